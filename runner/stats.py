"""A paired test that tells a regression from noise.

Reference and candidate answer the same cases, so their pass/fail results are paired data; an
unpaired test on them throws away most of the signal. Only the discordant pairs carry
information about a difference: `b` cases the reference passed and the candidate failed, `c`
the other way round. The exact McNemar test is a two-sided binomial test of b against
b + c at one half; the interval on the difference in pass rate is Agresti and Min's (2005)
adjusted Wald interval, which behaves at zero discordant pairs where plain Wald collapses.
Neither raises a number to the power n: both hold for a suite of any size.

The same interval answers the release question "the candidate is not worse by more than a
margin" (non-inferiority): at one-sided level 1 - alpha, the lower end of the Agresti-Min
interval at z = z(1 - alpha) (the two-sided 1 - 2 alpha interval: 90% at alpha = 0.05) must lie
above -margin. That is a one-sided test at alpha, the level the suite already gives McNemar; the
lower end of the 95% interval shown beside p would be a stricter 2.5% test. With no discordant
pair the half-pairs Agresti and Min add keep the interval from collapsing, so n concordant cases
bound the loss at z / (n + 2): a small suite can still fail to show a tight margin. With no
paired case at all nothing is known: undecided, never non-inferior.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from enum import StrEnum
from statistics import NormalDist
from typing import Any

Z95 = 1.959963984540054
_LOG2 = math.log(2.0)
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_SUM_EPS = 1e-17  # a tail term this small next to the sum so far cannot change a double


def binom_two_sided_half(k: int, n: int) -> float:
    """Exact two-sided p-value of k successes in n trials at p = 1/2, for any n.

    p = 2 * P(X <= min(k, n - k)), capped at 1. `2.0**n` overflows a double at n = 1024 and
    the sum of C(n, i) as integers costs seconds at n = 10^6, so the tail is summed relative to
    its largest term (each lower one is the one above times i / (n - i + 1), until a term can
    no longer change the sum: a few thousand at n = 10^6) and scaled by that term in log space.
    The term's log comes from Loader's saddle-point form of the binomial pmf (as R's dbinom
    computes it), accurate to about 1e-13 relative, where a difference of lgammas loses digits
    as n grows. A p-value below the smallest positive double is 0.0.
    """
    low = min(k, n - k)
    if 2 * low + 1 >= n:  # the tail holds half the mass or more (n = 0 too)
        return 1.0
    total = term = 1.0
    for i in range(low, 0, -1):
        term *= i / (n - i + 1)
        total += term
        if term < total * _SUM_EPS:
            break
    log_p = _LOG2 + _log_pmf_half(low, n) + math.log(total)
    return 1.0 if log_p >= 0.0 else math.exp(log_p)


def _log_pmf_half(k: int, n: int) -> float:
    """log P(X = k) for X ~ Binomial(n, 1/2) (Loader 2000, "Fast and accurate computation of
    binomial probabilities"): no lgamma of n, so no digits lost to n's size."""
    if k in {0, n}:
        return -n * _LOG2
    mean = n / 2.0
    log_c = _stirlerr(n) - _stirlerr(k) - _stirlerr(n - k) - _bd0(k, mean) - _bd0(n - k, mean)
    return log_c - 0.5 * (2.0 * _LOG_SQRT_2PI + math.log(k) + math.log1p(-k / n))


def _stirlerr(n: int) -> float:
    """log(n!) - log(sqrt(2 pi n) (n / e)^n), the error of Stirling's formula."""
    if n <= 15:  # small enough for lgamma to be exact to the last digits
        return math.lgamma(n + 1.0) - (n + 0.5) * math.log(n) + n - _LOG_SQRT_2PI
    nn = float(n) * n
    s0, s1, s2, s3, s4 = 1 / 12, 1 / 360, 1 / 1260, 1 / 1680, 1 / 1188
    if n > 500:
        return (s0 - s1 / nn) / n
    if n > 80:
        return (s0 - (s1 - s2 / nn) / nn) / n
    if n > 35:
        return (s0 - (s1 - (s2 - s3 / nn) / nn) / nn) / n
    return (s0 - (s1 - (s2 - (s3 - s4 / nn) / nn) / nn) / nn) / n


def _bd0(x: float, m: float) -> float:
    """x log(x / m) + m - x, by its series when x is near m (where the plain form cancels)."""
    if abs(x - m) >= 0.1 * (x + m):
        return x * math.log(x / m) + m - x
    v = (x - m) / (x + m)
    total, term, v2, j = (x - m) * v, 2.0 * x * v, v * v, 1
    while True:
        term *= v2
        later = total + term / (2 * j + 1)
        if later == total:
            return total
        total, j = later, j + 1


@dataclass(frozen=True, slots=True)
class PairedResult:
    """The counts behind a paired comparison and what they allow one to say."""

    n: int  # paired cases (both sides admitted)
    both_pass: int
    ref_only: int  # b: reference passed, candidate failed
    cand_only: int  # c: candidate passed, reference failed
    both_fail: int
    diff: float | None  # candidate pass rate minus reference pass rate
    low: float | None
    high: float | None
    p_value: float

    def significant(self, alpha: float = 0.05) -> bool:
        return self.n > 0 and self.p_value < alpha

    @property
    def direction(self) -> str:
        if self.diff is None or self.diff == 0:
            return "same"
        return "worse" if self.diff < 0 else "better"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def non_inferiority(self, margin: float, alpha: float = 0.05) -> NonInferiority:
        """Whether the candidate is worse by less than `margin`, at one-sided level 1 - alpha."""
        level = 1.0 - alpha
        if self.n == 0:
            return NonInferiority(Claim.UNDECIDED, margin, level, None, 0)
        bound, _ = _agresti_min(self.ref_only, self.cand_only, self.n, NormalDist().inv_cdf(level))
        claim = Claim.NON_INFERIOR if bound > -margin else Claim.NOT_NON_INFERIOR
        return NonInferiority(claim, margin, level, bound, self.n)


class Claim(StrEnum):
    """What a non-inferiority test lets one say about the candidate."""

    NON_INFERIOR = "non_inferior"  # the one-sided bound lies above -margin
    NOT_NON_INFERIOR = "not_non_inferior"  # the bound reaches -margin: a loss that size is possible
    UNDECIDED = "undecided"  # no paired case: nothing to bound


@dataclass(frozen=True, slots=True)
class NonInferiority:
    """The non-inferiority decision and the figures behind it, as summary.json carries them."""

    claim: Claim
    margin: float
    level: float  # one-sided confidence level of `bound`
    bound: float | None  # lower bound on candidate minus reference pass rate
    n: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"claim": self.claim.value, "text": self.text}

    @property
    def text(self) -> str:
        """The decision in words, e.g. "candidate is non-inferior: worse by at most 1.4 points
        (95% one-sided bound), margin 2 points, 300 paired cases"."""
        margin = f"margin {_points(self.margin)}"
        if self.bound is None:
            return f"cannot claim non-inferiority: no paired cases ({margin})"
        level = f"({self.level * 100:g}% one-sided bound)"
        cases = f"{self.n} paired case{'' if self.n == 1 else 's'}"
        if self.bound >= 0:
            size = f"better by at least {_points(self.bound)}"
        else:
            shown = self.claim is Claim.NON_INFERIOR
            worse = "worse by at most" if shown else "may be worse by up to"
            size = f"{worse} {_points(-self.bound)}"
        head = (
            "candidate is non-inferior"
            if self.claim is Claim.NON_INFERIOR
            else "cannot claim non-inferiority"
        )
        return f"{head}: {size} {level}, {margin}, {cases}"


def _points(fraction: float) -> str:
    shown = round(fraction * 100, 1)
    return f"{shown:g} point{'' if shown == 1 else 's'}"


def _agresti_min(b: int, c: int, n: int, z: float) -> tuple[float, float]:
    """Agresti-Min: add 1/2 to each of the four cells before the Wald formula."""
    bb, cc, nn = b + 0.5, c + 0.5, n + 2
    centre = (cc - bb) / nn
    variance = ((bb + cc) - (cc - bb) ** 2 / nn) / nn**2
    half = z * math.sqrt(max(variance, 0.0))
    return max(-1.0, centre - half), min(1.0, centre + half)


def paired_test(pairs: Iterable[tuple[bool, bool]]) -> PairedResult:
    """McNemar exact test and a 95% interval on (reference passed, candidate passed) pairs."""
    a = b = c = d = 0
    for ref, cand in pairs:
        if ref and cand:
            a += 1
        elif ref:
            b += 1
        elif cand:
            c += 1
        else:
            d += 1
    n = a + b + c + d
    p_value = binom_two_sided_half(b, b + c)
    if n == 0:
        return PairedResult(0, 0, 0, 0, 0, None, None, None, p_value)
    diff = (c - b) / n
    low, high = _agresti_min(b, c, n, Z95)
    return PairedResult(n, a, b, c, d, diff, low, high, p_value)


def describe(result: PairedResult, scope: str, alpha: float = 0.05) -> str:
    """One sentence a reviewer can paste: the direction, size, interval, p and the n."""
    if result.n == 0:
        return f"{scope}: no paired cases"
    points = f"{result.diff * 100:+.0f} points" if result.diff is not None else "n/a"
    interval = (
        f"[{result.low * 100:+.0f}, {result.high * 100:+.0f}]"
        if result.low is not None and result.high is not None
        else ""
    )
    cases = "paired case" if result.n == 1 else "paired cases"
    stats = f"{points} {interval}, {_p(result.p_value)}, {result.n} {cases}"
    if result.significant(alpha):
        where = "overall" if scope == "overall" else f"on {scope}"
        return f"candidate {result.direction} {where}: {stats}"
    return f"{scope}: no significant difference ({stats})"


def _p(value: float) -> str:
    return "p < 0.001" if value < 0.001 else f"p = {value:.3f}"
