"""What a run directory's name says: the UTC time it started, so names sort by start."""

from __future__ import annotations

from datetime import UTC, datetime

RUN_STAMP = "%Y%m%dT%H%M%SZ"  # a run dir's name starts with its start, so names sort by it


def started_of(name: str) -> datetime | None:
    """The start a run directory's name begins with, or None for any other name."""
    try:
        return datetime.strptime(name.partition("-")[0], RUN_STAMP).replace(tzinfo=UTC)
    except ValueError:
        return None


def run_order(name: str, finished_at: str | None) -> tuple[str, str, str]:
    """Where a run sorts among its suite's, the same from its dir or its results-database row:
    its start's second (its name's), then its end (to the millisecond, so two runs of one
    second keep the order they finished in; an unfinished one first), then its name."""
    return (name.partition("-")[0], finished_at or "", name)
