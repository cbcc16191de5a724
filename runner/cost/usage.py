"""What each side of a run used and cost, and how fast it answered: summary.json's `usage`.

Folded from the outcome rows as they are written (`gate.Folds` hands each row it keeps to
`UsageFold.add`), so a replay, which regrades the same rows, gives the same block, and no
ledger is read back. Per side and stratum a fold keeps counters and two compact arrays of
ints (the latencies of admitted calls and the time to first token of admitted streams):
percentiles need the values, and four bytes a call keep a 20,000-case run small.

Tokens are read in one shape (`Tokens`: the prompt, the completion and the prompt's cached
part) by the protocol that sent them (`Wire.tokens`, in that protocol's own module): an outcome
row keeps the usage as the reply said it, and the caller names the protocol (the gate its
side's endpoint's, as it names the price). A call whose usage is missing or not numbers (a
timeout, a reply without it) is counted apart: its cost is unknown, never zero. So is one whose
counts are past any call's (`wire.MAX_TOKENS`): a reply that claims a 401-digit prompt would
otherwise price past what a float holds, and stop the run on every resume and replay.

Money is float-only and exact to the cent: tokens are summed as integers and priced once per
side and stratum, `(uncached * input + cached * cached_input + completion * output) / 1e6`,
rounded to the micro-dollar, so no per-call rounding ever accumulates.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from runner.model import NOT_SENT_DETAIL, Outcome, Transport
from runner.protocols import wire_for
from runner.protocols.wire import Tokens

if TYPE_CHECKING:  # annotations only
    from runner.config import Price

PERCENTILES = (50, 90, 99)
_INT_MAX = 2**32 - 1  # what an array('I') holds: a call longer than 49 days is clamped


@dataclass(frozen=True, slots=True)
class Call:
    """What the usage fold reads of one outcome row: small enough to cross a process."""

    stratum: str | None
    tokens: Tokens | None
    elapsed_ms: int | None  # admitted calls only, and only when a time was measured
    ttft_ms: int | None  # admitted streams only
    sent: bool = True  # False for a call the run's budget kept from being made: no call, no cost
    admitted: bool = True  # the admission rule: only these enter a paired comparison


def tokens_of(kind: str, usage: Mapping[str, Any] | None) -> Tokens | None:
    """A reply's usage in one shape, as the protocol of that kind reads it (`Wire.tokens`), or
    None when it says no prompt and completion counts, claims a count past `wire.MAX_TOKENS`
    anywhere (a cache count too: it is no usage to believe), or the kind is no protocol."""
    wire = wire_for(kind)
    if wire is None or not isinstance(usage, Mapping):
        return None
    return wire.tokens(usage)


def call_of(outcome: Outcome, kind: str) -> Call:
    """What the fold reads of a row whose reply came in the protocol of that `kind`."""
    admitted = outcome.admitted
    return Call(
        stratum=outcome.stratum,
        tokens=tokens_of(kind, outcome.usage),
        elapsed_ms=outcome.elapsed_ms if admitted else None,
        ttft_ms=outcome.ttft_ms if admitted else None,
        sent=outcome.detail != NOT_SENT_DETAIL or outcome.transport != Transport.CANCELLED,
        admitted=admitted,
    )


@dataclass(slots=True)
class _Tally:
    """One side of one stratum."""

    calls: int = 0
    with_usage: int = 0
    prompt: int = 0
    completion: int = 0
    cached: int = 0
    latency: array[int] = field(default_factory=lambda: array("I"))
    ttft: array[int] = field(default_factory=lambda: array("I"))

    def add(self, call: Call) -> None:
        if not call.sent:  # counted by summary.json's `budget`, not as a call of unknown cost
            return
        self.calls += 1
        if call.tokens is not None:
            self.with_usage += 1
            self.prompt += call.tokens.prompt
            self.completion += call.tokens.completion
            self.cached += call.tokens.cached
        if call.elapsed_ms is not None:
            self.latency.append(min(max(call.elapsed_ms, 0), _INT_MAX))
        if call.ttft_ms is not None:
            self.ttft.append(min(max(call.ttft_ms, 0), _INT_MAX))

    def merge(self, other: _Tally) -> None:
        self.calls += other.calls
        self.with_usage += other.with_usage
        self.prompt += other.prompt
        self.completion += other.completion
        self.cached += other.cached
        self.latency.extend(other.latency)
        self.ttft.extend(other.ttft)


def percentiles(values: array[int] | list[int]) -> dict[str, int] | None:
    """Nearest-rank p50/p90/p99 (always a value that was seen), or None with no values."""
    if not values:
        return None
    ordered = sorted(values)
    n = len(ordered)
    return {f"p{p}": ordered[max(math.ceil(p * n / 100), 1) - 1] for p in PERCENTILES}


def micro_usd(prompt: int, completion: int, cached: int, price: Price) -> float:
    """The cost of these token totals at `price` in micro-dollars, unrounded (`runner.cost.budget`
    sums it per call)."""
    cached_rate = (
        price.input_per_mtok if price.cached_input_per_mtok is None else price.cached_input_per_mtok
    )
    return (
        (prompt - cached) * price.input_per_mtok
        + cached * cached_rate
        + completion * price.output_per_mtok
    )


def cost_usd(prompt: int, completion: int, cached: int, price: Price) -> float:
    """The cost of these token totals at `price`, rounded to the micro-dollar."""
    return round(micro_usd(prompt, completion, cached, price) / 1_000_000, 6)


class UsageFold:
    """Calls folded per side and stratum as their rows are kept."""

    def __init__(self) -> None:
        self._tallies: dict[tuple[str, str | None], _Tally] = {}

    def add(self, side: str, call: Call) -> None:
        key = (side, call.stratum)
        tally = self._tallies.get(key)
        if tally is None:
            tally = self._tallies[key] = _Tally()
        tally.add(call)

    def summary(
        self, prices: Mapping[str, Price | None], sides: tuple[str, ...], *, stratified: bool
    ) -> dict[str, Any]:
        """summary.json's `usage`: per side (each of `sides`, and any other side seen, such
        as the noise check's), overall and per stratum, and the candidate/reference ratios."""
        seen = list(sides) + sorted({s for s, _ in self._tallies} - set(sides))
        out: dict[str, Any] = {}
        for side in seen:
            strata = {
                stratum: tally
                for (s, stratum), tally in sorted(
                    self._tallies.items(), key=lambda item: str(item[0][1])
                )
                if s == side
            }
            overall = _Tally()
            for tally in strata.values():
                overall.merge(tally)
            price = prices.get(side)
            block = _block(overall, price)
            if stratified:
                block["strata"] = {
                    str(stratum): _block(tally, price)
                    for stratum, tally in strata.items()
                    if stratum is not None
                }
            out[side] = block
        ratios: dict[str, Any] = {"overall": _ratios(out, None)}
        if stratified:
            names = sorted(
                {n for side in ("reference", "candidate") for n in out[side].get("strata", {})}
            )
            ratios["strata"] = {name: _ratios(out, name) for name in names}
        return {"sides": out, "ratios": ratios}


def _block(tally: _Tally, price: Price | None) -> dict[str, Any]:
    return {
        "calls": tally.calls,
        "calls_with_usage": tally.with_usage,
        "prompt_tokens": tally.prompt,
        "completion_tokens": tally.completion,
        "total_tokens": tally.prompt + tally.completion,
        "cached_prompt_tokens": tally.cached,
        "cost_usd": (
            None if price is None else cost_usd(tally.prompt, tally.completion, tally.cached, price)
        ),
        # without a price every call's cost is unknown; with one, the calls without usage
        "cost_unknown_calls": tally.calls if price is None else tally.calls - tally.with_usage,
        "latency_ms": percentiles(tally.latency),
        "ttft_ms": percentiles(tally.ttft),
    }


def _ratio(candidate: Any, reference: Any) -> float | None:
    if not isinstance(candidate, int | float) or not isinstance(reference, int | float):
        return None
    return round(candidate / reference, 4) if reference > 0 else None


def _ratios(sides: Mapping[str, Any], stratum: str | None) -> dict[str, float | None]:
    """candidate / reference; None where either side has nothing to compare."""

    def pick(side: str) -> Mapping[str, Any]:
        block = sides.get(side) or {}
        found = block if stratum is None else (block.get("strata") or {}).get(stratum)
        return found or {}

    ref, cand = pick("reference"), pick("candidate")

    def p(block: Mapping[str, Any], key: str, rank: str) -> Any:
        return (block.get(key) or {}).get(rank)

    return {
        "cost_usd": _ratio(cand.get("cost_usd"), ref.get("cost_usd")),
        "total_tokens": _ratio(cand.get("total_tokens"), ref.get("total_tokens")),
        "latency_p50": _ratio(p(cand, "latency_ms", "p50"), p(ref, "latency_ms", "p50")),
        "latency_p90": _ratio(p(cand, "latency_ms", "p90"), p(ref, "latency_ms", "p90")),
        "ttft_p50": _ratio(p(cand, "ttft_ms", "p50"), p(ref, "ttft_ms", "p50")),
    }


def side_lines(summary: Mapping[str, Any]) -> list[str]:
    """The stderr summary's line per side that made calls, reference first."""
    usage = summary.get("usage")
    sides = usage.get("sides") if isinstance(usage, Mapping) else None
    if not isinstance(sides, Mapping):
        return []
    return [
        side_line(side, block)
        for side, block in _ordered(sides)
        if isinstance(block, Mapping) and block.get("calls")
    ]


def side_line(side: str, block: Mapping[str, Any]) -> str:
    """One human line for one side: calls, tokens, cost and latency."""
    cost = block.get("cost_usd")
    money = "cost unpriced" if cost is None else f"${cost:.4f}"
    unknown = block.get("cost_unknown_calls") or 0
    if cost is not None and unknown:
        money += f" (+{unknown} call(s) unknown)"
    latency = block.get("latency_ms") or {}
    speed = (
        f"p50 {latency.get('p50')} ms · p90 {latency.get('p90')} ms" if latency else "no latency"
    )
    tokens = f"{block.get('total_tokens')} tokens" if block.get("calls_with_usage") else "no usage"
    return f"{side}: {block.get('calls', 0)} call(s) · {tokens} · {money} · {speed}"


def usage_fields(summary: Mapping[str, Any]) -> dict[str, Any]:
    """`run.finished`'s figures: cost and tokens per side (None when unpriced)."""
    sides = (summary.get("usage") or {}).get("sides") or {}
    return {
        "cost_usd": {side: block.get("cost_usd") for side, block in sides.items()},
        "tokens": {side: block.get("total_tokens") for side, block in sides.items()},
    }


COLUMNS = (
    "side",
    "calls",
    "with usage",
    "prompt",
    "completion",
    "cached",
    "cost USD",
    "cost unknown",
    "p50 ms",
    "p90 ms",
    "p99 ms",
    "ttft p50 ms",
)


def _ordered(sides: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """Reference first, then candidate, then any other side (summary.json sorts its keys)."""
    order = ("reference", "candidate")
    return sorted(
        ((str(k), v) for k, v in sides.items()),
        key=lambda item: (order.index(item[0]) if item[0] in order else 2, item[0]),
    )


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def table(summary: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """The report's per-side rows (`COLUMNS`), and the candidate/reference ratios; none for a
    summary without usage (a run from before it was recorded)."""
    usage = summary.get("usage")
    sides = usage.get("sides") if isinstance(usage, Mapping) else None
    if not isinstance(sides, Mapping):
        return []
    rows = []
    for side, block in _ordered(sides):
        if not isinstance(block, Mapping) or not block.get("calls"):
            continue
        latency = block.get("latency_ms") if isinstance(block.get("latency_ms"), Mapping) else {}
        ttft = block.get("ttft_ms") if isinstance(block.get("ttft_ms"), Mapping) else {}
        rows.append(
            (
                str(side),
                *(
                    _cell(block.get(k))
                    for k in (
                        "calls",
                        "calls_with_usage",
                        "prompt_tokens",
                        "completion_tokens",
                        "cached_prompt_tokens",
                        "cost_usd",
                        "cost_unknown_calls",
                    )
                ),
                *(_cell((latency or {}).get(p)) for p in ("p50", "p90", "p99")),
                _cell((ttft or {}).get("p50")),
            )
        )
    ratios = usage.get("ratios") if isinstance(usage, Mapping) else None
    overall = ratios.get("overall") if isinstance(ratios, Mapping) else None
    if rows and isinstance(overall, Mapping):
        rows.append(
            (
                "candidate / reference",
                "",
                "",
                "",
                "",
                "",
                _cell(overall.get("cost_usd")),
                "",
                _cell(overall.get("latency_p50")),
                _cell(overall.get("latency_p90")),
                "",
                _cell(overall.get("ttft_p50")),
            )
        )
    return rows


def trend(summary: Mapping[str, Any]) -> dict[str, Any]:
    """What `history` keeps of a run's usage: per side its cost, tokens and median latency."""
    usage = summary.get("usage")
    sides = usage.get("sides") if isinstance(usage, Mapping) else None
    if not isinstance(sides, Mapping):
        return {}
    out: dict[str, Any] = {}
    for side, block in _ordered(sides):
        if isinstance(block, Mapping) and block.get("calls"):
            latency = block.get("latency_ms")
            out[str(side)] = {
                "cost_usd": block.get("cost_usd"),
                "total_tokens": block.get("total_tokens"),
                "latency_p50_ms": latency.get("p50") if isinstance(latency, Mapping) else None,
            }
    return out


def trend_line(sides: Mapping[str, Any]) -> str:
    """history's line under a run: each side's cost, tokens and median latency."""
    parts = []
    for side, figures in sides.items():
        if not isinstance(figures, Mapping):
            continue
        cost = figures.get("cost_usd")
        money = f"${cost:.4f}" if isinstance(cost, int | float) else "unpriced"
        p50 = figures.get("latency_p50_ms")
        latency = "no latency" if p50 is None else f"p50 {_cell(p50)} ms"  # none measured
        parts.append(f"{side} {money}, {_cell(figures.get('total_tokens'))} tokens, {latency}")
    return "usage: " + "; ".join(parts) if parts else ""
