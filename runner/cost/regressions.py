"""Is the candidate slower or dearer than the reference allows? Latency and cost as gates.

A run's percentiles (`runner.cost.usage`) move with the night: a slow provider hour or a few calls
stuck behind a retry shift a p50 or a p90 with no change in either model. So the gates compare
the sides *per case*, the case as the unit, as the paired pass-rate test does:

- Per case and side one value: the admitted call's `elapsed_ms`, or its cost from the reply's
  usage at the endpoint's price (unrounded); with `samples > 1` the median over the samples,
  which drops a one-off stall. A case enters only when both sides were admitted in every sample
  and both values are known and above zero (a missing usage is unknown, never zero; a ratio of
  nothing has no logarithm).
- Per paired case the ratio candidate / reference, summarised as their geometric mean (the mean
  of the log ratios, turned back): a case twice as slow and one twice as fast cancel, and what
  both sides share (a long prompt, a slow hour for both) divides out.
- A confidence interval from a bootstrap over cases: `RESAMPLES` resamples of the paired cases
  with replacement, the geometric mean of each; the interval is their `alpha` and `1 - alpha`
  quantiles, the two-sided `1 - 2 alpha` interval (90% at the default 0.05). Past
  `MAX_DRAWS` paired cases each resample draws `MAX_DRAWS` of them and its deviation from the
  full mean is scaled by sqrt(MAX_DRAWS / n) (the m-out-of-n bootstrap, Bickel, Goetze and van
  Zwet 1997, consistent for a mean): at 20,000 cases the interval is the one the plain
  bootstrap gives to a few per mille, and drawing it costs a tenth as much (seconds otherwise,
  as the stdlib draws a case at a time).

The rule: **regression when the interval's lower end is above the limit** (`latency_ratio_max`,
`cost_ratio_max`). That lower end is a one-sided `1 - alpha` bound, so a candidate truly exactly
at the limit is called a regression in about `alpha` of the nights, and one with no true
difference far less often; a few outliers widen the interval instead of moving the decision.
This is the bound the non-inferiority claim uses, turned around: here the burden is on the
regression, so a noisy night does not page anyone. `sim/latency.py` measures its power and
false alarms on known truth, through the real pipeline.

Fewer than `MIN_PAIRS` paired cases leave the percentile bootstrap no trustworthy tail (it
under-covers on a handful of values): the finding is `undecided`, which a gate treats as not
cleared, as non-inferiority treats its own.

The resamples are drawn from a generator seeded with a digest of the log ratios in case-id
order, so the run, its resume and its replay, which hold the same exchanges, draw the same
resamples and reach the same decision, whatever their run ids (a replay has its own) and in
whatever order the calls came back. The log ratios are summed with `math.fsum`, exact
whatever the order and the Python version.

Per case and side a fold keeps one float per metric as rows are written (1.6 MB at 20,000
cases, the slot index included), for run, resume and replay alike; with repeated samples, a
side's values only until its last sample is in.
"""

from __future__ import annotations

import hashlib
import math
import random
import statistics
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from runner import logs
from runner.cost.usage import Call, micro_usd
from runner.model import SIDES

if TYPE_CHECKING:  # annotations only
    from runner.config import Price, Thresholds

MIN_PAIRS = 10
RESAMPLES = 1000
MAX_DRAWS = 2000  # cases drawn per resample; more are drawn m out of n (module docstring)
_UNKNOWN = math.nan


class Metric(StrEnum):
    """What a regression gate compares per case."""

    LATENCY = "latency"
    COST = "cost"

    @property
    def fail_on(self) -> str:
        """Its `fail_on` entry, and its flag in summary.json."""
        return f"{self.value}_regression"

    @property
    def threshold(self) -> str:
        """Its key in `[thresholds]`."""
        return f"{self.value}_ratio_max"

    @property
    def event(self) -> str:
        return logs.ALERT_LATENCY if self is Metric.LATENCY else logs.ALERT_COST


class Finding(StrEnum):
    """What the per-case ratios let one say."""

    REGRESSION = "regression"  # the interval's lower end is above the limit
    NO_REGRESSION = "no_regression"  # a ratio above the limit is not shown
    UNDECIDED = "undecided"  # fewer than MIN_PAIRS paired cases


@dataclass(frozen=True, slots=True)
class RatioTest:
    """One gate's decision and the figures behind it, as summary.json carries them."""

    metric: Metric
    finding: Finding
    limit: float
    level: float  # two-sided level of [low, high]; low is a one-sided bound at (1 + level) / 2
    ratio: float | None  # geometric mean of candidate / reference over the paired cases
    low: float | None
    high: float | None
    pairs: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {
            "metric": self.metric.value,
            "finding": self.finding.value,
            "text": self.text,
        }

    @property
    def fires(self) -> bool:
        """Whether the gate is not cleared: a regression, or too few pairs to rule one out."""
        return self.finding is not Finding.NO_REGRESSION

    @property
    def text(self) -> str:
        """The decision in words, after the metric's name (`latency: ...`), e.g. "candidate
        slower: x1.31 per case (90% interval x1.24-x1.38), above the limit x1.10, 200 paired
        cases" or "no regression shown: x1.02 per case (...), limit x1.10, 200 paired cases"."""
        limit = f"x{self.limit:.2f}"
        cases = f"{self.pairs} paired case{'' if self.pairs == 1 else 's'}"
        if self.finding is Finding.UNDECIDED:
            return f"undecided: {cases}, at least {MIN_PAIRS} needed (limit {limit})"
        figures = (
            f"x{self.ratio:.2f} per case "
            f"({self.level * 100:g}% interval x{self.low:.2f}-x{self.high:.2f})"
        )
        if self.finding is Finding.REGRESSION:
            worse = "slower" if self.metric is Metric.LATENCY else "dearer"
            return f"candidate {worse}: {figures}, above the limit {limit}, {cases}"
        return f"no regression shown: {figures}, limit {limit}, {cases}"


def ratio_test(
    metric: Metric, pairs: Sequence[tuple[float, float]], limit: float, alpha: float
) -> RatioTest:
    """The gate's decision on (reference, candidate) values per case, in case-id order."""
    level = 1.0 - 2.0 * alpha
    logs_ = [math.log(cand / ref) for ref, cand in pairs]
    n = len(logs_)
    if n < MIN_PAIRS:
        ratio = math.exp(math.fsum(logs_) / n) if n else None
        return RatioTest(metric, Finding.UNDECIDED, limit, level, _round(ratio), None, None, n)
    seed = int.from_bytes(hashlib.sha256(array("d", logs_).tobytes()).digest()[:8], "big")
    rng = random.Random(seed)  # noqa: S311 - resampling, no secret: it must be reproducible
    centre = math.fsum(logs_) / n
    draws = min(n, MAX_DRAWS)
    scale = math.sqrt(draws / n)  # 1 up to MAX_DRAWS cases: the plain bootstrap
    means = sorted(
        centre + (math.fsum(rng.choices(logs_, k=draws)) / draws - centre) * scale
        for _ in range(RESAMPLES)
    )
    cut = math.ceil(alpha * RESAMPLES)
    low, high = math.exp(means[cut - 1]), math.exp(means[RESAMPLES - cut])
    finding = Finding.REGRESSION if low > limit else Finding.NO_REGRESSION
    ratio = math.exp(centre)
    return RatioTest(metric, finding, limit, level, _round(ratio), _round(low), _round(high), n)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


class PairFold:
    """Per case and side, its latency and its cost, as the rows are kept (`gate.Folds`)."""

    def __init__(self, samples: int, prices: Mapping[str, Price | None]) -> None:
        self._samples = samples
        self._prices = {side: prices.get(side) for side in SIDES}
        self._slots: dict[str, int] = {}  # case id -> index into the arrays
        # per side (latency, cost) by slot; NaN until known (`array` keeps a double a value)
        self._values = {side: (array("d"), array("d")) for side in SIDES}
        self._pending: dict[tuple[str, str], list[tuple[float, float]]] = {}

    def add(self, case_id: str, side: str, call: Call) -> None:
        """One kept row's call (the first of its case, side and sample: `Folds.put`)."""
        if side not in self._prices:  # the noise check's side is no candidate
            return
        latency, cost = self._value(side, call)
        if self._samples > 1:
            rows = self._pending.setdefault((case_id, side), [])
            rows.append((latency, cost))
            if len(rows) < self._samples:
                return
            del self._pending[(case_id, side)]
            latency, cost = _median([v[0] for v in rows]), _median([v[1] for v in rows])
        slot = self._slots.get(case_id)
        if slot is None:
            slot = self._slots[case_id] = len(self._slots)
            for latencies, costs in self._values.values():
                latencies.append(_UNKNOWN)
                costs.append(_UNKNOWN)
        latencies, costs = self._values[side]
        latencies[slot], costs[slot] = latency, cost

    def _value(self, side: str, call: Call) -> tuple[float, float]:
        """(latency, cost) of one call; NaN where unknown (a latency no one measured), and both
        for an unadmitted call."""
        if not call.admitted:  # the case is no pair
            return _UNKNOWN, _UNKNOWN
        latency = _UNKNOWN if call.elapsed_ms is None else call.elapsed_ms
        price, tokens = self._prices[side], call.tokens
        if price is None or tokens is None:
            return latency, _UNKNOWN
        # in dollars, unrounded: a small call rounded to the micro-dollar would skew its ratio
        cost = micro_usd(tokens.prompt, tokens.completion, tokens.cached, price) / 1_000_000
        return latency, cost

    def pairs(self, metric: Metric) -> list[tuple[float, float]]:
        """(reference, candidate) per case with both values known and above zero, by case id:
        milliseconds, or dollars."""
        return list(self.paired(metric).values())

    def paired(self, metric: Metric) -> dict[str, tuple[float, float]]:
        """The paired cases by id, each with its (reference, candidate): the cases a report
        links the gate's reason to."""
        which = 0 if metric is Metric.LATENCY else 1
        ref, cand = (self._values[side][which] for side in SIDES)
        found = {}
        for case_id in sorted(self._slots):
            slot = self._slots[case_id]
            r, c = ref[slot], cand[slot]
            if r > 0 and c > 0:  # NaN compares false
                found[case_id] = (r, c)
        return found


def _median(values: Sequence[float]) -> float:
    """The samples' median; unknown when any sample's value is."""
    return _UNKNOWN if any(math.isnan(v) for v in values) else statistics.median(values)


def regressions(
    fold: PairFold, thresholds: Thresholds, fail_on: Sequence[str], alpha: float
) -> dict[str, Any]:
    """summary.json's `regressions`: per metric its test and whether it gates, or None when
    its threshold is unset (the question was not asked)."""
    out: dict[str, Any] = {}
    for metric in Metric:
        limit = getattr(thresholds, metric.threshold)
        if limit is None:
            out[metric.value] = None
            continue
        test = ratio_test(metric, fold.pairs(metric), limit, alpha)
        out[metric.value] = test.to_json() | {
            "fires": test.fires,
            "gating": metric.fail_on in fail_on,
        }
    return out


def fired(block: Mapping[str, Any]) -> dict[str, bool]:
    """Per `fail_on` entry, whether its test was asked and not cleared."""
    return {metric.fail_on: bool((block.get(metric.value) or {}).get("fires")) for metric in Metric}


def log_alerts(log: Any, block: Mapping[str, Any]) -> None:
    """`alert.latency` / `alert.cost` for each test asked and not cleared, with its figures."""
    for metric in Metric:
        test = block.get(metric.value)
        if test and test.get("fires"):
            log.warning(
                metric.event,
                text=test["text"],
                finding=test["finding"],
                ratio=test["ratio"],
                low=test["low"],
                high=test["high"],
                interval_level=test["level"],  # `level` is the log line's own
                limit=test["limit"],
                pairs=test["pairs"],
                gating=test["gating"],
            )


def lines(summary: Mapping[str, Any]) -> list[tuple[str, bool]]:
    """For the stderr summary and the reports, per test asked its line (`latency: candidate
    slower: ...`) and whether it fires; read tolerantly, as a summary from before the gates
    existed, or edited by hand, may have none."""
    block = summary.get("regressions")
    if not isinstance(block, Mapping):
        return []
    shown = []
    for metric in Metric:
        test = block.get(metric.value)
        if isinstance(test, Mapping) and isinstance(text := test.get("text"), str):
            gates = " (gates: fail_on)" if test.get("gating") is True else ""
            shown.append((f"{metric.value}: {text}{gates}", test.get("fires") is True))
    return shown


def finished_fields(summary: Mapping[str, Any]) -> dict[str, Any]:
    """`run.finished`'s figures: per metric asked its finding, ratio, interval, limit, pairs."""
    block = summary.get("regressions") or {}
    keys = ("finding", "ratio", "low", "high", "limit", "pairs")
    return {
        "regressions": {
            metric.value: (
                None if not block.get(metric.value) else {k: block[metric.value][k] for k in keys}
            )
            for metric in Metric
        }
    }
