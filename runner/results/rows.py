"""A finished run dir as the rows it adds to the results database, read from its files
(manifest.json, summary.json, disagreement.json): the database never knows more than they."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from runner.errors import DataError
from runner.gate import GATE_CLASSES
from runner.ledger import read_json_map, read_json_object
from runner.results.schema import CASES, MERGES, RUNS, SIDE_COLUMNS, Table

Row = tuple[Any, ...]


@dataclass(frozen=True)
class RunRows:
    """One run's rows, each in its table's column order. Its case rows are read from the
    disagreement map again as they are written (`cases`): a 20,000-case map held as rows was
    some 110 MB, most of a finished run's peak memory."""

    run: Row
    merges: list[Row]
    disagreement: Path

    @property
    def run_id(self) -> str:
        return str(self.run[0])

    def cases(self) -> Iterator[Row]:
        """A row per case of the disagreement map, one line of it at a time."""
        for case_id, verdict in read_json_map(self.disagreement, "cases"):
            yield _case(self.run_id, case_id, _map(verdict))


def finished(run_dir: Path) -> bool:
    """Whether the run dir holds a finished run: a summary, and a manifest that says so."""
    try:
        return read_json_object(run_dir / "manifest.json").get("finished_at") is not None
    except DataError:
        return False


def read_rows(run_dir: Path) -> RunRows | None:
    """The rows of a finished run dir, None when it is not one (unfinished, or broken)."""
    if not (run_dir / "summary.json").is_file() or not finished(run_dir):
        return None
    disagreement = run_dir / "disagreement.json"
    try:
        manifest = read_json_object(run_dir / "manifest.json")
        summary = read_json_object(run_dir / "summary.json")
        rates = _pass_rates(disagreement)
    except DataError:
        return None
    run_id = run_dir.name
    run = _run(run_id, run_dir, manifest, summary, rates)
    if run[RUNS.names.index("suite")] is None:
        return None  # no suite named: nothing a row could be filed under
    return RunRows(run, list(_merges(run_id, _map(manifest.get("merged")))), disagreement)


def _map(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _joined(value: Any) -> str | None:
    """A list of names as one comma-separated text (what is no name left out)."""
    return ",".join(v for v in value if isinstance(v, str)) if isinstance(value, list) else None


def _epoch(text: Any) -> int | None:
    try:
        return int(datetime.fromisoformat(text).timestamp()) if isinstance(text, str) else None
    except ValueError:
        return None


def _pass_rates(disagreement: Path) -> dict[str, float | None]:
    """Each side's share of passes among its scored cases, in one pass over the map."""
    passed = dict.fromkeys(SIDE_COLUMNS, 0)
    scored = dict.fromkeys(SIDE_COLUMNS, 0)
    for _, verdict in read_json_map(disagreement, "cases"):
        for side in SIDE_COLUMNS:
            value = _map(_map(verdict).get(side)).get("passed")
            if isinstance(value, bool):
                scored[side] += 1
                passed[side] += value
    return {side: passed[side] / scored[side] if scored[side] else None for side in SIDE_COLUMNS}


def _digest(manifest: Mapping[str, Any], key: str) -> Any:
    return _map(manifest.get(key)).get("digest")


def _run(
    run_id: str,
    run_dir: Path,
    manifest: Mapping[str, Any],
    summary: Mapping[str, Any],
    rates: Mapping[str, float | None],
) -> Row:
    shard = _map(summary.get("shard") or manifest.get("shard"))
    gates = _map(summary.get("gate_counts"))
    sides = _map(_map(summary.get("usage")).get("sides"))
    models = _map(summary.get("served_models"))
    noise = _map(_map(summary.get("noise_floor")).get("overall")).get("rate")
    values: dict[str, Any] = {
        "run_id": run_id,
        "suite": summary.get("suite") or manifest.get("suite"),
        "shard_index": shard.get("index"),
        "shard_count": shard.get("count"),
        "started_at": summary.get("started_at"),
        "finished_at": summary.get("finished_at"),
        "started_epoch": _epoch(summary.get("started_at")),
        "mode": summary.get("mode"),
        "partial": int(summary.get("partial") is not None),
        "merged": int("merged" in manifest),
        "verdict": summary.get("verdict"),
        "exit_code": summary.get("exit_code"),
        "cases": summary.get("cases"),
        "admitted": summary.get("admitted"),
        **{f"gate_{g}": gates.get(g, 0) for g in GATE_CLASSES},
        "noise_floor": noise,
        "run_dir": str(run_dir.absolute()),
        "config_digest": _digest(manifest, "config"),
        "fixtures_digest": _digest(manifest, "fixtures"),
        "snapshot_digest": _digest(manifest, "snapshot"),
    }
    for side, prefix in SIDE_COLUMNS.items():
        usage = _map(sides.get(side))
        served = models.get(side)
        values[f"{prefix}_pass_rate"] = rates[side]
        values[f"{prefix}_cost_usd"] = usage.get("cost_usd")
        values[f"{prefix}_tokens"] = usage.get("total_tokens")
        values[f"{prefix}_models"] = _joined(served)
    return _typed(RUNS, values)


def _case(run_id: str, case_id: str, verdict: Mapping[str, Any]) -> Row:
    values: dict[str, Any] = {
        "run_id": run_id,
        "case_id": case_id,
        "stratum": verdict.get("stratum"),
        "gate": verdict.get("gate"),
    }
    for side, prefix in SIDE_COLUMNS.items():
        view = _map(verdict.get(side))
        passed = view.get("passed")
        misses = view.get("misses")
        values[f"{prefix}_transport"] = view.get("transport")
        values[f"{prefix}_schema"] = view.get("schema")
        values[f"{prefix}_admitted"] = int(view.get("admitted") is True)
        values[f"{prefix}_passed"] = int(passed) if isinstance(passed, bool) else None
        values[f"{prefix}_task_score"] = view.get("task_score")
        values[f"{prefix}_misses"] = _joined(misses)
    return _typed(CASES, values)


_INT64 = 2**63


def _typed(table: Table, values: Mapping[str, Any]) -> Row:
    """The row in column order, each value of its column's type or null: a hand-edited
    summary (`"exit_code": "x"`, a 400-digit count, `1e400`) must not refuse a whole run on
    PostgreSQL, which checks types where SQLite does not. A NUL, which PostgreSQL's text
    refuses, is written as the escape `\\x00` the reports show it as: a case id may hold
    one, and a case row without its id would refuse the whole run."""
    row = []
    for column in table.columns:
        value = values[column.name]
        if column.type.startswith(("INTEGER", "BIGINT")):
            ok = type(value) is int and -_INT64 <= value < _INT64
        elif column.type.startswith("DOUBLE"):
            ok = type(value) in (int, float) and math.isfinite(value)
            value = float(value) if ok else None
        else:
            ok = isinstance(value, str)
            value = value.replace("\x00", "\\x00") if ok else None
        row.append(value if ok else None)
    return tuple(row)


def _merges(run_id: str, merged: Mapping[str, Any]) -> Iterator[Row]:
    listed = merged.get("shards")
    for shard in map(_map, listed if isinstance(listed, list) else []):
        row = _typed(
            MERGES,
            {
                "run_id": run_id,
                "shard_index": shard.get("index"),
                "shard_count": merged.get("count"),
                "shard_run_id": shard.get("run_id"),
                "finished": int(shard.get("finished") is True),
            },
        )
        if row[1] is not None:  # the key: a shard with no index is no row
            yield row
