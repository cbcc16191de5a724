"""What is left of a pruned run: one line in `runs/<suite>/pruned.jsonl`.

Retention deletes old run directories (`runner.retention`); a night's record should not go
with them. Before a run dir is deleted its start, mode, verdict and gate counts are appended
here, and `parallax history` shows each as a one-line row among the runs. The file is
append-only JSONL like the ledgers: a torn last line (a kill mid-append) is cut by the next
append, and a run recorded twice (a prune killed between its record and the deletion, then
run again) is shown once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.errors import DataError
from runner.gate import GATE_CLASSES
from runner.ledger import LedgerWriter, read_jsonl

PRUNED_FILE = "pruned.jsonl"
TOMBSTONE_VERSION = 1


@dataclass(frozen=True)
class Tombstone:
    """One pruned run as history shows it."""

    run_id: str
    started_at: str | None
    finished_at: str | None
    mode: str | None
    exit_code: int | None
    verdict: str | None
    pruned_at: str
    gate_counts: Mapping[str, int] = field(default_factory=dict)
    parent: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "version": TOMBSTONE_VERSION,
            "run_id": self.run_id,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "mode": self.mode,
            "parent": self.parent,
            "exit_code": self.exit_code,
            "verdict": self.verdict,
            "gate_counts": dict(self.gate_counts),
            "pruned_at": self.pruned_at,
        }

    @classmethod
    def from_json(cls, row: Any) -> Tombstone | None:
        """A record as written, or None for a line that is not one (hand-edited, newer)."""
        if not isinstance(row, dict) or row.get("version") != TOMBSTONE_VERSION:
            return None
        run_id, pruned_at = row.get("run_id"), row.get("pruned_at")
        if not isinstance(run_id, str) or not isinstance(pruned_at, str):
            return None
        counts = row.get("gate_counts")
        code = row.get("exit_code")
        return cls(
            run_id=run_id,
            started_at=_str(row.get("started_at")),
            finished_at=_str(row.get("finished_at")),
            mode=_str(row.get("mode")),
            exit_code=code if type(code) is int else None,
            verdict=_str(row.get("verdict")),
            pruned_at=pruned_at,
            gate_counts={
                gate: n
                for gate, n in (counts.items() if isinstance(counts, dict) else ())
                if gate in GATE_CLASSES and type(n) is int and n >= 0
            },
            parent=_str(row.get("parent")),
        )


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def record(suite_dir: Path, stone: Tombstone) -> None:
    """Append one record, flushed and synced before the run dir it names is deleted; a write
    the disk refuses is a StorageError."""
    writer = LedgerWriter(suite_dir / PRUNED_FILE)
    try:
        writer.write([stone.to_json()])
    finally:
        writer.close()


def read_tombstones(suite_dir: Path) -> tuple[list[Tombstone], list[str]]:
    """The suite's pruned runs in the order they were recorded, each once, and notes on what
    could not be read (never an error: history shows the rest)."""
    path = suite_dir / PRUNED_FILE
    if not path.exists():
        return [], []
    stones: dict[str, Tombstone] = {}
    notes: list[str] = []
    try:
        for line_no, row in read_jsonl(path):
            stone = Tombstone.from_json(row)
            if stone is None:
                notes.append(f"{PRUNED_FILE}:{line_no}: not a pruned run's record; skipped")
            else:
                stones.setdefault(stone.run_id, stone)
    except DataError as exc:
        notes.append(f"{PRUNED_FILE}: {exc.reason}; the records after it are not shown")
    return list(stones.values()), notes
