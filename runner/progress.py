"""A progress bar for `run` on a terminal: cases done of total, transport misses, elapsed, ETA.

It is drawn with rich on stderr, and only when stderr is a TTY: in a container or CI the only
output stays the JSON log lines on stdout. The ledger writer feeds it after every batch.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Sequence
from typing import IO, Any

from runner.model import SIDES, Exchange


class CaseCounter:
    """Counts a case done once every one of its calls (both sides, all samples) is written."""

    def __init__(
        self, case_ids: Sequence[str], samples: int, done: Collection[tuple[str, str, int]]
    ) -> None:
        self.left: dict[str, int] = {}
        for case_id in case_ids:
            for side in SIDES:
                for sample in range(samples):
                    if (case_id, side, sample) not in done:
                        self.left[case_id] = self.left.get(case_id, 0) + 1
        self.total = len(case_ids)
        self.done = self.total - len(self.left)
        self.transport_misses = 0

    def update(self, batch: Sequence[Exchange], transport_misses: int) -> None:
        for exchange in batch:
            left = self.left.get(exchange.case_id)
            if left is None:
                continue
            if left <= 1:
                del self.left[exchange.case_id]
                self.done += 1
            else:
                self.left[exchange.case_id] = left - 1
        self.transport_misses = transport_misses


class ProgressBar:
    """A rich bar on a terminal stream, moved by `update` and finished by `stop`."""

    def __init__(self, label: str, counter: CaseCounter, stream: IO[str]) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.counter = counter
        console = Console(file=stream, force_terminal=True)
        self._bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("cases ·"),
            TextColumn("{task.fields[misses]} transport miss(es) ·"),
            TextColumn("elapsed"),
            TimeElapsedColumn(),
            TextColumn("· eta"),
            TimeRemainingColumn(),
            console=console,
        )
        self._task: Any = self._bar.add_task(
            label, total=counter.total, completed=counter.done, misses=0
        )
        self._bar.start()

    def update(self, batch: Sequence[Exchange], transport_misses: int) -> None:
        self.counter.update(batch, transport_misses)
        self._bar.update(
            self._task, completed=self.counter.done, misses=self.counter.transport_misses
        )

    def stop(self) -> None:
        self._bar.stop()


def start_progress(
    label: str,
    case_ids: Sequence[str],
    samples: int,
    done: Collection[tuple[str, str, int]],
    *,
    stream: IO[str] | None = None,
    force: bool | None = None,
) -> ProgressBar | None:
    """A bar on `stream` (stderr) when it is a terminal; None otherwise, and nothing is drawn."""
    out = stream if stream is not None else sys.stderr
    show = force if force is not None else out.isatty()
    if not show:
        return None
    return ProgressBar(label, CaseCounter(case_ids, samples, done), out)
