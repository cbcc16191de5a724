"""`parallax diff BASE CAND`: seed 004's comparison of two outcome ledgers.

Only rows that share a key are compared, and each pair lands in exactly one pile, so a
timeout in the candidate ledger is counted as a transport miss and never as a regression.
Reads seed 004's spellings (`transport_ok`, `schema_ok`) as well as parallax's own rows.
Counts alone send the reader back into two ledgers to find which rows they are: each pair that
is not `other` is also a `Finding` naming its case, side, sample and what went wrong there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.errors import DataError, UsageError
from runner.ledger import read_jsonl

Key = tuple[str, str | None, int]
NAMED = ("silent_regression", "transport_miss", "schema_miss")  # the piles a Finding names
SHOWN = 20  # findings printed before the rest are counted


@dataclass(frozen=True)
class Finding:
    """One pair that needs a look: its pile, its key and what CAND's row says went wrong."""

    kind: str
    case_id: str
    side: str | None
    sample: int
    what: str

    @property
    def line(self) -> str:
        """`silent_regression: med-a (candidate, sample 0): task_score 1.0 -> 0.5, ...`."""
        key = ", ".join([*([self.side] if self.side else []), f"sample {self.sample}"])
        return f"{self.kind}: {self.case_id} ({key}): {self.what}"


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


def _what(kind: str, base: Mapping[str, Any], cand: Mapping[str, Any]) -> str:
    """What CAND's row says went wrong: its stamp and detail, or its score and new misses."""
    detail = f" ({cand['detail']})" if cand.get("detail") else ""
    if kind == "transport_miss":
        return _norm(cand.get("transport"), "transport_") + detail
    if kind == "schema_miss":
        return f"schema {_norm(cand.get('schema'), 'schema_')}{detail}"
    before, now = (row.get("misses") for row in (base, cand))
    known = {str(m) for m in before} if isinstance(before, list) else set()
    new = [str(m) for m in now if str(m) not in known] if isinstance(now, list) else []
    said = f", new misses: {', '.join(new)}" if new else detail
    return f"task_score {base['task_score']} -> {cand['task_score']}{said}"


def compare(base_path: Path, cand_path: Path) -> tuple[dict[str, int], list[Finding]]:
    """The counts per pile, and a Finding per pair in a pile that needs a look, by key."""
    base, cand = _read(base_path), _read(cand_path)
    shared = set(base) & set(cand)
    if not shared:  # two suites, or an empty ledger: all zeros would read as clean
        raise UsageError(f"{base_path} and {cand_path} share no (case, side, sample) row")
    counts = {"transport_miss": 0, "schema_miss": 0, "silent_regression": 0, "other": 0}
    findings = []
    for key in sorted(shared, key=lambda k: (k[0], k[1] or "", k[2])):
        kind = classify_pair(base[key], cand[key])
        counts[kind if kind in counts else "other"] += 1
        if kind in NAMED:
            findings.append(Finding(kind, *key, _what(kind, base[key], cand[key])))
    return counts, findings


def finding_lines(findings: Sequence[Finding]) -> list[str]:
    """The findings, regressions first, at most SHOWN; the rest counted."""
    ordered = sorted(findings, key=lambda f: NAMED.index(f.kind))
    lines = [f.line for f in ordered[:SHOWN]]
    if len(ordered) > SHOWN:
        lines.append(f"... and {len(ordered) - SHOWN} more")
    return lines


def exit_code(counts: Mapping[str, int]) -> int:
    review = 1 if counts.get("silent_regression") else 0
    incomplete = 2 if counts.get("transport_miss") or counts.get("schema_miss") else 0
    return review | incomplete
