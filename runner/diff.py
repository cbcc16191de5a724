"""`parallax diff BASE CAND`: seed 004's comparison of two outcome ledgers.

Only rows that share a key are compared, and each pair lands in exactly one pile, so a
timeout in the candidate ledger is counted as a transport miss and never as a regression.
Reads seed 004's spellings (`transport_ok`, `schema_ok`) as well as parallax's own rows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runner.errors import DataError, UsageError
from runner.ledger import read_jsonl

Key = tuple[str, str | None, int]


def _norm(value: Any, prefix: str) -> str:
    text = str(value) if value is not None else ""
    return text.removeprefix(prefix)


def _read(path: Path) -> dict[Key, dict[str, Any]]:
    rows: dict[Key, dict[str, Any]] = {}
    lines: dict[Key, int] = {}
    for line_no, row in read_jsonl(path, tolerate_torn_tail=False):
        if not isinstance(row, dict) or not isinstance(row.get("case_id"), str):
            raise DataError(path, "an outcome row needs a string case_id", line_no)
        score = row.get("task_score")
        numeric = isinstance(score, int | float) and not isinstance(score, bool)
        if score is not None and not (numeric and math.isfinite(score)):
            raise DataError(path, "task_score must be a number or null", line_no)
        side, sample = row.get("side"), row.get("sample", 0)
        if side is not None and not isinstance(side, str):
            raise DataError(path, "side must be a string", line_no)
        if isinstance(sample, bool) or not isinstance(sample, int):
            raise DataError(path, "sample must be an integer", line_no)
        key = (row["case_id"], side, sample)
        if key in rows:  # the later row would hide the earlier one, a regression with it
            where = f"case {key[0]!r}" + (f", {side}" if side else "") + f", sample {sample}"
            raise DataError(path, f"a second row for {where} (first on line {lines[key]})", line_no)
        rows[key], lines[key] = row, line_no
    return rows


def classify_pair(base: Mapping[str, Any], cand: Mapping[str, Any]) -> str:
    """Seed 004's order: fixture, alias, transport, schema, then the score itself."""
    if base.get("fixture_sha") != cand.get("fixture_sha"):
        return "fixture_move"
    if base.get("model_alias") != cand.get("model_alias"):
        return "alias_swap"
    served = (base.get("response_model"), cand.get("response_model"))
    if all(served) and served[0] != served[1]:
        return "alias_swap"
    if _norm(cand.get("transport"), "transport_") != "ok":
        return "transport_miss"
    if _norm(cand.get("schema"), "schema_") != "ok" or cand.get("task_score") is None:
        return "schema_miss"
    if base.get("task_score") is None:
        return "baseline_unscored"
    if cand["task_score"] < base["task_score"]:
        return "silent_regression"
    if cand["task_score"] > base["task_score"]:
        return "score_rise"
    return "unchanged"


def diff_ledgers(base_path: Path, cand_path: Path) -> dict[str, int]:
    base, cand = _read(base_path), _read(cand_path)
    shared = set(base) & set(cand)
    if not shared:  # two suites, or an empty ledger: all zeros would read as clean
        raise UsageError(f"{base_path} and {cand_path} share no (case, side, sample) row")
    counts = {"transport_miss": 0, "schema_miss": 0, "silent_regression": 0, "other": 0}
    for key in sorted(shared, key=lambda k: (k[0], k[1] or "", k[2])):
        kind = classify_pair(base[key], cand[key])
        counts[kind if kind in counts else "other"] += 1
    return counts


def exit_code(counts: Mapping[str, int]) -> int:
    review = 1 if counts.get("silent_regression") else 0
    incomplete = 2 if counts.get("transport_miss") or counts.get("schema_miss") else 0
    return review | incomplete
