"""The accepted snapshot entry of each case, read one entry at a time.

A snapshot of a 20,000-case suite, parsed whole, is tens of megabytes of objects, and a
report needs one entry at a time. `promote` writes snapshots with `ledger.write_json` (keys
sorted, two-space indent), so each case's entry is the block from its `    "id": {` line to
its `    }` line: those spans are found in one pass and an entry is parsed when it is shown.
A snapshot in any other layout (edited by hand, reformatted) is read whole instead.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runner.jsontext import loads

_ENTRY = b'    "'
_CASES = b'  "cases": {'
_HEAD = (b'  "promoted_from": ', b'  "promoted_at": ')
_DECODER = json.JSONDecoder()


class Snapshot:
    """One suite's snapshot file, its entries by case id."""

    def __init__(self, path: Path, held: Mapping[str, Any] | None = None) -> None:
        """`held`: the entries as a run of this process read them (`Suite.snapshot`, the ones
        it was gated against), taken as they are instead of reading the file again."""
        self.path = path
        self.head: dict[str, Any] = {}  # promoted_from and promoted_at
        self.problem: str | None = None
        self._spans: dict[str, tuple[int, int]] = {}
        self._whole: Mapping[str, Any] | None = held
        self._fd: int | None = None
        if held is not None:
            return
        try:
            self._fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            self.problem = f"{path}: no snapshot yet (every case is new)"
            return
        except OSError as exc:
            self.problem = f"{path}: cannot read: {exc.strerror}"
            return
        if not self._index():
            self._read_whole()

    def _index(self) -> bool:
        """Find each entry's span; False when the file is not in `write_json`'s layout."""
        assert self._fd is not None
        with os.fdopen(os.dup(self._fd), "rb") as handle:
            offset, start, case_id = 0, -1, None
            inside = False
            for line in handle:
                bare = line.rstrip(b"\r\n")
                if bare == _CASES:
                    inside = True
                elif inside and bare.startswith(_ENTRY) and bare.endswith(b"{"):
                    case_id, start = _key(bare), offset
                    if case_id is None:
                        return False
                elif inside and bare in (b"    }", b"    },") and case_id is not None:
                    self._spans[case_id] = (start, offset + len(bare.rstrip(b",")))
                    case_id = None
                elif inside and bare in (b"  },", b"  }"):
                    inside = False
                elif not inside and bare.startswith(_HEAD):
                    try:
                        self.head.update(loads(b"{" + bare.rstrip(b",") + b"}"))
                    except ValueError:
                        return False
                offset += len(line)
        return bool(self._spans) or not inside

    def _read_whole(self) -> None:
        self._spans.clear()
        try:
            doc = loads(self.path.read_bytes())
        except (OSError, ValueError):
            self.problem = f"{self.path}: not a readable snapshot"
            return
        cases = doc.get("cases") if isinstance(doc, dict) else None
        if not isinstance(cases, dict):
            self.problem = f"{self.path}: not a parallax snapshot (no 'cases' object)"
            return
        self._whole = cases
        self.head = {k: doc.get(k) for k in ("promoted_from", "promoted_at")}

    def entry(self, case_id: str) -> Mapping[str, Any] | None:
        """The case's accepted entry, or None when the snapshot has none."""
        if self._whole is not None:
            found = self._whole.get(case_id)
            return found if isinstance(found, Mapping) else None
        span = self._spans.get(case_id)
        if span is None or self._fd is None:
            return None
        start, end = span
        try:
            value = loads(b"{" + os.pread(self._fd, end - start, start) + b"}")
        except (OSError, ValueError):
            return None
        found = value.get(case_id) if isinstance(value, dict) else None
        return found if isinstance(found, Mapping) else None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _key(line: bytes) -> str | None:
    """The case id of an entry's first line, `    "id": {`."""
    try:
        key, _ = _DECODER.raw_decode(line.decode("utf-8").strip())
    except (ValueError, UnicodeDecodeError):
        return None
    return key if isinstance(key, str) else None
