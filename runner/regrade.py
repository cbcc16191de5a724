"""Regrade: make outcomes.jsonl cover every exchange in raw.jsonl.

A resume heals what a kill left between the two ledgers; a replay regrades a whole raw ledger.
Stamping is a pure function of the exchange, today's case and the graders, so a large regrade
is spread over worker processes in chunks of lines, and the parent writes their outcome rows
in raw.jsonl's order and folds them in that order: outcomes.jsonl and the gate come out the
same, byte for byte, as one process would make them.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.errors import DataError
from runner.gate import Folds, SideView
from runner.jsontext import dumps
from runner.ledger import LedgerWriter, decode_line, read_jsonl, repair_tail
from runner.model import Exchange, Outcome
from runner.stamps import stamp

if TYPE_CHECKING:
    from runner.runs import Suite

Key = tuple[str, str, int]
# One raw line's result: its key, and when it was graded here its fold entry (see
# `Folds.entry`) and its encoded outcome row.
Graded = tuple[Key, SideView | Outcome | None, bytes | None]

# Below this much raw ledger, starting workers costs more than they save (some 2,000 rows).
PARALLEL_BYTES = 2 << 20
CHUNK_LINES = 500  # lines a worker grades per task: big enough to pay for the round trip
MAX_WORKERS = 8


def exchange_at(path: Path, line_no: int, row: Any) -> Exchange:
    try:
        return Exchange.from_json(row)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise DataError(path, f"not an exchange: {exc!r}", line_no) from None


def read_exchanges(path: Path) -> Iterator[Exchange]:
    for line_no, row in read_jsonl(path):
        yield exchange_at(path, line_no, row)


def read_outcomes(path: Path) -> Iterator[Outcome]:
    for line_no, row in read_jsonl(path):
        try:
            yield Outcome.from_json(row)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
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
        for key, entry, row in _graded(raw_path, suite, frozenset(graded), folds):
            done.add(key)
            if row is None or key in graded:
                continue  # graded before, not a case of today's suite, or a second row
            graded.add(key)
            folds.put(key, entry)
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
    workers = _workers()
    if workers < 2 or path.stat().st_size < PARALLEL_BYTES:
        with path.open("rb") as handle:
            yield from job.grade(1, handle)
        return
    yield from _graded_in_workers(job, workers)


@dataclass(frozen=True)
class _Job:
    """A regrade's inputs; a forked worker inherits it whole."""

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
                yield key, None, None
                continue
            outcome = stamp(exchange, suite.fixtures.load(ref), suite.graders)
            yield key, self.folds.entry(outcome, ref), dumps(outcome.to_json())


def _workers() -> int:
    """Worker processes for a large regrade: the cores this process may use.

    Only forked workers inherit the suite (graders may be loaded from a file path), and a fork
    is only safe while this process runs a single thread; otherwise the regrade stays here.
    """
    if sys.platform != "linux" or threading.active_count() > 1:
        return 1
    return min(len(os.sched_getaffinity(0)), MAX_WORKERS)


_JOB: _Job | None = None  # set in the parent just before the fork


def _quiet_worker() -> None:
    """Signals are the parent's to handle: Ctrl-C cancels the pool without a trace from each
    worker, and a SIGTERM meant for a worker ends it instead of reaching the event loop's
    handler the fork copied (whose wakeup socket the parent still reads)."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _grade_chunk(first_line: int, lines: list[bytes]) -> list[Graded]:
    assert _JOB is not None
    return list(_JOB.grade(first_line, lines))


def _chunks(path: Path) -> Iterator[tuple[int, list[bytes]]]:
    with path.open("rb") as handle:
        first = 1
        lines: list[bytes] = []
        for line in handle:
            lines.append(line)
            if len(lines) == CHUNK_LINES:
                yield first, lines
                first += len(lines)
                lines = []
        if lines:
            yield first, lines


def _graded_in_workers(job: _Job, workers: int) -> Iterator[Graded]:
    """Chunks go out to the workers a few at a time and come back in file order.

    A worker that dies (the OOM killer, a signal meant for it) breaks the pool; every chunk not
    yet back is then graded here, so the regrade still finishes whole and in order.
    """
    import multiprocessing

    global _JOB  # noqa: PLW0603 - the fork hands it to the workers
    _JOB = job
    pool = ProcessPoolExecutor(
        workers, mp_context=multiprocessing.get_context("fork"), initializer=_quiet_worker
    )
    pending: deque[tuple[int, list[bytes], Future[list[Graded]] | None]] = deque()
    broken = False

    def send(first: int, lines: list[bytes]) -> None:
        nonlocal broken
        future = None
        if not broken:
            try:
                future = pool.submit(_grade_chunk, first, lines)
            except BrokenProcessPool:
                broken = True
        pending.append((first, lines, future))

    def oldest() -> list[Graded]:
        nonlocal broken
        first, lines, future = pending.popleft()
        if future is not None:
            try:
                return future.result()
            except BrokenProcessPool:
                broken = True
        return list(job.grade(first, lines))

    try:
        for first, lines in _chunks(job.path):
            send(first, lines)
            if len(pending) > workers * 2:  # bounded: memory stays flat on any ledger
                yield from oldest()
        while pending:
            yield from oldest()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        _JOB = None
