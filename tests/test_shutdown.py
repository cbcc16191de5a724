"""A one-shot `parallax run` stopped by SIGTERM or SIGINT, as a real process and as PID 1;
`serve` and `replay` signalled while they read their config.

Each `run` test runs `parallax run` as a child against the loopback fault server: the reference
answers at once, the candidate (concurrency 1) is held at the server by a gate the test opens,
so a call is in flight and another waits for its slot when the signal is sent. The child says
when the stop reached it (`run.stopping`), so no wait depends on how fast the machine is.
The start-up tests run the command in-process and send the signal from inside its config
loading, so it lands exactly there; a handler of the test's own is the safety net, and fails
the test if the signal reached no handler of the command's (as PID 1 it would be ignored).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from faultserver import FaultServer
from relkit import (
    PARALLAX,
    Lines,
    check_complete,
    endpoint_toml,
    jsonl,
    suite_toml,
    wait_for,
    write_cases,
    write_config,
)

N = 4  # cases: the reference makes N calls, the candidate one, then one waits for its slot
CAND = "gate:cand"  # the candidate's fault mode: held until the test opens the gate


def _config(root: Path, server: FaultServer, *, grace: float) -> Path:
    write_cases(root, N)
    slow = {"deadline": 120.0, "read": 120.0}  # only the test ends a held call
    endpoints = endpoint_toml("ref", server.url("ok", "ref"), concurrency=2, **slow)
    endpoints += endpoint_toml("cand", server.url(CAND, "cand"), concurrency=1, **slow)
    return write_config(root, endpoints, suite_toml("s"), top=f"run_grace_seconds = {grace}")


def _start(config: Path, *args: str, prefix: tuple[str, ...] = ()) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*prefix, *PARALLAX, "run", "--config", str(config), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=config.parent,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _rows(run_dir: Path, side: str) -> list[dict[str, Any]]:
    path = run_dir / "raw.jsonl"
    return [e for e in jsonl(path) if e["side"] == side] if path.exists() else []


def _in_flight(server: FaultServer, run_dir: Path) -> None:
    """Wait until every reference call is written and the candidate's first call is held."""
    wait_for(lambda: len(_rows(run_dir, "reference")) == N and len(server.received(CAND)) == 1)


def _end(proc: subprocess.Popen[str], lines: Lines) -> tuple[int, list[dict[str, Any]], str]:
    """The exit code, every log line and stderr of a child expected to exit by itself."""
    try:
        code = proc.wait(timeout=30)
        logged = lines.rest()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        assert proc.stderr is not None
        stderr = proc.stderr.read()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    return code, logged, stderr


def _resume_finishes(config: Path, server: FaultServer, run_dir: Path, *, remade: int) -> None:
    """The interrupted run, resumed with the gate open, ends whole: every key once, and no
    call made twice but the `remade` ones cancelled in flight (never written)."""
    server.gate("cand").set()
    done = _start(config, "--resume", str(run_dir))
    code, logged, stderr = _end(done, Lines(done))
    assert code == 0, stderr
    assert [e["event"] for e in logged].count("run.resumed") == 1
    figures = check_complete(run_dir, 2 * N)
    assert (figures["lost_rows"], figures["duplicated_rows"]) == (0, 0)
    for mode, again in (("ok", 0), (CAND, remade)):
        prompts = [r.prompt for r in server.received(mode)]
        assert (len(set(prompts)), len(prompts)) == (N, N + again), mode


def _interrupted(logged: list[dict[str, Any]], run_dir: Path, name: str) -> None:
    """Exactly one run.interrupted, the last line, naming the signal and the run dir."""
    stops = [e for e in logged if e["event"] == "run.interrupted"]
    assert len(stops) == 1 and logged[-1] is stops[0], [e["event"] for e in logged]
    assert (stops[0]["signal"], stops[0]["run_dir"], stops[0]["resumable"]) == (
        name,
        str(run_dir),
        True,
    )
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["finished_at"] is None
    assert not (run_dir / "summary.json").exists()


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_lets_calls_in_flight_finish_and_starts_none(
    tmp_path: Path, fault_server: FaultServer, signum: signal.Signals
) -> None:
    """SIGTERM (143) or SIGINT (130): the held call is let finish and written, the call that
    waited for its slot is never sent, run.interrupted is the last line, stderr names the run
    dir to resume, and the resumed run ends with every row once."""
    config = _config(tmp_path, fault_server, grace=60)
    proc = _start(config)
    lines = Lines(proc)
    run_dir = Path(lines.until_event("run.started", timeout=30)["run_dir"])
    _in_flight(fault_server, run_dir)
    proc.send_signal(signum)
    stopping = lines.until_event("run.stopping", timeout=30)
    fault_server.gate("cand").set()  # the call in flight may now finish
    code, logged, stderr = _end(proc, lines)

    assert code == 128 + signum, stderr
    assert (stopping["signal"], stopping["grace_seconds"]) == (signum.name, 60)
    _interrupted(logged, run_dir, signum.name)
    assert len(fault_server.received(CAND)) == 1  # nothing new went out after the signal
    assert [e["transport"] for e in _rows(run_dir, "candidate")] == ["ok"]
    assert f" run --resume {run_dir.relative_to(tmp_path)}`" in stderr
    assert "Traceback" not in stderr
    _resume_finishes(config, fault_server, run_dir, remade=0)


@pytest.mark.slow
def test_a_second_signal_cuts_the_grace_short(tmp_path: Path, fault_server: FaultServer) -> None:
    """With a minute's grace and a call that never answers, a second SIGTERM cancels it at
    once: exit 143 long before the grace ends, the cancelled call unwritten (a resume makes
    it)."""
    config = _config(tmp_path, fault_server, grace=60)
    proc = _start(config)
    lines = Lines(proc)
    run_dir = Path(lines.until_event("run.started", timeout=30)["run_dir"])
    _in_flight(fault_server, run_dir)
    proc.send_signal(signal.SIGTERM)
    lines.until_event("run.stopping", timeout=30)
    proc.send_signal(signal.SIGTERM)
    code, logged, stderr = _end(proc, lines)  # waits 30 s at most: half the grace

    assert code == 143, stderr
    _interrupted(logged, run_dir, "SIGTERM")
    assert _rows(run_dir, "candidate") == []
    _resume_finishes(config, fault_server, run_dir, remade=1)


def _child_of(pid: int) -> int | None:
    """The pid of `pid`'s child, as seen from here, once it exists."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rpartition(")")[2].split()[1]) == pid:
                return int(entry.name)
    return None


@pytest.mark.slow
def test_sigterm_stops_a_run_that_is_pid_1_of_its_namespace(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """PID 1 of a container has no default signal actions: SIGTERM used to be ignored, and
    `podman stop` waited, then killed it. In a PID namespace of its own (`unshare`), the run
    stops within its grace (0.5 s here) with exit 143 and run.interrupted, and resumes whole."""
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        pytest.skip("needs unshare and root for a PID namespace")
    config = _config(tmp_path, fault_server, grace=0.5)
    proc = _start(config, prefix=(unshare, "--pid", "--fork", "--kill-child", "--mount-proc"))
    lines = Lines(proc)
    run_dir = Path(lines.until_event("run.started", timeout=30)["run_dir"])
    _in_flight(fault_server, run_dir)
    inner = _child_of(proc.pid)
    assert inner is not None
    nspid = (Path("/proc") / str(inner) / "status").read_text().split("NSpid:")[1].split("\n")[0]
    assert nspid.split()[-1] == "1"  # the run is PID 1 where it runs
    os.kill(inner, signal.SIGTERM)
    code, logged, stderr = _end(proc, lines)

    assert code == 143, stderr
    _interrupted(logged, run_dir, "SIGTERM")
    assert _rows(run_dir, "candidate") == []
    _resume_finishes(config, fault_server, run_dir, remade=1)


def _recorded_config(root: Path, *, schedule: str | None = None) -> Path:
    """An offline suite: both sides recorded, every case answered."""
    write_cases(root, 2)
    rows = [{"case_id": f"case-{i:03d}", "completion": f"word{i}"} for i in range(2)]
    (root / "replies.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    endpoints = "".join(
        f'[endpoints.{side}]\nkind = "recorded"\nmodel = "{side}-1"\ncassette = "replies.jsonl"\n'
        for side in ("ref", "cand")
    )
    extra = f'schedule = "{schedule}"\n' if schedule else ""
    return write_config(root, endpoints, suite_toml("s", extra=extra))


def _missed(signum: int, _frame: Any) -> None:
    raise AssertionError(f"{signal.Signals(signum).name} reached no handler of the command's")


def _signalled_while_loading(monkeypatch: pytest.MonkeyPatch, module: Any) -> None:
    """`module.load_config` sends this process SIGTERM before it reads the config."""
    real = module.load_config

    def loading(path: Path) -> Any:
        os.kill(os.getpid(), signal.SIGTERM)
        return real(path)

    monkeypatch.setattr(module, "load_config", loading)


def test_sigterm_while_serve_reads_its_config_ends_in_scheduler_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGTERM while `serve` still reads its config is received: no run starts, and the daemon
    ends as on any stop, with scheduler.stopped and exit 0."""
    from runner import config
    from runner.cli import main

    path = _recorded_config(tmp_path, schedule="0 3 * * *")
    _signalled_while_loading(monkeypatch, config)
    previous = signal.signal(signal.SIGTERM, _missed)
    try:
        code = main(["serve", "--config", str(path)])
    finally:
        signal.signal(signal.SIGTERM, previous)
    logged = [json.loads(line) for line in capsys.readouterr().out.splitlines()]

    events = [e["event"] for e in logged]
    assert code == 0 and events[-1] == "scheduler.stopped", events
    assert logged[-1]["reason"] == "SIGTERM"
    assert "scheduler.job_started" not in events


def test_sigterm_while_replay_reads_its_config_stops_it_with_143(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGTERM while `replay` still reads the run's config stops it where it stands, as Ctrl-C
    does: exit 143, one line on stderr saying to replay again, no new run dir finished."""
    from runner.cli import main
    from runner.config import load_config
    from runner.runs import rundir
    from runner.runs.run import run_suite

    run_dir, _, _ = run_suite(load_config(_recorded_config(tmp_path)), "s")
    _signalled_while_loading(monkeypatch, rundir)
    previous = signal.signal(signal.SIGTERM, _missed)
    try:
        code = main(["replay", str(run_dir)])
    finally:
        signal.signal(signal.SIGTERM, previous)
    stderr = capsys.readouterr().err

    assert code == 143, stderr
    assert stderr.splitlines()[-1] == (
        "parallax: stopped by SIGTERM; its new run dir is left unfinished: replay again"
    )
    assert [p for p in run_dir.parent.iterdir() if p.is_dir()] == [run_dir]
