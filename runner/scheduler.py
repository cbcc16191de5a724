"""`parallax serve`: each suite on its cron schedule, never two runs of a suite at once.

APScheduler 3.11 (the stable line; 4.0 is a pre-release) supplies the crontab parsing and
field arithmetic, run in UTC against the suite's wall clock; `Trigger` maps wall-clock fire
times to real ones, DST gaps and folds included. It stays behind this module. The loop that
waits and runs is ours, one anyio task group with named children, so a run in flight sits in
a cancel scope we own:

    serve
    ├── heartbeat      rewrites runs/.parallax-serve.json; `parallax health` reads it
    │                  (runner.health: found by the pointer written at start)
    └── suite:<name>   wait for the next fire time, run, repeat (one task per scheduled suite)

Scheduling follows APScheduler's own vocabulary:

- coalesce: fire times that came due together (a suspended host, a stuck loop) run once;
- misfire_grace_time: a fire time found more than `serve_misfire_grace_seconds` late is not
  run (`scheduler.misfire`);
- max_instances = 1: fire times that come due while the suite's run is in flight are skipped
  (`scheduler.job_skipped`, reason "running"), and so is a fire while another process holds
  the suite lock (reason "locked"; see `runner.lock`).

On SIGTERM, SIGINT or SIGHUP (`runner.shutdown`, the same stop as `run`'s) no new run starts; a
run in flight may finish within `serve_grace_seconds`, else it is cancelled, which leaves its
run dir resumable (its manifest keeps `finished_at: null`). A stdout whose reader went away
stops the daemon the same way: the log stream people alert on is gone, so it says why on
stderr and exits 74 for its supervisor to restart it. The daemon then logs exactly one of
`scheduler.stopped` (exit 0, or 74) or `scheduler.crashed` (exit 70). On the next start it
resumes the latest interrupted run of each suite, or logs `scheduler.resume_skipped` with the
reason it cannot. Fire times that passed while no daemon ran (a restart, a redeploy) are made
up as late ones: the heartbeat the last daemon left names the last fire it dealt with for each
suite.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import anyio

from runner import logs
from runner.config import LoadedConfig
from runner.errors import ConfigError, ParallaxError, UsageError
from runner.health import heartbeat_path, write_pointer
from runner.jsontext import loads
from runner.lock import SuiteLocked, daemon_lock, is_locked
from runner.shutdown import RUN_SIGNALS, Shutdown

HEARTBEAT_VERSION = 1
EXIT_CRASHED = 70  # sysexits EX_SOFTWARE: the scheduler itself failed (a run's failure is not)
EXIT_STDOUT_CLOSED = 74  # sysexits EX_IOERR: stopped because no one reads its log lines any more
STOP_SIGNALS = (*RUN_SIGNALS, signal.SIGHUP)  # each a clean stop, exit 0
STDOUT_CLOSED = "stdout_closed"  # the stop reason when stdout's reader went away
UNWIND_SECONDS = 10.0  # bounded, shielded wait for cancelled runs to close their ledgers
MAX_COALESCE = 1_000  # fire times counted one by one; past it the latest is found directly
SHIFT_WINDOW = timedelta(hours=26)  # longer than any offset change (Samoa skipped a day)
LOOKBACK = timedelta(days=400)  # how far back a fire is looked for, or a handled one believed
CLOCK_SLACK = timedelta(days=1)  # how far ahead of now a handled fire is still believed

Runner = Callable[..., Awaitable[tuple[Path, int, dict[str, Any]]]]


class Clock(Protocol):
    """Where the scheduler reads the time and waits for it; tests pass one moved by hand."""

    def now(self) -> datetime: ...

    async def sleep_until(self, when: datetime) -> None: ...


class SystemClock:
    """Wall-clock UTC; long waits re-read the clock so a suspend or a clock step is noticed."""

    recheck_seconds = 30.0

    def now(self) -> datetime:
        return datetime.now(UTC)

    async def sleep_until(self, when: datetime) -> None:
        while (delay := (when - self.now()).total_seconds()) > 0:
            await anyio.sleep(min(delay, self.recheck_seconds))


_DOW_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat", "sun")


def _crontab_dow(expr: str) -> str:
    """Crontab's numeric weekdays (0 or 7 = Sunday) as names.

    APScheduler 3 reads a number as Monday-based (its documented historical mistake, fixed
    only in 4.x); names mean the same to both, so numbers are spelled out before parsing.
    """
    out: list[str] = []
    for part in expr.split(","):
        if not part or not set(part) <= set("0123456789-/*"):
            out.append(part)  # names (mon-fri) and anything APScheduler should reject
            continue
        span, _, step_text = part.partition("/")
        step = int(step_text) if step_text else 1
        if span == "*":
            lo, hi = 0, 6
        elif "-" in span:
            lo_text, _, hi_text = span.partition("-")
            lo, hi = int(lo_text), int(hi_text)
        else:
            lo = int(span)
            hi = 6 if step_text else lo  # "1/2" means from Monday on, every other day
        if not (0 <= lo <= 7 and 0 <= hi <= 7 and lo <= hi and step >= 1):
            raise ValueError(f"day-of-week {part!r} is out of range 0-7")
        if part == "*":
            out.append("*")
            continue
        out.extend(_DOW_NAMES[day] for day in range(lo, hi + 1, step))
    return ",".join(dict.fromkeys(out))


class Trigger:
    """A suite's crontab line in its time zone, via APScheduler's CronTrigger.

    Five fields as crontab has them; six when the first is a second field (`*/10 * * * * *`
    fires every ten seconds), for sub-minute schedules such as a soak test's.
    """

    def __init__(self, expr: str, timezone: str, *, config_path: Path, suite: str) -> None:
        from apscheduler.triggers.cron import CronTrigger

        try:
            tz = ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ConfigError(
                config_path, f"suites.{suite}.timezone", f"unknown time zone {timezone!r}"
            ) from None
        fields = expr.split()
        if len(fields) not in (5, 6):
            raise ConfigError(
                config_path,
                f"suites.{suite}.schedule",
                f"bad cron {expr!r}: expected 5 fields (minute hour day month weekday), "
                f"or 6 with a leading second field, got {len(fields)}",
            )
        second = fields.pop(0) if len(fields) == 6 else "0"  # 6 fields: seconds first
        minute, hour, day, month, dow = fields
        try:
            self._cron = CronTrigger(
                second=second,
                minute=minute,
                hour=hour,
                day=day,
                month=month,
                day_of_week=_crontab_dow(dow),
                timezone=UTC,  # matched against the wall clock: see `_next`
            )
        except ValueError as exc:
            raise ConfigError(
                config_path, f"suites.{suite}.schedule", f"bad cron {expr!r}: {exc}"
            ) from None
        if self._cron.get_next_fire_time(None, datetime.now(UTC)) is None:  # `0 0 30 2 *`
            raise ConfigError(
                config_path, f"suites.{suite}.schedule", f"cron {expr!r} names no date that exists"
            )
        self.expr = expr
        self.timezone = timezone
        self.tz = tz

    @classmethod
    def for_suite(cls, loaded: LoadedConfig, name: str) -> Trigger | None:
        """The suite's `schedule` in its `timezone`, as `serve` fires it; None without one."""
        suite = loaded.config.suites[name]
        if not suite.schedule:
            return None
        return cls(suite.schedule, suite.timezone, config_path=loaded.path, suite=name)

    def first(self, now: datetime) -> datetime | None:
        """The first fire time at or after `now`."""
        return self._next(now, strictly=False)

    def after(self, previous: datetime) -> datetime | None:
        """The first fire time after `previous` (which may still be in the past)."""
        return self._next(previous, strictly=True)

    def _next(self, bound: datetime, *, strictly: bool) -> datetime | None:
        """The first fire time at (unless `strictly`) or after `bound`, in UTC.

        The crontab fields are matched against the zone's wall clock by a trigger that runs
        in UTC, where no day is 23 hours long: APScheduler 3's own arithmetic in a zone with
        DST adds 24 hours to step a day, and skipped the night after each spring-forward for a
        `0 0 * * *` job. A wall-clock time is read with the offset in force just before it
        (`fold=0`): one in a spring-forward gap fires later by the gap's length (02:30 at 03:30),
        and one in a fall-back's repeated hour at its first occurrence only, so a nightly job
        runs once that night.

        Wall-clock order is fire order for the times that exist, so the first of them that
        fires at or after `bound` is the answer, unless a gap's time (which fires after the
        gap) comes first; times that fire too early are passed a stretch of one offset at a
        time, so a per-second schedule costs a few dozen steps near a DST change, not one per
        second.
        """
        bound = bound.astimezone(UTC)
        own = self._wall(bound)
        behind = self._offset(bound) - self._offset(bound - SHIFT_WINDOW)
        fire = self._cron.get_next_fire_time(None, own - max(behind, timedelta(0)))
        best: datetime | None = None
        while fire is not None:
            if best is not None and fire - SHIFT_WINDOW > best:
                return best  # no offset brings this or a later time back before `best`
            offset = self._offset_at(fire)
            real = (fire - offset).replace(tzinfo=UTC)
            if real < bound or (real == bound and strictly):
                # fires too early: on to the first time at this offset that does not, or to
                # the end of this offset's stretch if that comes first (read with the next
                # offset, the stretch's end itself may count)
                at, end = bound + offset, self._stretch_end(fire)
                if end <= at:
                    fire = self._cron.get_next_fire_time(None, end)
                else:
                    fire = self._cron.get_next_fire_time(at if strictly else None, at)
                continue
            best = real if best is None else min(best, real)
            if self._exists(fire):
                return best
            # a gap's first time that counts: the gap's later times fire later still
            fire = self._cron.get_next_fire_time(None, max(self._stretch_end(fire), own))
        return best

    def _wall(self, when: datetime) -> datetime:
        """`when` on this zone's wall clock, labelled UTC for the wall-clock trigger."""
        return when.astimezone(self.tz).replace(tzinfo=UTC)

    def _offset_at(self, wall: datetime) -> timedelta:
        """The offset a wall-clock time is read with: the one in force just before it."""
        return wall.replace(tzinfo=self.tz).utcoffset() or timedelta(0)

    def _exists(self, wall: datetime) -> bool:
        """Whether a wall-clock time happens in this zone (not inside a spring-forward gap)."""
        return self._wall((wall - self._offset_at(wall)).replace(tzinfo=UTC)) == wall

    def _stretch_end(self, wall: datetime) -> datetime:
        """The first wall-clock time after `wall` read with another offset (to the second:
        offsets change on whole seconds), or SHIFT_WINDOW on when none is that near."""
        offset = self._offset_at(wall)
        low, high = wall.replace(microsecond=0), wall.replace(microsecond=0) + SHIFT_WINDOW
        if self._offset_at(high) == offset:
            return high
        while high - low > timedelta(seconds=1):
            middle = low + (high - low) // 2
            middle -= timedelta(microseconds=middle.microsecond)
            if self._offset_at(middle) == offset:
                low = middle
            else:
                high = middle
        return high

    def _offset(self, when: datetime) -> timedelta:
        return when.astimezone(self.tz).utcoffset() or timedelta(0)

    def due(self, fire: datetime, now: datetime) -> tuple[list[datetime], datetime | None]:
        """Fire times from `fire` up to `now`, and the first one after `now`.

        The list always ends with the latest fire time at or before `now`; past MAX_COALESCE
        (a per-second schedule after a day down) the ones between are not listed.
        """
        passed: list[datetime] = []
        current: datetime | None = fire
        while current is not None and current <= now:
            passed.append(current)
            if len(passed) >= MAX_COALESCE:
                latest = self.latest(now)
                if latest is not None and latest > current:
                    passed.append(latest)
                return passed, self.after(now)
            current = self.after(current)
        return passed, current

    def latest(self, now: datetime) -> datetime | None:
        """The last fire time at or before `now` (None if there is none within LOOKBACK).

        APScheduler only counts forward. `first(t)` never decreases as `t` grows, so this
        looks back twice as far each time until a window holds a fire, then halves that
        window down to the last `t` whose first fire is not past `now`: some fifty lookups for
        any schedule, where counting fires one by one could take a day's seconds.
        """
        back = timedelta(seconds=1)
        while True:
            low = now - back
            fire = self.first(low)
            if fire is not None and fire <= now:
                break
            if back >= LOOKBACK:
                return None
            back = min(back * 2, LOOKBACK)
        high = now + timedelta(microseconds=1)  # first(high) is past now; first(low) is not
        while high - low > timedelta(milliseconds=100):  # fire times are whole seconds apart
            middle = low + (high - low) / 2
            found = self.first(middle)
            if found is not None and found <= now:
                low = middle
            else:
                high = middle
        return self.first(low)


def _first_cause(exc: BaseException) -> BaseException:
    """The first exception a (nested) exception group carries, or `exc` itself."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _traceback(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))[-4000:]


def _task_count() -> int | None:
    """Live tasks in the daemon's event loop: a leak shows here first (None outside the loop)."""
    import asyncio

    try:
        return len(asyncio.all_tasks())
    except RuntimeError:
        return None


def _iso(when: datetime | None) -> str | None:
    return when.astimezone(UTC).isoformat(timespec="seconds") if when is not None else None


def _resume_points(path: Path, now: datetime) -> dict[str, tuple[datetime, bool]]:
    """Where each suite's fire times go on from, by the heartbeat a stopped daemon left: after
    the last fire it handled, or (when it handled none) from the fire it was waiting for, which
    is then still due; the flag says whether that time itself is a fire still to come.

    What cannot be read (no heartbeat yet, a hand-edited one) tells of nothing, and neither
    does a time more than LOOKBACK back or one ahead of now by more than CLOCK_SLACK (a
    handled fire a little ahead is a clock stepped back since, and stands).
    """
    try:
        suites = loads(path.read_bytes())["suites"]
        entries = suites.items()
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}
    points: dict[str, tuple[datetime, bool]] = {}
    for name, entry in entries:
        if not isinstance(entry, dict):
            continue
        handled, waited = _time_in(entry, "handled"), _time_in(entry, "next_fire")
        if handled is not None and now - LOOKBACK <= handled <= now + CLOCK_SLACK:
            points[name] = (handled, False)
        elif (
            entry.get("handled") is None and waited is not None and now - LOOKBACK <= waited <= now
        ):
            points[name] = (waited, True)
    return points


def _time_in(entry: dict[str, Any], key: str) -> datetime | None:
    try:
        when = datetime.fromisoformat(entry[key])
    except (KeyError, TypeError, ValueError):
        return None
    return when if when.tzinfo is not None else None


def runs_since(
    loaded: LoadedConfig, suite: str, *, since: datetime
) -> Iterator[tuple[Path, dict[str, Any], datetime]]:
    """The runs of `suite` that called every case (mode `run`: the daemon's or one started by
    hand; not a replay or a retry) made since `since`, with their manifests and starts.

    Run dirs are named by their start, so the dirs named before `since` are not read: a
    start-up reads only what was made since the last fire the heartbeat names, however many
    runs came before. A dir renamed by hand is read, and counts by the start it records.
    """
    from runner.runs import RUN_STAMP, read_manifest

    suite_dir = loaded.runs_dir / suite
    if not suite_dir.is_dir():
        return
    earliest = since.replace(microsecond=0)
    for path in sorted((p for p in suite_dir.iterdir() if p.is_dir()), reverse=True):
        try:
            named = datetime.strptime(path.name.partition("-")[0], RUN_STAMP).replace(tzinfo=UTC)
        except ValueError:
            named = None
        if named is not None and named < earliest:
            return
        try:
            manifest = read_manifest(path)
        except (ParallaxError, OSError):
            continue  # a dir that cannot be read stands for nothing
        started = _time_in(manifest, "started_at")
        if manifest.get("mode") == "run" and started is not None:
            yield path, manifest, started


def find_interrupted(loaded: LoadedConfig, suite: str) -> tuple[Path | None, str | None]:
    """The latest run of `suite` (replays call nothing and are passed over) if it was
    interrupted and can resume; else why not.

    (None, None) means there is nothing to resume: no run yet, or the latest one finished.
    """
    from runner.runs import read_manifest, resume_problem

    suite_dir = loaded.runs_dir / suite
    if not suite_dir.is_dir():
        return None, None
    dirs = sorted((p for p in suite_dir.iterdir() if p.is_dir()), key=lambda p: p.name)
    for latest in reversed(dirs):
        try:
            manifest = read_manifest(latest)
        except (ParallaxError, OSError) as exc:
            return None, f"latest run dir is not readable: {exc}"
        if manifest.get("mode") != "replay":
            break
    else:
        return None, None
    if manifest.get("finished_at") is not None:
        return None, None
    holder = is_locked(loaded.runs_dir, suite)
    if holder is not None:
        return None, f"another process holds the suite lock (pid {holder.get('pid')})"
    why = resume_problem(loaded, suite, manifest)
    if why is not None:
        return None, f"{why}; the next fire starts a new run"
    return latest, None


@dataclass
class _Suite:
    name: str
    trigger: Trigger
    next_fire: datetime | None = None
    handled: datetime | None = None  # the last fire time run, skipped or misfired
    resume_dir: Path | None = None
    covered_by: Path | None = None  # the run that stood for fires missed while no daemon ran
    scope: anyio.CancelScope | None = None
    done: anyio.Event = field(default_factory=anyio.Event)
    runs: int = 0


class Daemon:
    """The scheduler. `run()` returns the process exit code: 0 stopped, 70 crashed."""

    def __init__(
        self,
        loaded: LoadedConfig,
        *,
        runner: Runner | None = None,
        clock: Clock | None = None,
        run_now: bool = False,
        handle_signals: bool = True,
    ) -> None:
        if runner is None:
            from runner.runs import run_suite_async

            runner = run_suite_async
        self.loaded = loaded
        cfg = loaded.config
        self.grace = cfg.serve_grace_seconds
        self.misfire_grace = cfg.serve_misfire_grace_seconds
        self.heartbeat_seconds = cfg.serve_heartbeat_seconds
        self._runner = runner
        self._clock: Clock = clock or SystemClock()
        self._run_now = run_now
        self._handle_signals = handle_signals
        self._log = logs.get_logger()
        self._suites = [
            _Suite(name, trigger)
            for name in cfg.suites
            if (trigger := Trigger.for_suite(loaded, name)) is not None
        ]
        if not self._suites:
            raise ConfigError(
                loaded.path, "suites", "no suite has a schedule; `parallax serve` needs one"
            )
        self._shutdown = Shutdown(on_stop=self._stop)
        self._stop_event: anyio.Event | None = None
        self._waits: set[anyio.CancelScope] = set()
        self._wake: anyio.Event | None = None
        self._started_at = datetime.now(UTC)
        self._start = self._started_at  # the clock's time at start, set by `run`
        self.heartbeat = heartbeat_path(loaded.runs_dir)

    # control ---------------------------------------------------------------------------

    def request_stop(self, reason: str = "requested") -> None:
        """Stop scheduling; a run in flight gets the grace period. A second call hurries."""
        if self._shutdown.reason is not None:
            self._shutdown.hurry()
        self._shutdown.request(reason)

    @property
    def _stopping(self) -> bool:
        return self._shutdown.requested

    def _stop(self, reason: str) -> None:
        """What a stop does, once: no new wait or run, and the host task starts draining."""
        running = [s.name for s in self._suites if s.scope is not None]
        self._log.info(
            logs.SCHEDULER_STOPPING, reason=reason, running=running, grace_seconds=self.grace
        )
        for scope in list(self._waits):
            scope.cancel()
        if self._stop_event is not None:
            self._stop_event.set()
        self._poke()

    @property
    def suites(self) -> list[str]:
        return [s.name for s in self._suites]

    # the task group ----------------------------------------------------------------------

    async def run(self) -> int:
        # Signals are received from the first moment: one that arrives during start-up still
        # ends in scheduler.stopped, not in the default action's silent exit (143, 129).
        signals = STOP_SIGNALS if self._handle_signals else ()
        with (
            daemon_lock(self.loaded.runs_dir),
            self._shutdown.handling(signals),
            logs.on_stdout_closed(self._stdout_closed),
        ):
            return await self._run()

    def _stdout_closed(self) -> None:
        """A log line found no reader: stop as on SIGTERM (from the loop, not inside the write)."""
        self._shutdown.request_soon(STDOUT_CLOSED)

    async def _run(self) -> int:
        self._stop_event = anyio.Event()
        self._wake = anyio.Event()
        if self._stopping:
            self._stop_event.set()
        # every suite's first fire is settled before this daemon's first heartbeat replaces the
        # last one's, which names the fires it dealt with: a crash in between loses none
        now = self._start = self._clock.now()
        points = _resume_points(self.heartbeat, now)
        cannot_resume: dict[str, str] = {}
        for entry in self._suites:
            entry.resume_dir, why_not = find_interrupted(self.loaded, entry.name)
            if why_not:
                cannot_resume[entry.name] = why_not
            point, still_due = points.get(entry.name, (now, True))
            if entry.name in points:  # without a heartbeat no fire is made up: none counts
                point, still_due = self._covered(entry, point, still_due=still_due)
            if not still_due:
                entry.handled = point
            # in the past: missed while no daemon ran, made up below
            entry.next_fire = (
                entry.trigger.first(point) if still_due else entry.trigger.after(point)
            )
        pointer = write_pointer(self.heartbeat, self.loaded.path)  # held lock: ours to write
        try:
            self._write_heartbeat("running")
        except OSError as exc:
            raise UsageError(f"{self.heartbeat}: cannot write the heartbeat: {exc}") from None
        self._log.info(
            logs.SCHEDULER_STARTED,
            pid=os.getpid(),
            suites=self.suites,
            run_now=self._run_now,
            grace_seconds=self.grace,
            misfire_grace_seconds=self.misfire_grace,
            heartbeat=str(self.heartbeat),
            pointer=str(pointer),
        )
        for entry in self._suites:
            self._log_next_fire(entry)
            if entry.name in cannot_resume:
                self._log.warning(
                    logs.SCHEDULER_RESUME_SKIPPED,
                    suite=entry.name,
                    reason=cannot_resume[entry.name],
                )
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._heartbeat_loop, name="heartbeat")
                for entry in self._suites:
                    group.start_soon(self._suite_loop, entry, name=f"suite:{entry.name}")
                await self._stop_event.wait()
                await self._drain()
                group.cancel_scope.cancel()
        except Exception as exc:  # the scheduler itself failed, not a run (runs are caught)
            self._safe_heartbeat("crashed")
            cause = _first_cause(exc)  # what failed, not the task group that carried it
            self._log.error(
                logs.SCHEDULER_CRASHED,
                error=type(cause).__name__,
                message=str(cause),
                traceback=_traceback(exc),
            )
            return EXIT_CRASHED
        self._safe_heartbeat("stopped")
        self._log.info(
            logs.SCHEDULER_STOPPED,
            reason=self._shutdown.reason,
            runs={s.name: s.runs for s in self._suites},
        )
        return EXIT_STDOUT_CLOSED if self._shutdown.reason == STDOUT_CLOSED else 0

    def _covered(self, entry: _Suite, point: datetime, *, still_due: bool) -> tuple[datetime, bool]:
        """The resume point, moved past the fires the suite's latest run started after.

        A run stands for every fire at or before its start, up to now: the heartbeat can name
        less (a kill between the run's dir and the heartbeat write, a run by hand while no
        daemon ran). A run killed mid-way stands for its fire only if it is to be resumed, and
        a start more than CLOCK_SLACK ahead of now is a wrong clock, not a run.
        """
        counted = [
            (started, run_dir)
            for run_dir, manifest, started in runs_since(self.loaded, entry.name, since=point)
            if started <= self._start + CLOCK_SLACK
            and (manifest.get("finished_at") is not None or run_dir == entry.resume_dir)
        ]
        if not counted:
            return point, still_due
        started, run_dir = max(counted)
        covered = entry.trigger.latest(min(started, self._start))
        if covered is None or covered < point or (covered == point and not still_due):
            return point, still_due
        entry.covered_by = run_dir
        return covered, False

    async def _drain(self) -> None:
        """Wait for the runs in flight: each ends by itself or when its grace does (its scope is
        guarded by the shutdown). A daemon crashing meanwhile cancels them at once and waits
        for them to unwind, bounded."""
        running = [s for s in self._suites if s.scope is not None]
        try:
            for entry in running:
                await entry.done.wait()
        finally:
            for entry in running:
                if entry.scope is not None:
                    entry.scope.cancel()
            with anyio.move_on_after(UNWIND_SECONDS, shield=True):
                for entry in running:
                    await entry.done.wait()

    async def _heartbeat_loop(self) -> None:
        assert self._wake is not None
        while True:
            # A heartbeat the disk refuses (full, a path gone wrong) stops the heartbeat, not
            # the runs in flight: `health` then reads it stale, and the log says why.
            self._safe_heartbeat("stopping" if self._stopping else "running")
            with anyio.move_on_after(self.heartbeat_seconds):
                await self._wake.wait()
            self._wake = anyio.Event()

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _write_heartbeat(self, state: str) -> None:
        doc = {
            "version": HEARTBEAT_VERSION,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "state": state,
            "started_at": _iso(self._started_at),
            "updated_at": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "heartbeat_seconds": self.heartbeat_seconds,
            "tasks": _task_count(),
            "suites": {
                s.name: {
                    "next_fire": _iso(s.next_fire),
                    "running": s.scope is not None,
                    "handled": _iso(s.handled),
                }
                for s in self._suites
            },
        }
        self.heartbeat.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.heartbeat.with_name(f"{self.heartbeat.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(doc, sort_keys=True) + "\n", encoding="utf-8")
        tmp.replace(self.heartbeat)

    def _safe_heartbeat(self, state: str) -> None:
        try:
            self._write_heartbeat(state)
        except OSError as exc:
            # the daemon's last word is still scheduler.stopped or scheduler.crashed: a file it
            # could not write at the end is not itself a crash
            self._log.warning(
                logs.SCHEDULER_HEARTBEAT_FAILED, path=str(self.heartbeat), message=str(exc)
            )

    def _log_next_fire(self, entry: _Suite) -> None:
        self._log.info(
            logs.SCHEDULER_NEXT_FIRE,
            suite=entry.name,
            next_fire=_iso(entry.next_fire),
            local=entry.next_fire.astimezone(UTC).astimezone(entry.trigger.tz).isoformat()
            if entry.next_fire
            else None,
            schedule=entry.trigger.expr,
            timezone=entry.trigger.timezone,
            covered_by=str(entry.covered_by) if entry.covered_by else None,
        )
        entry.covered_by = None  # said once, with the first fire

    # one suite ---------------------------------------------------------------------------

    async def _suite_loop(self, entry: _Suite) -> None:
        fire = entry.next_fire
        if entry.resume_dir is not None:
            await self._job(entry, mode="resume", resume_dir=entry.resume_dir)
        elif self._run_now:  # a run at start stands for every fire missed before it
            covered = entry.trigger.latest(self._start)
            if covered is not None and (entry.handled is None or covered > entry.handled):
                fire = entry.trigger.after(covered)
            else:
                covered = None
            await self._job(entry, mode="run", handles=covered)
        if fire is None or fire > self._start:  # one missed before start is made up below
            fire = self._skip_passed(entry, fire)
        while fire is not None and not self._stopping:
            if fire != entry.next_fire:
                entry.next_fire = fire
                self._log_next_fire(entry)
                self._poke()
            if not await self._wait_until(fire):
                return
            now = self._clock.now()
            due, fire = entry.trigger.due(fire, now)
            latest = due[-1]
            # a fire that passed while no daemon ran is as late as the daemon was in coming
            # back, however long the resume before it took
            late = ((self._start if latest <= self._start else now) - latest).total_seconds()
            if late > self.misfire_grace:
                self._log.warning(
                    logs.SCHEDULER_MISFIRE,
                    suite=entry.name,
                    scheduled_for=_iso(latest),
                    late_seconds=round(late, 3),
                    missed=len(due),
                    misfire_grace_seconds=self.misfire_grace,
                )
                self._handle(entry, latest)
                continue
            await self._job(
                entry, mode="run", scheduled_for=latest, coalesced=len(due), handles=latest
            )
            fire = self._skip_passed(entry, fire)

    def _skip_passed(self, entry: _Suite, fire: datetime | None) -> datetime | None:
        """Fire times that came due while the suite's run was in flight are skipped."""
        now = self._clock.now()
        if fire is None or fire > now:
            return fire
        passed, fire = entry.trigger.due(fire, now)
        self._handle(entry, passed[-1])
        self._log.info(
            logs.SCHEDULER_JOB_SKIPPED,
            suite=entry.name,
            reason="running",
            missed=len(passed),
            first=_iso(passed[0]),
            last=_iso(passed[-1]),
        )
        return fire

    async def _wait_until(self, when: datetime) -> bool:
        """Sleep until `when`; False when a stop request cut the wait short."""
        if self._stopping:
            return False
        with anyio.CancelScope() as scope:
            self._waits.add(scope)
            try:
                await self._clock.sleep_until(when)
            finally:
                self._waits.discard(scope)
        return not self._stopping

    async def _job(
        self,
        entry: _Suite,
        *,
        mode: str,
        resume_dir: Path | None = None,
        scheduled_for: datetime | None = None,
        coalesced: int = 1,
        handles: datetime | None = None,
    ) -> None:
        """Run (or resume) the suite once. `handles` is the fire time it stands for, handled
        when the job ends (finished, crashed, or the lock held by a hand-started run) but not
        when a stop cancels it: then its run dir, if it got one, stands for the fire at the
        next start (`_covered`), and without one the next start makes it up."""
        if self._stopping:
            return
        holder = is_locked(self.loaded.runs_dir, entry.name)
        if holder is not None:
            self._log.warning(
                logs.SCHEDULER_JOB_SKIPPED,
                suite=entry.name,
                reason="locked",
                holder=holder,
                scheduled_for=_iso(scheduled_for),
            )
            self._handle(entry, handles)
            return
        self._log.info(
            logs.SCHEDULER_JOB_STARTED,
            suite=entry.name,
            mode=mode,
            scheduled_for=_iso(scheduled_for),
            coalesced=coalesced,
            resume_dir=str(resume_dir) if resume_dir else None,
        )
        t0 = time.monotonic()
        entry.done = anyio.Event()
        try:
            with self._shutdown.guarded(self.grace) as entry.scope:
                self._poke()
                await self._run_one(entry, mode, resume_dir, t0, handles)
            if entry.scope.cancelled_caught:
                self._log_cancelled(entry, t0)
            else:
                self._handle(entry, handles)
        except anyio.get_cancelled_exc_class():  # the daemon itself is going down
            self._log_cancelled(entry, t0)
            raise
        finally:
            entry.scope = None
            entry.runs += 1
            entry.done.set()
            self._poke()

    def _handle(self, entry: _Suite, when: datetime | None) -> None:
        """Record `when` as the suite's last fire dealt with, on disk at once."""
        if when is None or (entry.handled is not None and when <= entry.handled):
            return
        entry.handled = when
        self._safe_heartbeat("stopping" if self._stopping else "running")

    def _log_cancelled(self, entry: _Suite, t0: float) -> None:
        left, _ = find_interrupted(self.loaded, entry.name)
        self._log.warning(
            logs.SCHEDULER_JOB_CANCELLED,
            suite=entry.name,
            run_dir=str(left) if left else None,
            grace_seconds=self.grace,
            elapsed_s=round(time.monotonic() - t0, 3),
            resumable=left is not None,
        )

    async def _run_one(
        self,
        entry: _Suite,
        mode: str,
        resume_dir: Path | None,
        t0: float,
        handles: datetime | None,
    ) -> None:
        try:
            run_dir, code, summary = await self._runner(
                self.loaded, entry.name, resume_dir=resume_dir, mode=mode
            )
        except SuiteLocked as exc:  # lost the race with a `parallax run` started by hand
            self._log.warning(
                logs.SCHEDULER_JOB_SKIPPED, suite=entry.name, reason="locked", holder=exc.holder
            )
            return
        except Exception as exc:  # a run's failure must not stop the other suites
            self._log.error(
                logs.SCHEDULER_JOB_CRASHED,
                suite=entry.name,
                mode=mode,
                error=type(exc).__name__,
                message=str(exc),
                exit_code=exc.exit_code if isinstance(exc, ParallaxError) else None,
                elapsed_s=round(time.monotonic() - t0, 3),
                traceback=None if isinstance(exc, ParallaxError) else _traceback(exc),
            )
            return
        self._log.info(
            logs.SCHEDULER_JOB_FINISHED,
            suite=entry.name,
            run_id=run_dir.name,
            run_dir=str(run_dir),
            mode=mode,
            exit_code=code,
            verdict=summary.get("verdict"),
            elapsed_s=round(time.monotonic() - t0, 3),
        )


def serve(loaded: LoadedConfig, *, run_now: bool = False) -> int:
    """Run the daemon until SIGTERM/SIGINT/SIGHUP; the exit code is 0 after a clean stop."""
    from runner.config import check_keys

    daemon = Daemon(loaded, run_now=run_now)
    check_keys(loaded, daemon.suites)
    return anyio.run(daemon.run)
