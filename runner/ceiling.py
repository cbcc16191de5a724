"""Strata pass rates and the ceiling detector (seed 000), one side at a time.

A 100% pass rate is often a measurement failure: easy cases guard breakage, medium ones the
product contract, and stretch ones must keep failing or the yardstick has slipped. Rates count
admitted rows only, and every rate carries the number of rows it stands on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from runner.config import Thresholds
from runner.model import STRATA

Rates = dict[str, dict[str, Any]]


def strata_rates(results: Iterable[tuple[str | None, bool | None]]) -> Rates:
    """(stratum, passed) per case; passed None means unadmitted and is counted apart."""
    buckets = {name: {"n": 0, "passed": 0, "unadmitted": 0} for name in STRATA}
    for stratum, passed in results:
        slot = buckets[stratum or "medium"]
        if passed is None:
            slot["unadmitted"] += 1
            continue
        slot["n"] += 1
        slot["passed"] += int(passed)
    return {
        name: {**slot, "pass_rate": (slot["passed"] / slot["n"]) if slot["n"] else None}
        for name, slot in buckets.items()
    }


def detect(
    rates: Mapping[str, Mapping[str, Any]], thresholds: Thresholds, *, whole: bool = True
) -> list[str]:
    """Alerts that refuse a green verdict: a blind harness is as bad as a regression.

    `missing_stratum` and `thin_stratum` judge the suite, so they count its cases; rows that
    could not be scored are the run's trouble (exit 2, unscored: infrastructure or a side's
    format failure), not a review of the suite. A ceiling is still only claimed on at least two
    admitted rows in every stratum. Not `whole` (a partial run: some of the suite's cases),
    only the floors are asked of the cases it has: the suite's shape is a whole run's to judge.
    """
    alerts: list[str] = []
    if not whole:
        return _floors(rates, thresholds)
    cases = [int(rates[name]["n"]) + int(rates[name]["unadmitted"]) for name in STRATA]
    easy, medium, stretch = (rates[name]["pass_rate"] for name in STRATA)
    if any(n == 0 for n in cases):
        alerts.append("missing_stratum")
    if any(n == 1 for n in cases):
        alerts.append("thin_stratum")
    seen = all(int(rates[name]["n"]) >= 2 for name in STRATA)
    if easy is not None and medium is not None and stretch is not None and seen and not alerts:
        if easy >= 0.99 and medium >= 0.95 and stretch >= thresholds.stretch_high:
            alerts.append("ceiling")
        if stretch >= thresholds.stretch_high:
            alerts.append("stretch_too_easy")
    return alerts + _floors(rates, thresholds)


def _floors(rates: Mapping[str, Mapping[str, Any]], thresholds: Thresholds) -> list[str]:
    """The easy and medium pass rates below their floors."""
    alerts = []
    easy, medium = rates["easy"]["pass_rate"], rates["medium"]["pass_rate"]
    if easy is not None and easy < thresholds.easy_floor:
        alerts.append("easy_regression")
    if medium is not None and medium < thresholds.medium_floor:
        alerts.append("medium_regression")
    return alerts
