"""Retention: old runs' ledgers kept compressed and read as before, runs past keep_nights
deleted save the ones that must stay, a line of history left for each, and no prune ever
pulling a run dir from under a run, a resume or a promote.

Runs are real (`reportkit.Project`: recorded endpoints through the whole pipeline), then moved
back in time by renaming their directories to an older start, which is what retention reads.
"""

from __future__ import annotations

import gzip
import json
import shutil
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import time_machine
from faultserver import FaultServer
from hypothesis import given
from hypothesis import strategies as st
from reportkit import DATA_BLOCK, Project, page_blocks, page_cases
from structlog.testing import capture_logs
from test_scheduler import ManualClock, until
from test_scheduler import events as events_named

from runner import ledger, logs
from runner.cli import main
from runner.config import load_config
from runner.diff import compare
from runner.errors import ConfigError, DataError, UsageError
from runner.history import format_text, suite_report
from runner.lock import PruneRunning, SuiteLocked, prune_lock, suite_lock
from runner.regrade import read_outcomes
from runner.reports.write import write_reports
from runner.retention import Kept, SuitePrune, log_done, plan, prune
from runner.runs.mode import RunMode
from runner.runs.names import RUN_STAMP
from runner.runs.run import run_suite
from runner.snapshot import promote
from runner.tombstones import read_tombstones

NOW = datetime.now(UTC).replace(microsecond=0)
LEDGERS = ("raw.jsonl", "outcomes.jsonl")
CASES = [
    {"id": f"case-{i:02d}", "prompt": f"Say ok {i}.", "expect": {"must_include": ["ok"]}}
    for i in range(12)
]


def _project(root: Path, *, retention: str = "") -> Project:
    project = Project(root, CASES)
    # the cassettes break one case on the candidate, so a retry has something to call again
    project.cassettes({}, {"case-03": {"fault": "timeout"}})
    if retention:
        project.config.write_text(project.config.read_text() + f"[retention]\n{retention}\n")
    return project


def aged(run_dir: Path, days: float) -> Path:
    """The run moved `days` back: its dir renamed to that start, its manifest and summary
    saying so (retention reads the name; history, the summary)."""
    start = NOW - timedelta(days=days)
    name = f"{start.strftime(RUN_STAMP)}-{run_dir.name.partition('-')[2]}"
    moved = run_dir.rename(run_dir.with_name(name))
    for file in ("manifest.json", "summary.json"):
        path = moved / file
        if path.exists():
            doc = json.loads(path.read_text())
            doc |= {"run_id": name, "started_at": start.isoformat(timespec="seconds")}
            path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return moved


def _runs(project: Project, *ages: float) -> list[Path]:
    """One finished run per age (days back), oldest first."""
    return [aged(project.run()[0], days) for days in sorted(ages, reverse=True)]


def _unfinished(run_dir: Path) -> Path:
    """A run killed mid-way, as `--resume` finds it: no verdict, half its rows."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["finished_at"] = None
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    for name in ("summary.json", "disagreement.json", "report.html", "report.md"):
        (run_dir / name).unlink()
    for name in LEDGERS:
        rows = (run_dir / name).read_bytes().splitlines(keepends=True)
        (run_dir / name).write_bytes(b"".join(rows[: len(rows) // 2]))
    return run_dir


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.startswith(".")
    }


def _prune(project: Project, **kwargs: Any) -> list[SuitePrune]:
    return prune(load_config(project.config), now=NOW, **kwargs)


# --- compression ------------------------------------------------------------------------


def test_a_finished_run_past_compress_after_nights_keeps_gz_ledgers(tmp_path: Path) -> None:
    """Past compress_after_nights a finished run keeps raw.jsonl.gz and outcomes.jsonl.gz,
    holding the very bytes the plain files held; a younger run is left as it is."""
    project = _project(tmp_path)
    old, young = _runs(project, 8, 6)
    before = {name: (old / name).read_bytes() for name in LEDGERS}
    young_tree = _tree(young)
    with capture_logs() as events:
        (result,) = _prune(project, on_done=lambda d: log_done(logs.get_logger(), d, _policy()))
    for name in LEDGERS:
        assert not (old / name).exists()
        assert gzip.decompress((old / f"{name}.gz").read_bytes()) == before[name]
    assert _tree(young) == young_tree
    assert [(d.run.path, d.deleted) for d in result.done] == [(old, False)]
    assert [e["event"] for e in events] == ["run.compressed"]
    assert events[0]["run_id"] == old.name and events[0]["bytes_before"] == sum(
        len(b) for b in before.values()
    )
    assert not [p for p in old.iterdir() if p.name.endswith(".tmp")]


def _unpacked(report: Path) -> str:
    """A report's text, report.html's compressed case data as the JSON it holds."""
    text = report.read_text()
    blocks = iter(page_blocks(text))
    return DATA_BLOCK.sub(lambda _: json.dumps(next(blocks)), text)


def _policy() -> Any:
    from runner.config import Retention

    return Retention()


def test_every_reader_reads_a_compressed_run_as_the_plain_one(tmp_path: Path) -> None:
    """replay (byte-identical on the decompressed bytes), report, diff, a retry, a resume of
    the finished run and promote read a compressed run as they read its plain copy."""
    project = _project(tmp_path)
    (old,) = _runs(project, 30)
    plain = tmp_path / "elsewhere" / "s" / old.name  # the same run, left plain
    shutil.copytree(old, plain)
    _prune(project, suite="s")
    assert (old / "raw.jsonl.gz").exists() and not (plain / "raw.jsonl.gz").exists()
    loaded = load_config(project.config)

    # one frozen clock for both: report.html says when it was written, to the second
    with time_machine.travel(datetime(2026, 12, 2, 3, tzinfo=UTC), tick=False):
        write_reports(old)
        write_reports(plain)
    for name in ("report.md", "report.html"):
        packed_text = _unpacked(old / name).replace("raw.jsonl.gz", "raw.jsonl")
        assert packed_text == _unpacked(plain / name).replace(str(plain), str(old)), name
    page = (old / "report.html").read_text()
    assert "raw.jsonl.gz, line" in page  # the cases shown without JavaScript
    files = {  # and every case the script shows
        case.text(side["raw"][4])
        for case in page_cases(page)
        for side in map(case.side, (0, 1))
        if side["raw"] is not None
    }
    assert files == {"raw.jsonl.gz"}

    replayed, code, _ = run_suite(loaded, "s", parent_dir=old, mode=RunMode.REPLAY)
    again, plain_code, _ = run_suite(loaded, "s", parent_dir=plain, mode=RunMode.REPLAY)
    assert (replayed / "raw.jsonl").read_bytes() == (plain / "raw.jsonl").read_bytes()
    for name in ("outcomes.jsonl", "disagreement.json"):
        assert (replayed / name).read_bytes() == (again / name).read_bytes(), name
    assert code == plain_code

    assert (
        compare(ledger.stored(old / "outcomes.jsonl"), plain / "outcomes.jsonl")[0]
        == (compare(plain / "outcomes.jsonl", plain / "outcomes.jsonl")[0])
    )
    assert main(["diff", str(old), str(plain)]) == main(["diff", str(plain), str(plain)])

    retry, _, _ = run_suite(loaded, "s", parent_dir=old, mode=RunMode.RETRY)
    unscored = [o.key for o in read_outcomes(retry / "outcomes.jsonl") if not o.admitted]
    assert unscored == [("case-03", "candidate", 0)]  # the one row re-called (and still down)

    (old / "report.html").unlink()  # a crash in its reports: resume writes what is missing
    resumed, resumed_code, _ = run_suite(loaded, "s", resume_dir=old, mode=RunMode.RESUME)
    assert resumed == old and resumed_code == code and (old / "report.html").exists()

    promote(old, tmp_path / "snapshots", suite="s", allow_partial=True)
    assert json.loads((tmp_path / "snapshots" / "s.json").read_text())["promoted_from"] == old.name


def test_a_compressed_run_is_never_resumed_in_place(tmp_path: Path) -> None:
    """Only a finished run is compressed: with its summary lost, `--resume` refuses (exit 64)
    instead of calling every case again beside the compressed ledgers."""
    project = _project(tmp_path)
    (old,) = _runs(project, 10)
    _prune(project)
    (old / "summary.json").unlink()
    assert main(["run", "--resume", str(old)]) == 64
    assert not (old / "raw.jsonl").exists() and (old / "raw.jsonl.gz").exists()


@given(st.binary(max_size=5000))
def test_pack_keeps_the_bytes_whatever_they_are(data: bytes) -> None:
    """Compressed and read back, a ledger is byte for byte what it was (a torn tail too)."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "raw.jsonl"
        path.write_bytes(data)
        size, _ = ledger.pack(path)
        assert size == len(data) and not path.exists()
        source, handle = ledger.open_ledger(path)
        with handle:
            assert source.name == "raw.jsonl.gz" and handle.read() == data


def _crash_at(monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    """Stop `pack` dead at one of its steps, as a SIGKILL there would."""

    class Killed(BaseException):
        pass

    real_unlink, real_replace, real_sync = Path.unlink, Path.replace, ledger._sync
    calls = {"sync": 0}

    def unlink(self: Path, missing_ok: bool = False) -> None:
        if step == "before_unlink" and self.name.endswith(".jsonl"):
            raise Killed
        real_unlink(self, missing_ok=missing_ok)

    def replace(self: Path, target: Any) -> Path:
        if step == "before_rename":
            raise Killed
        return real_replace(self, target)

    def sync(directory: Path) -> None:
        calls["sync"] += 1
        if step == "after_unlink" and calls["sync"] == 2:
            raise Killed
        real_sync(directory)

    monkeypatch.setattr(Path, "unlink", unlink)
    monkeypatch.setattr(Path, "replace", replace)
    monkeypatch.setattr(ledger, "_sync", sync)


@pytest.mark.parametrize("step", ["before_rename", "before_unlink", "after_unlink"])
def test_a_prune_killed_while_compressing_leaves_a_whole_ledger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    """Killed before the rename, between the rename and the plain file's removal, or after
    it: readers get the ledger's bytes whole, and the next prune finishes the job."""
    project = _project(tmp_path)
    (old,) = _runs(project, 10)
    before = {name: (old / name).read_bytes() for name in LEDGERS}
    with monkeypatch.context() as patched:
        _crash_at(patched, step)
        with pytest.raises(BaseException) as killed:
            _prune(project)
        assert type(killed.value).__name__ == "Killed"
    # what a SIGKILL mid-write leaves (write_atomic cleans up after anything less)
    (old / ".raw.jsonl.gz.999999.tmp").write_bytes(b"\x1f\x8b half")
    for name in LEDGERS:
        source, handle = ledger.open_ledger(old / name)
        with handle:
            assert handle.read() == before[name], (step, source)
    (result,) = _prune(project)
    assert [d.run.path for d in result.done] == [old]
    for name in LEDGERS:
        assert sorted(p.name for p in old.iterdir() if p.name.startswith((name, f".{name}"))) == [
            f"{name}.gz"
        ]
        assert gzip.decompress((old / f"{name}.gz").read_bytes()) == before[name]


def test_a_damaged_compressed_ledger_is_one_line_naming_it(tmp_path: Path) -> None:
    """A raw.jsonl.gz cut short is a DataError naming it (replay: exit 65, one line); the
    report of such a run still renders, noting what it could not read."""
    project = _project(tmp_path)
    (old,) = _runs(project, 10)
    _prune(project)
    packed = old / "raw.jsonl.gz"
    packed.write_bytes(packed.read_bytes()[: packed.stat().st_size // 2])
    with pytest.raises(DataError, match=r"raw\.jsonl\.gz: not a whole gzip file"):
        list(ledger.read_jsonl(old / "raw.jsonl"))
    assert main(["replay", str(old)]) == 65
    rep = write_reports(old)
    assert any("raw.jsonl.gz: cannot read" in note for note in rep.notes)


# --- deletion ---------------------------------------------------------------------------


def test_runs_past_keep_nights_are_deleted_save_those_that_must_stay(tmp_path: Path) -> None:
    """Past keep_nights only the runs no rule keeps are deleted: the latest finished run, the
    snapshot's run, an unfinished run and the runs `keep` names (by name or short id) stay."""
    project = _project(tmp_path)
    runs = _runs(project, 95, 90, 85, 80, 75, 70, 65)
    gone_a, promoted, unfinished, by_short, by_name, gone_b, latest = runs
    project.promote(promoted)
    _unfinished(unfinished)
    keep = [by_short.name.partition("-")[2], by_name.name]
    project.config.write_text(project.config.read_text() + f"[retention]\nkeep = {keep!r}\n")
    with capture_logs() as events:
        (result,) = _prune(project, on_done=lambda d: log_done(logs.get_logger(), d, _policy()))
    left = sorted(p.name for p in (tmp_path / "runs" / "s").iterdir() if p.is_dir())
    assert left == sorted(p.name for p in (promoted, unfinished, by_short, by_name, latest))
    assert {run.path: why for run, why in result.kept} == {
        promoted: Kept.PROMOTED,
        unfinished: Kept.UNFINISHED,
        by_short: Kept.LISTED,
        by_name: Kept.LISTED,
        latest: Kept.LATEST,
    }
    pruned = [e for e in events if e["event"] == "run.pruned"]
    assert [e["run_id"] for e in pruned] == [gone_a.name, gone_b.name]
    assert all(e["keep_nights"] == 60 and e["bytes"] > 0 for e in pruned)
    stones, notes = read_tombstones(tmp_path / "runs" / "s")
    assert [s.run_id for s in stones] == [gone_a.name, gone_b.name] and notes == []
    assert stones[0].verdict == "incomplete" and stones[0].gate_counts["new_case"] == 12
    assert not (tmp_path / "runs" / ".pruning").exists() or not any(
        (tmp_path / "runs" / ".pruning").iterdir()
    )


def test_a_young_latest_run_lets_the_old_ones_go(tmp_path: Path) -> None:
    """The latest of a suite is its newest finished run: with a young one, every old run
    nothing else keeps is deleted; a young run never is."""
    project = _project(tmp_path, retention="keep_nights = 5")
    old_a, old_b, young = _runs(project, 9, 6, 4)
    (result,) = _prune(project)
    assert sorted(d.run.path for d in result.done if d.deleted) == [old_a, old_b]
    assert [p for p in (tmp_path / "runs" / "s").iterdir() if p.is_dir()] == [young]


def test_a_broken_snapshot_deletes_nothing(tmp_path: Path) -> None:
    """Which run a broken snapshot came from is unknown: none of its suite's runs is deleted,
    and the prune says why."""
    project = _project(tmp_path)
    runs = _runs(project, 90, 80)
    (tmp_path / "snapshots" / "s.json").write_text("{oops")
    (result,) = _prune(project)
    assert all(run.exists() for run in runs) and not any(d.deleted for d in result.done)
    assert any("s.json" in note and "mended" in note for note in result.notes)


def test_a_dry_run_changes_nothing(tmp_path: Path) -> None:
    """--dry-run reports what it would delete and compress and touches no file."""
    project = _project(tmp_path)
    old, mid, _ = _runs(project, 90, 30, 1)
    before = _tree(tmp_path)
    (result,) = _prune(project, dry_run=True)
    assert _tree(tmp_path) == before
    assert [(d.run.path, d.deleted) for d in result.done] == [(old, True), (mid, False)]


def test_history_keeps_a_line_for_a_pruned_night(tmp_path: Path) -> None:
    """A deleted night stays in `history`: one line at its place among the runs (text),
    a `pruned` record with --json; a record whose run dir is still there is not shown."""
    project = _project(tmp_path)
    gone, kept, latest = _runs(project, 90, 80, 70)
    project.promote(kept)
    _prune(project)
    suite_dir = tmp_path / "runs" / "s"
    report = suite_report(suite_dir, retire_after=2)
    assert [p["run_id"] for p in report["pruned"]] == [gone.name]
    assert [r["run_id"] for r in report["runs"]] == [kept.name, latest.name]
    text = format_text(report).splitlines()
    rows = [line for line in text if line.startswith("  20")]
    assert len(rows) == 3 and "pruned " in rows[0] and "incomplete" in rows[0]
    assert rows[0].split()[0] == gone.name[:4] + "-" + gone.name[4:6] + "-" + gone.name[6:8]
    assert suite_report(suite_dir, retire_after=2, last=1)["pruned"] == []
    # a record written by a prune killed before the deletion: the run itself is shown
    shutil.copytree(kept, suite_dir / gone.name)
    assert suite_report(suite_dir, retire_after=2)["pruned"] == []


def test_the_prune_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`parallax prune` logs run.pruned and run.compressed on stdout and says on stderr what
    it did and kept; --dry-run logs nothing; `history` shows the pruned night."""
    project = _project(tmp_path)
    _runs(project, 90, 30, 1)
    config = str(project.config)
    capsys.readouterr()  # the runs' own lines
    assert main(["prune", "--config", config, "--dry-run"]) == 0
    dry = capsys.readouterr()
    assert dry.out == ""
    assert "(dry run): would delete 1 run(s)" in dry.err and "would compress 1" in dry.err
    assert main(["prune", "--config", config]) == 0
    done = capsys.readouterr()
    assert [json.loads(line)["event"] for line in done.out.splitlines()] == [
        "run.pruned",
        "run.compressed",
    ]
    assert "prune s: deleted 1 run(s)" in done.err and "compressed 1" in done.err
    assert main(["history", "--config", config]) == 0
    assert "pruned " in capsys.readouterr().out
    assert main(["prune", "--config", config]) == 0  # nothing left to do
    assert "deleted 0 run(s)" in capsys.readouterr().err


def test_a_second_prune_at_once_is_refused(tmp_path: Path) -> None:
    """Two prunes would delete and compress under each other: the second one exits 64."""
    project = _project(tmp_path)
    _runs(project, 90, 1)
    with prune_lock(tmp_path / "runs"), pytest.raises(PruneRunning):
        _prune(project)
    with prune_lock(tmp_path / "runs"):
        assert main(["prune", "--config", str(project.config)]) == 64


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ("keep_nights = 0", "retention.keep_nights"),
        ("compress_after_nights = -1", "retention.compress_after_nights"),
        ('keep = ["../etc"]', "retention.keep"),
        ("nights = 3", "retention.nights"),
    ],
)
def test_a_bad_retention_table_is_a_config_error(tmp_path: Path, table: str, key: str) -> None:
    """A retention key out of range or unknown is exit 78 naming it, before anything is done."""
    project = _project(tmp_path, retention=table)
    with pytest.raises(ConfigError) as caught:
        load_config(project.config)
    assert caught.value.key == key


# --- races --------------------------------------------------------------------------------


def test_a_suite_whose_run_is_in_flight_loses_no_run(tmp_path: Path) -> None:
    """While a run of the suite holds its lock, the prune deletes none of its runs (it says
    so), and still compresses the finished old ones."""
    project = _project(tmp_path)
    old, mid = _runs(project, 90, 30)
    with suite_lock(tmp_path / "runs", "s"):
        (result,) = _prune(project)
    assert old.exists() and result.busy is not None and result.busy["pid"]
    assert {d.run.path for d in result.done} == {old, mid}
    assert not any(d.deleted for d in result.done)
    assert (old / "raw.jsonl.gz").exists()


def test_a_prune_beside_a_live_run_of_the_suite_deletes_none_of_its_runs(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """A real run of the suite, its calls held open by the server, while a prune counts every
    run as long past keep_nights: the prune deletes none of the suite's runs (the run holds the
    suite's lock) and says so, compresses the finished old ones, and the run then finishes
    with every row once."""
    from relkit import check_complete, endpoint_toml, suite_toml, write_cases, write_config

    write_cases(tmp_path, 6)
    endpoints = "".join(
        endpoint_toml(side, fault_server.url("gate:held", side), concurrency=2, read=30)
        for side in ("ref", "cand")
    )
    endpoints = endpoints.replace("deadline = 1.2", "deadline = 60")
    loaded = load_config(write_config(tmp_path, endpoints, suite_toml("s")))
    fault_server.gate("held").set()
    old = aged(run_suite(loaded, "s")[0], 90)
    fault_server.gate("held").clear()
    live: list[Path] = []
    running = threading.Thread(target=lambda: live.append(run_suite(loaded, "s")[0]))
    running.start()
    try:
        for _ in range(6000):  # until the run has its dir and its first calls are out
            dirs = [p for p in (tmp_path / "runs" / "s").iterdir() if p.is_dir() and p != old]
            if dirs and len(fault_server.received()) > 12:
                break
            threading.Event().wait(0.005)
        (result,) = prune(loaded, now=NOW + timedelta(days=400))
    finally:
        fault_server.gate("held").set()
        running.join(timeout=120)
    assert result.busy is not None and not any(d.deleted for d in result.done)
    assert [d.run.path for d in result.done] == [old] and (old / "raw.jsonl.gz").exists()
    (run_dir,) = live
    check_complete(run_dir, 12)


def test_a_prune_racing_resumes_never_pulls_a_run_dir_from_under_one(tmp_path: Path) -> None:
    """A resume of an old finished run (rewriting its missing reports) and a prune started
    together, over and over: the resume either finishes with its run dir whole, or is refused
    (the prune holds the lock, or deleted the run first); it never meets a dir half gone."""
    project = _project(tmp_path, retention="compress_after_nights = 1000")
    loaded = load_config(project.config)
    outcomes = {"finished": 0, "refused": 0, "pruned_first": 0}
    with capture_logs() as events:
        _race(project, loaded, outcomes)
    assert sum(outcomes.values()) == 12
    # a report the resume could not write (its dir gone under it) would be report.failed
    assert [e for e in events if e["event"] == "report.failed"] == []


def _race(project: Project, loaded: Any, outcomes: dict[str, int]) -> None:
    for _ in range(12):
        (old, _latest) = _runs(project, 90, 70 - _)
        (old / "report.html").unlink()
        start = threading.Barrier(2)
        errors: list[BaseException] = []

        def resume(
            old: Path = old, start: threading.Barrier = start, errors: list[BaseException] = errors
        ) -> None:
            start.wait()
            try:
                run_suite(loaded, "s", resume_dir=old, mode=RunMode.RESUME)
                outcomes["finished"] += 1
            except SuiteLocked:
                outcomes["refused"] += 1
            except UsageError as exc:  # "no such run directory": deleted before it began
                assert "no such run directory" in str(exc)
                outcomes["pruned_first"] += 1
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=resume)
        thread.start()
        start.wait()
        try:
            prune(loaded, now=NOW)
        except BaseException as exc:
            errors.append(exc)
        thread.join(timeout=60)
        assert errors == []


def test_a_promote_during_a_prune_keeps_its_run(tmp_path: Path) -> None:
    """The prune decides under the snapshots' lock: a promote in flight when the prune took
    the suite's lock finishes first, its run is then the snapshot's, and that run stays."""
    from runner.ledger import write_json
    from runner.lock import is_locked
    from runner.snapshot import promote_lock

    project = _project(tmp_path)
    old, _latest = _runs(project, 90, 70)
    results: list[SuitePrune] = []
    with promote_lock(tmp_path / "snapshots"):  # a promote of `old`, half-way
        pruning = threading.Thread(target=lambda: results.extend(_prune(project)))
        pruning.start()
        for _ in range(6000):  # the prune holds the suite's lock: next it waits for this one
            if is_locked(tmp_path / "runs", "s") is not None or not pruning.is_alive():
                break
            threading.Event().wait(0.005)
        write_json(  # what promote writes while it holds the lock
            tmp_path / "snapshots" / "s.json",
            {"version": 2, "suite": "s", "promoted_from": old.name, "cases": {}},
        )
    pruning.join(timeout=60)
    (result,) = results
    assert old.exists() and (old, Kept.PROMOTED) in [(r.path, why) for r, why in result.kept]
    assert plan(load_config(project.config), "s", NOW)[0] == []


# --- serve ------------------------------------------------------------------------------


def _served(root: Path) -> Project:
    project = _project(root)
    text = project.config.read_text()
    project.config.write_text(
        text.replace('candidate = "cand"\n', 'candidate = "cand"\nschedule = "* * * * *"\n')
    )
    return project


def test_serve_prunes_after_each_run(tmp_path: Path) -> None:
    """After its run the daemon deletes what is past keep_nights and compresses what is past
    compress_after_nights, logging run.pruned and run.compressed after job_finished."""
    import anyio

    from runner.scheduler.daemon import Daemon

    project = _served(tmp_path)
    old, mid = _runs(project, 90, 30)

    async def serve() -> None:
        daemon = Daemon(
            load_config(project.config), clock=ManualClock(NOW), run_now=True, handle_signals=False
        )
        async with anyio.create_task_group() as group:
            group.start_soon(daemon.run)
            await until(lambda: bool(events_named(events, "run.compressed")))
            daemon.request_stop()

    with capture_logs() as events:
        anyio.run(serve)
    names = [e["event"] for e in events]
    finished = names.index("scheduler.job_finished")
    assert names.index("run.pruned") > finished and names.index("run.compressed") > finished
    assert events_named(events, "run.pruned")[0]["run_id"] == old.name
    assert not old.exists() and (mid / "raw.jsonl.gz").exists()
    assert events_named(events, "scheduler.prune_failed") == []


def test_a_fire_due_while_serve_prunes_waits_for_the_prune_instead_of_being_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon's own prune holds each suite's lock in turn; the next fire of that suite
    comes due meanwhile and finds it locked. It waits for the prune to let go and runs: a
    night is never skipped as `locked` for housekeeping."""
    import anyio

    from runner import retention
    from runner.lock import suite_lock
    from runner.scheduler import daemon as daemon_module

    project = _served(tmp_path)
    real_prune, real_probe = retention.prune, daemon_module.is_locked
    holding, release, probed_locked = threading.Event(), threading.Event(), threading.Event()

    def slow_prune(loaded: Any, **kwargs: Any) -> Any:
        if not release.is_set():  # the first prune holds the lock until the next fire saw it
            with suite_lock(loaded.runs_dir, "s"):
                holding.set()
                release.wait(120)
        return real_prune(loaded, **kwargs)

    def probe(runs_dir: Path, suite: str) -> Any:
        holder = real_probe(runs_dir, suite)
        if holder is not None and holding.is_set():
            probed_locked.set()
        return holder

    monkeypatch.setattr(retention, "prune", slow_prune)
    monkeypatch.setattr(daemon_module, "is_locked", probe)
    clock = ManualClock(NOW)

    async def serve() -> None:
        daemon = Daemon(
            load_config(project.config), clock=clock, run_now=True, handle_signals=False
        )
        async with anyio.create_task_group() as group:
            group.start_soon(daemon.run)
            await until(holding.is_set)
            clock.advance(60)
            await until(lambda: probed_locked.is_set() or bool(skipped(events)))
            release.set()
            await until(lambda: len(events_named(events, "scheduler.job_finished")) == 2)
            daemon.request_stop()

    def skipped(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return events_named(events, "scheduler.job_skipped")

    from runner.scheduler.daemon import Daemon

    with capture_logs() as events:
        anyio.run(serve)
    assert probed_locked.is_set()
    assert skipped(events) == []
    assert len(events_named(events, "scheduler.job_finished")) == 2


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_retention_bench_smoke(tmp_path: Path) -> None:
    """bench/retention.py builds a run, packs it and times its readers; every figure is
    there and the table lands in RESULTS between its markers. No timing is asserted."""
    import subprocess
    import sys

    bench = Path(__file__).resolve().parent.parent / "bench" / "retention.py"
    out, results = tmp_path / "figures.json", tmp_path / "RESULTS.md"
    results.write_text("# Results\n\nkept\n")
    argv = [sys.executable, str(bench), "--n", "100", "--runs", "1"]
    argv += ["--json", str(out), "--results", str(results), "--workdir", str(tmp_path)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=280, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (row,) = json.loads(out.read_text())
    assert row["n"] == 100 and row["packed_bytes"] < row["plain_bytes"]
    for key in ("pack_s", "read_packed_rows_s", "replay_packed_s", "report_packed_s"):
        assert row[key] > 0, key
    text = results.read_text()
    assert text.startswith("# Results\n\nkept\n") and text.count("## Retention") == 1
