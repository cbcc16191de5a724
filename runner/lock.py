"""One run of a suite at a time: an exclusive flock on `runs/<suite>/.lock`.

Both the daemon's jobs and a hand-started `parallax run` take it (see `holds_suite_lock` on
`runner.runs.run.run_suite_async`). flock locks belong to the open file, so a crashed or killed
holder releases it with its last descriptor; nothing stale is ever left to clean up. The file
itself stays (unlinking a lock file races with the next locker) and names its last holder.
A replay calls no endpoint and writes only its own new run dir, so it takes no lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import socket
from collections.abc import Callable, Coroutine, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from runner.errors import UsageError
from runner.jsontext import loads
from runner.runs.mode import RunMode

if TYPE_CHECKING:
    from runner.config import LoadedConfig

LOCK_NAME = ".lock"
P = ParamSpec("P")
R = TypeVar("R")


class SuiteLocked(UsageError):
    """Another process is running this suite; the message names the holder (exit 64)."""

    def __init__(self, suite: str, path: Path, holder: dict[str, Any]) -> None:
        self.suite = suite
        self.path = path
        self.holder = holder
        who = _who(holder)
        super().__init__(
            f"{path}: suite {suite!r} is already running ({who or 'holder unknown'}); "
            "not starting a second run"
        )


def _who(holder: dict[str, Any]) -> str:
    return ", ".join(f"{k} {holder[k]}" for k in ("pid", "host", "since") if k in holder)


def lock_path(runs_dir: Path, suite: str) -> Path:
    return runs_dir / suite / LOCK_NAME


def _read_holder(fd: int) -> dict[str, Any]:
    try:
        raw = os.pread(fd, 4096, 0)
        holder = loads(raw) if raw.strip() else {}
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


def _open(path: Path) -> int:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise UsageError(f"{path}: cannot open this lock file: {exc.strerror}") from None


class DaemonRunning(UsageError):
    """Another `parallax serve` watches this runs dir; the message names it (exit 64)."""

    def __init__(self, path: Path, holder: dict[str, Any]) -> None:
        who = _who(holder)
        super().__init__(
            f"{path}: another `parallax serve` runs on this runs dir ({who or 'holder unknown'}); "
            "not starting a second one"
        )


@contextlib.contextmanager
def daemon_lock(runs_dir: Path) -> Iterator[Path]:
    """Hold the runs dir's daemon lock: two daemons would share one heartbeat, so `health`
    could read the one that stopped while the other runs."""
    with _exclusive(runs_dir / ".parallax-serve.lock", DaemonRunning) as path:
        yield path


class PruneRunning(UsageError):
    """Another `parallax prune` (or a daemon's) works on this runs dir (exit 64)."""

    def __init__(self, path: Path, holder: dict[str, Any]) -> None:
        who = _who(holder)
        super().__init__(
            f"{path}: another prune works on this runs dir ({who or 'holder unknown'}); "
            "not starting a second one"
        )


@contextlib.contextmanager
def prune_lock(runs_dir: Path) -> Iterator[Path]:
    """Hold the runs dir's prune lock: two prunes at once would compress and delete the same
    run dirs under each other."""
    with _exclusive(runs_dir / ".parallax-prune.lock", PruneRunning) as path:
        yield path


@contextlib.contextmanager
def suite_lock(runs_dir: Path, suite: str) -> Iterator[Path]:
    """Hold the suite's lock for the block; raise SuiteLocked at once if another holds it."""
    with _exclusive(
        lock_path(runs_dir, suite), lambda path, holder: SuiteLocked(suite, path, holder)
    ) as path:
        yield path


@contextlib.contextmanager
def _exclusive(path: Path, refused: Callable[[Path, dict[str, Any]], UsageError]) -> Iterator[Path]:
    """An exclusive flock on `path` for the block, naming its holder in the file."""
    fd = _open(path)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise refused(path, _read_holder(fd)) from None
        holder = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        with contextlib.suppress(OSError):  # who holds it is a courtesy: a full disk has none
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(holder, allow_nan=False) + "\n").encode("utf-8"), 0)
        try:
            yield path
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def is_locked(runs_dir: Path, suite: str) -> dict[str, Any] | None:
    """The holder's details when the suite is locked now, else None (a probe, not a claim)."""
    path = lock_path(runs_dir, suite)
    if not path.exists():
        return None
    fd = _open(path)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_holder(fd) or {"pid": None}
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def holds_suite_lock(
    fn: Callable[Concatenate[LoadedConfig, str, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[LoadedConfig, str, P], Coroutine[Any, Any, R]]:
    """Run `fn(loaded, suite, ...)` under the suite's lock, unless its `mode` calls nothing."""

    @functools.wraps(fn)
    async def locked(loaded: LoadedConfig, name: str, /, *args: P.args, **kwargs: P.kwargs) -> R:
        mode = RunMode.read(kwargs.get("mode", RunMode.RUN))
        if mode is not None and not mode.calls:
            return await fn(loaded, name, *args, **kwargs)
        with suite_lock(loaded.runs_dir, name):
            return await fn(loaded, name, *args, **kwargs)

    return locked
