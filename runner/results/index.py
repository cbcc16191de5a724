"""`parallax index RUNS_DIR`: the results database rebuilt from the run dirs, the record.

Every finished run dir the database does not hold is recorded (one it holds is left as it
is), so a deleted database, an outage's gap or a runs dir restored from a backup comes back
whole. A database that cannot be written is one line and exit 74: here the database is the
point of the command.
"""

from __future__ import annotations

from pathlib import Path

from runner.errors import StorageError
from runner.results.record import catch_up, open_store, outage_errors, where


def index(runs_dir: Path, results_url: str | None) -> int:
    """Record every finished run dir under `runs_dir` not recorded yet; the count written."""
    try:
        with open_store(runs_dir, results_url) as store:
            return catch_up(store, runs_dir)
    except outage_errors() as exc:
        raise StorageError(
            where(runs_dir, results_url),
            f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}",
            "the run dirs are untouched: index again once the database is reachable",
        ) from None
