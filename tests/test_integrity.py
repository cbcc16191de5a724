"""Integrity of accepted state: snapshots change only through promote, atomically, never silently.

Also: a run refuses to start, before any call, on a runs directory it cannot write — checked
as root (a runs_dir below a regular file) and as an unprivileged user in a child process
(`setpriv`), since root ignores permission bits.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from faultserver import FaultServer
from relkit import PARALLAX, endpoint_toml, record, suite_toml, write_cases, write_config

from runner.cli import main
from runner.config import load_config
from runner.runs.run import run_suite
from runner.snapshot import SNAPSHOT_VERSION, load_snapshot

NOBODY = 65534


def offline(root: Path, completion: str = "answer word", n: int = 4) -> Path:
    """A recorded suite of n cases whose replies all say `completion`."""
    rows = [
        {"id": f"c{i}", "prompt": f"p{i}", "expect": {"must_include": ["word"]}} for i in range(n)
    ]
    (root / "cases.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cassette = [{"case_id": f"c{i}", "completion": completion} for i in range(n)]
    (root / "cassette.jsonl").write_text("".join(json.dumps(r) + "\n" for r in cassette))
    config = root / "parallax.toml"
    config.write_text(
        'runs_dir = "runs"\nsnapshots_dir = "snapshots"\n'
        '[endpoints.rec]\nkind = "recorded"\ncassette = "cassette.jsonl"\n'
        '[suites.s]\nfixtures = "cases.jsonl"\nreference = "rec"\ncandidate = "rec"\n'
    )
    return config


def tree(directory: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(directory)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def test_only_promote_writes_snapshots(tmp_path: Path) -> None:
    """run, resume, replay, report, history and validate leave snapshots/ byte-for-byte alone."""
    config = offline(tmp_path)
    first, _, _ = run_suite(load_config(config), "s")
    assert main(["promote", str(first)]) == 0
    before = tree(tmp_path / "snapshots")

    run_dir, _, _ = run_suite(load_config(config), "s")
    for args in (
        ["run", "--config", str(config)],
        ["run", "--resume", str(run_dir)],
        ["replay", str(run_dir)],
        ["report", str(run_dir)],
        ["history", "--config", str(config)],
        ["validate", "--config", str(config)],
    ):
        assert main(args) in (0, 1, 2, 3), args

    assert tree(tmp_path / "snapshots") == before
    record("integrity", checks=6)


@pytest.mark.slow
def test_concurrent_promotes_never_corrupt_the_snapshot(tmp_path: Path) -> None:
    """Two promote processes at once, again and again: readers only ever see a whole snapshot."""
    config = offline(tmp_path, "answer word")
    run_a, _, _ = run_suite(load_config(config), "s")
    offline(tmp_path, "no match")  # a second run whose snapshot differs in every case
    run_b, _, _ = run_suite(load_config(config), "s")
    snapshot = tmp_path / "snapshots" / "s.json"
    expected = []
    for run in (run_a, run_b):  # run_a is the older: --force, this is about atomic writes
        assert main(["promote", "--force", str(run)]) == 0
        expected.append(load_snapshot(snapshot))
    assert expected[0] != expected[1]

    reads, bad = [0], []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            try:
                doc = json.loads(snapshot.read_bytes())
            except ValueError as exc:  # a torn read: the bug this test hunts for
                bad.append(repr(exc))
                continue
            if doc["cases"] not in expected:
                bad.append("unexpected content")
            reads[0] += 1

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    rounds = 4
    try:
        for _ in range(rounds):
            procs = [
                subprocess.Popen(
                    [*PARALLAX, "promote", "--force", str(run)],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                )
                for run in (run_a, run_b)
            ]
            for proc in procs:
                _, err = proc.communicate(timeout=60)
                assert proc.returncode == 0, err
    finally:
        stop.set()
        thread.join(timeout=5)

    assert not bad, bad[:3]
    assert reads[0] > 0
    assert load_snapshot(snapshot) in expected
    assert sorted(p.name for p in snapshot.parent.iterdir()) == [".promote.lock", "s.json"]
    record("integrity", concurrent_promotes=2 * rounds, snapshot_reads=reads[0], torn_reads=0)


BROKEN = {
    "truncated": lambda good: good[: len(good) // 2],
    "empty": lambda good: b"",
    "not_utf8": lambda good: b"\xff\xfe" + good,
    "wrong_version": lambda good: good.replace(
        b'"version": %d' % SNAPSHOT_VERSION, b'"version": 99'
    ),
    "cases_a_list": lambda good: json.dumps({"version": 1, "cases": []}).encode(),
    "entry_without_sha": lambda good: json.dumps(
        {"version": 1, "cases": {"c0": {"disagreement": []}}}
    ).encode(),
}


@pytest.mark.parametrize("damage", sorted(BROKEN))
def test_a_broken_snapshot_exits_65_and_is_never_overwritten(tmp_path: Path, damage: str) -> None:
    """run and promote both refuse a damaged snapshot with exit 65 and leave its bytes alone."""
    config = offline(tmp_path)
    run_dir, _, _ = run_suite(load_config(config), "s")
    assert main(["promote", str(run_dir)]) == 0
    snapshot = tmp_path / "snapshots" / "s.json"
    broken = BROKEN[damage](snapshot.read_bytes())
    snapshot.write_bytes(broken)
    runs_before = sorted((tmp_path / "runs" / "s").iterdir())

    assert main(["run", "--config", str(config)]) == 65
    assert main(["promote", str(run_dir)]) == 65
    assert main(["promote", str(run_dir), "--allow-partial"]) == 65

    assert snapshot.read_bytes() == broken
    assert sorted((tmp_path / "runs" / "s").iterdir()) == runs_before  # no run dir started
    record("integrity", broken_snapshots=1)


def live_config(root: Path, server: FaultServer, runs_dir: str) -> Path:
    write_cases(root, 3)
    endpoints = endpoint_toml("ref", server.url("ok", "ref")) + endpoint_toml(
        "cand", server.url("ok", "cand")
    )
    config = write_config(root, endpoints, suite_toml("s"))
    config.write_text(config.read_text().replace('runs_dir = "runs"', f'runs_dir = "{runs_dir}"'))
    return config


def test_run_refuses_a_runs_dir_below_a_file_before_any_call(
    tmp_path: Path, fault_server: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """runs_dir under a regular file (unwritable even for root): exit 64, no request sent."""
    (tmp_path / "afile").write_text("not a directory\n")
    config = live_config(tmp_path, fault_server, "afile/runs")

    code = main(["run", "--config", str(config)])

    assert code == 64
    assert fault_server.received() == []
    assert "afile" in capsys.readouterr().err
    record("integrity", unwritable_refusals=1)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A world-readable scratch dir (pytest's tmp dirs are 0700, closed to other users)."""
    path = Path(tempfile.mkdtemp(prefix="parallax-perm-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def as_nobody(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run parallax as an unprivileged user, where permission bits really apply."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to start an unprivileged child")
    return subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *PARALLAX, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
        check=False,
    )


@pytest.mark.slow
def test_run_and_resume_refuse_an_unwritable_runs_dir_as_a_user_before_any_call(
    shared_dir: Path, fault_server: FaultServer
) -> None:
    """As uid 65534: a read-only runs dir, suite dir or run dir exits 64 and calls nothing."""
    config = live_config(shared_dir, fault_server, "runs")
    probe = as_nobody(["--version"], shared_dir)
    if probe.returncode != 0:
        pytest.skip(f"parallax cannot start as uid {NOBODY}: {probe.stderr.strip()[-200:]}")
    runs = shared_dir / "runs"
    runs.mkdir(mode=0o755)

    fresh = as_nobody(["run", "--config", str(config)], shared_dir)  # cannot create runs/s/
    assert (fresh.returncode, fault_server.received()) == (64, []), fresh.stderr

    (runs / "s").mkdir(mode=0o755)  # the lock is shared and writable, the suite dir is not
    (runs / "s" / ".lock").touch(mode=0o666)
    (runs / "s" / ".lock").chmod(0o666)
    no_dir = as_nobody(["run", "--config", str(config)], shared_dir)
    assert (no_dir.returncode, fault_server.received()) == (64, []), no_dir.stderr

    run_dir, _, _ = run_suite(load_config(config), "s")  # a root-owned run to resume
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["finished_at"] = None
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    (run_dir / "raw.jsonl").write_bytes(
        b"".join((run_dir / "raw.jsonl").read_bytes().splitlines(True)[:2])
    )
    fault_server.clear()
    resumed = as_nobody(["run", "--resume", str(run_dir)], shared_dir)

    assert resumed.returncode == 64, resumed.stderr
    assert "not writable" in resumed.stderr
    assert "Traceback" not in fresh.stderr + no_dir.stderr + resumed.stderr
    assert fault_server.received() == []
    record("integrity", unwritable_refusals=3)


@pytest.mark.slow
def test_report_into_a_run_dir_the_user_cannot_write_is_one_line(shared_dir: Path) -> None:
    """As uid 65534, `report` of a run it may read but not write (a colleague's, a mounted
    artifact) exits 64 with one line naming the run dir, as `--resume` does, and writes
    nothing."""
    probe = as_nobody(["--version"], shared_dir)
    if probe.returncode != 0:
        pytest.skip(f"parallax cannot start as uid {NOBODY}: {probe.stderr.strip()[-200:]}")
    run_dir, _, _ = run_suite(load_config(offline(shared_dir)), "s")
    for path in (shared_dir, *shared_dir.rglob("*")):  # readable by all, writable by root
        path.chmod(0o755 if path.is_dir() else 0o644)
    before = tree(run_dir)

    proc = as_nobody(["report", str(run_dir)], shared_dir)

    assert (proc.returncode, proc.stdout) == (64, ""), proc.stderr
    expected = [f"parallax: {run_dir}: not writable; cannot write its reports here"]
    assert expected == proc.stderr.splitlines()
    assert before == tree(run_dir)
