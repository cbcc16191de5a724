"""Append-only JSONL ledgers: raw.jsonl and outcomes.jsonl.

One writer appends whole lines and flushes them to the OS after every batch, so a SIGKILL
loses at most the calls still in flight, never a written row. A reader tolerates a torn last
line (the one a kill can leave) and reports any other broken line with its file and number.
A write the disk refuses (full, over quota, past a file-size limit) is a `StorageError`
(exit 74) naming the file: the rows written before it stay whole, and a resume goes on.

A finished run's ledgers may be kept compressed (`raw.jsonl.gz`, by retention: `pack`); every
reader here opens a ledger by its plain name and reads a compressed one as the same bytes.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import shutil
import tempfile
import zlib
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from runner.errors import DISK_FULL, DataError, StorageError, reason_of
from runner.jsontext import dumps, loads, non_finite_at

PACKED = ".gz"  # a compressed ledger's suffix: raw.jsonl is kept as raw.jsonl.gz
PACK_LEVEL = 6  # zlib's default trade of time for size (bench/retention.py measures it)
_CHUNK = 1 << 20
# what reading a damaged gzip file raises: a bad header (an OSError), a cut end, bad data
_UNPACK_ERRORS = (gzip.BadGzipFile, EOFError, zlib.error)


@contextlib.contextmanager
def disk_refusal(path: Path) -> Iterator[None]:
    """A write the disk refuses (no space, over quota, past RLIMIT_FSIZE) as a StorageError
    naming `path`; any other OSError passes as it is."""
    try:
        yield
    except OSError as exc:
        if exc.errno in DISK_FULL:
            raise StorageError(path, exc.strerror or str(exc)) from None
        raise


def packed_path(path: Path) -> Path:
    """Where a ledger is kept once compressed: `<name>.gz`."""
    return path if path.name.endswith(PACKED) else path.with_name(path.name + PACKED)


def stored(path: Path) -> Path:
    """The file that holds a ledger: the plain one, else the compressed one when that exists."""
    if path.name.endswith(PACKED) or path.exists():
        return path
    packed = packed_path(path)
    return packed if packed.exists() else path


def open_ledger(path: Path) -> tuple[Path, io.BufferedIOBase]:
    """A ledger open for reading as the bytes it was written as, and the file that holds it.

    The plain file is tried first, then `<name>.gz`: `pack` renames the compressed file into
    place before it removes the plain one, so a reader always finds one of the two whole.
    """
    if not path.name.endswith(PACKED):
        try:
            return path, path.open("rb")
        except FileNotFoundError:
            if not packed_path(path).exists():
                raise DataError(path, "no such file") from None
        except OSError as exc:
            raise DataError(path, f"cannot read: {exc.strerror}") from None
    packed = packed_path(path)
    try:
        return packed, gzip.open(packed, "rb")
    except FileNotFoundError:
        raise DataError(path, "no such file") from None
    except OSError as exc:
        raise DataError(packed, f"cannot read: {exc.strerror}") from None


@contextlib.contextmanager
def _unpacking(source: Path) -> Iterator[None]:
    """A compressed ledger that does not decompress (cut short, damaged) as one DataError."""
    try:
        yield
    except _UNPACK_ERRORS as exc:
        raise DataError(source, f"not a whole gzip file: {exc}") from None


def read_jsonl(path: Path, *, tolerate_torn_tail: bool = True) -> Iterator[tuple[int, Any]]:
    """Yield (line number, value) for each non-blank line.

    A last line without its newline that does not parse is the mark of a killed writer:
    skipped when `tolerate_torn_tail`, an error otherwise. Any other bad line is an error.
    """
    source, handle = open_ledger(path)
    with handle, _unpacking(source):
        line_no = 0
        for raw in handle:
            line_no += 1
            if not raw.strip():
                continue
            try:
                value = decode_line(source, line_no, raw)
            except DataError:
                if tolerate_torn_tail and not raw.endswith(b"\n"):  # a kill can cut any line
                    return
                raise
            yield line_no, value


def copy_ledger(path: Path, target: Path) -> None:
    """Write the bytes a ledger holds, compressed or not, to `target` (a replay's raw.jsonl
    is its parent's, byte for byte)."""
    source, handle = open_ledger(path)
    with handle, _unpacking(source), disk_refusal(target), target.open("wb") as out:
        shutil.copyfileobj(handle, out, _CHUNK)


def unpack_temporary(packed: Path) -> int:
    """A compressed ledger decompressed once into an anonymous temporary file (in $TMPDIR,
    gone with its last descriptor): a descriptor on the plain bytes, for a reader that reads
    rows by their offsets. Raises OSError, or DataError for a damaged file."""
    with gzip.open(packed, "rb") as source, tempfile.TemporaryFile() as temp, _unpacking(packed):
        shutil.copyfileobj(source, temp, _CHUNK)
        temp.flush()
        temp.seek(0)  # a reader that reads on from the descriptor starts at the first row
        return os.dup(temp.fileno())


def pack(path: Path) -> tuple[int, int]:
    """Keep a finished ledger as `<name>.gz` instead; return its plain and packed sizes.

    The compressed file is written to a temporary name, fsynced and renamed (`write_atomic`),
    read back and checked against the plain file's length and CRC-32, and only then is the
    plain file removed, the directory synced between: a crash at any moment leaves the plain
    file, the compressed one or both (readers take the plain one, and the next `pack` starts
    over), never half of either.
    """
    packed = packed_path(path)
    written = {"crc": 0, "size": 0}

    def parts() -> Iterator[bytes]:
        deflate = zlib.compressobj(PACK_LEVEL, zlib.DEFLATED, 31)  # 31: gzip, mtime 0
        with path.open("rb") as plain:
            while chunk := plain.read(_CHUNK):
                written["crc"] = zlib.crc32(chunk, written["crc"])
                written["size"] += len(chunk)
                yield deflate.compress(chunk)
        yield deflate.flush()

    with disk_refusal(packed):
        write_atomic(packed, parts())
    if _checksum(packed) != (written["crc"], written["size"]):
        packed.unlink(missing_ok=True)
        raise DataError(packed, "does not read back as the ledger it packs; the plain file kept")
    _sync(path.parent)
    path.unlink()
    _sync(path.parent)
    return written["size"], packed.stat().st_size


def _checksum(packed: Path) -> tuple[int, int]:
    crc, size = 0, 0
    with gzip.open(packed, "rb") as source, _unpacking(packed):
        while chunk := source.read(_CHUNK):
            crc, size = zlib.crc32(chunk, crc), size + len(chunk)
    return crc, size


def _sync(directory: Path) -> None:
    """Make a rename or a removal in `directory` durable before the next step relies on it."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def decode_line(path: Path, line_no: int, raw: bytes) -> Any:
    """One ledger line's value; a line that is not JSON is a DataError naming it."""
    try:
        return loads(raw)
    except UnicodeDecodeError as exc:
        raise DataError(path, f"not UTF-8 at byte {exc.start}", line_no) from None
    except ValueError as exc:
        torn = not raw.endswith(b"\n")
        reason = "truncated last line" if torn else f"invalid JSON: {reason_of(exc)}"
        raise DataError(path, reason, line_no) from None


def _open(path: Path) -> IO[bytes]:
    try:
        return path.open("rb")
    except FileNotFoundError:
        raise DataError(path, "no such file") from None
    except OSError as exc:
        raise DataError(path, f"cannot read: {exc.strerror}") from None


def read_json_object(path: Path, *, missing: str = "no such file") -> dict[str, Any]:
    """A whole JSON file that must hold an object (manifest, summary, a disagreement map).

    One reader for all of them, so a missing, unreadable, non-JSON or non-object file is always
    one DataError (exit 65) naming the file, never a traceback.
    """
    try:
        value = loads(path.read_bytes())
    except FileNotFoundError:
        raise DataError(path, missing) from None
    except OSError as exc:
        raise DataError(path, f"cannot read: {exc.strerror}") from None
    except ValueError as exc:  # UnicodeDecodeError is a ValueError
        raise DataError(path, f"unreadable JSON: {reason_of(exc)}") from None
    if not isinstance(value, dict):
        raise DataError(path, "not a JSON object")
    return value


def repair_tail(path: Path) -> bool:
    """Cut a torn last line off a ledger before appending to it again; True if one was cut.

    A last row that lacks only its newline is whole (no prefix of a JSON object parses as
    one): it keeps its place and gets the newline, so a resume does not call it again.
    """
    if not path.exists():
        return False
    with disk_refusal(path), path.open("rb+") as handle:
        size = handle.seek(0, os.SEEK_END)
        if size == 0:
            return False
        handle.seek(size - 1)
        if handle.read(1) == b"\n":
            return False
        start = _last_line_start(handle, size)
        handle.seek(start)
        if _whole_row(handle.read(size - start)):
            handle.write(b"\n")
            return False
        handle.truncate(start)
        return True


def _last_line_start(handle: IO[bytes], size: int) -> int:
    """Where the last line begins: after the last newline before `size`, or 0."""
    pos, chunk = size - 1, 4096
    while pos > 0:
        start = max(0, pos - chunk)
        handle.seek(start)
        idx = handle.read(pos - start).rfind(b"\n")
        if idx >= 0:
            return start + idx + 1
        pos = start
    return 0


def _whole_row(line: bytes) -> bool:
    try:
        return isinstance(loads(line), dict)
    except ValueError:  # torn JSON, torn UTF-8, nested too deeply
        return False


class LedgerWriter:
    """Appends rows to one JSONL file; each `write` is flushed before it returns."""

    def __init__(self, path: Path) -> None:
        repair_tail(path)
        self.path = path
        with disk_refusal(path):
            self._handle: IO[bytes] = path.open("ab")

    def write(self, rows: Iterable[Any]) -> None:
        self.write_encoded(dumps(row) for row in rows)

    def write_encoded(self, rows: Iterable[bytes]) -> None:
        """Rows already through `dumps` (by a worker process, say). A write the disk refuses
        may leave part of the batch, ending in a torn line that the next writer cuts."""
        lines = [*rows, b""]  # each row then a newline, without a copy of each row to add it
        data = b"\n".join(lines)
        with disk_refusal(self.path):
            self._handle.write(data)
            self._handle.flush()

    def close(self) -> None:
        if not self._handle.closed:
            with disk_refusal(self.path):
                try:
                    self._handle.flush()
                    os.fsync(self._handle.fileno())
                finally:
                    self._handle.close()


def write_atomic(path: Path, parts: Iterable[bytes]) -> None:
    """Write a whole file atomically (temp file, fsync, rename): a reader never sees half.

    `parts` is consumed as it is written, so a large file is never held whole.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as handle:
            for part in parts:
                handle.write(part)
            handle.flush()
            os.fsync(handle.fileno())
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json(path: Path, value: Any) -> None:
    """A small JSON file (manifest, summary, snapshot), indented so a review diff reads well.

    A figure that is not finite is refused, the file left as it was (`runner.jsontext`)."""
    try:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True, indent=2, allow_nan=False)
    except ValueError:
        if (where := non_finite_at(value)) is None:
            raise
        raise ValueError(f"{path}: {where} is not a finite number; not written") from None
    data = (text + "\n").encode()
    write_atomic(path, [data])


def write_json_map(
    path: Path, head: Mapping[str, Any], key: str, items: Iterable[tuple[str, Any]]
) -> None:
    """A JSON object whose `key` holds a large map, written one entry a line.

    `items` must come sorted by name and is consumed as it is written, so the map is never
    held whole, neither as values nor as text; sorted, so a replay writes the same bytes.
    """

    def parts() -> Iterator[bytes]:
        yield b"{"
        for name in sorted(head):
            yield dumps(name) + b":" + dumps(head[name]) + b",\n"
        yield dumps(key) + b":{"
        separator = b"\n"
        for name, value in items:
            yield separator + dumps(name) + b":" + dumps(value)
            separator = b",\n"
        yield b"\n}}\n"

    write_atomic(path, parts())


def read_json_map(path: Path, key: str) -> Iterator[tuple[str, Any]]:
    """The entries of `key` in a file `write_json_map` wrote, one line at a time.

    A 20,000-case disagreement map parsed whole is tens of megabytes of objects; read line
    by line, only what the caller keeps stays in memory. A file in any other layout (edited
    and reformatted by hand) is read whole instead, so it still works.
    """
    for line_no, entry in json_map_lines(path, key):
        yield map_entry(path, key, line_no, entry)


def json_map_lines(path: Path, key: str) -> Iterator[tuple[int, bytes]]:
    """`read_json_map`'s entries unparsed: each one's line number and its `"name":value`
    bytes, for a caller that parses them elsewhere (`map_entry`, in a worker process). A file
    in another layout is read whole and each entry given as JSON text again (line 0)."""
    opening = dumps(key) + b":{"
    with _open(path) as handle:
        line_no = 0
        for line in handle:
            line_no += 1
            if line.rstrip(b"\r\n").removeprefix(b"{") == opening:
                break
        else:
            for name, value in _whole_map(path, key):  # the stdlib's text reads back exactly
                yield 0, json.dumps({name: value}).encode("ascii")[1:-1]
            return
        for line in handle:
            line_no += 1
            entry = line.rstrip(b"\r\n").removesuffix(b",")
            if entry == b"}}":
                return
            yield line_no, entry
        raise DataError(path, f"truncated: the {key!r} map does not end", line_no)


def map_entry(path: Path, key: str, line_no: int, entry: bytes) -> tuple[str, Any]:
    """One entry `json_map_lines` gave, parsed: (name, value)."""
    try:
        value = loads(b"{" + entry + b"}")
    except ValueError:
        value = None
    if not isinstance(value, dict) or len(value) != 1:
        raise DataError(path, f"not one {key!r} entry per line", line_no)
    return next(iter(value.items()))


def _whole_map(path: Path, key: str) -> Iterator[tuple[str, Any]]:
    items = read_json_object(path).get(key)
    if not isinstance(items, dict):
        raise DataError(path, f"no {key!r} object")
    yield from sorted(items.items())
