"""Latency and cost regressions as gates: per-case ratios, their bootstrap interval, the rule,
the fold that keeps them, the config, and real runs that gate on them."""

from __future__ import annotations

import json
import math
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from llmockkit import LlmockServer, Protocol
from relkit import RUN_TIMEOUT, run_parallax
from structlog.testing import capture_logs

from runner.config import Price, Thresholds, load_config
from runner.cost.regressions import (
    MAX_DRAWS,
    MIN_PAIRS,
    Finding,
    Metric,
    PairFold,
    ratio_test,
    regressions,
)
from runner.cost.usage import call_of
from runner.errors import ConfigError
from runner.gate import Folds
from runner.model import Outcome
from runner.protocols import Kind
from runner.runs.mode import RunMode
from runner.runs.run import run_suite

ROOT = Path(__file__).resolve().parent.parent


def _noisy(n: int, ratio: float, sigma: float, seed: int) -> list[tuple[float, float]]:
    """(reference, candidate) latencies whose log ratio is N(log ratio, sigma) per case."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        ref = 800 * math.exp(rng.gauss(0, 0.7))
        pairs.append((ref, ref * ratio * math.exp(rng.gauss(0, sigma))))
    return pairs


# --- the rule ------------------------------------------------------------------------------


def test_a_true_30_percent_slowdown_on_every_case_is_a_regression_above_a_10_percent_limit() -> (
    None
):
    """Every case 1.3 times slower: the ratio and both ends of its interval are 1.3, above 1.1."""
    test = ratio_test(Metric.LATENCY, [(100.0, 130.0)] * 20, limit=1.1, alpha=0.05)
    assert (test.finding, test.ratio, test.low, test.high, test.pairs) == (
        Finding.REGRESSION,
        1.3,
        1.3,
        1.3,
        20,
    )
    assert test.text == (
        "candidate slower: x1.30 per case (90% interval x1.30-x1.30), "
        "above the limit x1.10, 20 paired cases"
    )
    assert test.fires


def test_a_slowdown_whose_interval_reaches_below_the_limit_is_not_shown() -> None:
    """The rule is on the interval's lower end, not the point estimate: a noisy 1.15 on 30
    cases reads above a 1.1 limit yet is no regression shown, and does not fire."""
    pairs = [(100.0, 100 * 1.15 * math.exp(0.6 if i % 2 else -0.6)) for i in range(30)]
    test = ratio_test(Metric.LATENCY, pairs, limit=1.1, alpha=0.05)
    assert test.ratio == 1.15
    assert test.low is not None and test.high is not None
    assert test.low <= 1.1 < test.high
    assert (test.finding, test.fires) == (Finding.NO_REGRESSION, False)
    assert test.text.startswith("no regression shown: x1.15 per case (90% interval x0.")


@pytest.mark.parametrize("n", [400, 3 * MAX_DRAWS])
def test_the_lower_end_is_the_one_sided_bound_normal_theory_gives_on_known_data(n: int) -> None:
    """Log ratios N(log 1.3, 0.5): the bootstrap's 5% quantile of the geometric mean sits where
    exp(mean - 1.645 sd / sqrt(n)) puts it, within a few per mille, past MAX_DRAWS cases (drawn
    m out of n) too."""
    pairs = _noisy(n, 1.3, 0.5, seed=11)
    logs_ = [math.log(c / r) for r, c in pairs]
    mean = sum(logs_) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs_) / n)
    test = ratio_test(Metric.LATENCY, pairs, limit=1.1, alpha=0.05)
    assert test.low == pytest.approx(math.exp(mean - 1.6449 * sd / math.sqrt(n)), rel=0.005)
    assert test.high == pytest.approx(math.exp(mean + 1.6449 * sd / math.sqrt(n)), rel=0.005)
    assert test.ratio == pytest.approx(math.exp(mean), abs=1e-4)


def test_a_few_huge_outliers_do_not_page() -> None:
    """200 cases with no true difference and three candidate calls stalled 30 times: the
    point estimate moves a few percent, the interval widens, and no regression is shown."""
    pairs = _noisy(200, 1.0, 0.4, seed=5)
    for i in (7, 70, 170):
        ref, cand = pairs[i]
        pairs[i] = (ref, cand * 30)
    test = ratio_test(Metric.LATENCY, pairs, limit=1.1, alpha=0.05)
    assert test.finding is Finding.NO_REGRESSION
    assert test.low is not None and test.low < 1.1


def test_fewer_than_the_minimum_of_pairs_is_undecided_and_fires() -> None:
    """Nine paired cases, each twice as dear: too few for the bootstrap, so undecided, which a
    gate does not count as cleared; with none at all there is no ratio either."""
    test = ratio_test(Metric.COST, [(1.0, 2.0)] * (MIN_PAIRS - 1), limit=1.5, alpha=0.05)
    assert (test.finding, test.ratio, test.low, test.pairs, test.fires) == (
        Finding.UNDECIDED,
        2.0,
        None,
        9,
        True,
    )
    assert test.text == "undecided: 9 paired cases, at least 10 needed (limit x1.50)"
    assert ratio_test(Metric.COST, [], limit=1.5, alpha=0.05).ratio is None


def test_the_interval_depends_on_the_data_alone() -> None:
    """The resamples are seeded from the data: the same pairs give the same interval every
    time, and other pairs another one."""
    pairs = _noisy(50, 1.2, 0.5, seed=2)
    first = ratio_test(Metric.LATENCY, pairs, limit=1.1, alpha=0.05)
    assert first == ratio_test(Metric.LATENCY, list(pairs), limit=1.1, alpha=0.05)
    other = ratio_test(Metric.LATENCY, _noisy(50, 1.2, 0.5, seed=9), limit=1.1, alpha=0.05)
    assert other.low != first.low


# --- the fold ------------------------------------------------------------------------------


def _outcome(case_id: str, side: str, **fields: Any) -> Outcome:
    row: dict[str, Any] = {
        "case_id": case_id,
        "side": side,
        "fixture_sha": "f",
        "transport": "ok",
        "schema": "ok",
        "task_score": 1.0,
        "elapsed_ms": 100,
        "usage": {"prompt_tokens": 1000, "completion_tokens": 100},
    }
    return Outcome.from_json(row | fields)


CHAT = Kind.OPENAI_CHAT  # the rows' usage is in its shape

PRICES = {
    "reference": Price(input_per_mtok=1, output_per_mtok=2),
    "candidate": Price(input_per_mtok=3, output_per_mtok=6),
}


def test_only_cases_admitted_on_both_sides_with_known_values_pair() -> None:
    """A schema miss, a missing usage (cost only), a zero latency (no ratio) and the noise
    check's side are all left out; what pairs is ordered by case id."""
    fold = PairFold(1, PRICES)
    rows = [
        _outcome("b", "reference", elapsed_ms=200),
        _outcome("b", "candidate", elapsed_ms=300),
        _outcome("a", "reference"),
        _outcome("a", "candidate", elapsed_ms=150),
        _outcome("a", "noise", elapsed_ms=9_999),
        _outcome("c", "reference"),
        _outcome("c", "candidate", schema="not_json", task_score=None),
        _outcome("d", "reference", usage=None),
        _outcome("d", "candidate", elapsed_ms=120),
        _outcome("e", "reference", elapsed_ms=0),
        _outcome("e", "candidate"),
    ]
    for row in rows:
        fold.add(row.case_id, row.side, call_of(row, CHAT))
    assert fold.pairs(Metric.LATENCY) == [(100.0, 150.0), (200.0, 300.0), (100.0, 120.0)]
    # 1000 prompt and 100 completion tokens: $0.0012 at the reference's price, 3x that
    cost = fold.pairs(Metric.COST)
    assert list(cost) == [pytest.approx((0.0012, 0.0036))] * 3  # a, b, e


def test_an_unpriced_side_has_no_cost_pairs() -> None:
    """Without the candidate's price no case has a known cost ratio."""
    fold = PairFold(1, {"reference": PRICES["reference"], "candidate": None})
    for side in ("reference", "candidate"):
        row = _outcome("a", side)
        fold.add("a", side, call_of(row, CHAT))
    assert (fold.pairs(Metric.COST), fold.pairs(Metric.LATENCY)) == ([], [(100.0, 100.0)])


def test_with_samples_a_case_is_its_median_over_samples() -> None:
    """samples = 3: one stalled sample of three does not move the case; a side with one
    unadmitted sample is no pair; a side whose samples are not all in is none yet."""
    fold = PairFold(3, PRICES)
    for side, latencies in (("reference", (100, 110, 90)), ("candidate", (130, 9_000, 120))):
        for sample, ms in enumerate(latencies):
            fold.add("a", side, call_of(_outcome("a", side, sample=sample, elapsed_ms=ms), CHAT))
    for sample in range(3):
        fold.add("b", "reference", call_of(_outcome("b", "reference", sample=sample), CHAT))
        bad = {"transport": "timeout", "task_score": None} if sample == 1 else {}
        fold.add("b", "candidate", call_of(_outcome("b", "candidate", sample=sample, **bad), CHAT))
    fold.add("c", "reference", call_of(_outcome("c", "reference"), CHAT))
    fold.add("c", "candidate", call_of(_outcome("c", "candidate"), CHAT))
    assert fold.pairs(Metric.LATENCY) == [(100.0, 130.0)]


def test_the_gate_folds_keep_the_first_row_of_a_key_once() -> None:
    """Folds hands each kept row to the pair fold: a second row for one key changes nothing."""
    from runner.fixtures.refs import CaseRef

    folds = Folds(1, PRICES)
    ref = CaseRef("a", None, "f", 1, 0, 0, b"")
    folds.add(_outcome("a", "reference"), ref)
    folds.add(_outcome("a", "candidate", elapsed_ms=200), ref)
    folds.add(_outcome("a", "candidate", elapsed_ms=900), ref)
    assert folds.pairs.pairs(Metric.LATENCY) == [(100.0, 200.0)]


def test_an_unset_threshold_asks_nothing() -> None:
    """With neither ratio limit set, summary.json's regressions are both null."""
    block = regressions(PairFold(1, PRICES), Thresholds(), (), 0.05)
    assert block == {"latency": None, "cost": None}


# --- the config ----------------------------------------------------------------------------

CONFIG = """\
runs_dir = "runs"
snapshots_dir = "snapshots"
{top}
[endpoints.ref]
kind = "recorded"
model = "ref"
cassette = "cassette.jsonl"
{ref_price}
[endpoints.cand]
kind = "recorded"
model = "cand"
cassette = "cassette.jsonl"
{cand_price}
[suites.s]
fixtures = "cases.jsonl"
reference = "ref"
candidate = "cand"
{suite}
"""
REF_PRICE = "price = { input_per_mtok = 0.5, output_per_mtok = 1.5 }"
CAND_PRICE = "price = { input_per_mtok = 3, output_per_mtok = 15 }"


def _config(
    root: Path,
    *,
    top: str = "",
    suite: str = "",
    ref_price: str = REF_PRICE,
    cand_price: str = CAND_PRICE,
) -> Path:
    path = root / "parallax.toml"
    text = CONFIG.format(top=top, suite=suite, ref_price=ref_price, cand_price=cand_price)
    path.write_text(text, "utf-8")
    return path


@pytest.mark.parametrize("metric", list(Metric))
def test_a_regression_gate_without_its_threshold_is_refused(tmp_path: Path, metric: Metric) -> None:
    """fail_on = ["latency_regression"] (or cost) asks what only its ratio limit poses: without
    it, here hidden by a suite [thresholds] table that leaves it out, exit 78 naming the key."""
    path = _config(
        tmp_path,
        top=f"[thresholds]\n{metric.threshold} = 1.2\n",
        suite=f'fail_on = ["{metric.fail_on}"]\n[suites.s.thresholds]\nstretch_high = 0.7\n',
    )
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert (raised.value.key, raised.value.exit_code) == ("suites.s.fail_on", 78)
    assert f"thresholds.{metric.threshold}" in raised.value.reason


def test_the_ratio_limits_are_thresholds_a_suite_may_override(tmp_path: Path) -> None:
    """Unset by default, read from [thresholds], replaced by a suite's own table; not 0."""
    assert (Thresholds().latency_ratio_max, Thresholds().cost_ratio_max) == (None, None)
    top = "[thresholds]\nlatency_ratio_max = 1.1\ncost_ratio_max = 1.5\n"
    loaded = load_config(_config(tmp_path, top=top, suite='fail_on = ["latency_regression"]'))
    assert (loaded.thresholds("s").latency_ratio_max, loaded.thresholds("s").cost_ratio_max) == (
        1.1,
        1.5,
    )
    suite = "[suites.s.thresholds]\nlatency_ratio_max = 1.25\n"
    assert (
        load_config(_config(tmp_path, top=top, suite=suite)).thresholds("s").cost_ratio_max is None
    )
    with pytest.raises(ConfigError) as raised:
        load_config(_config(tmp_path, top="[thresholds]\ncost_ratio_max = 0\n"))
    assert raised.value.key == "thresholds.cost_ratio_max"


def test_a_cost_gate_needs_a_price_on_both_sides(tmp_path: Path) -> None:
    """An unpriced side's cost is unknown, so gating on cost without its price is exit 78,
    naming the endpoint's price key; a latency gate needs no price."""
    top = "[thresholds]\ncost_ratio_max = 1.5\nlatency_ratio_max = 1.1\n"
    path = _config(tmp_path, top=top, suite='fail_on = ["cost_regression"]', cand_price="")
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert (raised.value.key, raised.value.exit_code) == ("endpoints.cand.price", 78)
    assert "cost_regression" in raised.value.reason
    load_config(_config(tmp_path, top=top, suite='fail_on = ["latency_regression"]', cand_price=""))


# --- real runs -----------------------------------------------------------------------------


def _cases(root: Path, n: int) -> None:
    rows = [
        {"id": f"c{i:02d}", "prompt": f"q{i}", "expect": {"must_include": ["yes"]}}
        for i in range(n)
    ]
    (root / "cases.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")


def _cassette(root: Path, rows: list[dict[str, Any]]) -> None:
    (root / "cassette.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")


def _events(stdout: str, name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if f'"{name}"' in line]


def _cost_rows(n: int) -> list[dict[str, Any]]:
    """n cases; the candidate uses 1 to 1.5 times the reference's tokens, per case."""
    rows = []
    for i in range(n):
        for side, scale in (("reference", 1.0), ("candidate", 1.0 + (i % 6) / 10)):
            usage = {"prompt_tokens": round(400 * scale), "completion_tokens": round(90 * scale)}
            rows.append({"case_id": f"c{i:02d}", "side": side, "completion": "yes", "usage": usage})
    return rows


def test_a_dearer_candidate_fails_the_cost_gate_and_replays_to_the_same_decision(
    tmp_path: Path,
) -> None:
    """Recorded endpoints at two prices (7.5x the rates, 1-1.5x the tokens per case) and
    cost_ratio_max = 2: the cost gate fires, exit 1, alert.cost with the figures, the stderr
    line, run.finished and summary.json say so; a replay calls nothing and decides the same."""
    n = 24
    _cases(tmp_path, n)
    _cassette(tmp_path, _cost_rows(n))
    _config(
        tmp_path,
        top="[thresholds]\ncost_ratio_max = 2.0\n",
        suite='fail_on = ["cost_regression"]',
    )
    done = run_parallax("run", "--config", "parallax.toml", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    (run_dir,) = tmp_path.glob("runs/s/*/")
    summary = json.loads((run_dir / "summary.json").read_text("utf-8"))
    test = summary["regressions"]["cost"]
    assert (test["finding"], test["pairs"], test["limit"], test["gating"]) == (
        "regression",
        n,
        2.0,
        True,
    )
    assert 2.0 < test["low"] <= test["ratio"] <= test["high"] < 7.5 * 1.5
    assert (summary["cost_regression"], summary["latency_regression"]) == (True, False)
    assert summary["regressions"]["latency"] is None  # not asked
    assert f"  cost: {test['text']} (gates: fail_on)" in done.stderr.splitlines()
    assert test["text"].startswith("candidate dearer: x")
    [alert] = _events(done.stdout, "alert.cost")
    assert {k: alert[k] for k in ("finding", "ratio", "low", "high", "limit", "pairs")} == {
        k: test[k] for k in ("finding", "ratio", "low", "high", "limit", "pairs")
    }
    assert (alert["gating"], alert["interval_level"], alert["level"]) == (True, 0.9, "warning")
    line = f"cost: {test['text']} (gates: fail_on)"
    markdown = "- " + line.replace("_", "\\_")  # report.md escapes Markdown's characters
    assert markdown in (run_dir / "report.md").read_text("utf-8").splitlines()
    html = (run_dir / "report.html").read_text("utf-8")
    assert f'<p class="alert">{line}</p>' in html
    # the verdict's reasons at the top name the gate that made the run need review
    assert '<li class="reason" data-reason="cost_regression" data-weight="review">' in html
    assert "cost regression (gating: fail_on)" in html
    [finished] = _events(done.stdout, "run.finished")
    assert finished["regressions"]["cost"]["finding"] == "regression"
    assert finished["regressions"]["latency"] is None

    replay = run_parallax("replay", "--config", "parallax.toml", run_dir, cwd=tmp_path)
    assert replay.returncode == 1, replay.stderr
    (again,) = (p for p in tmp_path.glob("runs/s/*/") if p != run_dir)
    replayed = json.loads((again / "summary.json").read_text("utf-8"))
    assert replayed["regressions"] == summary["regressions"]


def test_a_cheaper_candidate_clears_the_cost_gate(tmp_path: Path) -> None:
    """The same tokens at a price of a third: no regression shown, exit 0, no alert."""
    n = 12
    _cases(tmp_path, n)
    _cassette(tmp_path, _cost_rows(n))
    _config(
        tmp_path,
        top="[thresholds]\ncost_ratio_max = 1.0\n",
        suite='fail_on = ["cost_regression"]',
        cand_price="price = { input_per_mtok = 0.15, output_per_mtok = 0.5 }",
    )
    with capture_logs() as events:
        _, code, summary = run_suite(load_config(tmp_path / "parallax.toml"), "s")
    assert (code, summary["regressions"]["cost"]["finding"]) == (0, "no_regression")
    assert not [e for e in events if e["event"] == "alert.cost"]


def _latency_rows(n: int, ratio: float, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        base = 800 * math.exp(rng.gauss(0, 0.7))
        for side, factor in (("reference", 1.0), ("candidate", ratio)):
            ms = max(1, round(base * factor * math.exp(rng.gauss(0, 0.2))))
            rows.append(
                {"case_id": f"c{i:02d}", "side": side, "completion": "yes", "elapsed_ms": ms}
            )
    return rows


def test_the_latency_gate_decides_on_cassette_latencies_through_run_resume_and_replay(
    tmp_path: Path,
) -> None:
    """40 cases whose recorded candidate calls take 1.5 times the reference's: a regression
    above latency_ratio_max = 1.1 (exit 1, alert.latency); a run killed half way and resumed,
    and a replay, reach the same figures; a candidate as fast clears the gate."""
    n = 40
    _cases(tmp_path, n)
    _cassette(tmp_path, _latency_rows(n, 1.5, seed=1))
    _config(
        tmp_path,
        top="[thresholds]\nlatency_ratio_max = 1.1\n",
        suite='fail_on = ["latency_regression"]',
    )
    loaded = load_config(tmp_path / "parallax.toml")
    with capture_logs() as events:
        run_dir, code, summary = run_suite(loaded, "s")
    test = summary["regressions"]["latency"]
    assert (code, test["finding"], test["pairs"]) == (1, "regression", n)
    assert 1.1 < test["low"] <= test["ratio"] <= test["high"]
    [alert] = [e for e in events if e["event"] == "alert.latency"]
    assert (alert["ratio"], alert["pairs"], alert["gating"]) == (test["ratio"], n, True)

    # a run killed with half its outcome rows written: resume regrades the rest from raw.jsonl
    killed = tmp_path / "runs" / "s" / "killed"
    shutil.copytree(run_dir, killed)
    lines = (killed / "outcomes.jsonl").read_text("utf-8").splitlines(keepends=True)
    (killed / "outcomes.jsonl").write_text("".join(lines[: len(lines) // 2]), "utf-8")
    manifest = json.loads((killed / "manifest.json").read_text("utf-8"))
    (killed / "manifest.json").write_text(json.dumps(manifest | {"finished_at": None}), "utf-8")
    (killed / "summary.json").unlink()
    _, resumed_code, resumed = run_suite(loaded, "s", resume_dir=killed, mode=RunMode.RESUME)
    assert (resumed_code, resumed["regressions"]) == (1, summary["regressions"])

    _, replay_code, replayed = run_suite(loaded, "s", parent_dir=run_dir, mode=RunMode.REPLAY)
    assert (replay_code, replayed["regressions"]) == (1, summary["regressions"])

    _cassette(tmp_path, _latency_rows(n, 1.0, seed=2))
    _, code, summary = run_suite(loaded, "s")
    assert (code, summary["regressions"]["latency"]["finding"]) == (0, "no_regression")


def test_too_few_paired_cases_fail_the_gate_closed(tmp_path: Path) -> None:
    """Every candidate call but five times out: five pairs are too few, so the latency gate
    is undecided and fails closed on top of the incomplete run (exit 3)."""
    n = 12
    _cases(tmp_path, n)
    rows = _latency_rows(n, 1.0, seed=3)
    for row in rows:
        if row["side"] == "candidate" and int(row["case_id"][1:]) >= 5:
            row.pop("completion"), row.pop("elapsed_ms")
            row["fault"] = "timeout"
    _cassette(tmp_path, rows)
    _config(
        tmp_path,
        top="[thresholds]\nlatency_ratio_max = 1.1\n",
        suite='fail_on = ["latency_regression"]',
    )
    _, code, summary = run_suite(load_config(tmp_path / "parallax.toml"), "s")
    test = summary["regressions"]["latency"]
    assert (code, test["finding"], test["pairs"], summary["latency_regression"]) == (
        3,
        "undecided",
        5,
        True,
    )


def test_a_cassette_elapsed_ms_must_be_a_whole_number(tmp_path: Path) -> None:
    """A recorded latency that is negative or not an integer is a bad row (exit 65)."""
    from runner.errors import DataError
    from runner.recorded.endpoint import load_cassette

    _cassette(tmp_path, [{"case_id": "c00", "completion": "yes", "elapsed_ms": -1}])
    with pytest.raises(DataError) as raised:
        load_cassette(tmp_path / "cassette.jsonl")
    assert "elapsed_ms" in raised.value.reason


def test_the_latency_simulation_catches_a_doubling_and_stays_quiet_on_noise() -> None:
    """sim/latency.py drives real runs on heavy-tailed latencies (data, not wall time): a true
    doubling on 40 cases fires every night, no true difference never does."""
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "sim" / "latency.py"),
            *("--nights", "3", "--cases", "40", "--slowdown", "2.0", "--limit", "1.1"),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=RUN_TIMEOUT,
    )
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert (figures["nights"], figures["power"], figures["false_alarm_rate"]) == (3, 1.0, 0.0)
    assert figures["slowdown"]["exit_1"] == 1.0  # the gate's verdict, not just the finding
    assert 0.0 <= figures["false_alarm_rate_at_limit"] <= 1.0


def test_a_live_run_against_llmock_gates_on_the_cost_its_replies_report(
    tmp_path: Path, llmock: LlmockServer
) -> None:
    """Against a real server that returns real usage, the candidate at ten times the rates
    fails cost_ratio_max = 2 (exit 1, alert.cost); the cost ratio is the geometric mean of the
    per-case ratios the replies' usage gives, and every case whose calls took a measurable
    time on both sides is a latency pair."""
    n = 12
    rows = [
        {"id": f"c{i:02d}", "prompt": f"Say {i}.", "must_not_include": ["zzqq"]} for i in range(n)
    ]
    (tmp_path / "cases.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    rates = {"live-ref": (1, 4), "live-cand": (10, 40)}
    endpoints = "".join(
        llmock.endpoint_toml(name, Protocol.OPENAI, concurrency=4, price=price)
        for name, price in rates.items()
    )
    (tmp_path / "parallax.toml").write_text(
        'runs_dir = "runs"\nsnapshots_dir = "snapshots"\n'
        "[thresholds]\ncost_ratio_max = 2.0\nlatency_ratio_max = 50.0\n"
        + endpoints
        + '[suites.s]\nfixtures = "cases.jsonl"\nreference = "live-ref"\ncandidate = "live-cand"\n'
        'fail_on = ["cost_regression"]\n',
        "utf-8",
    )
    done = run_parallax("run", "--config", "parallax.toml", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    (run_dir,) = tmp_path.glob("runs/s/*/")
    cost: dict[str, dict[str, float]] = {"reference": {}, "candidate": {}}
    latency: dict[str, dict[str, int]] = {"reference": {}, "candidate": {}}
    for line in (run_dir / "outcomes.jsonl").read_text("utf-8").splitlines():
        row = json.loads(line)
        assert row["transport"] == "ok" and row["schema"] == "ok", row
        i, o = rates["live-ref" if row["side"] == "reference" else "live-cand"]
        usage = row["usage"]  # what the server said
        cost[row["side"]][row["case_id"]] = (
            usage["prompt_tokens"] * i + usage["completion_tokens"] * o
        ) / 1e6
        latency[row["side"]][row["case_id"]] = row["elapsed_ms"]
    logs_ = [
        math.log(cost["candidate"][c] / cost["reference"][c]) for c in sorted(cost["reference"])
    ]
    summary = json.loads((run_dir / "summary.json").read_text("utf-8"))
    test = summary["regressions"]["cost"]
    assert (test["finding"], test["pairs"]) == ("regression", n)
    assert test["ratio"] == round(math.exp(sum(logs_) / n), 4)
    timed = [
        c for c in latency["reference"] if latency["reference"][c] > 0 < latency["candidate"][c]
    ]
    assert summary["regressions"]["latency"]["pairs"] == len(timed)
    [alert] = _events(done.stdout, "alert.cost")
    assert (alert["ratio"], alert["pairs"], alert["gating"]) == (test["ratio"], n, True)


def _worked_example(root: Path) -> None:
    """The latency and cost guide's worked example: 40 cases, a small model and a large one at
    two prices."""
    rng = random.Random(7)
    cases, rows = [], []
    for i in range(40):
        case_id = f"q{i:02d}"
        cases.append(
            {"id": case_id, "prompt": f"Question {i}?", "expect": {"must_include": ["answer"]}}
        )
        prompt, completion = rng.randint(300, 900), rng.randint(60, 200)
        base = 700 * math.exp(rng.gauss(0, 0.5))
        for side, tokens, speed in (
            ("reference", completion, 1.0),
            ("candidate", round(completion * rng.uniform(1.1, 1.6)), 0.8),
        ):
            rows.append(
                {
                    "case_id": case_id,
                    "side": side,
                    "completion": "the answer",
                    "elapsed_ms": round(base * speed * math.exp(rng.gauss(0, 0.25))),
                    "usage": {"prompt_tokens": prompt, "completion_tokens": tokens},
                }
            )
    (root / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases), "utf-8")
    _cassette(root, rows)
    (root / "parallax.toml").write_text(
        'runs_dir = "runs"\nsnapshots_dir = "snapshots"\n'
        "[thresholds]\nlatency_ratio_max = 1.2\ncost_ratio_max = 3.0\n"
        '[endpoints.small]\nkind = "recorded"\nmodel = "small-model"\ncassette = "cassette.jsonl"\n'
        "price = { input_per_mtok = 0.5, output_per_mtok = 1.5 }\n"
        '[endpoints.large]\nkind = "recorded"\nmodel = "large-model"\ncassette = "cassette.jsonl"\n'
        "price = { input_per_mtok = 3, output_per_mtok = 15 }\n"
        '[suites.qa]\nfixtures = "cases.jsonl"\nreference = "small"\ncandidate = "large"\n'
        'fail_on = ["latency_regression", "cost_regression"]\n',
        "utf-8",
    )


def test_the_readme_worked_example_prints_what_the_readme_shows(tmp_path: Path) -> None:
    """The latency and cost guide's two models at two prices: the run exits 1 on cost, and
    every usage and gate line the guide shows is the one the stderr summary prints."""
    _worked_example(tmp_path)
    done = run_parallax("run", "--config", "parallax.toml", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    readme = (ROOT / "docs" / "how-to" / "latency-cost-gates.md").read_text("utf-8")
    shown = readme[readme.index("parallax · qa: REVIEW (exit 1)") :].split("```")[0]
    lines = [line for line in shown.splitlines() if line.strip() and line.strip() != "..."]
    assert len(lines) == 8
    printed = done.stderr.splitlines()
    assert [line for line in lines if line not in printed] == []
