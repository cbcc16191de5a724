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
