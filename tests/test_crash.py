"""Crash trials: SIGKILL a real `parallax run` at ten moments, resume it, lose nothing.

Each trial starts `parallax run` as a subprocess against the loopback fault server (slow
replies, schema failures, 503s that recover after one retry and 503s that never do), kills it
with SIGKILL the moment a watched condition holds — a file appears, raw.jsonl reaches a line
count, the server sees a first attempt that will be retried, a log line of the final summary
goes by — then runs `parallax run --resume` and compares the outcome rows, by key with their
stamps and misses, to an uninterrupted run of the same suite. A child about to be killed
cannot exit first, however slow the watcher: the last thing a run does is print its summary
on stderr, and its stderr is a pipe that is already full.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from faultserver import FaultServer
from relkit import (
    PARALLAX,
    check_complete,
    endpoint_toml,
    key_rows,
    record,
    suite_toml,
    write_cases,
    write_config,
)

from runner.config import load_config
from runner.runs.run import run_suite
from runner.snapshot import promote

N = 30  # cases; 2N calls and 2N outcome rows per run
WAIT = 30.0  # bound on every wait for a kill moment


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


class Trial:
    """One `parallax run` child plus what the watcher saw when it pulled the trigger."""

    def __init__(self, root: Path, server: FaultServer, config: Path) -> None:
        self.root = root
        self.server = server
        self.config = config
        self.events: list[str] = []
        self.proc: subprocess.Popen[str] | None = None
        self._full: int | None = None  # the read end of a held child's stderr

    @property
    def run_dir(self) -> Path | None:
        found = sorted((self.root / "runs" / "live").glob("*/manifest.json"))
        return found[-1].parent if found else None

    def raw_lines(self) -> int:
        run_dir = self.run_dir
        return _lines(run_dir / "raw.jsonl") if run_dir else 0

    def start(self, *args: str, held: bool = True) -> None:
        """`parallax ARGS` as a child; `held`, it cannot finish until it is killed."""
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.events = []
        self._full, stderr = _full_pipe() if held else (None, subprocess.DEVNULL)
        self.proc = subprocess.Popen(
            [*PARALLAX, *args],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=env,
            cwd=self.root,
        )
        if held:
            os.close(stderr)  # the child's copy is the only writer
        stream = self.proc.stdout
        assert stream is not None

        def pump() -> None:
            with stream:
                for line in stream:
                    try:
                        self.events.append(json.loads(line)["event"])
                    except (ValueError, KeyError, TypeError):
                        self.events.append(line)

        self._pump = threading.Thread(target=pump, daemon=True)
        self._pump.start()

    def _reap(self) -> None:
        assert self.proc is not None
        self.proc.wait(timeout=60)
        self._pump.join(timeout=10)
        if self._full is not None:
            os.close(self._full)
            self._full = None

    def kill_when(self, condition: Callable[[Trial], bool]) -> dict[str, Any]:
        """SIGKILL the child as soon as `condition` holds; what the run dir held at that moment."""
        assert self.proc is not None
        deadline = time.monotonic() + WAIT
        while not condition(self):
            assert self.proc.poll() is None, "the run finished before the kill moment"
            assert time.monotonic() < deadline, "the kill moment never came"
            time.sleep(0.001)
        assert self.proc.poll() is None, "the run finished before the kill landed"
        os.kill(self.proc.pid, signal.SIGKILL)
        self._reap()
        run_dir = self.run_dir
        assert run_dir is not None
        raw = (run_dir / "raw.jsonl").read_bytes() if (run_dir / "raw.jsonl").exists() else b""
        out = run_dir / "outcomes.jsonl"
        return {
            "raw_lines": raw.count(b"\n"),
            "outcome_lines": _lines(out),
            "torn_tail": bool(raw) and not raw.endswith(b"\n"),
            "summary": (run_dir / "summary.json").exists(),
        }

    def finish(self, *args: str) -> int:
        self.start(*args, held=False)
        assert self.proc is not None
        self._reap()
        return self.proc.returncode


def _full_pipe() -> tuple[int, int]:
    """A pipe whose buffer is full: a child writing to it blocks until it is killed (the read
    end stays open, so the write neither fails nor returns)."""
    read, write = os.pipe()
    os.set_blocking(write, False)
    with contextlib.suppress(BlockingIOError):
        while True:
            os.write(write, b"x" * 65536)
    os.set_blocking(write, True)
    return read, write


def retried(trial: Trial, at_least: int) -> bool:
    """The server has seen `at_least` first attempts of calls that will be retried."""
    prompts = {p for p, m in trial.server.prompt_modes.items() if m.startswith(("flaky", "status"))}
    seen = [r for r in trial.server.received() if "/trial/" in r.path and r.prompt in prompts]
    return len(seen) >= at_least


MOMENTS: dict[str, Callable[[Trial], bool]] = {
    "manifest_only": lambda t: t.run_dir is not None,
    "first_row": lambda t: t.raw_lines() >= 1,
    "ten_rows": lambda t: t.raw_lines() >= 10,
    "half_the_rows": lambda t: t.raw_lines() >= N,
    "near_the_end": lambda t: t.raw_lines() >= 2 * N - 4,
    "first_retry": lambda t: retried(t, 1),
    "many_retries": lambda t: retried(t, 8),
    "final_summary_alerts": lambda t: "alert.alias_drift" in t.events,
    "summary_written": lambda t: bool(t.run_dir and (t.run_dir / "summary.json").exists()),
    "resume_killed_too": lambda t: t.raw_lines() >= 16,
}


def _suite(root: Path, server: FaultServer, tag: str) -> Path:
    prompts = write_cases(root, N)
    for i, prompt in enumerate(prompts):
        if i % 7 == 3:
            server.prompt_modes[prompt] = "flaky:1"  # 503, then ok on the retry
        elif i % 11 == 5:
            server.prompt_modes[prompt] = "status:503"  # retried, never recovers
        elif i % 6 == 1:
            server.prompt_modes[prompt] = "garbage"  # schema miss, no retry
        else:
            server.prompt_modes[prompt] = "slow:0.04"
    endpoints = "".join(
        # long timeouts: a reply late on a busy machine must not change a row between runs
        endpoint_toml(
            side, server.url("ok", side, tag), concurrency=2, backoff=0.15, deadline=30, read=20
        )
        for side in ("ref", "cand")
    )
    return write_config(root, endpoints, suite_toml("live"))


@pytest.mark.slow
@pytest.mark.parametrize("moment", list(MOMENTS))
def test_sigkill_then_resume_equals_an_uninterrupted_run(
    tmp_path: Path, fault_server: FaultServer, moment: str
) -> None:
    """Killed at this moment and resumed, the run's rows equal an uninterrupted run's."""
    fresh_root, trial_root = tmp_path / "fresh", tmp_path / "trial"
    fresh_root.mkdir()
    trial_root.mkdir()
    fresh, fresh_code, _ = run_suite(load_config(_suite(fresh_root, fault_server, "fresh")), "live")
    # an accepted snapshot: gate classes and alert lines in the trial
    promote(fresh, trial_root / "snapshots", suite="live", allow_partial=True)
    fault_server.model_map["cand-model"] = "cand-model-2"  # alias drift: an alert in finalize
    trial = Trial(trial_root, fault_server, _suite(trial_root, fault_server, "trial"))

    trial.start("run", "--config", str(trial.config))
    states = [trial.kill_when(MOMENTS[moment])]
    run_dir = trial.run_dir
    assert run_dir is not None
    if moment == "resume_killed_too":  # a crash during recovery, then recover again
        trial.start("run", "--resume", str(run_dir))
        states.append(trial.kill_when(lambda t: t.raw_lines() >= states[0]["raw_lines"] + 10))
    for name in ("raw.jsonl", "outcomes.jsonl"):  # whole lines, bar one torn tail
        if (run_dir / name).exists():
            lines = (run_dir / name).read_bytes().split(b"\n")
            assert all(json.loads(line) for line in lines[:-1])
    code = trial.finish("run", "--resume", str(run_dir))

    assert (fresh_code, code) == (2, 3)  # incomplete; the trial also has the alias drift
    assert key_rows(run_dir) == key_rows(fresh)
    figures = check_complete(run_dir, 2 * N)
    record(
        "crash",
        trials=1,
        kills=len(states),
        rows_checked=figures["rows_checked"],
        rows_written_before_kill=sum(s["raw_lines"] for s in states[:1]),
        torn_tails_seen=sum(s["torn_tail"] for s in states),
        lost_rows=figures["lost_rows"],
        duplicated_rows=figures["duplicated_rows"],
    )
