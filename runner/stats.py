"""A paired test that tells a regression from noise.

Reference and candidate answer the same cases, so their pass/fail results are paired data; an
unpaired test on them throws away most of the signal. Only the discordant pairs carry
information about a difference: `b` cases the reference passed and the candidate failed, `c`
the other way round. The exact McNemar test is a two-sided binomial test of b against
b + c at one half; the interval on the difference in pass rate is Agresti and Min's (2005)
adjusted Wald interval, which behaves at zero discordant pairs where plain Wald collapses.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

Z95 = 1.959963984540054


def binom_two_sided_half(k: int, n: int) -> float:
    """Exact two-sided p-value of k successes in n trials at p = 1/2."""
    if n == 0:
        return 1.0
    low = min(k, n - k)
    tail = sum(math.comb(n, i) for i in range(low + 1)) / 2.0**n
    return min(1.0, 2.0 * tail)


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
    # Agresti-Min: add 1/2 to each of the four cells before the Wald formula.
    bb, cc, nn = b + 0.5, c + 0.5, n + 2
    centre = (cc - bb) / nn
    variance = ((bb + cc) - (cc - bb) ** 2 / nn) / nn**2
    half = Z95 * math.sqrt(max(variance, 0.0))
    low, high = max(-1.0, centre - half), min(1.0, centre + half)
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
