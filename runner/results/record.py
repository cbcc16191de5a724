"""A finished run recorded in the results database, never at the run's expense.

Called once the run dir is complete (its summary, manifest and reports written). It records
the run, then every other finished run dir of the runs dir the database does not hold yet:
what an outage left unwritten is caught up by the next run. A database that cannot be opened
or written is one `alert.results_db` line; the run's exit code and files are untouched.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner import logs
from runner.results.rows import read_rows
from runner.results.store import Store

if TYPE_CHECKING:
    from runner.config import LoadedConfig

DB_NAME = "parallax.db"


def where(runs_dir: Path, results_url: str | None) -> str:
    """The database a runs dir records into, as a message may name it."""
    from runner.results.postgres import shown

    return shown(results_url) if results_url else str(runs_dir / DB_NAME)


def open_store(runs_dir: Path, results_url: str | None) -> Store:
    """The runs dir's database: PostgreSQL at `results_url`, else SQLite beside the runs."""
    if results_url:
        from runner.results.postgres import PostgresStore

        return PostgresStore.open(results_url)
    from runner.results.sqlite import SQLiteStore

    return SQLiteStore.open(runs_dir / DB_NAME)


def outage_errors() -> tuple[type[Exception], ...]:
    """What an unreachable, full or broken database raises: an outage, never a crash."""
    import psycopg

    return (sqlite3.Error, psycopg.Error, OSError)


def run_dirs(runs_dir: Path) -> Iterator[Path]:
    """Every run dir under the runs dir, by name: `<suite>/<run>`, and deeper ones too (a
    night's shard dirs, `shards/<night>/<suite>/<run>`); a run dir holds a manifest."""
    if not runs_dir.is_dir():
        return
    for path in sorted(runs_dir.iterdir()):
        if not path.is_dir() or path.name.startswith("."):  # .pruning: on its way out
            continue
        if (path / "manifest.json").is_file():
            yield path
        else:
            yield from run_dirs(path)


def catch_up(store: Store, runs_dir: Path, first: Sequence[Path] = ()) -> int:
    """Record `first`, then every finished run dir not recorded yet; the count written."""
    done = store.recorded()
    written = 0
    for run_dir in (*first, *run_dirs(runs_dir)):
        if run_dir.name in done:
            continue
        rows = read_rows(run_dir)
        if rows is not None and store.write(rows):
            written += 1
        done.add(run_dir.name)
    return written


def record_run(loaded: LoadedConfig, run_dir: Path, log: Any) -> None:
    """Record a finished run (and what is missing); a failure is logged, never raised."""
    url = loaded.config.results_url
    try:
        with open_store(loaded.runs_dir, url) as store:
            catch_up(store, loaded.runs_dir, [run_dir])
    except Exception as exc:  # whatever stops the index (a bug too), the run's verdict stands
        log.warning(
            logs.ALERT_RESULTS_DB,
            error=_error(exc),
            results=where(loaded.runs_dir, url),
            run_dir=str(run_dir.absolute()),
        )


def forget(loaded: LoadedConfig, run_ids: Sequence[str], log: Any) -> None:
    """Delete the rows of runs retention deleted; an outage is logged (`index` never adds
    them back: their dirs are gone)."""
    if not run_ids:
        return
    url = loaded.config.results_url
    if url is None and not (loaded.runs_dir / DB_NAME).exists():
        return
    try:
        with open_store(loaded.runs_dir, url) as store:
            store.delete(run_ids)
    except outage_errors() as exc:
        log.warning(
            logs.ALERT_RESULTS_DB,
            error=_error(exc),
            results=where(loaded.runs_dir, url),
            run_dir=None,
        )


def _error(exc: Exception) -> str:
    """The error's class and first line: a driver's message names the host, not the password."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__
