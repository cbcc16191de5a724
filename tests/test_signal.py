"""Repeated samples, the reference's noise floor and the paired test, through real runs.

Every test drives the real pipeline offline: recorded endpoints replay a cassette whose rows
are narrowed by side and sample, so each sample is its own exchange and outcome row.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from runner.config import load_config
from runner.history import run_dirs
from runner.runs.run import run_suite
from runner.snapshot import promote


def setup(root: Path, n: int, *, suite_extra: str = "", stratified: bool = False) -> None:
    strata = ("easy", "medium", "stretch")
    rows = []
    for i in range(n):
        row: dict[str, Any] = {
            "id": f"c{i:02d}",
            "prompt": f"q{i}",
            "expect": {"must_include": ["yes"]},
        }
        if stratified:
            row["stratum"] = strata[i % 3]
        rows.append(row)
    (root / "cases.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "parallax.toml").write_text(
        f"""
runs_dir = "runs"
snapshots_dir = "snapshots"
[endpoints.ref]
kind = "recorded"
model = "ref"
cassette = "cassette.jsonl"
[endpoints.cand]
kind = "recorded"
model = "cand"
cassette = "cassette.jsonl"
[suites.s]
fixtures = "cases.jsonl"
reference = "ref"
candidate = "cand"
{suite_extra}
"""
    )


def cassette(root: Path, rows: list[dict[str, Any]]) -> None:
    (root / "cassette.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def replies(n: int, side: str, passing: set[int], samples: int = 1) -> list[dict[str, Any]]:
    return [
        {
            "case_id": f"c{i:02d}",
            "side": side,
            "sample": s,
            "completion": "yes" if i in passing else "no",
        }
        for i in range(n)
        for s in range(samples)
    ]


def read(run_dir: Path, name: str) -> Any:
    return json.loads((run_dir / name).read_text())


def test_a_reference_that_moves_pages_even_when_the_delta_does_not(tmp_path: Path) -> None:
    """Both sides start missing the same case: the delta is unchanged and so is the gate, but
    the frozen reference is not frozen, and alert.reference_moved says so."""
    setup(tmp_path, 3)
    config = tmp_path / "parallax.toml"
    cassette(tmp_path, replies(3, "reference", {0, 1, 2}) + replies(3, "candidate", {0, 1, 2}))
    first, _, _ = run_suite(load_config(config), "s")
    promote(first, tmp_path / "snapshots", suite="s")
    cassette(tmp_path, replies(3, "reference", {0, 2}) + replies(3, "candidate", {0, 2}))
    with capture_logs() as logs:
        _, code, summary = run_suite(load_config(config), "s")
    assert (code, summary["gate_counts"]["unchanged"]) == (0, 3)
    [moved] = [e for e in logs if e["event"] == "alert.reference_moved"]
    assert (moved["count"], moved["case_ids"]) == (1, ["c01"])
    # the candidate's call of that case fails too: the reference was still scored, and moved
    rows = replies(3, "reference", {0, 2}) + replies(3, "candidate", {0, 2})
    rows[-2] = {"case_id": "c01", "side": "candidate", "fault": "timeout"}
    cassette(tmp_path, rows)
    with capture_logs() as logs:
        _, code, summary = run_suite(load_config(config), "s")
    assert (code, summary["gate_counts"]["transport_miss"]) == (2, 1)
    assert [e["case_ids"] for e in logs if e["event"] == "alert.reference_moved"] == [["c01"]]


def test_samples_are_separate_rows_with_pass_fractions(tmp_path: Path) -> None:
    """samples = 3 gives three outcome rows per case and side, and a pass fraction per side."""
    setup(tmp_path, 2, suite_extra="samples = 3")
    rows = [
        *replies(2, "reference", {0, 1}, samples=3),
        {"case_id": "c00", "side": "candidate", "sample": 0, "completion": "yes"},
        {"case_id": "c00", "side": "candidate", "sample": 1, "completion": "no"},
        {"case_id": "c00", "side": "candidate", "sample": 2, "completion": "yes"},
        {"case_id": "c01", "side": "candidate", "completion": "yes"},
    ]
    cassette(tmp_path, rows)
    run_dir, _, _ = run_suite(load_config(tmp_path / "parallax.toml"), "s")
    keys = [
        (o["case_id"], o["side"], o["sample"])
        for o in map(json.loads, (run_dir / "outcomes.jsonl").read_text().splitlines())
    ]
    assert sorted(keys) == sorted(
        (f"c0{i}", side, s)
        for i in range(2)
        for side in ("reference", "candidate")
        for s in range(3)
    )
    case = read(run_dir, "disagreement.json")["cases"]["c00"]
    assert (case["candidate"]["pass_fraction"], case["candidate"]["passed"]) == (2 / 3, True)
    assert (case["candidate"]["misses"], case["candidate"]["noise"]) == ([], ["missing:yes"])
    assert case["disagreement"] == []


def test_new_noise_under_accepted_stable_misses_is_flaky_and_exits_clean(tmp_path: Path) -> None:
    """A candidate that starts flipping on one sample of three is flaky, not a changed delta."""
    setup(tmp_path, 2, suite_extra="samples = 3")
    config = tmp_path / "parallax.toml"
    cassette(tmp_path, replies(2, "reference", {0, 1}, 3) + replies(2, "candidate", {0, 1}, 3))
    first, code, _ = run_suite(load_config(config), "s")
    promote(first, tmp_path / "snapshots", suite="s")
    rows = replies(2, "reference", {0, 1}, 3) + replies(2, "candidate", {0, 1}, 3)
    rows[-1]["completion"] = "no"  # c01, candidate, sample 2
    cassette(tmp_path, rows)

    second, code, summary = run_suite(load_config(config), "s")

    cases = read(second, "disagreement.json")["cases"]
    assert (cases["c01"]["gate"], cases["c00"]["gate"]) == ("flaky", "unchanged")
    assert code == 0
    assert summary["gate_counts"]["flaky"] == 1
    assert summary["flaky"] == ["c01"]  # listed, not only counted
    assert summary["quiet_cases"] == ["c00"]  # a case that flips is no ceiling candidate


def test_noise_check_calls_the_reference_twice_and_reports_its_floor(tmp_path: Path) -> None:
    """noise_check adds a second reference call per case; the floor counts self-disagreements."""
    setup(tmp_path, 6, suite_extra="noise_check = true", stratified=True)
    rows = replies(6, "reference", set(range(6))) + replies(6, "candidate", set(range(6)))
    rows += replies(6, "noise", {0, 1, 2, 3, 5})  # c04 (medium) flips on the second call
    cassette(tmp_path, rows)

    run_dir, _, summary = run_suite(load_config(tmp_path / "parallax.toml"), "s")

    sides = [json.loads(line)["side"] for line in (run_dir / "raw.jsonl").read_text().splitlines()]
    assert sides.count("noise") == 6
    floor = summary["noise_floor"]
    assert (floor["overall"]["n"], floor["overall"]["disagreeing"]) == (6, 1)
    assert (floor["medium"]["disagreeing"], floor["medium"]["rate"]) == (1, 0.5)
    assert floor["easy"]["rate"] == 0.0


def test_significant_regression_gates_only_when_asked(tmp_path: Path) -> None:
    """A candidate that loses 12 of 40 cases is flagged; fail_on turns the flag into exit 1."""
    n = 40
    setup(tmp_path, n)
    cassette(
        tmp_path,
        replies(n, "reference", set(range(n))) + replies(n, "candidate", set(range(12, n))),
    )

    _, code, summary = run_suite(load_config(tmp_path / "parallax.toml"), "s")
    overall = summary["paired"]["overall"]
    assert (overall["ref_only"], overall["cand_only"], overall["n"]) == (12, 0, 40)
    assert overall["significant"] and summary["significant_regression"]
    assert overall["text"].startswith("candidate worse overall: -30 points")
    assert code == 0

    setup(tmp_path, n, suite_extra='fail_on = ["significant_regression"]')
    with capture_logs() as events:
        _, code, _ = run_suite(load_config(tmp_path / "parallax.toml"), "s")
    alert = [e for e in events if e["event"] == "alert.significant_regression"]
    assert code == 1
    assert len(alert) == 1 and alert[0]["count"] == 12 and len(alert[0]["case_ids"]) == 12


def test_no_difference_is_said_in_words(tmp_path: Path) -> None:
    """Balanced flips on both sides give no significant difference and no flag."""
    n = 30
    setup(tmp_path, n, suite_extra='fail_on = ["significant_regression"]')
    cassette(
        tmp_path,
        replies(n, "reference", set(range(n)) - {1, 2})
        + replies(n, "candidate", set(range(n)) - {3, 4}),
    )
    _, code, summary = run_suite(load_config(tmp_path / "parallax.toml"), "s")
    assert summary["paired"]["overall"]["text"].startswith("overall: no significant difference")
    assert not summary["significant_regression"]
    assert code == 0


def test_report_and_history_say_the_test_and_the_floor_in_words(tmp_path: Path) -> None:
    """report.md, report.html and `history --json` carry the paired test and the noise floor."""
    import subprocess
    import sys

    n = 30
    setup(tmp_path, n, suite_extra="noise_check = true")
    rows = replies(n, "reference", set(range(n))) + replies(n, "candidate", set(range(10, n)))
    rows += replies(n, "noise", set(range(1, n)))
    cassette(tmp_path, rows)
    run_dir, _, _ = run_suite(load_config(tmp_path / "parallax.toml"), "s")

    markdown = (run_dir / "report.md").read_text()
    html_text = (run_dir / "report.html").read_text()
    assert "candidate worse overall: -33 points" in markdown
    assert "noise floor (overall): the reference disagreed with itself on 1 of 30 cases" in markdown
    assert "candidate worse overall" in html_text
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "runner",
            "history",
            "--config",
            str(tmp_path / "parallax.toml"),
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    text = json.dumps(doc)
    assert "candidate worse overall" in text
    assert '"disagreeing": 1' in text


def test_power_simulation_runs_and_flags_a_large_drop() -> None:
    """sim/power.py drives real runs; a 30-point drop on 90 cases is flagged every night, and
    with a margin it reports how often non-inferiority was claimed, rightly and wrongly."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    result = subprocess.run(
        [
            sys.executable,
            str(root / "sim" / "power.py"),
            "--nights",
            "3",
            "--cases",
            "90",
            "--drop",
            "0.3",
            "--margin",
            "0.05",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert (figures["nights"], figures["power"]) == (3, 1.0)
    assert 0.0 <= figures["false_alarm_rate"] <= 1.0
    assert figures["margin"] == 0.05
    assert 0.0 <= figures["non_inferior_at_margin"] <= figures["non_inferior_at_no_difference"]


def margin_setup(root: Path, n: int, margin: float, samples: int = 1) -> None:
    setup(
        root,
        n,
        suite_extra=f'fail_on = ["not_non_inferior"]\nsamples = {samples}\n'
        f"[suites.s.thresholds]\nnon_inferiority_margin = {margin}",
    )


def test_a_candidate_3_points_worse_is_non_inferior_at_5_points_not_at_1(tmp_path: Path) -> None:
    """300 cases, 9 lost: the 95% one-sided bound is -4.7 points, inside a 5-point margin (exit
    0, no alert) and outside a 1-point one, which gates with exit 1, alert.not_non_inferior, and
    says so in summary.json, on stderr and in report.md."""
    import subprocess
    import sys

    n = 300
    cassette(
        tmp_path,
        replies(n, "reference", set(range(n))) + replies(n, "candidate", set(range(9, n))),
    )
    margin_setup(tmp_path, n, 0.05)
    with capture_logs() as events:
        first, code, summary = run_suite(load_config(tmp_path / "parallax.toml"), "s")
    shutil.rmtree(first)  # so the run below is the only one left
    claim = summary["paired"]["overall"]["non_inferiority"]
    assert (code, claim["claim"], summary["not_non_inferior"]) == (0, "non_inferior", False)
    assert claim["text"] == (
        "candidate is non-inferior: worse by at most 4.7 points (95% one-sided bound), "
        "margin 5 points, 300 paired cases"
    )
    assert not [e for e in events if e["event"] == "alert.not_non_inferior"]

    margin_setup(tmp_path, n, 0.01)
    proc = subprocess.run(
        [sys.executable, "-m", "runner", "run", "--config", "parallax.toml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    words = (
        "cannot claim non-inferiority: may be worse by up to 4.7 points (95% one-sided bound), "
        "margin 1 point, 300 paired cases"
    )
    assert f"  non-inferiority: {words} (gates: fail_on)" in proc.stderr.splitlines()
    [alert] = [
        json.loads(line) for line in proc.stdout.splitlines() if '"alert.not_non_inferior"' in line
    ]
    assert (alert["claim"], alert["margin"], alert["gating"]) == ("not_non_inferior", 0.01, True)
    assert (alert["level"], alert["interval_level"]) == ("warning", 0.95)
    assert alert["bound"] == pytest.approx(-0.046792, abs=1e-6)
    (run_dir,) = run_dirs(tmp_path / "runs" / "s")
    summary = read(run_dir, "summary.json")
    assert summary["not_non_inferior"] is True
    assert summary["paired"]["overall"]["non_inferiority"]["text"] == words
    assert f"non-inferiority: {words}" in (run_dir / "report.md").read_text()


def test_repeated_samples_leave_the_case_the_unit_of_non_inferiority(tmp_path: Path) -> None:
    """With samples = 3 a case counts once, on its majority: a candidate missing one sample of
    every case still passes every case, and the bound is that of 40 agreeing cases."""
    n = 40
    rows = replies(n, "reference", set(range(n)), samples=3)
    rows += replies(n, "candidate", set(range(n)), samples=3)
    for row in rows[-n * 3 :: 3]:  # the candidate's sample 0 of each case says no
        row["completion"] = "no"
    cassette(tmp_path, rows)
    margin_setup(tmp_path, n, 0.05, samples=3)
    _, code, summary = run_suite(load_config(tmp_path / "parallax.toml"), "s")
    claim = summary["paired"]["overall"]["non_inferiority"]
    assert (claim["n"], summary["paired"]["overall"]["ref_only"]) == (40, 0)
    assert claim["bound"] == pytest.approx(-1.6448536269514722 / 42)
    assert (code, claim["claim"]) == (0, "non_inferior")


def test_no_admitted_case_is_undecided_and_gates(tmp_path: Path) -> None:
    """Every candidate call times out: nothing is paired, so non-inferiority is undecided,
    never claimed, and fail_on gates it on top of the incomplete run (exit 3)."""
    n = 5
    rows = replies(n, "reference", set(range(n)))
    rows += [{"case_id": f"c{i:02d}", "side": "candidate", "fault": "timeout"} for i in range(n)]
    cassette(tmp_path, rows)
    margin_setup(tmp_path, n, 0.5)
    _, code, summary = run_suite(load_config(tmp_path / "parallax.toml"), "s")
    claim = summary["paired"]["overall"]["non_inferiority"]
    assert (claim["claim"], claim["bound"], code) == ("undecided", None, 3)
    assert claim["text"] == "cannot claim non-inferiority: no paired cases (margin 50 points)"
