"""The user-facing error tree. Each class carries its exit code; the CLI prints one line.

    ParallaxError            exit_code 1 (never raised directly)
    ├── UsageError           64  wrong arguments, missing run directory, refused action
    ├── DataError            65  a data file parallax reads is broken (ledger, snapshot, cassette)
    │   └── FixtureError     65  a fixture row is malformed: path:line: reason
    ├── StorageError         74  the disk refused a write to a run dir (full, quota, size limit)
    ├── ConfigError          78  the TOML config, an env var or a grader module is wrong
    ├── Errors           78 / 65  several of the above found in one pass, one line each
    └── InternalError        70  parallax itself failed (a bug), not its input (EX_SOFTWARE)

Transport failures are never exceptions that escape a call: they are stamps (data).
Bad input is reported whole: every error of a config and every bad row of a fixture file, each
its own located line (`Errors`, built by `Gathered`), so one run of `validate` lists all there
is to fix.
"""

from __future__ import annotations

import difflib
import errno
import sys
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

MAX_LISTED = 50  # errors listed of one file before the rest are counted ("and N more")


class ParallaxError(Exception):
    """Base of every error parallax reports to a user as one line."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message

    @property
    def each(self) -> tuple[ParallaxError, ...]:
        """The located errors this one reports, one line each: itself (`Errors`: several)."""
        return (self,)


class UsageError(ParallaxError):
    """The command line asked for something that cannot be done as asked."""

    exit_code = 64


class DataError(ParallaxError):
    """A data file (ledger, snapshot, cassette) cannot be read; names the file and line."""

    exit_code = 65

    def __init__(self, path: str | Path, reason: str, line: int | None = None) -> None:
        self.path = str(path)
        self.line = line
        self.reason = reason
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:  # a worker process's error crosses back whole
        return type(self), (self.path, self.reason, self.line)


class FixtureError(DataError):
    """A fixture row is malformed; the message reads `path:line: reason`."""


# What a full disk answers a write: no space, over the user's quota, past RLIMIT_FSIZE.
DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


class StorageError(ParallaxError):
    """The disk refused a write to a run directory: full, over quota or over a file-size
    limit (sysexits EX_IOERR). What was written before it stays whole; `advice` says how the
    run goes on once there is space."""

    exit_code = 74

    def __init__(self, path: str | Path, reason: str, advice: str | None = None) -> None:
        self.path = str(path)
        self.reason = reason
        self.advice = advice
        super().__init__(f"{self.path}: cannot write: {reason}" + (f"; {advice}" if advice else ""))

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.path, self.reason, self.advice)

    def advised(self, advice: str) -> StorageError:
        """The same refusal, saying what to do next (where the run stands is known above)."""
        return StorageError(self.path, self.reason, advice)


class ConfigError(ParallaxError):
    """The config (or something it names) is wrong; the message names the file and key."""

    exit_code = 78

    def __init__(self, path: str | Path, key: str | None, reason: str) -> None:
        self.path = str(path)
        self.key = key
        self.reason = reason
        where = f"{self.path}: {key}" if key else self.path
        super().__init__(f"{where}: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.path, self.key, self.reason)


class Errors(ParallaxError):
    """Several errors of the input found in one pass, each one located line, in the order
    found: a config's keys and rules, a fixture file's rows in file order. Never made of one
    (`Gathered.raise_found` raises that error itself).

    The exit code is the config's, 78, when any of them is a config error, else the first
    one's (65): a config error can be why rows fail (a graders module that does not load, a
    template a case cannot fill), so it is the one to fix first.
    """

    def __init__(self, errors: Iterable[ParallaxError]) -> None:
        self.errors = tuple(found for error in errors for found in error.each)
        codes = [error.exit_code for error in self.errors]
        self.exit_code = ConfigError.exit_code if ConfigError.exit_code in codes else codes[0]
        super().__init__("; ".join(error.message for error in self.errors))

    @property
    def each(self) -> tuple[ParallaxError, ...]:
        return self.errors

    @property
    def decider(self) -> ParallaxError:
        """The first error whose exit code is the one reported: what a log line names."""
        return next(e for e in self.errors if e.exit_code == self.exit_code)


class Gathered:
    """Errors collected while checking on past each one, raised together at the end."""

    def __init__(self) -> None:
        self.errors: list[ParallaxError] = []

    @contextmanager
    def checking(self) -> Iterator[None]:
        """Run a check; a config or data error it raises is kept, and the caller goes on."""
        try:
            yield
        except (ConfigError, DataError, Errors) as exc:
            self.errors.append(exc)

    def add(self, error: ParallaxError) -> None:
        self.errors.append(error)

    def keys(self) -> set[str]:
        """The config keys the errors found so far name."""
        each = (found for error in self.errors for found in error.each)
        return {e.key for e in each if isinstance(e, ConfigError) and e.key}

    def raise_found(self) -> None:
        """Raise what was found, each line once (two checks may find one thing): the one error
        itself, several as `Errors`; nothing found, nothing raised."""
        unique = list({e.message: e for error in self.errors for e in error.each}.values())
        if len(unique) == 1:
            raise unique[0]
        if unique:
            raise Errors(unique)


def did_you_mean(word: str, known: Sequence[str], shown: Callable[[str], str] = repr) -> str:
    """` (did you mean 'x'?)` for a misspelt name close to a known one (`shown` as the
    message writes a name), else ``."""
    close = difflib.get_close_matches(word, known, n=1)
    return f" (did you mean {shown(close[0])}?)" if close else ""


class InternalError(ParallaxError):
    """An error no input explains: a bug in parallax, caught where it stops a command so that
    it is one line and exit 70 (never 1, which reads as a verdict). `cause` is the exception,
    kept for the traceback a log line carries; `run_dir` the run it left unfinished, if any,
    and `then` what finishes it (a command line to print)."""

    exit_code = 70

    def __init__(
        self, cause: BaseException, run_dir: Path | None = None, then: str | None = None
    ) -> None:
        self.cause = cause
        self.run_dir = run_dir
        leaf = first_cause(cause)
        detail = " ".join(str(leaf).split())[:300]
        found = f"{type(leaf).__name__}: {detail}" if detail else type(leaf).__name__
        left = f"; {then}" if then else ""
        super().__init__(f"internal error (a bug in parallax), {found}{left}")


def first_cause(exc: BaseException) -> BaseException:
    """The first exception a (nested) exception group carries, or `exc` itself: an error
    inside a task group is named, not the group that carried it."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def bug_trace(exc: BaseException, limit: int = 4000) -> str:
    """The traceback a bug report needs, at most `limit` characters: that of the first cause
    (its own chain included), whose innermost frame is the bug, then one line naming what else
    the task group carried. Cutting the whole group's text instead loses that frame as soon as
    the group holds a few errors (the streams the bug broke, each with its own trace)."""
    if isinstance(exc, InternalError):
        exc = exc.cause
    leaf = first_cause(exc)
    found = "".join(traceback.format_exception(leaf))[-limit:]
    if leaf is exc:
        return found
    others = _group_leaves(exc)[1:]
    names = ", ".join(type(other).__name__ for other in others[:MAX_LISTED])
    more = f" and {len(others) - MAX_LISTED} more" if len(others) > MAX_LISTED else ""
    errors = "error" if len(others) == 1 else "errors"
    return f"{found}(raised in a task group with {len(others)} other {errors}: {names}{more})\n"


def _group_leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _group_leaves(inner)]
    return [exc]


def reason_of(exc: ValueError) -> str:
    """Why text would not parse, in the terms of whoever wrote it.

    CPython refuses to read an integer past its digit limit with advice about an interpreter
    setting, which the author of a fixture, config or ledger cannot act on.
    """
    message = str(exc)
    if "integer string conversion" in message:
        return f"an integer of more than {sys.get_int_max_str_digits()} digits"
    return message
