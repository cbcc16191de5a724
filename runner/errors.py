"""The user-facing error tree. Each class carries its exit code; the CLI prints one line.

    ParallaxError            exit_code 1 (never raised directly)
    ├── UsageError           64  wrong arguments, missing run directory, refused action
    ├── DataError            65  a data file parallax reads is broken (ledger, snapshot, cassette)
    │   └── FixtureError     65  a fixture row is malformed: path:line: reason
    ├── StorageError         74  the disk refused a write to a run dir (full, quota, size limit)
    ├── ConfigError          78  the TOML config, an env var or a grader module is wrong
    └── InternalError        70  parallax itself failed (a bug), not its input (EX_SOFTWARE)

Transport failures are never exceptions that escape a call: they are stamps (data).
"""

from __future__ import annotations

import errno
import sys
from pathlib import Path
from typing import Any


class ParallaxError(Exception):
    """Base of every error parallax reports to a user as one line."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


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
        leaf = cause  # an error inside a task group is named, not the group that carried it
        while isinstance(leaf, BaseExceptionGroup) and leaf.exceptions:
            leaf = leaf.exceptions[0]
        detail = " ".join(str(leaf).split())[:300]
        found = f"{type(leaf).__name__}: {detail}" if detail else type(leaf).__name__
        left = f"; {then}" if then else ""
        super().__init__(f"internal error (a bug in parallax), {found}{left}")


def reason_of(exc: ValueError) -> str:
    """Why text would not parse, in the terms of whoever wrote it.

    CPython refuses to read an integer past its digit limit with advice about an interpreter
    setting, which the author of a fixture, config or ledger cannot act on.
    """
    message = str(exc)
    if "integer string conversion" in message:
        return f"an integer of more than {sys.get_int_max_str_digits()} digits"
    return message
