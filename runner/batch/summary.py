"""What a run says of its batches: summary.json's `batch`, and its line in every report.

Read from the run's journal (batches.jsonl, which a replay copies), so a run, its resume and
its replay say the same: per ledger side that ran as a batch, how many batches it sent, how
many requests they carried, how each ended, and how long they took, from the first one's
submission to the last one's end (the wall time the side's calls waited on the provider).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runner.batch.journal import JOURNAL, Journal, epoch
from runner.history import mapping_of
from runner.model import NOISE, SIDES


def batch_block(run_dir: Path, manifest: Mapping[str, Any]) -> dict[str, Any] | None:
    """summary.json's `batch`: per side that ran as a batch (its manifest says so, or its
    calls are in the journal), its batches; None when no side did."""
    journal = Journal.read(run_dir / JOURNAL)
    endpoints = mapping_of(manifest.get("endpoints"))
    block: dict[str, Any] = {}
    for side in (*SIDES, NOISE):
        batches = [b for b in journal.submitted.values() if any(r.side == side for r in b.requests)]
        configured = mapping_of(endpoints.get(side)).get("batch") is True
        if not batches and not configured:
            continue
        ended = [journal.ended[b.batch_id] for b in batches if b.batch_id in journal.ended]
        starts = [epoch(b.submitted_at) for b in batches]
        ends = [epoch(e.ended_at) for e in ended]
        took = {
            b.batch_id: epoch(journal.ended[b.batch_id].ended_at) - epoch(b.submitted_at)
            for b in batches
            if b.batch_id in journal.ended
        }
        block[side] = {
            "batches": len(batches),
            "requests": sum(r.side == side for b in batches for r in b.requests),
            "ended": dict(sorted(Counter(str(e.state) for e in ended).items())),
            "open": len(batches) - len(ended),
            "seconds": round(max(ends) - min(starts), 3) if ends else None,
            "longest_seconds": round(max(took.values()), 3) if took else None,
        }
    return block or None


def _span(seconds: float) -> str:
    """A wait as a person reads it: `42 s`, `3 min 5 s`, `2 h 14 min`."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    minutes, rest = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {rest} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def batch_lines(summary: Mapping[str, Any]) -> list[str]:
    """One line per side that ran as a batch (stderr, report.md, report.html), read as
    tolerantly as every reader of a recorded summary is."""
    lines = []
    for side, found in mapping_of(summary.get("batch")).items():
        entry = mapping_of(found)
        count, requests = entry.get("batches"), entry.get("requests")
        if not isinstance(count, int) or not isinstance(requests, int):
            continue
        line = f"{side} ran as a batch: {count} batch(es) of {requests} request(s)"
        seconds = entry.get("seconds")
        if isinstance(seconds, int | float):
            line += f", {_span(seconds)} from the first submission to the last result"
        states = mapping_of(entry.get("ended"))
        if states:
            line += " (" + ", ".join(f"{n} {state}" for state, n in states.items()) + ")"
        if isinstance(opened := entry.get("open"), int) and opened:
            line += f"; {opened} still open"
        lines.append(line + ", at the batch price")
    return lines
