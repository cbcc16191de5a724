"""Regrade: make outcomes.jsonl cover every exchange in raw.jsonl.

A resume heals what a kill left between the two ledgers; a replay regrades a whole raw ledger.
Stamping is a pure function of the exchange, today's case and the graders, so a large regrade
is spread over worker processes in chunks of lines, and the parent writes their outcome rows
in raw.jsonl's order and folds them in that order: outcomes.jsonl and the gate come out the
same, byte for byte, as one process would make them.
"""

from __future__ import annotations

import io
import mmap
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.cost.usage import Call
from runner.errors import DataError
from runner.gate import Folds, SideView
from runner.jsontext import dumps
from runner.ledger import LedgerWriter, decode_line, read_jsonl, repair_tail
from runner.model import ROW_ERRORS, Exchange, Outcome
from runner.stamps import stamp
from runner.suite import Suite
from runner.workers import available, line_spans, ordered

Key = tuple[str, str, int]
# One raw line's result: its key, and when it was graded here its fold entry (see
# `Folds.entry`), what the usage fold reads of it, and its encoded outcome row.
Graded = tuple[Key, SideView | Outcome | None, Call | None, bytes | None]

# Below this much raw ledger, starting workers costs more than they save (some 2,000 rows).
PARALLEL_BYTES = 2 << 20
CHUNK_LINES = 500  # lines a worker grades per task: big enough to pay for the round trip


def exchange_at(path: Path, line_no: int, row: Any) -> Exchange:
    try:
        return Exchange.from_json(row)
    except ROW_ERRORS as exc:
        raise DataError(path, f"not an exchange: {exc!r}", line_no) from None


def read_exchanges(path: Path) -> Iterator[Exchange]:
    for line_no, row in read_jsonl(path):
        yield exchange_at(path, line_no, row)


def read_outcomes(path: Path) -> Iterator[Outcome]:
    for line_no, row in read_jsonl(path):
        try:
            yield Outcome.from_json(row)
        except ROW_ERRORS as exc:
            raise DataError(path, f"not an outcome row: {exc!r}", line_no) from None


def heal(run_dir: Path, suite: Suite, folds: Folds) -> set[Key]:
    """Make outcomes.jsonl cover every exchange in raw.jsonl; return the keys already called.

    A kill can land between the raw and the outcome line of the same exchange, and a torn
    line may end either file: both are repaired here before more is appended. Every outcome
    row, found or regraded, goes into `folds` for the gate.
    """
    raw_path, out_path = run_dir / "raw.jsonl", run_dir / "outcomes.jsonl"
    repair_tail(raw_path)
    repair_tail(out_path)
    graded: set[Key] = set()
    if out_path.exists():
        for found in read_outcomes(out_path):
            graded.add(found.key)
            if (ref := suite.ref(found.case_id)) is not None:
                folds.add(found, ref)
    done: set[Key] = set()
    if not raw_path.exists():
        return done
    writer: LedgerWriter | None = None
    batch: list[bytes] = []
    try:
        for key, entry, call, row in _graded(raw_path, suite, frozenset(graded), folds):
            done.add(key)
            if row is None or call is None or key in graded:
                continue  # graded before, not a case of today's suite, or a second row
            graded.add(key)
            folds.put(key, entry, call)
            batch.append(row)
            if len(batch) >= 1000:  # in batches: a replay's memory stays flat
                writer = writer or LedgerWriter(out_path)
                writer.write_encoded(batch)
                batch = []
        if batch:
            writer = writer or LedgerWriter(out_path)
            writer.write_encoded(batch)
    finally:
        if writer is not None:
            writer.close()
    return done


def _graded(path: Path, suite: Suite, graded: frozenset[Key], folds: Folds) -> Iterator[Graded]:
    job = _Job(path, suite, graded, folds)
    workers = available()
    if workers < 2 or path.stat().st_size < PARALLEL_BYTES:
        with path.open("rb") as handle:
            yield from job.grade(1, handle)
        return
    for results in ordered(_grade_chunk(job), _spans(path), workers):
        yield from results


@dataclass(frozen=True)
class _Job:
    """A regrade's inputs; a forked worker inherits it whole (`runner.workers`)."""

    path: Path
    suite: Suite
    graded: frozenset[Key]  # keys outcomes.jsonl already had
    folds: Folds  # for `entry` only: the parent's folds take what comes back

    def grade(self, first_line: int, lines: Iterable[bytes]) -> Iterator[Graded]:
        """Grade each complete line (repair_tail left no torn one) not graded before."""
        suite, path = self.suite, self.path
        for line_no, raw in enumerate(lines, first_line):
            if not raw.strip():
                continue
            exchange = exchange_at(path, line_no, decode_line(path, line_no, raw))
            key = exchange.key
            ref = suite.ref(exchange.case_id)
            if ref is None or key in self.graded:
                yield key, None, None, None
                continue
            outcome = stamp(exchange, suite.fixtures.load(ref), suite.graders)
            yield (
                key,
                self.folds.entry(outcome, ref),
                self.folds.call(outcome),
                dumps(outcome.to_json()),
            )


def _grade_chunk(job: _Job) -> Callable[[tuple[int, int, int]], list[Graded]]:
    def task(span: tuple[int, int, int]) -> list[Graded]:
        first, start, end = span
        with job.path.open("rb") as handle:
            handle.seek(start)
            lines = io.BytesIO(handle.read(end - start))  # split at b"\n" only, as a file is
        return list(job.grade(first, lines))

    return task


def _spans(path: Path) -> Iterator[tuple[int, int, int]]:
    with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        yield from line_spans(data, CHUNK_LINES)
