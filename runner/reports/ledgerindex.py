"""Where each (case, side, sample) row of a ledger sits: found in one pass, read on demand.

A report opens every case of a run, and a 20,000-case raw.jsonl is hundreds of megabytes of
request and reply bodies: held as exchanges it would be the largest thing a report touches.
So a ledger is read once for the key, line number and byte span of each row, and a case's
rows are read again, by their span, only while its detail is built. A ledger retention keeps
compressed (`raw.jsonl.gz`) has no byte spans to read by: it is decompressed once into an
anonymous temporary file, which the spans then index (bench/retention.py measures the cost).
"""

from __future__ import annotations

import os
import sys
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from runner.errors import DataError
from runner.jsontext import loads
from runner.ledger import packed_path, unpack_temporary
from runner.model import record


@record
class Spot:
    """One ledger row: its 1-based line number and its bytes' span in the file."""

    sample: int
    line: int
    offset: int
    size: int


class LedgerIndex:
    """The rows of one JSONL ledger (raw.jsonl, outcomes.jsonl) by case and side.

    The first row of a key is the one kept, as the gate keeps it. A line that is not a JSON
    object with a key is skipped and counted in `problems`, never an error: a report of a
    damaged run still shows what can be read. The rows are held in integer columns, chained
    per case (a dict of 40,000 small objects was most of a report's memory).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.problems: list[str] = []
        self._head: dict[str, int] = {}  # case id -> its last row's position in the columns
        self._sides: list[str] = []
        self._cols = {name: array(code) for name, code in _COLUMNS.items()}
        self._fd: int | None = None
        self._scan()

    @property
    def opened(self) -> bool:
        """Whether the ledger was there to be read."""
        return self._fd is not None

    def _scan(self) -> None:
        try:
            self._fd = self._open()
        except FileNotFoundError:
            self.problems.append(f"{self.path.name}: missing")
            return
        except OSError as exc:
            self.problems.append(f"{self.path.name}: cannot read: {exc.strerror or exc}")
            return
        except DataError as exc:
            self.problems.append(f"{self.path.name}: cannot read: {exc.reason}")
            return
        codes: dict[str, int] = {}
        cols = self._cols
        for line_no, offset, raw in _lines(self._fd):
            key = _key(raw)
            if key is None:
                if raw.strip() and raw.endswith(b"\n"):  # a torn last line is a kill's mark
                    self.problems.append(f"{self.path.name}:{line_no}: not a ledger row; skipped")
                continue
            case_id, side, sample = key
            case_id = sys.intern(case_id)  # one string per id for both ledgers and the history
            code = codes.get(side)
            if code is None:
                code = codes[side] = len(self._sides)
                self._sides.append(side)
            if any(s.sample == sample for s in self._chain(case_id, code)):
                continue
            cols["side"].append(code)
            cols["sample"].append(sample)
            cols["line"].append(line_no)
            cols["offset"].append(offset)
            cols["size"].append(len(raw))
            cols["next"].append(self._head.get(case_id, -1))
            self._head[case_id] = len(cols["next"]) - 1

    def _open(self) -> int:
        """A descriptor on the ledger's plain bytes: the file, else its compressed form
        decompressed (`self.path` then names the file that was read)."""
        try:
            return os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            packed = packed_path(self.path)
            if not packed.exists():
                raise
        self.path = packed
        return unpack_temporary(packed)

    def _chain(self, case_id: str, code: int) -> Iterator[Spot]:
        cols = self._cols
        at = self._head.get(case_id, -1)
        while at >= 0:
            if cols["side"][at] == code:
                yield Spot(
                    cols["sample"][at], cols["line"][at], cols["offset"][at], cols["size"][at]
                )
            at = cols["next"][at]

    def spots(self, case_id: str, side: str) -> list[Spot]:
        """The rows of one case's side, by sample."""
        if side not in self._sides:
            return []
        return sorted(self._chain(case_id, self._sides.index(side)), key=lambda s: s.sample)

    def read(self, spot: Spot) -> bytes:
        """A row's bytes as written (its newline stripped)."""
        assert self._fd is not None  # a spot is only ever found in a file that was opened
        return os.pread(self._fd, spot.size, spot.offset).rstrip(b"\r\n")

    def row(self, spot: Spot) -> dict[str, Any] | None:
        """A row parsed, or None when it no longer reads as the object it was indexed as."""
        try:
            value = loads(self.read(spot))
        except (OSError, ValueError):
            return None
        return value if isinstance(value, dict) else None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


# column -> array type: byte offsets need 64 bits, the rest fit in 32 (a line of a ledger is
# far below 2 GiB, and 2**31 rows would be a report no one renders)
_COLUMNS = {"side": "i", "sample": "i", "line": "i", "offset": "q", "size": "i", "next": "i"}


def _lines(fd: int, chunk: int = 1 << 20) -> Iterator[tuple[int, int, bytes]]:
    """(line number, byte offset, line with its newline) for each line of an open file."""
    with os.fdopen(os.dup(fd), "rb", buffering=chunk) as handle:
        offset = 0
        for line_no, raw in enumerate(handle, 1):
            yield line_no, offset, raw
            offset += len(raw)


# raw.jsonl's rows as parallax writes them (`jsontext.dumps`: compact, keys sorted): the first
# `"case_id":"` is the row's own (only "adapter", "answer_pointer", flat attempts and a number
# come before it), and so are the last `,"sample":` and `,"side":"`, which only scalars follow.
# A string holds no unescaped quote, so none of these can start inside one.
_RAW_ROW = b'{"adapter":'
_CASE_ID = b'"case_id":"'
_SAMPLE = b',"sample":'
_SIDE = b',"side":"'


def _raw_key(raw: bytes) -> tuple[str, str, int] | None:
    """A raw row's key found without parsing the row (a report indexes some 40,000 of them),
    or None when the row is not laid out as parallax writes it: then it is parsed. The view
    that reads the row checks the key it parses against this one."""
    if not raw.startswith(_RAW_ROW) or not raw.rstrip(b"\r\n").endswith(b"}"):
        return None
    start = raw.find(_CASE_ID) + len(_CASE_ID)
    end = raw.find(b'"', start)
    at_sample, at_side = raw.rfind(_SAMPLE), raw.rfind(_SIDE)
    if start < len(_CASE_ID) or end < 0 or b"\\" in raw[start:end] or at_side < at_sample:
        return None  # an escape in the id, or no such key: the parser decides
    digits = raw[at_sample + len(_SAMPLE) : raw.find(b",", at_sample + len(_SAMPLE))]
    side_end = raw.find(b'"', at_side + len(_SIDE))
    if at_sample < 0 or not digits.isdigit() or len(digits) > 9 or side_end < 0:
        return None
    try:
        case_id = raw[start:end].decode("utf-8")
        side = raw[at_side + len(_SIDE) : side_end].decode("ascii")
    except UnicodeDecodeError:
        return None
    return case_id, side, int(digits)


def _key(raw: bytes) -> tuple[str, str, int] | None:
    if not raw.strip():
        return None
    if (fast := _raw_key(raw)) is not None:
        return fast
    try:
        row = loads(raw)
    except ValueError:
        return None
    if not isinstance(row, dict):
        return None
    case_id, side, sample = row.get("case_id"), row.get("side"), row.get("sample", 0)
    if not isinstance(case_id, str) or not isinstance(side, str) or type(sample) is not int:
        return None
    if not -(2**31) <= sample < 2**31:  # no run numbers its samples so; the column is 32-bit
        return None
    return case_id, side, sample
