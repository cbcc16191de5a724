"""The serve daemon in-process: cron triggers, no overlap, misfires, the lock, stop and resume.

Time moves only by hand (never slept on, so no test depends on how fast the machine is);
endpoints are the loopback fault server.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import anyio
import pytest
import time_machine
from faultserver import FaultServer
from hypothesis import given, settings
from hypothesis import strategies as st
from relkit import wait_for
from structlog.testing import capture_logs

from runner.cli import main
from runner.config import LoadedConfig, load_config
from runner.errors import ConfigError
from runner.health import check_health, heartbeat_path
from runner.lock import is_locked, suite_lock
from runner.runs.run import run_suite_async
from runner.runs.rundir import MANIFEST_VERSION
from runner.scheduler.catchup import find_interrupted
from runner.scheduler.daemon import Daemon
from runner.scheduler.trigger import MAX_COALESCE, Trigger

pytestmark = pytest.mark.anyio

CASES = [
    {"id": "a", "prompt": "alpha", "expect": {"must_include": ["alpha"]}},
    {"id": "b", "prompt": "beta", "expect": {"must_include": ["beta"]}},
    {"id": "c", "prompt": "gamma", "expect": {"must_include": ["gamma"]}},
]


def write_config(
    tmp_path: Path,
    server: FaultServer,
    *,
    ref: str = "ok",
    cand: str = "ok",
    schedule: str = "* * * * *",
    timezone: str = "UTC",
    grace: float = 5.0,
    misfire: float = 30.0,
    heartbeat: float = 0.05,
) -> LoadedConfig:
    """A one-suite config whose endpoints are fault-server modes; no retries, short timeouts."""
    fixtures = tmp_path / "cases.jsonl"
    fixtures.write_text("".join(json.dumps(c) + "\n" for c in CASES))
    endpoint = (
        'kind = "openai-chat"\nmodel = "m"\nretry = {{ attempts = 1 }}\n'
        "timeout = {{ connect = 2, read = 60, write = 2, pool = 2 }}\n"
        'base_url = "{url}"\n'
    )
    text = (
        f'runs_dir = "runs"\nsnapshots_dir = "snapshots"\n'
        f"serve_grace_seconds = {grace}\nserve_misfire_grace_seconds = {misfire}\n"
        f"serve_heartbeat_seconds = {heartbeat}\n"
        f"[endpoints.ref]\n{endpoint.format(url=server.url(ref, 'ref'))}"
        f"[endpoints.cand]\n{endpoint.format(url=server.url(cand, 'cand'))}"
        '[suites.nightly]\nfixtures = "cases.jsonl"\nreference = "ref"\ncandidate = "cand"\n'
        f'schedule = "{schedule}"\ntimezone = "{timezone}"\n'
    )
    path = tmp_path / "parallax.toml"
    path.write_text(text)
    return load_config(path)


class ManualClock:
    """Time that moves only when the test calls `advance`."""

    def __init__(self, start: datetime) -> None:
        self._now = start
        self._moved = anyio.Event()

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += timedelta(seconds=seconds)
        self._moved.set()
        self._moved = anyio.Event()

    async def sleep_until(self, when: datetime) -> None:
        while self._now < when:
            await self._moved.wait()


START = datetime(2026, 11, 30, 3, 0, 30, tzinfo=UTC)  # 30 s before a minute fires


def events(logs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] == name]


async def until(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    """Wait for a condition the daemon makes true; the bound only stops a hung test."""
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.01)


def manifest(run_dir: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((run_dir / "manifest.json").read_text())
    return doc


def run_dirs(loaded: LoadedConfig) -> list[Path]:
    return sorted(p for p in (loaded.runs_dir / "nightly").iterdir() if p.is_dir())


# triggers ------------------------------------------------------------------------------


def test_crontab_weekday_numbers_mean_crontab_days() -> None:
    """`1` is Monday and `0` Sunday, as in crontab (APScheduler 3 alone would shift them)."""
    where = {"config_path": Path("p.toml"), "suite": "s"}
    monday = Trigger("0 9 * * 1", "UTC", **where).first(datetime(2026, 11, 28, tzinfo=UTC))
    sunday = Trigger("0 9 * * 0", "UTC", **where).first(datetime(2026, 11, 24, tzinfo=UTC))
    assert monday is not None and sunday is not None
    assert (monday.strftime("%a"), sunday.strftime("%a")) == ("Mon", "Sun")


def test_a_nightly_job_fires_once_in_the_night_dst_repeats_an_hour() -> None:
    """02:30 Berlin happens twice on 25 October 2026; the suite runs at the first only."""
    trigger = Trigger("30 2 * * *", "Europe/Berlin", config_path=Path("p.toml"), suite="s")
    fires = [trigger.first(datetime(2026, 10, 24, 12, tzinfo=UTC))]
    for _ in range(2):
        last = fires[-1]
        assert last is not None
        fires.append(trigger.after(last))
    assert [f.astimezone(UTC).isoformat() for f in fires if f] == [
        "2026-10-25T00:30:00+00:00",
        "2026-10-26T01:30:00+00:00",
        "2026-10-27T01:30:00+00:00",
    ]


def _field(spec: str, value: int) -> bool:
    """A crontab field of the shapes below: `*`, `*/n`, `n`, `a-b` and lists of them."""
    for part in spec.split(","):
        span, _, step = part.partition("/")
        low, _, high = span.partition("-")
        if span == "*":
            low, high = "0", "59"
        if int(low) <= value <= int(high or low) and (value - int(low)) % int(step or 1) == 0:
            return True
    return False


def _reference_fires(expr: str, zone: str, start: datetime, days: int) -> list[datetime]:
    """Every fire time over `days` local days from `start`, minute by minute, by the rules
    the README states: a wall-clock time a spring-forward skips fires when the gap ends
    (read with the offset before it), one a fall-back repeats fires at its first occurrence."""
    minute, hour, day, month, _ = expr.split()
    tz = ZoneInfo(zone)
    wall = start.astimezone(tz).replace(tzinfo=None, hour=0, minute=0, second=0)
    fires = set()
    for step in range(days * 24 * 60):
        at = wall + timedelta(minutes=step)
        if (
            _field(minute, at.minute)
            and _field(hour, at.hour)
            and (day == "*" or _field(day, at.day))
            and (month == "*" or _field(month, at.month))
        ):
            fires.add(at.replace(tzinfo=tz).astimezone(UTC))
    return sorted(fires)


@pytest.mark.parametrize(
    ("zone", "around"),
    [
        ("America/New_York", datetime(2026, 3, 8, tzinfo=UTC)),
        ("America/New_York", datetime(2026, 11, 1, tzinfo=UTC)),
        ("Europe/Berlin", datetime(2026, 3, 29, tzinfo=UTC)),
        ("Europe/Berlin", datetime(2026, 10, 25, tzinfo=UTC)),
        ("America/Santiago", datetime(2026, 9, 6, tzinfo=UTC)),  # midnight does not exist
        ("America/Santiago", datetime(2026, 4, 5, tzinfo=UTC)),
        ("Australia/Lord_Howe", datetime(2026, 10, 4, tzinfo=UTC)),  # a 30-minute shift
    ],
)
@pytest.mark.parametrize(
    "expr",
    [
        "0 0 * * *",
        "30 0 * * *",
        "30 1 * * *",
        "30 2 * * *",
        "20,40 2 * * *",
        "*/20 * * * *",
        "0 23 * * *",
    ],
)
def test_fire_times_across_dst_match_a_minute_by_minute_reference(
    zone: str, around: datetime, expr: str
) -> None:
    """APScheduler 3 alone stepped a day by 24 hours and lost the midnight fire after every
    spring-forward; every fire time here, and the first one at or after any moment, is the
    reference's."""
    start = around - timedelta(days=3)
    expected = _reference_fires(expr, zone, start, days=7)
    trigger = Trigger(expr, zone, config_path=Path("p.toml"), suite="s")
    fires = [trigger.first(expected[0])]
    while (last := fires[-1]) is not None and last < expected[-1]:
        fires.append(trigger.after(last))
    assert fires == expected
    rng = random.Random(f"{zone}{around}{expr}")
    span = (expected[-1] - expected[0]).total_seconds()
    for _ in range(200):
        moment = expected[0] + timedelta(seconds=rng.uniform(0, span))
        assert trigger.first(moment) == next(f for f in expected if f >= moment), moment


TRANSITIONS = [  # (zone, a moment near one of its offset changes)
    ("America/New_York", datetime(2026, 3, 8, 7, tzinfo=UTC)),
    ("America/New_York", datetime(2026, 11, 1, 6, tzinfo=UTC)),
    ("Europe/Dublin", datetime(2026, 10, 25, 1, tzinfo=UTC)),
    ("America/Santiago", datetime(2026, 9, 6, 4, tzinfo=UTC)),
    ("Australia/Lord_Howe", datetime(2026, 4, 4, 15, tzinfo=UTC)),
    ("Africa/Casablanca", datetime(2026, 2, 15, 2, tzinfo=UTC)),
    ("America/St_Johns", datetime(2026, 3, 8, 5, tzinfo=UTC)),
    ("Pacific/Apia", datetime(2011, 12, 30, 10, tzinfo=UTC)),  # a whole day skipped
]
_MINUTES = st.sampled_from(["*", "*/15", "*/7", "0", "30", "10,50", "20-40/5", "59"])
_HOURS = st.sampled_from(["*", "0", "1", "2", "3", "0-3", "*/2", "23", "1,2,22"])


@settings(max_examples=60)
@given(
    where=st.sampled_from(TRANSITIONS),
    minute=_MINUTES,
    hour=_HOURS,
    offset=st.floats(min_value=-30, max_value=30),
)
def test_random_schedules_across_offset_changes_match_the_reference(
    where: tuple[str, datetime], minute: str, hour: str, offset: float
) -> None:
    """`first`, `after` and `latest` at random moments within a day and a half of an offset
    change, in zones that shift by 30 minutes, at midnight, or by a whole day."""
    zone, around = where
    expr = f"{minute} {hour} * * *"
    expected = _reference_fires(expr, zone, around - timedelta(days=3), days=8)
    trigger = Trigger(expr, zone, config_path=Path("p.toml"), suite="s")
    moment = around + timedelta(hours=offset)
    following = [f for f in expected if f >= moment]
    assert trigger.first(moment) == following[0]
    assert trigger.after(following[0]) == following[1]
    assert trigger.latest(moment) == max(f for f in expected if f <= moment)


def test_the_fire_after_a_fall_back_instant_itself_is_kept() -> None:
    """At the very instant Berlin falls back (01:00 UTC), 03:00 CET is read with the new
    offset and fires at 02:00 UTC: the next fire after that instant, not 04:00 CET."""
    trigger = Trigger("0 * * * *", "Europe/Berlin", config_path=Path("p.toml"), suite="s")
    instant = datetime(2024, 10, 27, 1, tzinfo=UTC)
    assert trigger.after(instant) == trigger.first(instant) == datetime(2024, 10, 27, 2, tzinfo=UTC)


def test_a_schedule_only_a_gap_holds_is_found_without_walking_the_calendar() -> None:
    """The last Sunday of March at 02:30 never exists in Berlin: it fires at 03:30 CEST each
    year, and the lookup stops there instead of searching on to the year 9999."""
    trigger = Trigger("30 2 25-31 3 0", "Europe/Berlin", config_path=Path("p.toml"), suite="s")
    assert trigger.first(datetime(2024, 1, 1, tzinfo=UTC)) == datetime(
        2024, 3, 31, 1, 30, tzinfo=UTC
    )
    assert trigger.latest(datetime(2024, 6, 1, tzinfo=UTC)) == datetime(
        2024, 3, 31, 1, 30, tzinfo=UTC
    )


def test_a_monthly_fire_after_a_spring_forward_is_kept() -> None:
    """`0 0 1 * *` in Berlin went from 1 March straight to 1 May with APScheduler 3 alone."""
    trigger = Trigger("0 0 1 * *", "Europe/Berlin", config_path=Path("p.toml"), suite="s")
    march = trigger.first(datetime(2026, 2, 20, tzinfo=UTC))
    assert march is not None
    april = trigger.after(march)
    assert april == datetime(2026, 3, 31, 22, tzinfo=UTC)  # 1 April 00:00 CEST
    assert trigger.latest(datetime(2026, 4, 15, tzinfo=UTC)) == april


def test_bad_schedule_or_zone_is_a_config_error_naming_the_key() -> None:
    """A broken cron line or time zone is exit 78 with the suite's key in the message."""
    with pytest.raises(ConfigError, match=r"suites\.s\.schedule"):
        Trigger("61 * * * *", "UTC", config_path=Path("p.toml"), suite="s")
    with pytest.raises(ConfigError, match=r"suites\.s\.timezone"):
        Trigger("0 3 * * *", "Mars/Olympus", config_path=Path("p.toml"), suite="s")


def test_a_final_heartbeat_that_cannot_be_written_is_not_a_crash(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """Paging on scheduler.crashed must mean a crash: a last heartbeat the disk refused is its
    own warning, with the path and the reason."""
    loaded = write_config(tmp_path, fault_server)
    daemon = Daemon(loaded, handle_signals=False)
    daemon.heartbeat.mkdir(parents=True)  # a directory where the file goes: the rename fails
    with capture_logs() as logs:
        daemon._safe_heartbeat("stopped")
    assert [e["event"] for e in logs] == ["scheduler.heartbeat_failed"]
    assert logs[0]["path"] == str(daemon.heartbeat) and logs[0]["log_level"] == "warning"
    assert logs[0]["message"]


async def test_a_heartbeat_the_disk_refuses_mid_run_stops_nothing(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """A heartbeat that cannot be written (a full disk) is a warning; the run in flight
    finishes and the daemon stops cleanly, where the error crashed it (exit 70)."""
    loaded = write_config(tmp_path, fault_server, cand="slow:0.5", heartbeat=0.02)
    with capture_logs() as logs:
        daemon = Daemon(loaded, clock=ManualClock(START), run_now=True, handle_signals=False)
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                codes.append(await daemon.run())

            codes: list[int] = []
            tg.start_soon(run)
            await until(lambda: bool(events(logs, "scheduler.job_started")))
            daemon.heartbeat.unlink()
            daemon.heartbeat.mkdir()  # every later rename onto it fails
            await until(lambda: bool(events(logs, "scheduler.job_finished")))
            daemon.request_stop()
    assert codes == [0]
    assert events(logs, "scheduler.heartbeat_failed")
    assert events(logs, "scheduler.crashed") == []
    assert logs[-1]["event"] == "scheduler.stopped"


async def test_a_signal_during_start_up_stops_the_daemon_cleanly(
    tmp_path: Path, fault_server: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM while the daemon still starts (here: while it looks for interrupted runs) is
    received and ends in scheduler.stopped with exit 0; it used to arrive before any handler,
    so the process died silently (143). A handler of the test's own is the safety net: had
    the daemon missed the signal, it lands there and the daemon runs on into the time limit."""
    from runner.scheduler import daemon as daemon_module

    loaded = write_config(tmp_path, fault_server)
    real = daemon_module.find_interrupted

    def interrupted(*args: Any) -> tuple[Path | None, str | None]:
        os.kill(os.getpid(), signal.SIGTERM)
        return real(*args)

    missed: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: missed.append(signum))
    monkeypatch.setattr(daemon_module, "find_interrupted", interrupted)
    try:
        with capture_logs() as logs:
            daemon = Daemon(loaded, clock=ManualClock(START))
            with anyio.fail_after(30):
                code = await daemon.run()
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert (code, missed) == (0, [])
    assert [e["reason"] for e in events(logs, "scheduler.stopping")] == ["SIGTERM"]
    assert logs[-1]["event"] == "scheduler.stopped"


def test_a_second_daemon_on_one_runs_dir_is_refused(
    tmp_path: Path, fault_server: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two daemons would share one heartbeat, and `health` could read the stopped one while the
    other runs: the second is refused (64) with the first one's pid, and writes nothing."""
    from runner.lock import daemon_lock

    loaded = write_config(tmp_path, fault_server)
    with daemon_lock(loaded.runs_dir):  # the first daemon
        code = main(["serve", "--config", str(loaded.path)])
    err = capsys.readouterr().err
    assert code == 64 and "another `parallax serve` runs on this runs dir" in err, err
    assert f"pid {os.getpid()}" in err
    assert not heartbeat_path(loaded.runs_dir).exists()


async def test_a_crash_names_its_cause_and_the_runs_it_cancelled(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """When the scheduler itself fails, scheduler.crashed names the error that did it, not
    the task group that carried it, and each run in flight gets its job_cancelled line."""
    loaded = write_config(tmp_path, fault_server, cand="slow:30")
    with capture_logs() as logs:
        daemon = Daemon(loaded, clock=ManualClock(START), run_now=True, handle_signals=False)

        async def broken() -> None:
            await until(lambda: bool(events(logs, "run.started")))
            raise RuntimeError("the scheduler broke")

        daemon._heartbeat_loop = broken  # type: ignore[method-assign]
        with anyio.fail_after(45):
            code = await daemon.run()
    assert code == 70
    [crashed] = events(logs, "scheduler.crashed")
    assert (crashed["error"], crashed["message"]) == ("RuntimeError", "the scheduler broke")
    [cancelled] = events(logs, "scheduler.job_cancelled")
    assert cancelled["resumable"] is True
    assert [e["event"] for e in logs[-2:]] == ["scheduler.job_cancelled", "scheduler.crashed"]


async def test_next_fire_is_logged_at_start_across_a_dst_gap(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """02:30 Berlin does not exist on 29 March 2026: the logged next fire is 03:30 CEST."""
    loaded = write_config(tmp_path, fault_server, schedule="30 2 * * *", timezone="Europe/Berlin")
    with (
        time_machine.travel(datetime(2026, 3, 28, 12, tzinfo=UTC), tick=False),
        capture_logs() as logs,
    ):
        daemon = Daemon(loaded, handle_signals=False)
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run)
            await until(lambda: bool(events(logs, "scheduler.next_fire")))
            daemon.request_stop()
    [fire] = events(logs, "scheduler.next_fire")
    assert (
        fire["next_fire"],
        fire["local"],
    ) == ("2026-03-29T01:30:00+00:00", "2026-03-29T03:30:00+02:00")


# firing --------------------------------------------------------------------------------


async def test_fires_on_schedule(tmp_path: Path, fault_server: FaultServer) -> None:
    """As the clock reaches each minute, `* * * * *` runs the suite, tick after tick."""
    loaded = write_config(tmp_path, fault_server)
    clock = ManualClock(START)
    with capture_logs() as logs:
        daemon = Daemon(loaded, clock=clock, handle_signals=False)
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run)
            await until(lambda: bool(events(logs, "scheduler.next_fire")))
            clock.advance(30)  # 03:01:00
            await until(lambda: len(events(logs, "scheduler.job_finished")) == 1)
            clock.advance(60)  # 03:02:00
            await until(lambda: len(events(logs, "scheduler.job_finished")) == 2)
            daemon.request_stop()
    finished = events(logs, "scheduler.job_finished")
    assert [e["exit_code"] for e in finished] == [0, 0]
    fires = [e["scheduled_for"] for e in events(logs, "scheduler.job_started")]
    assert fires == ["2026-11-30T03:01:00+00:00", "2026-11-30T03:02:00+00:00"]
    assert all(manifest(Path(e["run_dir"]))["finished_at"] for e in finished)
    assert logs[-1]["event"] == "scheduler.stopped"


async def test_no_overlap_when_a_run_outlasts_the_interval(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """Fire times that come due while the suite runs are skipped, never run alongside it."""
    loaded = write_config(tmp_path, fault_server)
    clock = ManualClock(START)
    release = anyio.Event()
    active: list[int] = [0, 0]  # running now, most at once

    async def slow_runner(*args: Any, **kwargs: Any) -> Any:
        active[0] += 1
        active[1] = max(active)
        try:
            await release.wait()
            return await run_suite_async(*args, **kwargs)
        finally:
            active[0] -= 1

    with capture_logs() as logs:
        daemon = Daemon(loaded, clock=clock, runner=slow_runner, handle_signals=False)
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run)
            await until(lambda: bool(events(logs, "scheduler.next_fire")))
            clock.advance(30)  # 03:01:00, the first fire
            await until(lambda: active[0] == 1)
            clock.advance(185)  # 03:04:05: three more fire times pass while it runs
            release.set()
            await until(lambda: bool(events(logs, "scheduler.job_finished")))
            clock.advance(60)  # 03:05:05, the next fire
            await until(lambda: len(events(logs, "scheduler.job_finished")) == 2)
            daemon.request_stop()
    assert active[1] == 1
    [skipped] = events(logs, "scheduler.job_skipped")
    assert (skipped["reason"], skipped["missed"]) == ("running", 3)
    started = [e["scheduled_for"] for e in events(logs, "scheduler.job_started")]
    assert started == ["2026-11-30T03:01:00+00:00", "2026-11-30T03:05:00+00:00"]


async def test_a_late_fire_beyond_the_grace_is_a_misfire_not_a_run(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """Waking five minutes after an hourly fire (grace 60 s) logs a misfire; the next one runs."""
    loaded = write_config(tmp_path, fault_server, schedule="0 * * * *", misfire=60)
    clock = ManualClock(START)
    with capture_logs() as logs:
        daemon = Daemon(loaded, clock=clock, handle_signals=False)
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run)
            await until(lambda: bool(events(logs, "scheduler.next_fire")))
            clock.advance(3600 + 270)  # 04:05:00, the 04:00 fire is 300 s late
            await until(lambda: bool(events(logs, "scheduler.misfire")))
            clock.advance(3300)  # 05:00:00
            await until(lambda: bool(events(logs, "scheduler.job_finished")))
            daemon.request_stop()
    [misfire] = events(logs, "scheduler.misfire")
    assert (
        misfire["scheduled_for"],
        misfire["late_seconds"],
    ) == ("2026-11-30T04:00:00+00:00", 300.0)
    [started] = events(logs, "scheduler.job_started")
    assert started["scheduled_for"] == "2026-11-30T05:00:00+00:00"


async def test_fire_times_that_came_due_together_run_once(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """After a two-hour stall, 120 due minutes coalesce into one run of the latest."""
    loaded = write_config(tmp_path, fault_server, misfire=60)
    clock = ManualClock(START)
    with capture_logs() as logs:
        daemon = Daemon(loaded, clock=clock, handle_signals=False)
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run)
            await until(lambda: bool(events(logs, "scheduler.next_fire")))
            clock.advance(2 * 3600 + 5)  # 05:00:35: every minute from 03:01 on is due
            await until(lambda: bool(events(logs, "scheduler.job_finished")))
            daemon.request_stop()
    [started] = events(logs, "scheduler.job_started")
    assert (started["coalesced"], started["scheduled_for"]) == (120, "2026-11-30T05:00:00+00:00")
    assert events(logs, "scheduler.misfire") == []


def _left_heartbeat(loaded: LoadedConfig, handled: str) -> None:
    """The heartbeat a stopped daemon leaves: the last fire it dealt with."""
    heartbeat_path(loaded.runs_dir).parent.mkdir(parents=True, exist_ok=True)
    doc = {"state": "stopped", "suites": {"nightly": {"handled": handled, "running": False}}}
    heartbeat_path(loaded.runs_dir).write_text(json.dumps(doc))


async def _interrupted(
    loaded: LoadedConfig, server: FaultServer, clock: ManualClock
) -> tuple[Path, list[dict[str, Any]]]:
    """A `--run-now` run whose candidate hangs, stopped by SIGTERM once the reference's three
    rows are written: its run dir, left resumable, and the daemon's log lines."""
    with capture_logs() as logs:
        daemon = Daemon(loaded, clock=clock, run_now=True, handle_signals=False)
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run)
            await until(lambda: len(server.received("ok")) == 3)
            [run_dir] = run_dirs(loaded)
            await until(lambda: len((run_dir / "raw.jsonl").read_text().splitlines()) == 3)
            daemon.request_stop("SIGTERM")
    return run_dir, logs


def _handled(loaded: LoadedConfig) -> str | None:
    doc = json.loads(heartbeat_path(loaded.runs_dir).read_text())
    handled: str | None = doc["suites"]["nightly"]["handled"]
    return handled


async def _serve_until(
    loaded: LoadedConfig, clock: ManualClock, event: str, **daemon: Any
) -> list[dict[str, Any]]:
    """Start a daemon, wait for its first `event`, stop it; its log lines."""
    with capture_logs() as logs:
        running = Daemon(loaded, clock=clock, handle_signals=False, **daemon)
        async with anyio.create_task_group() as tg:
            tg.start_soon(running.run)
            await until(lambda: bool(events(logs, event)))
            running.request_stop()
    return logs


def _first_fire(logs: list[dict[str, Any]]) -> str:
    fire: str = events(logs, "scheduler.next_fire")[0]["next_fire"]
    return fire


def _set_manifest(run_dir: Path, **fields: Any) -> None:
    manifest = json.loads((run_dir / "manifest.json").read_text())
    (run_dir / "manifest.json").write_text(json.dumps(manifest | fields))


def _started_at(run_dir: Path, when: datetime) -> None:
    """Date a run's start by the test's clock: a run writes the machine's, which a daemon on
    the real clock shares."""
    _set_manifest(run_dir, started_at=when.isoformat(timespec="seconds"))


def _past_run(loaded: LoadedConfig, name: str, mode: str, started: str) -> Path:
    """A finished run dir of `mode` that started at `started` (UTC, ISO-8601)."""
    run_dir = loaded.runs_dir / "nightly" / name
    run_dir.mkdir(parents=True)
    manifest = {
        "version": MANIFEST_VERSION,
        "suite": "nightly",
        "mode": mode,
        "started_at": started,
        "finished_at": started,
    }
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    return run_dir


async def test_a_fire_missed_while_no_daemon_ran_is_made_up_at_start(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """Down over the nightly 03:00 and back 30 s after it (grace 60 s): that night runs at
    start, for 03:00, instead of waiting a day; the heartbeat then names it handled."""
    loaded = write_config(tmp_path, fault_server, schedule="0 3 * * *", misfire=60)
    _left_heartbeat(loaded, "2026-11-29T03:00:00+00:00")
    logs = await _serve_until(loaded, ManualClock(START), "scheduler.job_finished")
    assert _first_fire(logs) == "2026-11-30T03:00:00+00:00"
    [started] = events(logs, "scheduler.job_started")
    assert (started["mode"], started["scheduled_for"], started["coalesced"]) == (
        "run",
        "2026-11-30T03:00:00+00:00",
        1,
    )
    [finished] = events(logs, "scheduler.job_finished")
    assert [Path(finished["run_dir"])] == run_dirs(loaded)
    assert events(logs, "scheduler.misfire") == []
    assert _handled(loaded) == "2026-11-30T03:00:00+00:00"

    logs = await _serve_until(loaded, ManualClock(START), "scheduler.next_fire")  # once only
    assert _first_fire(logs) == "2026-12-01T03:00:00+00:00"


async def test_fires_missed_while_down_past_the_grace_are_one_misfire(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """Down for two nights: both are counted in one misfire, as a stuck loop's are, and
    nothing runs until the next fire."""
    loaded = write_config(tmp_path, fault_server, schedule="0 3 * * *", misfire=10)
    _left_heartbeat(loaded, "2026-11-28T03:00:00+00:00")
    logs = await _serve_until(loaded, ManualClock(START), "scheduler.misfire")
    [misfire] = events(logs, "scheduler.misfire")
    assert (misfire["scheduled_for"], misfire["late_seconds"], misfire["missed"]) == (
        "2026-11-30T03:00:00+00:00",
        30.0,
        2,
    )
    assert events(logs, "scheduler.next_fire")[-1]["next_fire"] == "2026-12-01T03:00:00+00:00"
    assert events(logs, "scheduler.job_started") == []


async def test_a_schedule_moved_earlier_while_down_makes_up_its_own_fire(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """The last daemon handled 04:00 under `0 4 * * *`; back at 03:00:30 under `0 3 * * *`,
    the new schedule's 03:00 passed unhandled and is made up."""
    loaded = write_config(tmp_path, fault_server, schedule="0 3 * * *", misfire=60)
    _left_heartbeat(loaded, "2026-11-29T04:00:00+00:00")
    logs = await _serve_until(loaded, ManualClock(START), "scheduler.next_fire")
    assert _first_fire(logs) == "2026-11-30T03:00:00+00:00"


@pytest.mark.parametrize(
    ("heartbeat", "timezone"),
    [
        ("not json", "UTC"),
        ('{"suites": []}', "UTC"),
        ('{"suites": {"nightly": {"handled": "03:00"}}}', "UTC"),
        ('{"suites": {"nightly": {"handled": "0001-01-01T00:00:00+14:00"}}}', "UTC"),
        ('{"suites": {"nightly": {"handled": "0001-01-01T00:00:00+00:00"}}}', "Asia/Tokyo"),
        ('{"suites": {"nightly": {"handled": "9999-12-31T23:59:59-14:00"}}}', "UTC"),
    ],
    ids=["garbage", "suites-list", "naive-time", "year-1", "year-1-in-zone", "year-9999"],
)
async def test_a_heartbeat_that_cannot_be_believed_tells_of_no_missed_fire(
    tmp_path: Path, fault_server: FaultServer, heartbeat: str, timezone: str
) -> None:
    """Unreadable, far past or ahead of now: no traceback, and the suite starts from now."""
    loaded = write_config(
        tmp_path, fault_server, schedule="0 3 * * *", misfire=60, timezone=timezone
    )
    heartbeat_path(loaded.runs_dir).parent.mkdir(parents=True)
    heartbeat_path(loaded.runs_dir).write_text(heartbeat)
    logs = await _serve_until(loaded, ManualClock(START), "scheduler.next_fire")
    expected = "2026-12-01T03:00:00+00:00" if timezone == "UTC" else "2026-11-30T18:00:00+00:00"
    assert _first_fire(logs) == expected


async def test_run_now_at_start_stands_for_a_missed_fire(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """`--run-now` runs at start anyway: the missed fire does not make it run twice."""
    loaded = write_config(tmp_path, fault_server, schedule="0 3 * * *", misfire=60)
    _left_heartbeat(loaded, "2026-11-29T03:00:00+00:00")
    logs = await _serve_until(loaded, ManualClock(START), "scheduler.job_finished", run_now=True)
    [started] = events(logs, "scheduler.job_started")
    assert started["scheduled_for"] is None
    assert events(logs, "scheduler.job_skipped") == []
    assert len(run_dirs(loaded)) == 1
    assert _handled(loaded) == "2026-11-30T03:00:00+00:00"


def _write_heartbeat(loaded: LoadedConfig, nightly: dict[str, Any]) -> None:
    heartbeat_path(loaded.runs_dir).parent.mkdir(parents=True, exist_ok=True)
    heartbeat_path(loaded.runs_dir).write_text(json.dumps({"suites": {"nightly": nightly}}))


async def test_a_daemon_that_handled_no_fire_yet_leaves_the_one_it_waited_for(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """Started at 02:50 on a fresh install and stopped before 03:00: nothing handled, so the
    fire it was waiting for is still due when the next daemon comes back at 03:00:30."""
    loaded = write_config(tmp_path, fault_server, schedule="0 3 * * *", misfire=60)
    _write_heartbeat(loaded, {"handled": None, "next_fire": "2026-11-30T03:00:00+00:00"})
    logs = await _serve_until(loaded, ManualClock(START), "scheduler.job_started")
    assert events(logs, "scheduler.job_started")[0]["scheduled_for"] == (
        "2026-11-30T03:00:00+00:00"
    )


async def test_a_clock_stepped_back_after_a_run_does_not_run_the_night_again(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """03:01 was handled; the clock now reads 03:00:30 (stepped back at boot): the next fire
    is tomorrow's, not 03:01 again. A handled time a year ahead is a wrong file, not a clock."""
    loaded = write_config(tmp_path, fault_server, schedule="1 3 * * *")
    _write_heartbeat(loaded, {"handled": "2026-11-30T03:01:00+00:00"})
    logs = await _serve_until(loaded, ManualClock(START), "scheduler.next_fire")
    assert _first_fire(logs) == "2026-12-01T03:01:00+00:00"
    _write_heartbeat(loaded, {"handled": "2027-11-30T03:01:00+00:00"})
    logs = await _serve_until(loaded, ManualClock(START), "scheduler.next_fire")
    assert _first_fire(logs) == "2026-11-30T03:01:00+00:00"


async def test_a_run_cancelled_before_its_dir_exists_leaves_its_fire_to_be_made_up(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """A stop that cancels a run still validating its fixtures leaves the heartbeat at the
    last night, and the next start makes the fire up. (Once the run dir exists, the dir
    stands for the fire: see the kill test below.)"""
    loaded = write_config(tmp_path, fault_server, schedule="0 3 * * *", misfire=60, grace=0.1)
    _write_heartbeat(loaded, {"handled": "2026-11-29T03:00:00+00:00"})
    entered = anyio.Event()

    async def runner(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        await anyio.sleep_forever()

    with capture_logs() as logs:
        daemon = Daemon(loaded, clock=ManualClock(START), runner=runner, handle_signals=False)
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run)
            await entered.wait()
            daemon.request_stop("SIGTERM")
    assert events(logs, "scheduler.job_cancelled")
    assert _handled(loaded) == "2026-11-29T03:00:00+00:00"
    logs = await _serve_until(loaded, ManualClock(START), "scheduler.next_fire")
    assert _first_fire(logs) == "2026-11-30T03:00:00+00:00"


async def test_a_misfire_is_on_disk_as_handled_at_once(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """With an hour between heartbeats, a kill right after a misfire must not log it again."""
    loaded = write_config(tmp_path, fault_server, schedule="0 3 * * *", misfire=10, heartbeat=3600)
    _left_heartbeat(loaded, "2026-11-30T03:00:00+00:00")
    clock = ManualClock(START)
    seen: list[str | None] = []
    with capture_logs() as logs:
        daemon = Daemon(loaded, clock=clock, handle_signals=False)
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run)
            await until(lambda: bool(events(logs, "scheduler.next_fire")))
            await anyio.wait_all_tasks_blocked()  # the heartbeat loop wrote, and waits an hour
            clock.advance(86400 + 60)  # 1 December 03:01:30: its 03:00 is 90 s late
            await until(lambda: bool(events(logs, "scheduler.misfire")))
            seen.append(_handled(loaded))
            daemon.request_stop()
    assert seen == ["2026-12-01T03:00:00+00:00"]


async def test_a_stop_before_the_start_up_run_leaves_the_missed_fire_unhandled(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """`--run-now` stands for a missed fire only once its run starts: a SIGTERM during
    start-up leaves the fire for the next start to make up."""
    loaded = write_config(tmp_path, fault_server, schedule="0 3 * * *", misfire=60)
    _left_heartbeat(loaded, "2026-11-29T03:00:00+00:00")
    with capture_logs() as logs:
        daemon = Daemon(loaded, clock=ManualClock(START), run_now=True, handle_signals=False)
        daemon.request_stop("SIGTERM")
        assert await daemon.run() == 0
    assert events(logs, "scheduler.job_started") == []
    assert _handled(loaded) == "2026-11-29T03:00:00+00:00"


async def test_a_resumed_run_from_an_earlier_night_does_not_stand_for_tonights_fire(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """Stopped mid-run on the 28th and back 30 s after the 30th's fire: the 28th's run is
    resumed first, then the 29th's and 30th's fires run once. The resume takes a quarter of
    an hour, past the 10-minute grace: the made-up fire is as late as the daemon was in
    coming back, not as the resume made it."""
    loaded = write_config(tmp_path, fault_server, schedule="0 3 * * *", cand="slow:30", grace=0.2)
    earlier = datetime(2026, 11, 28, 3, 0, 5, tzinfo=UTC)
    run_dir, _ = await _interrupted(loaded, fault_server, ManualClock(earlier))
    _started_at(run_dir, earlier)
    assert _handled(loaded) is None  # a run stopped mid-way names no fire: its dir does

    loaded = write_config(tmp_path, fault_server, schedule="0 3 * * *", misfire=600)
    clock = ManualClock(START)

    async def runner(*args: Any, **kwargs: Any) -> Any:
        result = await run_suite_async(*args, **kwargs)
        if kwargs["mode"] == "resume":
            clock.advance(15 * 60)
        return result

    with capture_logs() as logs:
        daemon = Daemon(loaded, clock=clock, runner=runner, handle_signals=False)
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run)
            await until(lambda: len(events(logs, "scheduler.job_finished")) == 2)
            daemon.request_stop()
    started = events(logs, "scheduler.job_started")
    assert [(e["mode"], e["scheduled_for"], e["coalesced"]) for e in started] == [
        ("resume", None, 1),
        ("run", "2026-11-30T03:00:00+00:00", 2),
    ]
    assert started[0]["resume_dir"] == str(run_dir)
    assert events(logs, "scheduler.misfire") == events(logs, "scheduler.job_skipped") == []


async def test_a_run_dir_made_before_a_kill_stands_for_its_fire_the_heartbeat_lags(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """The heartbeat names a fire once its run ends; a run stopped or killed before that
    leaves its dir to stand for the fire: the next daemon resumes that run and makes up no
    second one, because the run started after it."""
    loaded = write_config(tmp_path, fault_server, schedule="0 3 * * *", cand="slow:30", grace=0.2)
    tonight = datetime(2026, 11, 30, 3, 0, 5, tzinfo=UTC)
    run_dir, _ = await _interrupted(loaded, fault_server, ManualClock(tonight))
    _started_at(run_dir, tonight)
    _left_heartbeat(loaded, "2026-11-29T03:00:00+00:00")  # as a SIGKILL would have left it

    loaded = write_config(tmp_path, fault_server, schedule="0 3 * * *", misfire=600)
    logs = await _serve_until(loaded, ManualClock(START), "scheduler.job_finished")
    started = events(logs, "scheduler.job_started")
    assert [(e["mode"], e["resume_dir"]) for e in started] == [("resume", str(run_dir))]
    assert _first_fire(logs) == "2026-12-01T03:00:00+00:00"
    assert run_dirs(loaded) == [run_dir]
    assert _handled(loaded) == "2026-11-30T03:00:00+00:00"


async def test_the_daemons_own_run_killed_and_past_resuming_has_its_fire_made_up(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """Tonight's run was stopped mid-way and its fixtures changed before the next start: it
    cannot be resumed, so it stands for no fire, and the night is made up with a new run
    (the heartbeat never named a fire whose run did not end)."""
    loaded = write_config(tmp_path, fault_server, schedule="0 3 * * *", cand="slow:30", grace=0.2)
    _left_heartbeat(loaded, "2026-11-29T03:00:00+00:00")
    tonight = datetime(2026, 11, 30, 3, 0, 5, tzinfo=UTC)
    run_dir, _ = await _interrupted(loaded, fault_server, ManualClock(tonight))
    _started_at(run_dir, tonight)
    assert _handled(loaded) == "2026-11-29T03:00:00+00:00"

    loaded = write_config(tmp_path, fault_server, schedule="0 3 * * *", misfire=600)
    with (tmp_path / "cases.jsonl").open("a") as cases:
        cases.write(json.dumps({"id": "d", "prompt": "delta"}) + "\n")
    logs = await _serve_until(loaded, ManualClock(START), "scheduler.job_finished")
    assert events(logs, "scheduler.resume_skipped")
    [job] = events(logs, "scheduler.job_started")
    assert (job["mode"], job["scheduled_for"]) == ("run", "2026-11-30T03:00:00+00:00")


@pytest.mark.parametrize(
    ("mode", "started", "made_up"),
    [
        ("run", "2026-11-30T03:00:10+00:00", False),  # by hand after the fire: that night's
        ("run", "2026-11-30T02:59:59+00:00", True),  # before it: the fire is still missed
        ("replay", "2026-11-30T03:00:10+00:00", True),  # calls nothing
        ("retry", "2026-11-30T03:00:10+00:00", True),  # calls only what its parent missed
        ("run", "2027-11-30T03:00:10+00:00", True),  # a year ahead: a wrong clock, not a run
        ("run", "03:00:10", True),  # no date, no zone: tells of nothing
    ],
    ids=["run-after", "run-before", "replay-after", "retry-after", "year-ahead", "no-date"],
)
async def test_a_run_started_by_hand_while_down_stands_for_the_fire_it_followed(
    tmp_path: Path, fault_server: FaultServer, mode: str, started: str, made_up: bool
) -> None:
    """Down over 03:00; someone ran the suite by hand at 03:00:10. Back at 03:00:30, the
    daemon does not run the night a second time; a run before the fire, a replay or a retry
    of unscored calls leaves the fire to be made up."""
    loaded = write_config(tmp_path, fault_server, schedule="0 3 * * *", misfire=60)
    _left_heartbeat(loaded, "2026-11-29T03:00:00+00:00")
    _past_run(loaded, "by-hand", mode, started)
    logs = await _serve_until(
        loaded, ManualClock(START), "scheduler.job_finished" if made_up else "scheduler.next_fire"
    )
    fire = _first_fire(logs)
    if made_up:
        assert fire == "2026-11-30T03:00:00+00:00"
        [job] = events(logs, "scheduler.job_started")
        assert job["scheduled_for"] == "2026-11-30T03:00:00+00:00"
    else:
        assert fire == "2026-12-01T03:00:00+00:00"
        assert events(logs, "scheduler.job_started") == []
        assert _handled(loaded) == "2026-11-30T03:00:00+00:00"


async def test_the_run_that_stood_for_a_missed_fire_is_named_once(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """The first `scheduler.next_fire` names the run that stood for the missed 03:00, so the
    night does not vanish from the logs; a dir renamed by hand does not hide it."""
    loaded = write_config(tmp_path, fault_server, schedule="0 3 * * *", misfire=60)
    _left_heartbeat(loaded, "2026-11-29T03:00:00+00:00")
    by_hand = _past_run(loaded, "20261130T030010Z-0a0b0c", "run", "2026-11-30T03:00:10+00:00")
    _past_run(loaded, "golden", "run", "2026-10-01T03:00:10+00:00")  # sorts last by name
    logs = await _serve_until(loaded, ManualClock(START), "scheduler.next_fire")
    [first] = events(logs, "scheduler.next_fire")
    assert (first["next_fire"], first["covered_by"]) == ("2026-12-01T03:00:00+00:00", str(by_hand))


async def test_a_run_dated_ahead_of_now_stands_for_no_fire_still_to_come(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """A run dated 06:00:10 by a host whose clock runs three hours fast, read at 03:00:30: it
    stands for the fires up to now, and 04:00, 05:00 and 06:00 still run."""
    loaded = write_config(tmp_path, fault_server, schedule="0 * * * *", misfire=60)
    _left_heartbeat(loaded, "2026-11-30T02:00:00+00:00")
    _past_run(loaded, "20261130T060010Z-0a0b0c", "run", "2026-11-30T06:00:10+00:00")
    logs = await _serve_until(loaded, ManualClock(START), "scheduler.next_fire")
    assert _first_fire(logs) == "2026-11-30T04:00:00+00:00"
    assert _handled(loaded) == "2026-11-30T03:00:00+00:00"


async def test_a_killed_run_that_cannot_resume_stands_for_no_fire(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """A run by hand killed at 03:00:20 whose fixtures then changed cannot be resumed: the
    daemon says why and makes the 03:00 fire up, so the night still gets a finished run."""
    loaded = write_config(tmp_path, fault_server, schedule="0 3 * * *", misfire=60)
    _left_heartbeat(loaded, "2026-11-29T03:00:00+00:00")
    killed = _past_run(loaded, "20261130T030010Z-0a0b0c", "run", "2026-11-30T03:00:10+00:00")
    _set_manifest(killed, finished_at=None)
    logs = await _serve_until(loaded, ManualClock(START), "scheduler.job_finished")
    assert events(logs, "scheduler.resume_skipped")
    [job] = events(logs, "scheduler.job_started")
    assert (job["mode"], job["scheduled_for"]) == ("run", "2026-11-30T03:00:00+00:00")


@pytest.mark.parametrize(
    ("handled", "name", "started"),
    [
        # dirs are named by their start, and only those named since the fire the heartbeat
        # names are read: one named on the 29th is passed over even if its manifest, edited,
        # claims tonight (the heartbeat as a `0 2 * * *` schedule left it)
        ("2026-11-30T02:00:00+00:00", "20261129T030010Z-0a0b0c", "2026-11-30T03:00:10+00:00"),
        # a first start (no heartbeat) makes up no fire, whatever runs the suite has had: only
        # a daemon that was running can have missed one
        (None, "old", "2026-11-20T12:00:00+00:00"),
    ],
    ids=["named-before-the-heartbeat", "no-heartbeat"],
)
async def test_runs_that_tell_of_no_missed_fire(
    tmp_path: Path, fault_server: FaultServer, handled: str | None, name: str, started: str
) -> None:
    loaded = write_config(tmp_path, fault_server, schedule="0 3 * * *", misfire=60)
    if handled is not None:
        _left_heartbeat(loaded, handled)
    _past_run(loaded, name, "run", started)
    logs = await _serve_until(loaded, ManualClock(START), "scheduler.next_fire")
    expected = "2026-11-30T03:00:00+00:00" if handled else "2026-12-01T03:00:00+00:00"
    assert _first_fire(logs) == expected


async def test_a_replay_after_an_interrupted_run_does_not_hide_it(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """A replay calls nothing and is passed over: the interrupted run before it resumes."""
    loaded = write_config(tmp_path, fault_server, cand="slow:30", grace=0.2)
    run_dir, _ = await _interrupted(loaded, fault_server, ManualClock(START))
    _past_run(loaded, "29990101T000000Z-aaaaaa", "replay", "2999-01-01T00:00:00+00:00")
    assert find_interrupted(loaded, "nightly") == (run_dir, None)


async def test_a_start_that_fails_leaves_the_fire_the_last_daemon_handled(
    tmp_path: Path, fault_server: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first heartbeat is written once every suite's first fire is settled: a start that
    fails before that leaves the last daemon's heartbeat, and its missed fire, for the next."""
    loaded = write_config(tmp_path, fault_server, schedule="0 3 * * *")
    _left_heartbeat(loaded, "2026-11-29T03:00:00+00:00")
    left = heartbeat_path(loaded.runs_dir).read_text()

    def unreadable(*args: Any) -> Any:
        raise OSError("runs dir went away")

    monkeypatch.setattr("runner.scheduler.daemon.find_interrupted", unreadable)
    with pytest.raises(OSError, match="went away"):
        await Daemon(loaded, clock=ManualClock(START), handle_signals=False).run()
    assert heartbeat_path(loaded.runs_dir).read_text() == left


async def test_a_per_second_schedule_down_for_days_makes_up_only_its_latest_fire(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """Two days of per-second fires missed: counting stops at MAX_COALESCE, but the one that
    runs is the latest, half a second late, not the last one counted, a day late."""
    loaded = write_config(tmp_path, fault_server, schedule="* * * * * *", misfire=30)
    clock = ManualClock(START + timedelta(seconds=0.5))
    _left_heartbeat(loaded, (START - timedelta(days=2)).isoformat())
    logs = await _serve_until(loaded, clock, "scheduler.job_started")
    [started] = events(logs, "scheduler.job_started")
    assert (started["scheduled_for"], started["coalesced"]) == (
        "2026-11-30T03:00:30+00:00",
        MAX_COALESCE + 1,
    )
    assert events(logs, "scheduler.misfire") == []


def test_latest_fire_looks_back_as_far_as_the_schedule_needs() -> None:
    def latest(expr: str, timezone: str = "UTC", now: datetime = START) -> datetime | None:
        trigger = Trigger(expr, timezone, config_path=Path("p.toml"), suite="s")
        return trigger.latest(now)

    assert latest("* * * * * *") == START
    assert latest("*/10 * * * * *") == START
    assert latest("*/7 * * * * *") == START - timedelta(seconds=2)  # 03:00:28
    assert latest("0 3 * * *") == START.replace(minute=0, second=0)
    assert latest("0 4 * * *") == datetime(2026, 11, 29, 4, 0, tzinfo=UTC)
    assert latest("0 0 1 1 *") == datetime(2026, 1, 1, tzinfo=UTC)
    assert latest("0 0 29 2 *") is None  # the last 29 February, 2024, is past the lookback
    assert latest("30 22 * * *", "America/New_York") == datetime(2026, 11, 29, 3, 30, tzinfo=UTC)
    # every second of the 1st only: a day of fires lies between, found without counting them
    first_day = latest("* * * 1 * *", now=datetime(2026, 11, 2, 12, tzinfo=UTC))
    assert first_day == datetime(2026, 11, 1, 23, 59, 59, tzinfo=UTC)
    # a spring-forward gap moves 02:30 New York to 03:30 EDT (07:30 UTC), and it is found
    spring = latest("30 2 * * *", "America/New_York", datetime(2026, 3, 8, 8, tzinfo=UTC))
    assert spring is not None
    assert spring.astimezone(UTC) == datetime(2026, 3, 8, 7, 30, tzinfo=UTC)


async def test_a_restart_in_the_hour_a_dst_fall_back_repeats_runs_the_night_once(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """01:30 New York fired in the first 01:00-02:00 of 1 November and was stopped mid-run;
    a daemon restarted in the second 01:00-02:00 resumes it and fires next on 2 November."""
    loaded = write_config(
        tmp_path, fault_server, schedule="30 1 * * *", timezone="America/New_York"
    )
    clock = ManualClock(datetime(2026, 11, 1, 5, 29, 50, tzinfo=UTC))  # 01:29:50 EDT
    with capture_logs() as first:
        daemon = Daemon(loaded, clock=clock, handle_signals=False)
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run)
            await until(lambda: bool(events(first, "scheduler.next_fire")))
            clock.advance(15)
            await until(lambda: bool(events(first, "scheduler.job_started")))
            daemon.request_stop()
    assert _handled(loaded) == "2026-11-01T05:30:00+00:00"

    clock = ManualClock(datetime(2026, 11, 1, 6, 10, tzinfo=UTC))  # 01:10 EST, the hour again
    logs = await _serve_until(loaded, clock, "scheduler.next_fire")
    assert _first_fire(logs) == "2026-11-02T06:30:00+00:00"


async def test_a_fire_in_a_spring_forward_gap_missed_while_down_is_made_up(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """02:30 New York does not exist on 8 March; it fires at 03:30 EDT (07:30 UTC). Down over
    it and back a minute later, it is made up, not lost to the next day's."""
    loaded = write_config(
        tmp_path, fault_server, schedule="30 2 * * *", timezone="America/New_York"
    )
    _left_heartbeat(loaded, "2026-03-07T07:30:00+00:00")
    logs = await _serve_until(
        loaded, ManualClock(datetime(2026, 3, 8, 7, 31, tzinfo=UTC)), "scheduler.next_fire"
    )
    assert _first_fire(logs) == "2026-03-08T07:30:00+00:00"


async def test_endpoint_outage_makes_one_run_incomplete_and_the_next_tick_runs_normally(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """A 503 for every first call makes run one exit 2; run two, after it, is clean."""
    loaded = write_config(tmp_path, fault_server, cand="flaky:1:503")
    clock = ManualClock(START)
    with capture_logs() as logs:
        daemon = Daemon(loaded, clock=clock, handle_signals=False)
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run)
            await until(lambda: bool(events(logs, "scheduler.next_fire")))
            clock.advance(30)
            await until(lambda: len(events(logs, "scheduler.job_finished")) == 1)
            clock.advance(60)
            await until(lambda: len(events(logs, "scheduler.job_finished")) == 2)
            daemon.request_stop()
    finished = events(logs, "scheduler.job_finished")
    assert [(e["exit_code"], e["verdict"]) for e in finished] == [(2, "incomplete"), (0, "clean")]
    first_summary = json.loads((Path(finished[0]["run_dir"]) / "summary.json").read_text())
    assert first_summary["unadmitted"] == 3
    assert events(logs, "scheduler.job_crashed") == []


async def test_a_bug_in_one_run_is_a_job_crash_with_its_traceback_and_the_daemon_goes_on(
    tmp_path: Path, fault_server: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug mid-run (an exception no input explains) is the run's `scheduler.job_crashed`
    with exit code 70 and the traceback a bug report needs; the next fire runs as usual."""
    from runner.gate import Folds

    loaded = write_config(tmp_path, fault_server)
    clock = ManualClock(START)
    real, calls = Folds.add, []

    def first_fails(self: Folds, *args: Any) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise OverflowError("int too large to convert to float")
        real(self, *args)

    monkeypatch.setattr(Folds, "add", first_fails)
    with capture_logs() as logs:
        daemon = Daemon(loaded, clock=clock, handle_signals=False)
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run)
            await until(lambda: bool(events(logs, "scheduler.next_fire")))
            clock.advance(30)
            await until(lambda: len(events(logs, "scheduler.job_crashed")) == 1)
            clock.advance(60)
            await until(lambda: len(events(logs, "scheduler.job_finished")) == 1)
            daemon.request_stop()
    (crashed,) = events(logs, "scheduler.job_crashed")
    assert (crashed["exit_code"], crashed["error"]) == (70, "InternalError")
    assert "OverflowError: int too large" in crashed["traceback"]
    assert "in first_fails" in crashed["traceback"]
    assert events(logs, "scheduler.crashed") == []


# the lock --------------------------------------------------------------------------------


async def test_a_fire_while_another_process_holds_the_lock_is_skipped(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """A suite locked by a hand-started run is skipped with reason `locked`, nothing called."""
    loaded = write_config(tmp_path, fault_server)
    clock = ManualClock(START)
    with capture_logs() as logs, suite_lock(loaded.runs_dir, "nightly"):
        daemon = Daemon(loaded, clock=clock, handle_signals=False)
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run)
            await until(lambda: bool(events(logs, "scheduler.next_fire")))
            clock.advance(30)
            await until(lambda: bool(events(logs, "scheduler.job_skipped")))
            daemon.request_stop()
    [skipped] = events(logs, "scheduler.job_skipped")
    assert skipped["reason"] == "locked"
    assert events(logs, "scheduler.job_started") == []
    assert fault_server.received() == []


def test_parallax_run_refuses_a_locked_suite_with_exit_64(
    tmp_path: Path, fault_server: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """`parallax run` beside a run in flight exits 64 with one line naming the holder."""
    loaded = write_config(tmp_path, fault_server)
    with suite_lock(loaded.runs_dir, "nightly"):
        code = main(["run", "--config", str(loaded.path)])
    err = capsys.readouterr().err
    assert code == 64
    assert "already running" in err and "Traceback" not in err
    assert not (loaded.runs_dir / "nightly").exists() or not run_dirs(loaded)


# stop and resume -------------------------------------------------------------------------


async def test_stop_mid_run_leaves_a_resumable_dir_that_the_next_start_resumes(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """Past the grace a run is cancelled with finished_at null; the next start finishes it."""
    loaded = write_config(tmp_path, fault_server, cand="slow:30", grace=0.2)
    clock = ManualClock(START)
    run_dir, first = await _interrupted(loaded, fault_server, clock)
    assert [e["event"] for e in first[-2:]] == ["scheduler.job_cancelled", "scheduler.stopped"]
    assert manifest(run_dir)["finished_at"] is None
    assert (run_dir, None) == find_interrupted(loaded, "nightly")

    loaded = write_config(tmp_path, fault_server, cand="ok")  # the endpoint is back
    with capture_logs() as second:
        daemon = Daemon(loaded, clock=clock, handle_signals=False)
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run)
            await until(lambda: bool(events(second, "scheduler.job_finished")))
            daemon.request_stop()
    [started] = events(second, "scheduler.job_started")
    assert ("resume", str(run_dir)) == (started["mode"], started["resume_dir"])
    assert events(second, "run.resumed")[0]["already_done"] == 3
    assert manifest(run_dir)["finished_at"] is not None
    assert [run_dir] == run_dirs(loaded)
    ref_calls = [r for r in fault_server.received() if "/ref/" in r.path]
    assert len(ref_calls) == 3  # the reference was not called again


async def test_an_interrupted_run_with_edited_fixtures_is_not_resumed_and_says_why(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """Edited fixtures make a half-done run unresumable: logged, and the schedule goes on."""
    loaded = write_config(tmp_path, fault_server)
    run_dir = loaded.runs_dir / "nightly" / "20261130T000000Z-abcdef"
    run_dir.mkdir(parents=True)
    (run_dir / "manifest.json").write_text(
        json.dumps({"version": 1, "suite": "nightly", "mode": "run", "finished_at": None})
    )
    with capture_logs() as logs:
        daemon = Daemon(loaded, clock=ManualClock(START), handle_signals=False)
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run)
            await until(lambda: bool(events(logs, "scheduler.resume_skipped")))
            daemon.request_stop()
    [skipped] = events(logs, "scheduler.resume_skipped")
    assert "fixtures changed" in skipped["reason"]
    assert events(logs, "scheduler.job_started") == []


@pytest.mark.parametrize("fixtures", [[1], "x", 5])
def test_an_interrupted_run_with_a_mangled_manifest_is_skipped_with_a_reason(
    tmp_path: Path, fault_server: FaultServer, fixtures: Any
) -> None:
    """A manifest whose `fixtures` is not an object is a reason to start afresh, not a crash
    of the daemon at start."""
    loaded = write_config(tmp_path, fault_server)
    run_dir = loaded.runs_dir / "nightly" / "20261130T000000Z-abcdef"
    run_dir.mkdir(parents=True)
    doc = {"version": 1, "suite": "nightly", "mode": "run", "finished_at": None}
    (run_dir / "manifest.json").write_text(json.dumps(doc | {"fixtures": fixtures}))
    found, reason = find_interrupted(loaded, "nightly")
    assert found is None
    assert reason is not None and "no fixtures object" in reason


# health ----------------------------------------------------------------------------------


def test_heartbeat_goes_stale_when_the_scheduler_loop_is_stuck(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """A run that blocks the event loop stops the heartbeat; health fails, then recovers."""
    loaded = write_config(tmp_path, fault_server, heartbeat=0.05)
    entered, release = threading.Event(), threading.Event()

    async def blocking_runner(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        release.wait(timeout=30)  # a blocking call on the loop: nothing else runs meanwhile
        return await run_suite_async(*args, **kwargs)

    heartbeat = heartbeat_path(loaded.runs_dir)
    healthy: Callable[[], bool] = lambda: check_health(heartbeat, 30)["healthy"]  # noqa: E731
    with anyio.from_thread.start_blocking_portal() as portal:
        clock = portal.call(ManualClock, START)
        daemon = Daemon(loaded, clock=clock, runner=blocking_runner, handle_signals=False)
        done = portal.start_task_soon(daemon.run)
        wait_for(healthy)
        portal.call(clock.advance, 30)
        assert entered.wait(timeout=30)
        with time_machine.travel(datetime.now(UTC) + timedelta(minutes=5), tick=True):
            report = check_health(heartbeat, 30)
            assert not report["healthy"]
            assert report["reason"].startswith("stale heartbeat")
            release.set()
            wait_for(healthy)
        portal.call(daemon.request_stop)
        assert done.result(timeout=30) == 0
    assert check_health(heartbeat, 30)["reason"] == "scheduler is stopped"


def test_health_and_lock_probes_survive_hostile_files(tmp_path: Path) -> None:
    """A heartbeat or lock file nested past the parser's limit reads as unreadable, not a crash."""
    runs = tmp_path / "runs"
    runs.mkdir()
    deep = "[" * 5000 + "]" * 5000
    heartbeat_path(runs).write_text(deep)
    report = check_health(heartbeat_path(runs))
    assert not report["healthy"]
    assert report["reason"].startswith("unreadable heartbeat")
    with suite_lock(runs, "s") as path:
        path.write_text(deep)
        assert is_locked(runs, "s") == {"pid": None}


def test_health_without_a_daemon_fails_with_a_reason(tmp_path: Path) -> None:
    """No heartbeat file means unhealthy, with a reason a person can act on."""
    report = check_health(heartbeat_path(tmp_path / "runs"))
    assert not report["healthy"]
    assert "no heartbeat file" in report["reason"]


def _heartbeat(runs: Path, **changes: Any) -> None:
    """A heartbeat as the daemon writes it, for this live process, with `changes` applied."""
    doc = {
        "version": 1,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "state": "running",
        "updated_at": datetime.now(UTC).isoformat(timespec="milliseconds"),
        "heartbeat_seconds": 15,
        "suites": {},
    }
    runs.mkdir(parents=True, exist_ok=True)
    text = json.dumps(doc | changes)
    heartbeat_path(runs).write_text(text.replace('"NAN"', "NaN"), encoding="utf-8")


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"heartbeat_seconds": "NAN", "updated_at": "2020-01-01T00:00:00+00:00"}, "unreadable"),
        ({"heartbeat_seconds": 0}, "unreadable heartbeat: heartbeat_seconds is 0.0"),
        ({"heartbeat_seconds": 1e308}, "unreadable heartbeat: heartbeat_seconds is 1e+308"),
        ({"updated_at": "2020-01-01T00:00:00"}, "unreadable heartbeat: updated_at has no time"),
        ({"updated_at": "2099-01-01T00:00:00+00:00"}, "heartbeat from the future"),
        ({"pid": -1}, "unreadable heartbeat: pid is -1"),
        ({"pid": 1e30}, "unreadable heartbeat: pid is 1e+30"),
        ({"pid": "12"}, "unreadable heartbeat: pid is '12'"),
    ],
    ids=[
        *("nan-interval", "zero-interval", "endless-interval", "naive-time", "future"),
        *("pid-1", "pid-float", "pid-str"),
    ],
)
def test_health_never_reads_a_heartbeat_no_daemon_writes_as_healthy(
    tmp_path: Path, changes: dict[str, Any], reason: str
) -> None:
    """A heartbeat with a NaN interval, a time from the future or without a zone, or a pid no
    process has is unhealthy with a reason, never fresh and never a traceback."""
    runs = tmp_path / "runs"
    _heartbeat(runs)
    assert check_health(heartbeat_path(runs))["healthy"]  # the same file untouched is healthy
    _heartbeat(runs, **changes)
    report = check_health(heartbeat_path(runs))
    assert not report["healthy"]
    assert report["reason"].startswith(reason), report
