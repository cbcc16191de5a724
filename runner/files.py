"""Files a user names: inputs read only when they are regular files, outputs checked first.

A path on a command line or in a config can name anything: `/dev/zero` read whole never ends
(it fills memory into a MemoryError), a FIFO blocks until someone writes to it, a directory
cannot be read at all. Every reader of a named input goes through `read_regular`, which opens
without waiting on a FIFO, asks the open file (not the path, which may be swapped between a
check and the read) what it is, and reads no more than its bound.

A command that writes into an existing run directory (`run --resume`, `report`) asks
`check_writable` first, so a read-only directory or a file name taken by a directory is one
line before any work, not a traceback half-way.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from runner.errors import DataError, UsageError


class Unreadable(Exception):
    """Why a named file was not read; the caller turns `reason` into its own error."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


_NO_FILE = "no such file"


def _size(limit: int) -> str:
    return f"{limit // (1 << 20)} MiB" if limit % (1 << 20) == 0 else f"{limit} bytes"


def _kind_problem(mode: int) -> str | None:
    if stat.S_ISDIR(mode):
        return "a directory, not a file"
    if not stat.S_ISREG(mode):
        return "not a regular file (a device, FIFO or socket)"
    return None


def file_problem(path: Path) -> str | None:
    """Why `path` cannot be read as an input file (checked before a run starts), or None."""
    try:
        return _kind_problem(path.stat().st_mode)
    except FileNotFoundError:
        return _NO_FILE
    except (OSError, ValueError) as exc:  # a symlink loop, a parent that is a file, a NUL
        return f"cannot read: {getattr(exc, 'strerror', None) or exc}"


def read_regular(path: Path, *, limit: int | None = None) -> bytes:
    """The whole content of `path`, which must be a regular file of at most `limit` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens without a writer
    except FileNotFoundError:
        raise Unreadable(_NO_FILE) from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the name
        raise Unreadable(f"cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        info = os.fstat(fd)
        if (problem := _kind_problem(info.st_mode)) is not None:
            raise Unreadable(problem)
        if limit is not None and info.st_size > limit:
            raise Unreadable(f"larger than {_size(limit)}")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read() if limit is None else handle.read(limit + 1)
    except OSError as exc:
        raise Unreadable(f"cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if limit is not None and len(data) > limit:  # grew since fstat: still bounded
        raise Unreadable(f"larger than {_size(limit)}")
    return data


def check_writable(directory: Path, names: Iterable[str], *, action: str) -> None:
    """Refuse `action` unless `directory` and each of `names` in it that exists can be written:
    UsageError (64) for a permission, DataError (65) for a name that is not a regular file."""
    for path in (directory, *(directory / name for name in names)):
        if not path.exists():
            continue
        if path != directory and (problem := file_problem(path)) is not None:
            raise DataError(path, f"{problem}; cannot {action}")
        if not os.access(path, os.W_OK):
            raise UsageError(f"{path}: not writable; cannot {action}")
