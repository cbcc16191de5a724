"""Where a miss shows in a reply: the text a `forbidden:` needle matched, and in the other
side's reply the text a `missing:` needle wanted.

The diff says which words differ; these marks say which of them the graders cared about. A
needle is matched as grading matches it (case-insensitive, anywhere), over the text a report
shows, and at most MAX_MARKS times a reply, so a one-letter needle cannot flood a page.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence

from runner.reports.wordiff import Piece

MAX_MARKS = 50


def needles(own: Iterable[str], other: Iterable[str]) -> list[tuple[str, str]]:
    """(needle, miss code) to mark in one side's reply: its own `forbidden:` needles, and the
    other side's `missing:` needles (what this reply has that the other one lacks)."""
    found = [(code.partition(":")[2], code) for code in own if code.startswith("forbidden:")]
    found += [(code.partition(":")[2], code) for code in other if code.startswith("missing:")]
    return [(needle, code) for needle, code in found if needle]


def mark(pieces: Sequence[Piece], wanted: Sequence[tuple[str, str]]) -> tuple[Piece, ...]:
    """The pieces split where a needle matches, the matching parts carrying its miss code."""
    if not wanted:
        return tuple(pieces)
    text = "".join(p.text for p in pieces)
    spans: list[tuple[int, int, str]] = []
    for needle, code in wanted:
        found = re.finditer(re.escape(needle), text, re.IGNORECASE)
        spans += [(m.start(), m.end(), code) for m in itertools.islice(found, MAX_MARKS)]
    kept: list[tuple[int, int, str]] = []
    for start, end, code in sorted(spans):
        if not kept or start >= kept[-1][1]:  # overlapping matches: the earlier one wins
            kept.append((start, end, code))
    kept = kept[:MAX_MARKS]
    out: list[Piece] = []
    at = 0  # where the current piece starts in `text`
    for piece in pieces:
        end = at + len(piece.text)
        cursor = at
        for start, stop, code in kept:
            if stop <= cursor or start >= end:
                continue
            lo, hi = max(start, cursor), min(stop, end)
            if lo > cursor:
                out.append(Piece(text[cursor:lo], piece.changed))
            out.append(Piece(text[lo:hi], piece.changed, code))
            cursor = hi
        if cursor < end:
            out.append(Piece(text[cursor:end], piece.changed))
        at = end
    return tuple(out)
