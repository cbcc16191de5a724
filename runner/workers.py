"""Forked worker processes for the CPU-bound stages: fixture validation and regrading.

Both are pure functions of chunks of a file, and both must end exactly as one process would:
the same rows in the same order, the same first error. `ordered` runs a task function over
chunks in worker processes and hands the results back in chunk order, so the caller stays the
only one who writes, folds or decides which error comes first.
"""

from __future__ import annotations

import mmap
import os
import signal
import sys
import threading
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

MAX_WORKERS = 8

_TASK: Callable[[Any], Any] | None = None  # a worker's task, set as it starts


def available() -> int:
    """Worker processes a stage may fork: the cores this process may use.

    Only forked workers inherit what the stage loaded (graders may come from a file path), and
    a fork is only safe while this process runs a single thread; otherwise the stage stays
    here (1).
    """
    if sys.platform != "linux" or threading.active_count() > 1:
        return 1
    return min(len(os.sched_getaffinity(0)), MAX_WORKERS)


def line_spans(data: bytes | mmap.mmap, lines: int) -> Iterator[tuple[int, int, int]]:
    """(number of the first line, start, end) of each run of `lines` whole lines of `data`; the
    last run may be shorter and lack its newline. Workers get spans, not text: they read the
    text from what they inherited or from the file, so the parent neither copies nor pickles
    it."""
    line, start, size = 1, 0, len(data)
    while start < size:
        end = start
        for _ in range(lines):
            newline = data.find(b"\n", end)
            if newline < 0:
                end = size
                break
            end = newline + 1
        yield line, start, end
        line += lines
        start = end


def ordered(task: Callable[[T], R], chunks: Iterable[T], workers: int) -> Generator[R, None, None]:
    """`task(chunk)` for every chunk, computed in `workers` forked processes, in chunk order.

    Chunks go out a few at a time, so memory stays bounded by the number of workers on any
    file. A worker that dies (the OOM killer, a signal meant for it) breaks the pool; every
    chunk not yet back is then computed here, so the stage still finishes whole and in order.
    An exception a task raises comes back as itself (parallax's errors survive pickling).
    """
    import multiprocessing

    # forked, a worker inherits its arguments instead of unpickling them: the task may be a
    # closure over the suite and its graders
    pool = ProcessPoolExecutor(
        workers,
        mp_context=multiprocessing.get_context("fork"),
        initializer=_start_worker,
        initargs=(task,),
    )
    pending: deque[tuple[T, Future[R] | None]] = deque()
    broken = False

    def send(chunk: T) -> None:
        nonlocal broken
        future = None
        if not broken:
            try:
                future = pool.submit(_run, chunk)
            except BrokenProcessPool:
                broken = True
        pending.append((chunk, future))

    def oldest() -> R:
        nonlocal broken
        chunk, future = pending.popleft()
        if future is not None:
            try:
                return future.result()
            except BrokenProcessPool:
                broken = True
        return task(chunk)

    try:
        for chunk in chunks:
            send(chunk)
            if len(pending) > workers * 2:
                yield oldest()
        while pending:
            yield oldest()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _run(chunk: Any) -> Any:
    assert _TASK is not None
    return _TASK(chunk)


def _start_worker(task: Callable[[Any], Any]) -> None:
    """Signals are the parent's to handle: Ctrl-C cancels the pool without a trace from each
    worker, and a SIGTERM meant for a worker ends it instead of reaching the event loop's
    handler the fork copied (whose wakeup socket the parent still reads)."""
    global _TASK  # noqa: PLW0603 - one task per worker process
    _TASK = task
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
