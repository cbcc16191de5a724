"""What both engines do alike: create the tables, write a run's rows once, read and delete
them. A run is written in one transaction whose first statement claims its `runs` row: a run
recorded already (by this process, another daemon or a shard on another machine) changes
nothing, and a writer that dies half-way leaves nothing half-written."""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from runner.results.rows import RunRows
from runner.results.schema import CASES, MERGES, RUNS, SIDE_COLUMNS, TABLES, Dialect
from runner.runs.names import run_order


class Store(abc.ABC):
    """A connection to one results database (DB-API), closed when the `with` ends."""

    dialect: Dialect

    def __init__(self, connection: Any, where: str) -> None:
        self.connection = connection
        self.where = where  # for messages: never a password

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.connection.close()

    @abc.abstractmethod
    def transaction(self) -> contextlib.AbstractContextManager[Any]:
        """One transaction, yielding a cursor; committed when the block ends, else rolled back."""

    def create(self) -> None:
        with self.transaction() as cursor:
            for table in TABLES:
                cursor.execute(table.create())

    def recorded(self) -> set[str]:
        with self.transaction() as cursor:
            cursor.execute("SELECT run_id FROM runs")
            return {row[0] for row in cursor.fetchall()}

    def write(self, rows: RunRows) -> bool:
        """Record one run; False when it was recorded already (nothing changes then)."""
        with self.transaction() as cursor:
            cursor.execute(RUNS.insert(self.dialect), rows.run)
            if cursor.rowcount != 1:
                return False
            cursor.executemany(CASES.insert(self.dialect), rows.cases())
            if rows.merges:
                cursor.executemany(MERGES.insert(self.dialect), rows.merges)
            return True

    def delete(self, run_ids: Sequence[str]) -> None:
        """Forget runs (retention deleted their dirs), in every table."""
        mark = self.dialect.value
        with self.transaction() as cursor:
            for table in (CASES, MERGES, RUNS):
                cursor.executemany(
                    f"DELETE FROM {table.name} WHERE run_id = {mark}", [(r,) for r in run_ids]
                )

    def runs(self) -> Iterator[dict[str, Any]]:
        """Every recorded run, oldest first."""
        with self.transaction() as cursor:
            cursor.execute(f"SELECT {', '.join(RUNS.names)} FROM runs")
            rows = cursor.fetchall()
        return iter(in_run_order(dict(zip(RUNS.names, row, strict=True)) for row in rows))

    def suite_runs(self, suite: str, suite_dir: Path) -> list[dict[str, Any]]:
        """A suite's recorded runs but those with a dir in `suite_dir` (read from there),
        oldest first, each with `strata`: per side prefix and stratum, (passed, scored) of
        its cases."""
        mark = self.dialect.value
        sides = ", ".join(f"SUM({p}_passed), COUNT({p}_passed)" for p in SIDE_COLUMNS.values())
        with self.transaction() as cursor:
            cursor.execute(
                f"SELECT {', '.join(RUNS.names)} FROM runs WHERE suite = {mark}", (suite,)
            )
            found = cursor.fetchall()
            rows = in_run_order(dict(zip(RUNS.names, row, strict=True)) for row in found)
            runs = {r["run_id"]: r for r in rows if not (suite_dir / r["run_id"]).is_dir()}
            counts = []
            ids = list(runs)
            for start in range(0, len(ids), _CHUNK):  # within any engine's parameter limit
                chunk = ids[start : start + _CHUNK]
                cursor.execute(
                    f"SELECT run_id, stratum, {sides} FROM cases WHERE run_id IN "
                    f"({', '.join(mark for _ in chunk)}) GROUP BY run_id, stratum",
                    chunk,
                )
                counts.extend(cursor.fetchall())
        for run in runs.values():
            run["strata"] = {p: {} for p in SIDE_COLUMNS.values()}
        for run_id, stratum, *figures in counts:
            for i, prefix in enumerate(SIDE_COLUMNS.values()):
                passed, scored = figures[2 * i], figures[2 * i + 1]
                runs[run_id]["strata"][prefix][stratum] = (int(passed or 0), int(scored))
        return list(runs.values())


_CHUNK = 500


def in_run_order(runs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Runs table rows oldest first, as their run dirs sort (`runner.runs.names.run_order`)."""
    return sorted(runs, key=lambda r: run_order(r["run_id"], r["finished_at"]))
