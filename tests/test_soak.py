"""Fault soak: a real `parallax serve` firing every second against a server that misbehaves.

The fault server draws a random fault for every request (CHAOS_MODES: every transport and
schema fault a server can cause) and a second suite's candidate is a dead port
(connect_error). After each finished cycle the daemon's RSS, open file descriptors and
thread count are sampled from /proc; every cycle's run dir is checked for whole, complete
ledgers in which no unadmitted row carries a score. The daemon must never exit on its own.
"""

from __future__ import annotations

import json
import queue
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from faultserver import CHAOS_MODES, FaultServer, refused_port
from relkit import (
    check_complete,
    endpoint_toml,
    record,
    start_serve,
    suite_toml,
    write_cases,
)

CYCLES = 40  # finished runs to observe (both suites together), however long they take
SILENCE = 30.0  # the daemon logs a fire or a skip every second: this long without a line is hung
WARMUP = 6  # cycles before the baseline sample (imports, pools, caches settle)
N = 8  # cases per suite
WINDOW = 8  # samples per window: a window's fd floor is its quietest moment
# Tolerances once warm. A sample lands whenever a run finishes, possibly while the other
# suite's run holds its connections, so fds are compared by their floor over a window (a leak
# raises the floor) and capped at the floor plus every connection both suites may hold. One
# leaked fd or thread per cycle, or ~0.7 MB per cycle, would break these.
FD_SLACK = 2
FD_IN_FLIGHT = 2 * 2 * 4 + 4  # suites x endpoints x concurrency, plus files being written
THREAD_SLACK = 2
TASK_SLACK = 2  # asyncio tasks in the daemon loop, from the heartbeat (floor to floor)
RSS_SLACK_KB = 24 * 1024


def proc_sample(pid: int) -> dict[str, int]:
    """RSS (kB), open fds and threads of a live process, read from /proc."""
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return {
        "rss_kb": int(fields["VmRSS"].split()[0]),
        "fds": sum(1 for _ in Path(f"/proc/{pid}/fd").iterdir()),
        "threads": int(fields["Threads"]),
    }


def soak_config(root: Path, server: FaultServer) -> Path:
    write_cases(root, N)
    dead = f"http://127.0.0.1:{refused_port()}/v1"
    endpoints = "".join(
        endpoint_toml(name, url, deadline=0.5, read=0.4, attempts=2)
        for name, url in (
            ("ref", server.url("chaos:ref", "ref")),
            ("cand", server.url("chaos:cand", "cand")),
            ("dead", dead),
        )
    )
    suites = suite_toml("chaos", extra='schedule = "* * * * * *"\n') + suite_toml(
        "dead", extra='schedule = "*/2 * * * * *"\n'
    ).replace('candidate = "cand"', 'candidate = "dead"')
    path = root / "parallax.toml"
    path.write_text(
        'runs_dir = "runs"\nsnapshots_dir = "snapshots"\nserve_grace_seconds = 0\n'
        f"serve_heartbeat_seconds = 0.5\n{endpoints}\n{suites}"
    )
    return path


def idle_tasks(heartbeat: Path) -> int:
    """The daemon's task count from a heartbeat written with no run in flight (one is written
    as each run ends), so floors compare like with like: one written as a run makes its dir
    counts that run's tasks too."""
    beat: dict[str, Any] = {}
    for _ in range(50):
        beat = json.loads(heartbeat.read_text())
        if not any(suite["running"] for suite in beat["suites"].values()):
            break
        time.sleep(0.01)
    tasks: int = beat["tasks"]
    return tasks


@pytest.mark.slow
@pytest.mark.timeout(600)  # ~1 minute on an idle machine; a busy one only takes longer
def test_serve_soaks_every_fault_without_leaking_or_exiting(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """Every second for ~30 cycles: flat RSS/fds/threads, complete ledgers, the daemon lives."""
    config = soak_config(tmp_path, fault_server)
    proc = start_serve(config)
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        with proc.stdout:
            for line in proc.stdout:
                lines.put(line)
        lines.put(None)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    finished: list[dict[str, Any]] = []
    samples: list[dict[str, int]] = []
    events: list[dict[str, Any]] = []
    try:
        while len(finished) < CYCLES:
            try:
                line = lines.get(timeout=SILENCE)
            except queue.Empty:
                break
            assert line is not None, f"serve exited on its own: {events[-3:]}"
            event = json.loads(line)
            events.append(event)
            if event["event"] == "scheduler.job_finished":
                finished.append(event)
                sample = proc_sample(proc.pid)
                sample["tasks"] = idle_tasks(tmp_path / "runs" / ".parallax-serve.json")
                samples.append(sample)
        assert proc.poll() is None, "the daemon exited during the soak"
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
        reader.join(timeout=10)
        while (line := lines.get_nowait() if not lines.empty() else None) is not None:
            events.append(json.loads(line))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        assert proc.stderr is not None
        stderr = proc.stderr.read()
        proc.stderr.close()

    assert code == 0, stderr[-2000:]
    names = [e["event"] for e in events]
    assert names[-1] == "scheduler.stopped"
    assert "scheduler.crashed" not in names and "scheduler.job_crashed" not in names
    assert len(finished) >= CYCLES, f"silent for {SILENCE}s after {len(finished)} cycles"

    rows = unadmitted = 0
    for event in finished:
        figures = check_complete(Path(event["run_dir"]), 2 * N)
        rows += figures["rows_checked"] // 2
        unadmitted += figures["unadmitted_rows"]
    transports = {
        json.loads(line)["transport"]
        for event in finished
        for line in (Path(event["run_dir"]) / "outcomes.jsonl").read_text().splitlines()
    }
    assert {"ok", "timeout", "connection_lost", "rate_limited", "http_error"} <= transports
    assert {"too_large", "connect_error"} <= transports

    warm = samples[WARMUP:]
    first, last = warm[:WINDOW], warm[-WINDOW:]
    fd_floor = min(s["fds"] for s in first)
    fd_growth = min(s["fds"] for s in last) - fd_floor
    thread_growth = max(s["threads"] for s in warm) - max(s["threads"] for s in first)
    # the heartbeat is written between runs as often as during one, so compare floors
    task_growth = min(s["tasks"] for s in last) - min(s["tasks"] for s in first)
    rss = (
        sorted(s["rss_kb"] for s in first)[WINDOW // 2],
        sorted(s["rss_kb"] for s in last)[WINDOW // 2],
    )
    print(
        f"\nsoak: {len(finished)} cycles; fd floor {fd_floor} -> {fd_floor + fd_growth}, "
        f"fd max {max(s['fds'] for s in warm)}; threads +{thread_growth}; tasks +{task_growth}; "
        f"median RSS {rss[0]} kB -> {rss[1]} kB"
    )
    assert fd_growth <= FD_SLACK, samples
    assert max(s["fds"] for s in warm) <= fd_floor + FD_IN_FLIGHT, samples
    assert thread_growth <= THREAD_SLACK, samples
    assert task_growth <= TASK_SLACK, samples
    assert rss[1] - rss[0] <= RSS_SLACK_KB, samples
    benign = {"ok", "slow:0.1"}
    faults = sum(n for mode, n in fault_server.chaos_drawn.items() if mode not in benign)
    dead_calls = sum(1 for e in finished if "/dead/" in e["run_dir"]) * N
    record(
        "soak",
        cycles=len(finished),
        requests=sum(fault_server.chaos_drawn.values()),
        faults_injected=faults + dead_calls,
        fault_kinds=len(set(CHAOS_MODES) - benign) + 1,  # + connect_error from the dead port
        rows_checked=rows,
        unadmitted_rows=unadmitted,
        unadmitted_scored=0,
        lost_rows=0,
        daemon_exits=0,
        rss_growth_kb=max(0, rss[1] - rss[0]),
        fd_growth=max(0, fd_growth),
        thread_growth=max(0, thread_growth),
        task_growth=max(0, task_growth),
    )


def test_a_six_field_schedule_fires_every_second_and_five_fields_stay_on_the_minute() -> None:
    """A leading seconds field gives sub-minute fire times; a crontab line still fires at :00."""
    from datetime import UTC, datetime

    from runner.scheduler.trigger import Trigger

    start = datetime(2026, 3, 29, 0, 59, 58, 500000, tzinfo=UTC)
    every_second = Trigger("* * * * * *", "Europe/Berlin", config_path=Path("p"), suite="s")
    nightly = Trigger("0 1 * * *", "UTC", config_path=Path("p"), suite="s")
    first = every_second.first(start)
    assert first is not None
    assert (first.second, every_second.after(first).second) == (59, 0)
    assert nightly.first(start) == datetime(2026, 3, 29, 1, 0, 0, tzinfo=UTC)
