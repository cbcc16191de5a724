"""The paired test: exact McNemar and the Agresti-Min interval, checked against scipy."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import binomtest

from runner.stats import binom_two_sided_half, describe, paired_test


def pairs(both: int, ref_only: int, cand_only: int, neither: int) -> list[tuple[bool, bool]]:
    return (
        [(True, True)] * both
        + [(True, False)] * ref_only
        + [(False, True)] * cand_only
        + [(False, False)] * neither
    )


@given(st.integers(0, 60), st.integers(0, 60))
def test_exact_p_value_matches_scipy_binomtest(b: int, c: int) -> None:
    """The two-sided exact p equals scipy's binomial test on the discordant pairs."""
    expected = binomtest(b, b + c, 0.5).pvalue if b + c else 1.0
    assert math.isclose(binom_two_sided_half(b, b + c), expected, rel_tol=1e-9, abs_tol=1e-12)


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


def test_describe_no_significant_difference() -> None:
    """A small, balanced difference is reported as no significant difference with its counts."""
    text = describe(paired_test(pairs(30, 2, 1, 7)), "overall")
    assert text.startswith("overall: no significant difference (")
    assert "40 paired cases" in text
