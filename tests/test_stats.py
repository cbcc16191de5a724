"""The paired test: exact McNemar and the Agresti-Min interval, checked against scipy."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import binomtest

from runner.history import run_dirs
from runner.stats import Claim, binom_two_sided_half, describe, paired_test


def pairs(both: int, ref_only: int, cand_only: int, neither: int) -> list[tuple[bool, bool]]:
    return (
        [(True, True)] * both
        + [(True, False)] * ref_only
        + [(False, True)] * cand_only
        + [(False, False)] * neither
    )


def scipy_p(k: int, n: int) -> float:
    return float(binomtest(k, n, 0.5).pvalue) if n else 1.0


def agrees_with_scipy(k: int, n: int) -> None:
    """Equal to scipy within 1e-9 relative wherever scipy's value is a normal float.

    Below the smallest normal double (about 2.2e-308) both are subnormal or 0 and only an
    absolute comparison means anything; there the value must still be >= 0 and not exceed
    scipy's by more than the subnormal step, and it is never 0 where scipy's is positive.
    """
    got, expected = binom_two_sided_half(k, n), scipy_p(k, n)
    assert 0.0 <= got <= 1.0
    # scipy's 0.0 can be its own underflow far above the subnormals: (10, 1075) is 2.7e-300,
    # (15, 1075) 1.0e-290, both 0.0 in scipy; no decision tells such values from 0
    floor = 1e-250 if expected == 0.0 else 1e-300
    assert math.isclose(got, expected, rel_tol=1e-9, abs_tol=floor), (k, n, got, expected)
    if expected > 0.0:
        assert got > 0.0, (k, n, expected)


@given(st.integers(0, 60), st.integers(0, 60))
def test_exact_p_value_matches_scipy_binomtest(b: int, c: int) -> None:
    """The two-sided exact p equals scipy's binomial test on the discordant pairs."""
    agrees_with_scipy(b, b + c)


@given(st.integers(0, 10**6).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_exact_p_value_matches_scipy_up_to_a_million_pairs(kn: tuple[int, int]) -> None:
    """Any k of any n up to 10^6 discordant pairs: as scipy says, with no overflow."""
    agrees_with_scipy(*kn)


def _grid() -> list[tuple[int, int]]:
    """Every n from 0 to 1,100 at its tails, centre and between; then large n, each at the
    k where p crosses from normal floats into underflow, a few standard deviations out, and
    the centre."""
    points = set()
    for n in range(1101):
        points |= {(k, n) for k in {0, 1, 2, n // 4, n // 3, n // 2, n - 1, n} if 0 <= k <= n}
    for n in (1023, 1024, 1025, 2047, 4096, 10**4, 65537, 10**5, 999_999, 10**6):
        sd = math.sqrt(n) / 2
        for k in (0, 1, 10, n // 2 - round(37 * sd), n // 2 - round(38 * sd), n // 2 - 1):
            for kk in (k, n - k):
                if 0 <= kk <= n:
                    points.add((kk, n))
        points |= {(n // 2 - round(z * sd), n) for z in (0.5, 1, 2, 3, 5, 8, 13, 21, 30)}
    return sorted(points, key=lambda kn: (kn[1], kn[0]))


def test_exact_p_value_matches_scipy_on_a_grid_from_zero_to_a_million() -> None:
    """An explicit grid: both tails, the centre and the p < 1e-300 edge at n = 0 .. 10^6."""
    for k, n in _grid():
        agrees_with_scipy(k, n)


@pytest.mark.parametrize("n", [1024, 1025, 2000, 10**5, 10**6, 10**9])
def test_no_overflow_past_1024_discordant_pairs(n: int) -> None:
    """p at the centre is 1 and at the far tail a tiny float, never an
    OverflowError, whatever n (2.0**n overflowed a double at n = 1024)."""
    assert binom_two_sided_half(n // 2, n) == 1.0
    assert 0.0 <= binom_two_sided_half(0, n) < 1e-300
    # one below the centre, p is 1 less the centre's mass (one term when n is even, two when
    # odd): scipy rounds it to 1 past n ~ 10^7, as its "as likely" test allows 1e-7 relative
    m = n // 2
    pmf = math.exp(
        math.lgamma(n + 1) - math.lgamma(m + 1) - math.lgamma(n - m + 1) - n * math.log(2)
    )
    expected = 1.0 - (pmf if n % 2 == 0 else 2 * pmf)
    assert binom_two_sided_half(n // 2 - 1, n) == pytest.approx(expected, rel=1e-9)


def test_far_tail_p_values_that_scipy_underflows_stay_positive() -> None:
    """2 / 2^1075 is the smallest positive double: kept, where scipy's incomplete beta gives 0."""
    assert binom_two_sided_half(0, 1075) == 5e-324
    assert binom_two_sided_half(0, 1020) == pytest.approx(2.0 / 2**1020, rel=1e-12)
    assert binom_two_sided_half(0, 1076) == 0.0  # 2^-1075 is below every positive double


def test_hand_computed_case() -> None:
    """b = 0, c = 5: p = 2 / 32, and the candidate is better by 5 of 10 cases."""
    result = paired_test(pairs(3, 0, 5, 2))
    assert (result.n, result.ref_only, result.cand_only) == (10, 0, 5)
    assert result.p_value == pytest.approx(2 / 32)
    assert result.diff == pytest.approx(0.5)


def test_zero_discordant_pairs_give_p_one_and_an_interval_around_zero() -> None:
    """With no discordant pair there is nothing to test: p is 1, the interval straddles 0."""
    result = paired_test(pairs(30, 0, 0, 10))
    assert result.p_value == 1.0
    assert result.diff == 0.0
    assert result.low is not None and result.high is not None
    assert result.low < 0 < result.high
    assert not result.significant()


def test_all_pairs_discordant() -> None:
    """Twenty cases all lost by the candidate: p = 2 / 2**20, diff -1, interval inside [-1, 1]."""
    result = paired_test(pairs(0, 20, 0, 0))
    assert result.p_value == pytest.approx(2 / 2**20)
    assert result.diff == -1.0
    assert result.low is not None and result.high is not None
    assert -1.0 <= result.low < result.high < 0
    text = describe(result, "medium")
    assert text.startswith("candidate worse on medium: -100 points [-100, ")
    assert text.endswith("], p < 0.001, 20 paired cases")
    assert describe(result, "overall").startswith("candidate worse overall: -100 points")


def test_empty_stratum() -> None:
    """No paired cases: no difference, no interval, and the sentence says so."""
    result = paired_test([])
    assert (result.n, result.diff, result.low, result.high, result.p_value) == (
        0,
        None,
        None,
        None,
        1.0,
    )
    assert describe(result, "stretch") == "stretch: no paired cases"


def test_agresti_min_interval_hand_computed() -> None:
    """b = 12, c = 4, n = 40: the adjusted Wald interval computed by hand."""
    result = paired_test(pairs(20, 12, 4, 4))
    bb, cc, nn = 12.5, 4.5, 42
    centre = (cc - bb) / nn
    half = 1.959963984540054 * math.sqrt(((bb + cc) - (cc - bb) ** 2 / nn) / nn**2)
    assert (result.low, result.high) == (pytest.approx(centre - half), pytest.approx(centre + half))
    assert result.diff == pytest.approx(-0.2)


@pytest.mark.parametrize(("b", "c"), [(1024, 0), (700, 400), (600_000, 400_000), (0, 10**6)])
def test_a_big_run_gets_a_finite_p_and_interval(b: int, c: int) -> None:
    """A million paired cases: the p-value and the Agresti-Min interval are finite numbers
    inside their ranges, the interval holds the difference, and the sentence is written."""
    result = paired_test(pairs(10**6 - b - c, b, c, 0))
    assert result.n == 10**6
    assert result.p_value == pytest.approx(scipy_p(b, b + c), rel=1e-9, abs=1e-300)
    assert result.low is not None and result.high is not None and result.diff is not None
    assert -1.0 <= result.low <= result.diff <= result.high <= 1.0
    assert all(math.isfinite(x) for x in (result.low, result.high, result.diff))
    assert describe(result, "overall").endswith("1000000 paired cases")


def test_describe_no_significant_difference() -> None:
    """A small, balanced difference is reported as no significant difference with its counts."""
    text = describe(paired_test(pairs(30, 2, 1, 7)), "overall")
    assert text.startswith("overall: no significant difference (")
    assert "40 paired cases" in text


def test_a_run_with_more_than_1024_discordant_pairs_writes_its_summary_and_report(
    tmp_path: Path,
) -> None:
    """1,100 recorded cases the two sides disagree on (700 lost, 400 won by the candidate):
    `parallax run` finishes with its verdict, summary.json holds scipy's p, and both reports
    are written (the p-value's 2.0**n overflowed here and cost the run all three)."""
    n, lost = 1100, 700
    cases = [
        {"id": f"c{i:04d}", "prompt": f"q{i}", "expect": {"must_include": ["correct"]}}
        for i in range(n)
    ]
    (tmp_path / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    rows = [
        {
            "case_id": f"c{i:04d}",
            "side": side,
            "completion": "correct" if (side == "reference") == (i < lost) else "wrong",
        }
        for i in range(n)
        for side in ("reference", "candidate")
    ]
    (tmp_path / "cassette.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "parallax.toml").write_text(
        'runs_dir = "runs"\nsnapshots_dir = "snapshots"\n'
        '[endpoints.ref]\nkind = "recorded"\nmodel = "ref"\ncassette = "cassette.jsonl"\n'
        '[endpoints.cand]\nkind = "recorded"\nmodel = "cand"\ncassette = "cassette.jsonl"\n'
        '[suites.big]\nfixtures = "cases.jsonl"\nreference = "ref"\ncandidate = "cand"\n'
        'fail_on = ["significant_regression"]\n'
    )
    proc = subprocess.run(
        [sys.executable, "-m", "runner", "run", "--config", "parallax.toml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr  # a significant regression gates
    assert "Traceback" not in proc.stderr
    (run_dir,) = run_dirs(tmp_path / "runs" / "big")
    summary = json.loads((run_dir / "summary.json").read_text())
    overall = summary["paired"]["overall"]
    assert (overall["ref_only"], overall["cand_only"]) == (lost, n - lost)
    assert overall["p_value"] == pytest.approx(scipy_p(lost, n), rel=1e-9)
    assert summary["significant_regression"] is True
    assert (run_dir / "report.html").stat().st_size > 0
    assert "candidate worse overall" in (run_dir / "report.md").read_text()


# --- non-inferiority ---------------------------------------------------------------------------


def agresti_min_low(b: int, c: int, n: int, z: float) -> float:
    """Agresti and Min (2005), written out from the paper: a half added to each cell."""
    bb, cc, nn = b + 0.5, c + 0.5, n + 2
    centre = (cc - bb) / nn
    return centre - z * math.sqrt((bb + cc) - (cc - bb) ** 2 / nn) / nn


def test_the_non_inferiority_bound_is_the_90_percent_intervals_lower_end_at_alpha_5() -> None:
    """At alpha 0.05 the bound is the lower end of the two-sided 90% Agresti-Min interval (a
    one-sided 95% bound, z = 1.6449), not of the 95% interval shown beside p."""
    result = paired_test(pairs(291, 9, 0, 0))  # 3 points worse on 300 cases
    claim = result.non_inferiority(0.05, alpha=0.05)
    assert claim.bound == pytest.approx(agresti_min_low(9, 0, 300, 1.6448536269514722), abs=1e-12)
    assert claim.bound == pytest.approx(-0.046792, abs=1e-6)
    assert claim.level == pytest.approx(0.95)
    assert result.low is not None and result.low < claim.bound  # the 95% interval is wider
    assert (claim.claim, claim.n) == (Claim.NON_INFERIOR, 300)
    assert claim.text == (
        "candidate is non-inferior: worse by at most 4.7 points (95% one-sided bound), "
        "margin 5 points, 300 paired cases"
    )
    stricter = result.non_inferiority(0.05, alpha=0.01)  # z = 2.3263: a lower bound
    assert stricter.bound == pytest.approx(agresti_min_low(9, 0, 300, 2.3263478740408408))
    assert stricter.claim is Claim.NOT_NON_INFERIOR
    assert stricter.text.startswith("cannot claim non-inferiority: may be worse by up to 5.4 po")


def test_a_tight_margin_cannot_be_claimed_and_says_so() -> None:
    """The same 3-point loss cannot be called non-inferior at a 1-point margin."""
    claim = paired_test(pairs(291, 9, 0, 0)).non_inferiority(0.01)
    assert claim.claim is Claim.NOT_NON_INFERIOR
    assert claim.text == (
        "cannot claim non-inferiority: may be worse by up to 4.7 points (95% one-sided bound), "
        "margin 1 point, 300 paired cases"
    )


def test_no_paired_case_is_undecided_never_non_inferior() -> None:
    """With nothing admitted there is nothing to bound, whatever the margin."""
    claim = paired_test([]).non_inferiority(0.99)
    assert (claim.claim, claim.bound, claim.n) == (Claim.UNDECIDED, None, 0)
    assert claim.text == "cannot claim non-inferiority: no paired cases (margin 99 points)"


def test_no_discordant_pair_is_bounded_by_the_suites_size() -> None:
    """All cases agree: the bound is -z / (n + 2), so 100 cases show a 2-point margin and 20
    do not."""
    z = 1.6448536269514722
    big = paired_test(pairs(100, 0, 0, 0)).non_inferiority(0.02)
    assert big.bound == pytest.approx(-z / 102)
    assert big.claim is Claim.NON_INFERIOR
    small = paired_test(pairs(10, 0, 0, 10)).non_inferiority(0.02)
    assert small.bound == pytest.approx(-z / 22)
    assert small.claim is Claim.NOT_NON_INFERIOR


def test_a_candidate_better_for_sure_is_said_to_be_better() -> None:
    """A bound above zero reads "better by at least", and a zero margin is then claimed."""
    claim = paired_test(pairs(100, 0, 10, 0)).non_inferiority(0.0)
    assert claim.claim is Claim.NON_INFERIOR
    assert claim.text.startswith("candidate is non-inferior: better by at least 4.3 points")


@given(
    st.integers(0, 200),
    st.integers(0, 60),
    st.integers(0, 60),
    st.integers(0, 200),
    st.floats(0, 0.999),
    st.floats(0, 0.999),
    st.floats(0.001, 0.5),
)
def test_a_larger_margin_never_takes_non_inferiority_away(
    a: int, b: int, c: int, d: int, m1: float, m2: float, alpha: float
) -> None:
    """Monotone in the margin: what is non-inferior at a margin stays so at any larger one, and
    the bound itself does not depend on the margin."""
    result = paired_test(pairs(a, b, c, d))
    small, large = sorted((m1, m2))
    tight, loose = result.non_inferiority(small, alpha), result.non_inferiority(large, alpha)
    assert tight.bound == loose.bound
    if tight.claim is Claim.NON_INFERIOR:
        assert loose.claim is Claim.NON_INFERIOR
    if result.n == 0:
        assert tight.claim is loose.claim is Claim.UNDECIDED
