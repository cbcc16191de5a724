"""`parallax history`'s runs from the results database when there is one, so a fleet's runs,
recorded from many machines, show in one place. `--all`: one row per run of every suite, else
from the run dirs under the runs dir, the same rows either way. One suite's text history:
the runs the database holds whose run dirs are not in the suite's folder here (another
machine's, a night's shards elsewhere), each where its start puts it among those read from
the run dirs (the record, and the only place of what the database does not hold)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from runner.gate import GATE_CLASSES
from runner.model import STRATA
from runner.results.record import DB_NAME, open_store, outage_errors, run_dirs, where
from runner.results.rows import read_rows
from runner.results.schema import RUNS, SIDE_COLUMNS
from runner.results.store import Store, in_run_order

T = TypeVar("T")


def every_run(runs_dir: Path, results_url: str | None) -> tuple[list[dict[str, Any]], list[str]]:
    """Every recorded run, oldest first, and notes (where they were read from)."""
    runs, notes = _read(runs_dir, results_url, lambda store: list(store.runs()))
    return (_from_files(runs_dir) if runs is None else runs), notes


def suite_runs(
    runs_dir: Path, results_url: str | None, suites: Sequence[str]
) -> tuple[dict[str, list[dict[str, Any]]], list[str]]:
    """Per suite, the runs the database holds whose dirs are not in the suite's folder here,
    oldest first, as history's text lists a run (start, mode, exit code, gate classes, each
    side's strata, served models); none without a database or in an outage (a note says so):
    the run dirs are the listing then."""

    def elsewhere(store: Store) -> dict[str, list[dict[str, Any]]]:
        return {s: store.suite_runs(s, runs_dir / s) for s in suites}

    found, notes = _read(runs_dir, results_url, elsewhere)
    return {s: [_as_history(r) for r in runs] for s, runs in (found or {}).items()}, notes


def _read(
    runs_dir: Path, results_url: str | None, read: Callable[[Store], T]
) -> tuple[T | None, list[str]]:
    """What `read` finds in the database; None (with a note in an outage) when there is
    none to read: the caller reads the run dirs instead."""
    if not (results_url or (runs_dir / DB_NAME).exists()):
        return None, []
    try:
        with open_store(runs_dir, results_url) as store:
            return read(store), []
    except outage_errors() as exc:
        return None, [f"{where(runs_dir, results_url)}: {type(exc).__name__}; read the run dirs"]


def _as_history(row: Mapping[str, Any]) -> dict[str, Any]:
    """A runs row (with `strata` counted from its cases) as `history` lists a run read from
    its summary; what only the run dir holds (the paired test, usage, the noise floor's
    counts, a partial run's selection, a retry's parent) it cannot say."""
    return {
        "run_id": row["run_id"],
        "started_at": row["started_at"],
        "mode": row["mode"],
        "exit_code": row["exit_code"],
        "verdict": row["verdict"],
        "gate_counts": {g: row[f"gate_{g}"] or 0 for g in GATE_CLASSES},
        "strata": {side: _strata(row["strata"][p]) for side, p in SIDE_COLUMNS.items()},
        "served_models": {
            side: (row[f"{p}_models"] or "").split(",") if row[f"{p}_models"] else []
            for side, p in SIDE_COLUMNS.items()
        },
        "partial": {} if row["partial"] else None,  # how many of which cases: not recorded
        "shard": None
        if row["shard_count"] is None
        else f"{row['shard_index']}/{row['shard_count']}",
        "recorded": row["run_dir"] or "",
    }


def _strata(counts: Mapping[str | None, tuple[int, int]]) -> dict[str, dict[str, Any]]:
    """Per stratum, its pass rate and the scored cases under it, counted as the summary's
    `strata` are (`ceiling.strata_rates`: a case of no stratum is a medium one)."""
    buckets = {name: [0, 0] for name in STRATA}
    for stratum, (passed, scored) in counts.items():
        slot = buckets.get(stratum or "medium")
        if slot is not None:  # another name: no fixture gives one, a hand-edited run dir may
            slot[0] += passed
            slot[1] += scored
    return {name: {"pass_rate": p / n if n else None, "n": n} for name, (p, n) in buckets.items()}


def _from_files(runs_dir: Path) -> list[dict[str, Any]]:
    found = [rows.run for d in run_dirs(runs_dir) if (rows := read_rows(d)) is not None]
    runs = [dict(zip(RUNS.names, row, strict=True)) for row in found]
    return in_run_order(runs)


def _rate(value: Any) -> str:
    return f"{value:.0%}" if isinstance(value, int | float) else "—"


def _cost(value: Any) -> str:
    return f"${value:.4f}" if isinstance(value, int | float) else "—"


def format_runs(runs: Sequence[Mapping[str, Any]]) -> str:
    """A table: a line per run, its suite, verdict, each side's pass rate and cost."""
    header = ("started", "suite", "run", "mode", "verdict", "exit", "ref", "cand", "cost")
    lines = [
        (
            str(r["started_at"] or "—"),
            str(r["suite"]),
            str(r["run_id"]),
            str(r["mode"] or "—") + (" (shard)" if r["shard_count"] is not None else ""),
            str(r["verdict"] or "—"),
            str(r["exit_code"]),
            _rate(r["ref_pass_rate"]),
            _rate(r["cand_pass_rate"]),
            _cost(
                None
                if r["ref_cost_usd"] is None and r["cand_cost_usd"] is None
                else (r["ref_cost_usd"] or 0) + (r["cand_cost_usd"] or 0)
            ),
        )
        for r in runs
    ]
    widths = [max(len(row[i]) for row in (header, *lines)) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in (header, *lines)
    )
