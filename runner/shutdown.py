"""Stopping on a signal, one way for `run` and `serve`: no new work, a bounded grace, a cancel.

The first stop signal (or a stop the code asks for: `serve` stops when its stdout goes away)
means nothing new starts; work in flight (the calls of a `run`, the runs of `serve`) runs in a
`guarded` cancel scope, which the stop cancels once the grace period is over, and a second
signal cancels at once. Cancelled work unwinds through its own `finally` blocks, so its ledgers
are flushed and its run dir is left resumable. Inside a guarded scope `may_start()` says
whether new work may still begin: a call that waited for its endpoint's concurrency slot when
the stop came is then not sent (`NotStarted`), so a stopping run pays for no call it will make
again on resume.

Handlers are plain `signal.signal` ones, installed from a command's first moment, rather than
the event loop's: `run` validates fixtures before any loop runs and runs one loop per suite,
and a signal in between must count too. Without a handler SIGTERM is ignored when parallax is
PID 1 of a container (PID 1 has no default signal actions), and kills it silently elsewhere
(143). A handler may run between any two bytecodes, so while an event loop runs it only records
the signal and hands the rest to the loop, as asyncio's own Ctrl-C handling does.

`replay` calls nothing and leaves nothing to resume (its unfinished new run dir is replayed
again), and its regrade never waits on the loop where a recorded stop would be seen: there a
stop signal stops it where it stands (`stopping_where_it_stands`), as Ctrl-C does.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import anyio

from runner import logs
from runner.invocation import command
from runner.text import visible

RUN_SIGNALS = (signal.SIGTERM, signal.SIGINT)
SERVE_SIGNALS = (*RUN_SIGNALS, signal.SIGHUP)  # a daemon outlives its terminal: each a clean stop


class NotStarted(Exception):
    """A call `may_start()` refused: nothing was sent or recorded, and a resume makes it."""


class Interrupted(Exception):
    """A stop signal ended a `run` before its verdict; `run_dir` is where it stopped, if it had
    one yet (its manifest keeps `finished_at: null`, so `--resume` finishes it)."""

    def __init__(self, signum: signal.Signals, run_dir: Path | None) -> None:
        super().__init__(f"stopped by {signum.name}")
        self.signal = signum
        self.run_dir = run_dir

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as a shell reports a process the signal ended: 143, 130."""
        return 128 + int(self.signal)

    def report(self) -> int:
        """Say it once: one `run.interrupted` line, and on stderr the command that finishes
        the run; returns the exit code."""
        run_dir = self.run_dir
        logs.get_logger().warning(
            logs.RUN_INTERRUPTED,
            signal=self.signal.name,
            run_dir=str(run_dir.absolute()) if run_dir else None,
            resumable=run_dir is not None,
            run_id=run_dir.name if run_dir else None,
            suite=run_dir.parent.name if run_dir else None,
        )
        if run_dir is None:
            logs.say(f"parallax: stopped by {self.signal.name} before a run dir was made")
        else:  # the suite's name in the path is untrusted: shown visibly, as in the summary
            again = visible(command("run", "--resume", run_dir), one_line=True)
            logs.say(f"parallax: stopped by {self.signal.name}; finish the run with `{again}`")
        return self.exit_code


@dataclass(frozen=True)
class _Guard:
    grace: float
    on_stop: Callable[[], None] | None


_GUARD: contextvars.ContextVar[Shutdown | None] = contextvars.ContextVar("guard", default=None)


def may_start() -> bool:
    """Whether new work may begin here: not once the innermost guarded scope's stop came."""
    guard = _GUARD.get()
    return guard is None or not guard.requested


class Shutdown:
    """One process's stop: asked for once (the first reason stands), hurried by a later signal."""

    def __init__(self) -> None:
        self.signal: signal.Signals | None = None  # the first stop signal received
        self.reason: str | None = None  # why the stop was asked for (a signal's name)
        self._on_stop: Callable[[str], None] | None = None  # see `on_stop`
        self._hurried = False
        self._scopes: dict[anyio.CancelScope, _Guard] = {}  # the guarded scopes

    @property
    def requested(self) -> bool:
        """Whether a stop was asked for: true from the moment a signal arrived."""
        return self.reason is not None or self.signal is not None

    def on_stop(self, callback: Callable[[str], None]) -> None:
        """Call `callback(reason)` once, from the loop, when the stop is asked for; at once when
        it already was (a signal that came while the config was read, before the loop ran)."""
        self._on_stop = callback
        if self.reason is not None:
            callback(self.reason)

    @contextlib.contextmanager
    def handling(self, signals: Iterable[signal.Signals]) -> Iterator[Shutdown]:
        """Handle `signals` while the block runs, then restore the handlers found."""
        with _handlers(signals, self._received):
            yield self

    def _received(self, signum: int, _frame: FrameType | None) -> None:
        received = signal.Signals(signum)
        act: Callable[[], None] = (
            self.hurry if self.requested else functools.partial(self.request, received.name)
        )
        if self.signal is None:
            self.signal = received
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop, so no work in flight: recording the stop is all
            act()
        else:  # a fresh context: lines the loop logs for it carry no bound run's fields
            loop.call_soon_threadsafe(act, context=contextvars.Context())

    def request(self, reason: str) -> None:
        """Stop (called in the loop's thread): nothing new starts, and the grace of the work in
        flight begins. Asked again, it changes nothing: the first reason stands."""
        if self.reason is not None:
            return
        self.reason = reason
        for scope, guard in list(self._scopes.items()):
            self._arm(scope, guard)
        if self._on_stop is not None:
            self._on_stop(reason)

    def request_soon(self, reason: str) -> None:
        """`request`, from the running loop once the code running now gives way to it."""
        asyncio.get_running_loop().call_soon(self.request, reason, context=contextvars.Context())

    def hurry(self) -> None:
        """Cancel the work in flight now, grace or not (a second signal)."""
        self._hurried = True
        for scope in self._scopes:
            scope.cancel()

    def _arm(self, scope: anyio.CancelScope, guard: _Guard) -> None:
        end = anyio.current_time() + (0.0 if self._hurried else guard.grace)
        scope.deadline = min(scope.deadline, end)
        if guard.on_stop is not None:
            guard.on_stop()

    @contextlib.contextmanager
    def guarded(
        self, grace: float, on_stop: Callable[[], None] | None = None
    ) -> Iterator[anyio.CancelScope]:
        """A cancel scope for work a stop lets finish: cancelled `grace` seconds after the stop
        (entered after it, `grace` seconds from then), or at once when hurried; `on_stop` is
        called when the stop reaches it. Its `cancelled_caught` then says the work was cut."""
        with anyio.CancelScope() as scope:
            guard = self._scopes[scope] = _Guard(grace, on_stop)
            token = _GUARD.set(self)
            try:
                if self._hurried:
                    scope.cancel()
                elif self.reason is not None:
                    self._arm(scope, guard)
                yield scope
            finally:
                _GUARD.reset(token)
                del self._scopes[scope]


class Stopped(KeyboardInterrupt):
    """A stop signal in a command that stops where it stands, as Ctrl-C does: `replay` calls
    nothing and leaves nothing to resume (its unfinished new run dir is replayed again).
    A KeyboardInterrupt, so it leaves an event loop and passes `except Exception` as one."""

    def __init__(self, signum: signal.Signals) -> None:
        super().__init__(f"stopped by {signum.name}")
        self.signal = signum

    @property
    def exit_code(self) -> int:
        return 128 + int(self.signal)


def _stop_here(signum: int, _frame: FrameType | None) -> None:
    raise Stopped(signal.Signals(signum))


@contextlib.contextmanager
def stopping_where_it_stands(signals: Iterable[signal.Signals]) -> Iterator[None]:
    """While the block runs, each of `signals` raises `Stopped` wherever the code stands, as
    Python's own SIGINT handler raises KeyboardInterrupt."""
    with _handlers(signals, _stop_here):
        yield


@contextlib.contextmanager
def _handlers(
    signals: Iterable[signal.Signals], handler: Callable[[int, FrameType | None], None]
) -> Iterator[None]:
    """`handler` for `signals` while the block runs, then the handlers found. Only the main
    thread may set handlers; elsewhere (a test's worker thread) none is set."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, handler) for signum in signals}
    try:
        yield
    finally:
        for signum, found in previous.items():
            signal.signal(signum, found)
