"""`parallax history --all`: one row per run of every suite, read from the results database
when there is one (so a fleet's runs, recorded from many machines, show in one place), else
from the run dirs under the runs dir, the same rows either way."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from runner.results.record import DB_NAME, open_store, outage_errors, run_dirs, where
from runner.results.rows import read_rows
from runner.results.schema import RUNS


def every_run(runs_dir: Path, results_url: str | None) -> tuple[list[dict[str, Any]], list[str]]:
    """Every recorded run, oldest first, and notes (where they were read from)."""
    if results_url or (runs_dir / DB_NAME).exists():
        try:
            with open_store(runs_dir, results_url) as store:
                return list(store.runs()), []
        except outage_errors() as exc:
            note = f"{where(runs_dir, results_url)}: {type(exc).__name__}; read the run dirs"
            return _from_files(runs_dir), [note]
    return _from_files(runs_dir), []


def _from_files(runs_dir: Path) -> list[dict[str, Any]]:
    found = [rows.run for d in run_dirs(runs_dir) if (rows := read_rows(d)) is not None]
    runs = [dict(zip(RUNS.names, row, strict=True)) for row in found]
    return sorted(runs, key=lambda r: (r["started_at"] or "", r["run_id"]))


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
