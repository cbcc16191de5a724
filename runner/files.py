"""Files a user names: inputs read only when they are regular files, outputs checked first.

A path on a command line or in a config can name anything: `/dev/zero` read whole never ends
(it fills memory into a MemoryError), a FIFO blocks until someone writes to it, a directory
cannot be read at all. Every reader of a named input goes through `read_regular`, which opens
without waiting on a FIFO, asks the open file (not the path, which may be swapped between a
check and the read) what it is, and reads no more than its bound.

A named input is also a stranger's pull request: a prompt file turned into a symlink to
`/proc/self/environ`, or a fixture row's tools file `../../.ssh/id_rsa`, would be read and sent
as a prompt. So a reader given a `root` follows every symlink first (`inside`), refuses a path
that leads out of the root before anything is opened, then opens that resolved path (its last
component not followed again) and asks the open file where it is: a symlink swapped in between
the check and the open is refused, never read.

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


class Outside(Unreadable):
    """A named input that leads out of the folder it must stay in (`inside`)."""

    def __init__(self, path: Path, real: Path, root: Path) -> None:
        leads = f" (it leads to {real})" if real != Path(os.path.normpath(path.absolute())) else ""
        super().__init__(f"outside {root}{leads}")
        self.real = real
        self.root = root


def outside_reason(name: str, exc: Outside) -> str:
    """Why a file a config or a fixture row names is refused, and what would let it be read."""
    return (
        f"{name} is {exc.reason}: every file a config and its fixtures name must be in the "
        "config's folder, or under the input_root it sets"
    )


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


def _cannot(exc: OSError | ValueError) -> Unreadable:
    if isinstance(exc, FileNotFoundError):
        return Unreadable(_NO_FILE)
    return Unreadable(f"cannot read: {getattr(exc, 'strerror', None) or exc}")


def inside(path: Path, root: Path) -> Path:
    """`path` with every symlink followed, which must lead into `root` (its symlinks followed
    too); raises Outside before anything is opened, else returns the resolved path to open."""
    try:
        real_root = Path(os.path.realpath(root))
        real = Path(os.path.realpath(path))
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the name
        raise _cannot(exc) from None
    if not real.is_relative_to(real_root):
        raise Outside(path, real, real_root)
    return real


def open_regular(path: Path, *, root: Path | None = None) -> int:
    """A read-only descriptor of `path`, a regular file; with `root`, one inside it.

    The path is resolved and checked first (`inside`), then the resolved path is opened with
    its last component not followed, and the open file is asked where it is (on Linux): a
    symlink swapped into the path after the check is refused, its target never read.
    """
    target = path if root is None else inside(path, root)
    flags = os.O_RDONLY | os.O_NONBLOCK  # a FIFO opens without a writer
    if root is not None:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(target, flags)
    except (OSError, ValueError) as exc:
        raise _cannot(exc) from None
    try:
        _check_opened(fd, path, root)
        os.set_blocking(fd, True)
    except OSError as exc:
        os.close(fd)
        raise _cannot(exc) from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check_opened(fd: int, path: Path, root: Path | None) -> None:
    """Refuse an open file that is no regular file, or (with `root`) not inside it after all:
    a path changed under us between the check and the open."""
    if (problem := _kind_problem(os.fstat(fd).st_mode)) is not None:
        raise Unreadable(problem)
    if root is None:
        return
    try:
        opened = Path(f"/proc/self/fd/{fd}").readlink()
    except OSError:  # no /proc: the resolved path, opened without following, is the check
        return
    real_root = Path(os.path.realpath(root))
    if not opened.is_relative_to(real_root):
        raise Outside(path, opened, real_root)


def read_regular(path: Path, *, limit: int | None = None, root: Path | None = None) -> bytes:
    """The whole content of `path`, which must be a regular file of at most `limit` bytes
    (and, with `root`, lead into that folder: `open_regular`)."""
    fd = open_regular(path, root=root)
    try:
        if limit is not None and os.fstat(fd).st_size > limit:
            raise Unreadable(f"larger than {_size(limit)}")
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
