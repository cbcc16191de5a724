"""Specification of `parallax diff`: seed 004's outcome-ledger comparison and its counts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runner.diff import classify_pair, compare, exit_code
from runner.errors import DataError

# Seed 004's worked example, verbatim (runs/accepted.jsonl and runs/shadow.jsonl).
SEED_ACCEPTED = """\
{"case_id":"city-07","fixture_sha":"placeholder-hash","model_alias":"primary","response_id":"resp-base-07","transport":"transport_ok","schema":"schema_ok","task_score":1.0,"detail":"ok","elapsed_ms":500}
{"case_id":"city-09","fixture_sha":"placeholder-hash","model_alias":"primary","response_id":"resp-base-09","transport":"transport_ok","schema":"schema_ok","task_score":1.0,"detail":"ok","elapsed_ms":480}
{"case_id":"city-11","fixture_sha":"old-hash","model_alias":"primary","response_id":"resp-base-11","transport":"transport_ok","schema":"schema_ok","task_score":1.0,"detail":"ok","elapsed_ms":510}
"""
SEED_SHADOW = """\
{"case_id":"city-07","fixture_sha":"placeholder-hash","model_alias":"primary","response_id":null,"transport":"transport_timeout","schema":"schema_fail","task_score":null,"detail":"timeout","elapsed_ms":8001}
{"case_id":"city-09","fixture_sha":"placeholder-hash","model_alias":"primary","response_id":"resp-shadow-09","transport":"transport_ok","schema":"schema_ok","task_score":0.0,"detail":"missing=city","elapsed_ms":640}
{"case_id":"city-11","fixture_sha":"new-hash","model_alias":"primary","response_id":"resp-shadow-11","transport":"transport_ok","schema":"schema_ok","task_score":0.5,"detail":"missing=country","elapsed_ms":700}
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def ledger(tmp_path: Path, name: str, rows: list[dict[str, Any]]) -> Path:
    return write(tmp_path, name, "".join(json.dumps(r) + "\n" for r in rows))


def row(**fields: Any) -> dict[str, Any]:
    """A parallax outcomes.jsonl row with sensible defaults."""
    base: dict[str, Any] = {
        "case_id": "c1",
        "side": "candidate",
        "sample": 0,
        "fixture_sha": "sha",
        "model_alias": "alias",
        "response_model": "served",
        "transport": "ok",
        "schema": "ok",
        "task_score": 1.0,
    }
    return {**base, **fields}


def test_seed_004_example_counts_and_exit_code(tmp_path: Path) -> None:
    """The seed's two ledgers give one transport miss, one regression and one fixture move."""
    base = write(tmp_path, "accepted.jsonl", SEED_ACCEPTED)
    cand = write(tmp_path, "shadow.jsonl", SEED_SHADOW)
    counts = compare(base, cand)[0]
    expected = {"other": 1, "schema_miss": 0, "silent_regression": 1, "transport_miss": 1}
    assert expected == counts
    expected = 3
    assert expected == exit_code(counts)


def test_seed_004_rows_classify_one_pile_each() -> None:
    """city-07 is a transport miss, city-09 a silent regression, city-11 a fixture move."""
    base = [json.loads(line) for line in SEED_ACCEPTED.splitlines()]
    cand = [json.loads(line) for line in SEED_SHADOW.splitlines()]
    expected = ["transport_miss", "silent_regression", "fixture_move"]
    assert expected == [classify_pair(b, c) for b, c in zip(base, cand, strict=True)]


@pytest.mark.parametrize(
    ("base", "cand", "expected"),
    [
        (row(), row(fixture_sha="new", transport="timeout"), "fixture_move"),
        (row(), row(model_alias="other", transport="timeout"), "alias_swap"),
        (row(), row(response_model="served-v2", task_score=0.0), "alias_swap"),
        (row(response_model=None), row(response_model="x", task_score=0.5), "silent_regression"),
        (row(), row(transport="timeout", schema="skipped", task_score=None), "transport_miss"),
        (row(), row(transport="connection_lost", task_score=None), "transport_miss"),
        (row(), row(schema="fail", task_score=None), "schema_miss"),
        (row(), row(schema="schema_ok", task_score=None), "schema_miss"),
        (row(task_score=None), row(), "baseline_unscored"),
        (row(task_score=1.0), row(task_score=0.5), "silent_regression"),
        (row(task_score=0.5), row(task_score=1.0), "score_rise"),
        (row(task_score=0.5), row(task_score=0.5), "unchanged"),
        (row(transport="timeout", task_score=None), row(task_score=0.5), "baseline_unscored"),
    ],
)
def test_classify_pair_follows_seed_004_order(
    base: dict[str, Any], cand: dict[str, Any], expected: str
) -> None:
    """fixture, alias, transport, schema, then the score: first match wins."""
    assert expected == classify_pair(base, cand)


def test_parallax_rows_are_paired_by_case_side_and_sample(tmp_path: Path) -> None:
    """Rows pair only with the same (case_id, side, sample); unpaired rows are not counted."""
    base = ledger(
        tmp_path,
        "base.jsonl",
        [
            row(side="reference"),
            row(side="candidate"),
            row(side="candidate", sample=1),
            row(case_id="only-in-base"),
        ],
    )
    cand = ledger(
        tmp_path,
        "cand.jsonl",
        [
            row(side="reference"),
            row(side="candidate", task_score=0.5),
            row(side="candidate", sample=1, transport="timeout", task_score=None),
            row(case_id="only-in-cand", task_score=0.0),
        ],
    )
    counts = compare(base, cand)[0]
    expected = {"other": 1, "schema_miss": 0, "silent_regression": 1, "transport_miss": 1}
    assert expected == counts
    expected = 3
    assert expected == exit_code(counts)


def test_a_schema_miss_alone_is_incomplete(tmp_path: Path) -> None:
    """Only schema misses: exit 2, never counted as a regression."""
    base = ledger(tmp_path, "b.jsonl", [row()])
    cand = ledger(tmp_path, "c.jsonl", [row(schema="fail", task_score=None)])
    counts = compare(base, cand)[0]
    expected = {"other": 0, "schema_miss": 1, "silent_regression": 0, "transport_miss": 0}
    assert expected == counts
    expected = 2
    assert expected == exit_code(counts)


@pytest.mark.parametrize(
    ("counts", "expected"),
    [
        ({}, 0),
        ({"other": 4}, 0),
        ({"silent_regression": 1}, 1),
        ({"transport_miss": 2}, 2),
        ({"schema_miss": 1}, 2),
        ({"silent_regression": 1, "schema_miss": 1}, 3),
    ],
)
def test_exit_code_table(counts: dict[str, int], expected: int) -> None:
    """Regressions are review (1), transport/schema misses incomplete (2), both 3."""
    assert expected == exit_code(counts)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"case_id": "c1"}\n[1]\n', "an outcome row needs a string case_id"),
        ('{"case_id": "c1"}\n{"case_id": 5}\n', "an outcome row needs a string case_id"),
        (
            '{"case_id": "c1"}\n{"case_id": "c2", "task_score": "1"}\n',
            "task_score must be a number or null",
        ),
        (
            '{"case_id": "c1"}\n{"case_id": "c2", "task_score": true}\n',
            "task_score must be a number or null",
        ),
        (
            '{"case_id": "c1"}\n{"case_id": "c2", "task_score": NaN}\n',
            "task_score must be a number or null",
        ),
        ('{"case_id": "c1"}\n{"case_id": "c2", "side": ["x"]}\n', "side must be a string"),
        ('{"case_id": "c1"}\n{"case_id": "c2", "side": 5}\n', "side must be a string"),
        ('{"case_id": "c1"}\n{"case_id": "c2", "sample": "1"}\n', "sample must be an integer"),
        ('{"case_id": "c1"}\n{"case_id": "c2"', "truncated last line"),
    ],
)
def test_a_malformed_ledger_names_file_and_line(tmp_path: Path, text: str, reason: str) -> None:
    """A bad row (or a torn last line) is a DataError at `path:line`."""
    bad = write(tmp_path, "bad.jsonl", text)
    good = ledger(tmp_path, "good.jsonl", [row()])
    with pytest.raises(DataError) as info:
        compare(good, bad)[0]
    assert f"{bad}:2: {reason}" == str(info.value)


def _diff(*args: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runner", "diff", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_diff_names_the_case_side_sample_and_miss_of_each_pair_that_needs_a_look(
    tmp_path: Path,
) -> None:
    """The counts said "1 silent regression" and nothing of which: stderr now names each
    regression, transport miss and schema miss by case, side and sample with what CAND's row
    says (its new misses, its stamp and detail), regressions first; stdout keeps the counts."""
    base = ledger(
        tmp_path,
        "b.jsonl",
        [
            row(case_id="fjord", misses=[]),
            row(case_id="late", side="reference"),
            row(case_id="garbled", sample=1),
            row(case_id="same"),
        ],
    )
    cand = ledger(
        tmp_path,
        "c.jsonl",
        [
            row(case_id="fjord", task_score=0.5, misses=["missing:Fjord Express"]),
            row(case_id="late", side="reference", transport="timeout", task_score=None,
                detail="timeout: ReadTimeout"),
            row(case_id="garbled", sample=1, schema="fail", task_score=None, detail="not_json"),
            row(case_id="same"),
        ],
    )  # fmt: skip
    proc = _diff(base, cand, cwd=tmp_path)
    assert (proc.returncode, json.loads(proc.stdout)) == (
        3,
        {"other": 1, "schema_miss": 1, "silent_regression": 1, "transport_miss": 1},
    )
    assert proc.stderr.splitlines() == [
        "silent_regression: fjord (candidate, sample 0): task_score 1.0 -> 0.5, "
        "new misses: missing:Fjord Express",
        "transport_miss: late (reference, sample 0): timeout (timeout: ReadTimeout)",
        "schema_miss: garbled (candidate, sample 1): schema fail (not_json)",
    ]


def test_diff_names_at_most_twenty_pairs_and_counts_the_rest(tmp_path: Path) -> None:
    """A ledger of regressions does not flood the terminal: twenty lines, then the rest."""
    base = ledger(tmp_path, "b.jsonl", [row(case_id=f"c{n:02d}") for n in range(25)])
    cand = ledger(tmp_path, "c.jsonl", [row(case_id=f"c{n:02d}", task_score=0) for n in range(25)])
    lines = _diff(base, cand, cwd=tmp_path).stderr.splitlines()
    assert (len(lines), lines[-1]) == (21, "... and 5 more")
