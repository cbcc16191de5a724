"""The daemon: one task group, a heartbeat and one task per scheduled suite, stopped by a
signal or a closed stdout (see the package's docstring)."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import anyio

from runner import logs
from runner.config import LoadedConfig
from runner.errors import (
    ConfigError,
    InternalError,
    ParallaxError,
    StorageError,
    UsageError,
    bug_trace,
    first_cause,
)
from runner.health import heartbeat_path, write_pointer
from runner.lock import SuiteLocked, daemon_lock, is_locked
from runner.runs.mode import RunMode
from runner.runs.run import run_suite_async
from runner.scheduler.catchup import CLOCK_SLACK, find_interrupted, resume_points, runs_since
from runner.scheduler.heartbeat import iso, write_heartbeat
from runner.scheduler.trigger import Trigger
from runner.shutdown import SERVE_SIGNALS, Shutdown

EXIT_CRASHED = 70  # sysexits EX_SOFTWARE: the scheduler itself failed (a run's failure is not)
EXIT_STDOUT_CLOSED = 74  # sysexits EX_IOERR: stopped because no one reads its log lines any more
STDOUT_CLOSED = "stdout_closed"  # the stop reason when stdout's reader went away
UNWIND_SECONDS = 10.0  # bounded, shielded wait for cancelled runs to close their ledgers


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


@dataclass
class _Suite:
    name: str
    trigger: Trigger
    next_fire: datetime | None = None
    handled: datetime | None = None  # the last fire time run, skipped or misfired
    resume_dir: Path | None = None
    covered_by: Path | None = None  # the run that stood for fires missed while no daemon ran
    stalled: Path | None = None  # a run a full disk stopped: the next fire resumes it
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
        shutdown: Shutdown | None = None,
    ) -> None:
        self.loaded = loaded
        cfg = loaded.config
        self.grace = cfg.serve_grace_seconds
        self.misfire_grace = cfg.serve_misfire_grace_seconds
        self.heartbeat_seconds = cfg.serve_heartbeat_seconds
        self._runner = runner or run_suite_async
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
        self._shutdown = shutdown or Shutdown()  # `serve`'s, handled since its first moment
        self._stop_event: anyio.Event | None = None
        self._waits: set[anyio.CancelScope] = set()
        self._wake: anyio.Event | None = None
        self._prune_due: anyio.Event | None = None  # set when a job ends: `_pruner` prunes
        self._prune_after: str | None = None  # the suite whose job ended last
        self._pruning: anyio.Event | None = None  # set when the prune in flight is done
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
        signals = SERVE_SIGNALS if self._handle_signals else ()
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
        self._prune_due = anyio.Event()
        self._shutdown.on_stop(self._stop)  # a stop asked for before the loop ran acts now
        # every suite's first fire is settled before this daemon's first heartbeat replaces the
        # last one's, which names the fires it dealt with: a crash in between loses none
        now = self._start = self._clock.now()
        points = resume_points(self.heartbeat, now)
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
                group.start_soon(self._pruner, name="pruner")
                for entry in self._suites:
                    group.start_soon(self._suite_loop, entry, name=f"suite:{entry.name}")
                await self._stop_event.wait()
                await self._drain()
                group.cancel_scope.cancel()
        except Exception as exc:  # the scheduler itself failed, not a run (runs are caught)
            self._safe_heartbeat("crashed")
            cause = first_cause(exc)  # what failed, not the task group that carried it
            self._log.error(
                logs.SCHEDULER_CRASHED,
                error=type(cause).__name__,
                message=str(cause),
                traceback=bug_trace(exc),
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
        write_heartbeat(
            self.heartbeat,
            state=state,
            started_at=self._started_at,
            heartbeat_seconds=self.heartbeat_seconds,
            suites={
                s.name: {
                    "next_fire": iso(s.next_fire),
                    "running": s.scope is not None,
                    "handled": iso(s.handled),
                }
                for s in self._suites
            },
        )

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
            next_fire=iso(entry.next_fire),
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
            await self._job(entry, mode=RunMode.RESUME, resume_dir=entry.resume_dir)
        elif self._run_now:  # a run at start stands for every fire missed before it
            covered = entry.trigger.latest(self._start)
            if covered is not None and (entry.handled is None or covered > entry.handled):
                fire = entry.trigger.after(covered)
            else:
                covered = None
            await self._job(entry, mode=RunMode.RUN, handles=covered)
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
                    scheduled_for=iso(latest),
                    late_seconds=round(late, 3),
                    missed=len(due),
                    misfire_grace_seconds=self.misfire_grace,
                )
                self._handle(entry, latest)
                continue
            await self._job(
                entry, mode=RunMode.RUN, scheduled_for=latest, coalesced=len(due), handles=latest
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
            first=iso(passed[0]),
            last=iso(passed[-1]),
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
        mode: RunMode,
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
        if mode is RunMode.RUN and entry.stalled is not None:  # space may be back: finish it
            mode, resume_dir, entry.stalled = RunMode.RESUME, entry.stalled, None
        holder = await self._holder(entry.name)
        if holder is not None:
            self._log.warning(
                logs.SCHEDULER_JOB_SKIPPED,
                suite=entry.name,
                reason="locked",
                holder=holder,
                scheduled_for=iso(scheduled_for),
            )
            self._handle(entry, handles)
            return
        self._log.info(
            logs.SCHEDULER_JOB_STARTED,
            suite=entry.name,
            mode=mode,
            scheduled_for=iso(scheduled_for),
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
        self._prune_after = entry.name
        if self._prune_due is not None:
            self._prune_due.set()

    async def _pruner(self) -> None:
        """Retention after each run (`runner.retention`): its own task, so no fire waits for
        it, and one prune at a time however many suites finish together (a run that ends
        while one prunes is followed by one more)."""
        while True:
            assert self._prune_due is not None
            await self._prune_due.wait()
            self._prune_due = anyio.Event()
            if self._stopping:
                return
            await self._prune(self._prune_after)

    async def _holder(self, suite: str) -> dict[str, Any] | None:
        """Who holds the suite's lock, once this daemon's own prune has let it go: a prune
        takes each suite's lock in turn, and a fire that came due meanwhile waits for it
        rather than being skipped as `locked` (a night lost to housekeeping)."""
        while True:
            holder = is_locked(self.loaded.runs_dir, suite)
            if holder is None or self._pruning is None:
                return holder
            await self._pruning.wait()

    async def _prune(self, suite: str | None) -> None:
        """One prune of every suite, in a worker thread: compressing a large ledger must not
        hold up the calls of the suites still running. What it deletes or compresses is logged
        from the loop as it goes; a suite whose run is in flight is left for the prune after
        that run; a stop is heeded between run dirs."""
        from runner.retention import Done, log_done, prune

        policy = self.loaded.config.retention

        def heard(done: Done) -> None:
            anyio.from_thread.run_sync(log_done, self._log, done, policy)

        self._pruning = pruning = anyio.Event()
        try:
            await anyio.to_thread.run_sync(
                functools.partial(
                    prune,
                    self.loaded,
                    now=self._clock.now(),
                    on_done=heard,
                    stopping=lambda: self._stopping,
                )
            )
        except Exception as exc:  # a prune's failure must not stop the daemon or its runs
            self._log.warning(
                logs.SCHEDULER_PRUNE_FAILED,
                suite=suite,
                error=type(exc).__name__,
                message=str(exc),
                exit_code=exc.exit_code if isinstance(exc, ParallaxError) else None,
                traceback=None if isinstance(exc, ParallaxError) else bug_trace(exc),
            )
        finally:
            self._pruning = None
            pruning.set()

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
            run_dir=str(left.absolute()) if left else None,
            grace_seconds=self.grace,
            elapsed_s=round(time.monotonic() - t0, 3),
            resumable=left is not None,
        )

    async def _run_one(
        self,
        entry: _Suite,
        mode: RunMode,
        resume_dir: Path | None,
        t0: float,
        handles: datetime | None,
    ) -> None:
        try:
            run_dir, code, summary = await self._runner(
                self.loaded, entry.name, resume_dir=resume_dir, mode=mode
            )
        except SuiteLocked as exc:  # lost the race with a `parallax run` started by hand
            if await self._holder(entry.name) is None:  # or with this daemon's own prune
                await self._run_one(entry, mode, resume_dir, t0, handles)
                return
            self._log.warning(
                logs.SCHEDULER_JOB_SKIPPED, suite=entry.name, reason="locked", holder=exc.holder
            )
            return
        except Exception as exc:  # a run's failure must not stop the other suites
            if isinstance(exc, StorageError):  # the disk was full: resumed at the next fire
                entry.stalled, _ = find_interrupted(self.loaded, entry.name)
            self._log.error(
                logs.SCHEDULER_JOB_CRASHED,
                suite=entry.name,
                mode=mode,
                error=type(exc).__name__,
                message=str(exc),
                exit_code=exc.exit_code if isinstance(exc, ParallaxError) else None,
                elapsed_s=round(time.monotonic() - t0, 3),
                traceback=None
                if isinstance(exc, ParallaxError) and not isinstance(exc, InternalError)
                else bug_trace(exc),
            )
            return
        self._log.info(
            logs.SCHEDULER_JOB_FINISHED,
            suite=entry.name,
            run_id=run_dir.name,
            run_dir=str(run_dir.absolute()),
            mode=mode,
            exit_code=code,
            verdict=summary.get("verdict"),
            elapsed_s=round(time.monotonic() - t0, 3),
        )


def serve(loaded: LoadedConfig, *, run_now: bool = False, shutdown: Shutdown | None = None) -> int:
    """Run the daemon until SIGTERM/SIGINT/SIGHUP; the exit code is 0 after a clean stop.
    `shutdown` is the command's, whose handlers were installed before the config was read."""
    from runner.config import check_keys

    daemon = Daemon(loaded, run_now=run_now, shutdown=shutdown)
    check_keys(loaded, daemon.suites)
    return anyio.run(daemon.run)
