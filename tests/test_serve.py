"""`parallax serve` as a real process: SIGTERM mid-run, the lock across processes, health."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from faultserver import FaultServer
from relkit import Lines, start_serve

PARALLAX = [sys.executable, "-m", "runner"]


def write_config(
    tmp_path: Path, server: FaultServer, *, cand: str = "hang", schedule: str = "0 3 * * *"
) -> Path:
    """A scheduled suite whose candidate by default never answers: a run stays in flight until
    it is stopped, however long the test takes to stop it."""
    (tmp_path / "cases.jsonl").write_text(
        "".join(
            json.dumps({"id": i, "prompt": i, "expect": {"must_include": [i]}}) + "\n"
            for i in ("a", "b")
        )
    )
    endpoint = 'kind = "openai-chat"\nmodel = "m"\nretry = { attempts = 1 }\nbase_url = "%s"\n'
    path = tmp_path / "parallax.toml"
    path.write_text(
        'runs_dir = "runs"\nserve_grace_seconds = 0.5\nserve_heartbeat_seconds = 0.2\n'
        f"[endpoints.ref]\n{endpoint % server.url('ok', 'ref')}"
        f"[endpoints.cand]\n{endpoint % server.url(cand, 'cand')}"
        '[suites.nightly]\nfixtures = "cases.jsonl"\nreference = "ref"\ncandidate = "cand"\n'
        f'schedule = "{schedule}"\n'
    )
    return path


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_serve_process_stops_on_sigterm_with_exit_0_and_a_resumable_run(
    tmp_path: Path, fault_server: FaultServer, signum: signal.Signals
) -> None:
    """SIGTERM (or a terminal's SIGHUP, whose default action killed the daemon without its
    last line) mid-run: exit 0, last line scheduler.stopped, the run dir left to resume."""
    config = write_config(tmp_path, fault_server)
    proc = start_serve(config, "--run-now")
    try:
        lines = Lines(proc)
        lines.until_event("scheduler.started")
        started = lines.until_event("run.started")
        health = subprocess.run(
            [*PARALLAX, "health", "--config", str(config)],
            check=False,
            capture_output=True,
            text=True,
            timeout=30,
        )
        beside = subprocess.run(
            [*PARALLAX, "run", "--config", str(config)],
            check=False,
            capture_output=True,
            text=True,
            timeout=30,
        )
        proc.send_signal(signum)
        code = proc.wait(timeout=20)
        logged = lines.rest()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        assert proc.stderr is not None
        stderr = proc.stderr.read()
        proc.stderr.close()
        if proc.stdout is not None:
            proc.stdout.close()
    assert (health.returncode, json.loads(health.stdout)["state"]) == (0, "running")
    assert beside.returncode == 64, beside.stderr
    assert "already running" in beside.stderr
    assert code == 0, stderr
    events = [e["event"] for e in logged]
    assert events[-1] == "scheduler.stopped"
    assert [e["reason"] for e in logged if e["event"] == "scheduler.stopping"] == [signum.name]
    assert events.count("scheduler.stopped") + events.count("scheduler.crashed") == 1
    assert "scheduler.job_cancelled" in events
    manifest = json.loads((Path(started["run_dir"]) / "manifest.json").read_text())
    assert manifest["finished_at"] is None
    after = subprocess.run(
        [*PARALLAX, "health", "--config", str(config)],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert after.returncode == 1


@pytest.mark.slow
def test_serve_process_makes_up_the_fire_it_missed_while_down(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """A daemon back after a minute's fire it missed (its heartbeat says the minute before was
    the last it handled) runs that fire at start, instead of waiting for the next minute."""
    config = write_config(tmp_path, fault_server, cand="ok", schedule="* * * * *")
    minute = datetime.now(UTC).replace(second=0, microsecond=0)
    handled = minute - timedelta(minutes=1)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / ".parallax-serve.json").write_text(
        json.dumps({"state": "stopped", "suites": {"nightly": {"handled": handled.isoformat()}}})
    )
    proc = start_serve(config)
    try:
        lines = Lines(proc)
        up = datetime.fromisoformat(lines.until_event("scheduler.started")["timestamp"])
        started = lines.until_event("scheduler.job_started")
        finished = lines.until_event("scheduler.job_finished")
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    # the fire made up is the latest one due as the daemon came up: `minute`, or the next one
    # if a slow start-up crossed into it (then both are coalesced into it)
    fire = datetime.fromisoformat(started["scheduled_for"])
    assert started["mode"] == "run"
    assert minute <= fire <= up.replace(second=0, microsecond=0), (minute, fire, up)
    assert started["coalesced"] == (fire - handled) // timedelta(minutes=1)
    manifest = json.loads((Path(finished["run_dir"]) / "manifest.json").read_text())
    assert manifest["finished_at"] is not None
    assert code == 0


def test_serve_without_any_schedule_is_a_config_error(tmp_path: Path) -> None:
    """A config with no scheduled suite exits 78 with one line, before anything starts."""
    (tmp_path / "cases.jsonl").write_text('{"id": "a", "prompt": "a"}\n')
    config = tmp_path / "parallax.toml"
    config.write_text(
        '[endpoints.r]\nkind = "recorded"\n'
        '[suites.s]\nfixtures = "cases.jsonl"\nreference = "r"\ncandidate = "r"\n'
    )
    done = subprocess.run(
        [*PARALLAX, "serve", "--config", str(config)],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 78
    assert "no suite has a schedule" in done.stderr
    assert "Traceback" not in done.stderr
