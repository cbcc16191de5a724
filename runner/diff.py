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

from runner.errors import DataError
from runner.ledger import read_jsonl

Key = tuple[str, str | None, int]


def _norm(value: Any, prefix: str) -> str:
    text = str(value) if value is not None else ""
    return text.removeprefix(prefix)


def _read(path: Path) -> dict[Key, dict[str, Any]]:
    rows: dict[Key, dict[str, Any]] = {}
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
        rows[(row["case_id"], side, sample)] = row
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
    counts = {"transport_miss": 0, "schema_miss": 0, "silent_regression": 0, "other": 0}
    for key in sorted(set(base) & set(cand), key=lambda k: (k[0], k[1] or "", k[2])):
        kind = classify_pair(base[key], cand[key])
        counts[kind if kind in counts else "other"] += 1
    return counts


def exit_code(counts: Mapping[str, int]) -> int:
    review = 1 if counts.get("silent_regression") else 0
    incomplete = 2 if counts.get("transport_miss") or counts.get("schema_miss") else 0
    return review | incomplete
