"""A full disk is a fault like the others: the run stops calling, says so with exit 74, and
`--resume` finishes it once there is space, with no row lost or written twice; a report the
disk refuses costs the run nothing but its report.

Two real small disks: a tmpfs of a few MB (mounted as root; skipped with the reason where the
kernel refuses), and a file-size limit (`RLIMIT_FSIZE`) set in the child, which makes a write
past it fail with EFBIG without root.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import subprocess
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from faultserver import FaultServer
from relkit import (
    PARALLAX,
    RUN_TIMEOUT,
    check_complete,
    endpoint_toml,
    key_rows,
    suite_toml,
    write_cases,
    write_config,
)

from runner.errors import StorageError
from runner.ledger import LedgerWriter

N = 40  # cases: 2N calls and 2N rows per run
# The report tests' suite: small enough that report.html (its script and style alone are some
# 40 KB, its cases compressed data) outweighs the ledgers, so a limit or a disk fits the
# ledgers and not the report.
REPORT_N = 4

Limit = Callable[[], None] | None  # what the child does to its own limits before it runs


def _project(root: Path, server: FaultServer, *, runs_dir: Path | None = None, n: int = N) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    write_cases(root, n)
    endpoints = "".join(
        endpoint_toml(side, server.url("ok", side), concurrency=2, max_bytes=65536)
        for side in ("ref", "cand")
    )
    top = f'runs_dir = "{runs_dir}"\n' if runs_dir is not None else ""
    config = write_config(root, endpoints, suite_toml("s"))
    if runs_dir is not None:
        config.write_text(config.read_text().replace('runs_dir = "runs"\n', top))
    return config


def _parallax(
    root: Path, *args: str | Path, limit: Limit = None
) -> subprocess.CompletedProcess[str]:
    """`parallax ARGS` as a child of `root`, with `limit` applied to the child alone."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARALLAX_")}
    env |= {"NO_PROXY": "127.0.0.1", "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [*PARALLAX, *map(str, args)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
        preexec_fn=limit,  # one setrlimit call in the child, which runs no thread yet
    )


def _file_size_limit(size: int) -> Callable[[], None]:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

    return limit


def _events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def _only_run(runs: Path) -> Path:
    (run_dir,) = [p for p in (runs / "s").iterdir() if p.is_dir() and not p.name.startswith(".")]
    return run_dir


@pytest.fixture
def baseline(tmp_path: Path, fault_server: FaultServer) -> dict[str, Any]:
    """An uninterrupted run of the same suite: its rows by key, and what its files weigh."""
    return _baseline(tmp_path / "baseline", fault_server, N)


@pytest.fixture
def report_baseline(tmp_path: Path, fault_server: FaultServer) -> dict[str, Any]:
    """The same for the report tests' smaller suite."""
    return _baseline(tmp_path / "baseline", fault_server, REPORT_N)


def _baseline(root: Path, fault_server: FaultServer, n: int) -> dict[str, Any]:
    done = _parallax(root, "run", "--config", _project(root, fault_server, n=n))
    assert done.returncode == 0, done.stderr
    run_dir = _only_run(root / "runs")
    return {
        "rows": key_rows(run_dir),
        "raw": (run_dir / "raw.jsonl").stat().st_size,
        "ledgers": sum(
            (run_dir / name).stat().st_size
            for name in ("raw.jsonl", "outcomes.jsonl", "disagreement.json", "summary.json")
        ),
        "report": (run_dir / "report.html").stat().st_size,
    }


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MB tmpfs: a disk that really fills. Skipped where mounting is refused."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(disk: Path, leave: int) -> Path:
    """A file that takes all of `disk` but `leave` bytes."""
    info = os.statvfs(disk)
    filler = disk / "filler"
    with filler.open("wb") as handle:
        left = info.f_bavail * info.f_frsize - leave
        while left > 0:
            left -= handle.write(b"\0" * min(left, 1 << 20))
    return filler


def _assert_stopped_then_resumed(
    root: Path,
    runs: Path,
    config: Path,
    server: FaultServer,
    baseline: dict[str, Any],
    stopped: subprocess.CompletedProcess[str],
    make_room: Callable[[], None],
) -> None:
    assert stopped.returncode == 74, stopped.stderr
    assert "Traceback" not in stopped.stderr
    (line,) = stopped.stderr.strip().splitlines()
    assert "cannot write" in line and "--resume" in line, line
    failed = [e for e in _events(stopped.stdout) if e["event"] == "run.failed"]
    assert [(e["exit_code"], e["error"]) for e in failed] == [(74, "StorageError")]
    run_dir = _only_run(runs)
    assert json.loads((run_dir / "manifest.json").read_text())["finished_at"] is None
    written = (run_dir / "raw.jsonl").read_bytes().count(b"\n")
    assert written < 2 * N
    # it stopped calling: at most the calls in flight (two per side) went out after the last row
    assert len(server.received()) <= written + 2 * 2 * 2
    make_room()
    server.clear()
    resumed = _parallax(root, "run", "--resume", run_dir, "--config", config)
    assert resumed.returncode == 0, resumed.stderr
    check_complete(run_dir, 2 * N)  # every row once, none lost
    assert key_rows(run_dir) == baseline["rows"]
    assert len(server.received()) <= 2 * N - written + 2 * 2 * 2


def test_a_file_size_limit_stops_the_run_and_a_resume_finishes_it(
    tmp_path: Path, fault_server: FaultServer, baseline: dict[str, Any]
) -> None:
    """Past RLIMIT_FSIZE the ledger write fails with EFBIG: the run stops calling, logs
    run.failed with exit 74 and names the resume; resumed without the limit, it is complete."""
    root = tmp_path / "limited"
    config = _project(root, fault_server)
    fault_server.clear()
    stopped = _parallax(
        root, "run", "--config", config, limit=_file_size_limit(baseline["raw"] // 3)
    )
    _assert_stopped_then_resumed(
        root, root / "runs", config, fault_server, baseline, stopped, lambda: None
    )


def test_a_full_disk_stops_the_run_and_a_resume_finishes_it(
    tmp_path: Path, fault_server: FaultServer, baseline: dict[str, Any], small_disk: Path
) -> None:
    """On a tmpfs that fills mid-run (ENOSPC) the run stops with exit 74; once the filler is
    gone, `--resume` completes it with the rows of an uninterrupted run."""
    root = tmp_path / "full"
    config = _project(root, fault_server, runs_dir=small_disk)
    filler = _fill(small_disk, baseline["raw"] // 3)
    fault_server.clear()
    stopped = _parallax(root, "run", "--config", config)
    _assert_stopped_then_resumed(
        root, small_disk, config, fault_server, baseline, stopped, filler.unlink
    )


def _assert_report_refused(
    root: Path,
    runs: Path,
    finished: subprocess.CompletedProcess[str],
    again: Callable[[Path], subprocess.CompletedProcess[str]],
    make_room: Callable[[], None],
) -> None:
    """The run's verdict and ledgers stand; its reports are written once there is space."""
    assert finished.returncode == 0, finished.stderr  # the verdict's code, not the report's
    assert "Traceback" not in finished.stderr
    said = [line for line in finished.stderr.splitlines() if line.startswith("parallax:")]
    assert len(said) == 1 and "verdict and ledgers are intact" in said[0], finished.stderr
    events = _events(finished.stdout)
    assert "report.failed" in [e["event"] for e in events]
    # the results database, on the same full disk, is one alert after the verdict
    assert [e["event"] for e in events[-2:]] == ["run.finished", "alert.results_db"]
    assert events[-2]["exit_code"] == 0
    run_dir = _only_run(runs)
    assert json.loads((run_dir / "summary.json").read_text())["verdict"] == "clean"
    check_complete(run_dir, 2 * REPORT_N)
    assert not (run_dir / "report.html").exists()
    assert not [p.name for p in run_dir.iterdir() if p.name.endswith(".tmp")]
    refused = again(run_dir)  # `parallax report` while the disk is still full
    assert refused.returncode == 74, refused.stderr
    (line,) = refused.stderr.strip().splitlines()
    assert "cannot write" in line and "verdict and ledgers are intact" in line, line
    make_room()
    written = _parallax(root, "report", run_dir)
    assert written.returncode == 0, written.stderr
    assert (run_dir / "report.html").stat().st_size > 0


def test_a_report_past_the_file_size_limit_leaves_the_verdict(
    tmp_path: Path, fault_server: FaultServer, report_baseline: dict[str, Any]
) -> None:
    """The ledgers and summary fit under the limit and report.html does not: the run exits
    with its verdict, says in one line that the report was not written, and `parallax report`
    writes it without the limit (under it: exit 74)."""
    baseline = report_baseline
    root = tmp_path / "report"
    config = _project(root, fault_server, n=REPORT_N)
    limit = _file_size_limit((baseline["raw"] + baseline["report"]) // 2)
    assert baseline["raw"] < baseline["report"]  # else this limit would stop the ledger first
    finished = _parallax(root, "run", "--config", config, limit=limit)
    _assert_report_refused(
        root,
        root / "runs",
        finished,
        lambda run_dir: _parallax(root, "report", run_dir, limit=limit),
        lambda: None,
    )


def test_a_report_on_a_full_disk_leaves_the_verdict(
    tmp_path: Path, fault_server: FaultServer, report_baseline: dict[str, Any], small_disk: Path
) -> None:
    """On a tmpfs with room for the ledgers but not the report, the same holds."""
    baseline = report_baseline
    root = tmp_path / "report"
    config = _project(root, fault_server, runs_dir=small_disk, n=REPORT_N)
    # room for the run's other files (its manifest, report.md, each file's last 4 KB page)
    room = 32 * 1024
    filler = _fill(small_disk, baseline["ledgers"] + room)
    assert baseline["report"] > room  # the report cannot fit in what is left
    finished = _parallax(root, "run", "--config", config)
    _assert_report_refused(
        root,
        small_disk,
        finished,
        lambda run_dir: _parallax(root, "report", run_dir),
        filler.unlink,
    )


def test_a_ledger_the_disk_refuses_is_a_storage_error_naming_it() -> None:
    """/dev/full refuses every write with ENOSPC: one StorageError (exit 74) naming the file."""
    writer = LedgerWriter(Path("/dev/full"))
    with pytest.raises(StorageError, match=r"^/dev/full: cannot write: No space left") as caught:
        writer.write([{"case_id": "c1"}])
    assert caught.value.exit_code == 74
    with contextlib.suppress(StorageError):
        writer.close()


def _old(run_dir: Path, days: int) -> Path:
    """The run moved `days` back, by the start its name says (what retention reads)."""
    from datetime import timedelta

    from runner.runs.names import RUN_STAMP

    start = datetime.now(UTC) - timedelta(days=days)
    return run_dir.rename(
        run_dir.with_name(f"{start.strftime(RUN_STAMP)}-{run_dir.name.partition('-')[2]}")
    )


def test_a_prune_on_a_full_disk_makes_room_before_it_records(
    tmp_path: Path, fault_server: FaultServer, small_disk: Path
) -> None:
    """With not a byte left, a prune still deletes what is past keep_nights: each deletion
    frees the room its one-line record needs, so history keeps every pruned night."""
    root = tmp_path / "prune"
    config = _project(root, fault_server, runs_dir=small_disk)
    for _ in range(3):
        assert _parallax(root, "run", "--config", config).returncode == 0
    runs = sorted(p for p in (small_disk / "s").iterdir() if p.is_dir())
    gone = [_old(run, 90 - i) for i, run in enumerate(runs[:2])]
    filler = _fill(small_disk, 0)
    # the last pages, down to the last byte
    with contextlib.suppress(OSError), filler.open("ab") as handle:
        while handle.write(b"\0" * 4096):
            handle.flush()
    pruned = _parallax(root, "prune", "--config", config)
    assert pruned.returncode == 0, pruned.stderr
    assert not any(run.exists() for run in gone)
    records = [
        json.loads(line) for line in (small_disk / "s" / "pruned.jsonl").read_text().splitlines()
    ]
    assert [r["run_id"] for r in records] == [run.name for run in gone]
    history = _parallax(root, "history", "--config", config)
    assert history.stdout.count("pruned ") == 2


def test_a_compression_the_disk_refuses_keeps_the_plain_ledgers(
    tmp_path: Path, fault_server: FaultServer, small_disk: Path
) -> None:
    """A prune that cannot write a compressed ledger exits 74 with one line; the plain
    ledgers stay as they were and no temporary file is left."""
    root = tmp_path / "pack"
    config = _project(root, fault_server, runs_dir=small_disk)
    assert _parallax(root, "run", "--config", config).returncode == 0
    assert _parallax(root, "run", "--config", config).returncode == 0
    old = _old(sorted(p for p in (small_disk / "s").iterdir() if p.is_dir())[0], 10)
    before = {name: (old / name).read_bytes() for name in ("raw.jsonl", "outcomes.jsonl")}
    _fill(small_disk, 0)
    refused = _parallax(root, "prune", "--config", config)
    assert refused.returncode == 74, refused.stderr
    (line,) = refused.stderr.strip().splitlines()
    assert "raw.jsonl.gz: cannot write" in line
    assert {name: (old / name).read_bytes() for name in before} == before
    assert sorted(p.name for p in old.iterdir() if "jsonl" in p.name) == [
        "outcomes.jsonl",
        "raw.jsonl",
    ]


def test_serve_resumes_a_run_a_full_disk_stopped_at_the_next_fire(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In `serve`, a job the disk stopped is a job_crashed with exit code 74; at the next
    fire (space back) the daemon resumes that run dir instead of starting another. The full
    disk is a StorageError raised where the raw ledger's write would have met ENOSPC."""
    import anyio
    from reportkit import BASE_CASES, Project
    from structlog.testing import capture_logs
    from test_scheduler import ManualClock, events, until

    from runner import ledger
    from runner.config import load_config
    from runner.scheduler.daemon import Daemon

    project = Project(tmp_path)
    text = project.config.read_text()
    project.config.write_text(
        text.replace('candidate = "cand"\n', 'candidate = "cand"\nschedule = "* * * * *"\n')
    )
    real = ledger.LedgerWriter.write_encoded
    full = {"left": 1}

    def write_encoded(self: ledger.LedgerWriter, rows: Any) -> None:
        if self.path.name == "raw.jsonl" and full["left"]:
            full["left"] -= 1
            raise StorageError(self.path, "No space left on device")
        real(self, rows)

    monkeypatch.setattr(ledger.LedgerWriter, "write_encoded", write_encoded)
    clock = ManualClock(datetime(2026, 11, 30, 3, 0, 30, tzinfo=UTC))

    async def serve() -> None:
        daemon = Daemon(
            load_config(project.config), clock=clock, run_now=True, handle_signals=False
        )
        async with anyio.create_task_group() as group:
            group.start_soon(daemon.run)
            await until(lambda: bool(events(logs, "scheduler.job_crashed")))
            for _ in range(10):  # a fire while the daemon still tidies up after the job is
                if len(events(logs, "scheduler.job_started")) > 1:  # skipped: the next one
                    break
                seen = len(logs)
                clock.advance(60)
                await until(lambda seen=seen: len(logs) > seen)
            await until(lambda: bool(events(logs, "scheduler.job_finished")))
            daemon.request_stop()

    with capture_logs() as logs:
        anyio.run(serve)
    (crashed,) = events(logs, "scheduler.job_crashed")
    assert (crashed["exit_code"], crashed["error"]) == (74, "StorageError")
    assert "--resume" in crashed["message"]
    started = events(logs, "scheduler.job_started")
    assert [e["mode"] for e in started] == ["run", "resume"]
    (finished,) = events(logs, "scheduler.job_finished")
    assert finished["run_dir"] == started[1]["resume_dir"]
    rows = (Path(finished["run_dir"]) / "outcomes.jsonl").read_bytes().splitlines()
    assert len(rows) == 2 * len(BASE_CASES)
