"""A run's budget (`budget_usd`): checked before every attempt of every call, failing closed.

Before an attempt is sent (a retry is an attempt too) the run's spend so far, plus what the
attempts in flight hold, plus this attempt's estimate must stay within the limit. An attempt
that does not fit waits for the calls in flight to settle, and the attempts that asked after it
wait behind it, so both sides keep pace; once nothing is in flight and it
still does not fit, it is refused, and so is every attempt after it (`Budget.exhausted`). A
refused attempt is not sent: its call is stamped `cancelled` with detail `budget`, unscored and
re-callable by `--retry-unscored`. A call's hold is replaced by what it spent once it is
retried or its outcome row is written, by the rule a resume reads back from the ledgers
(`attempt_spend`), so a run, its resume and its replay count the same spend.

An estimate bounds what an attempt can cost (`Meter.estimate`). No tokenizer runs offline (and
Anthropic's is not public), so the prompt is counted as one token per UTF-8 byte of the exact
request body: a byte-level BPE or byte-fallback tokenizer never makes more tokens than bytes,
and the body's JSON keys and quotes outweigh a chat template's few tokens per message. A
request that offers tools gets `TOOLS_ALLOWANCE` more, for the system prompt a provider adds
(Anthropic documents up to 530 tokens). The reply is bounded by `max_tokens`, which every chat
request sends, at the output rate; prompt tokens at the dearer of the input and cached rates.
So as long as no reply says it used more than that, the spend never passes the limit.

Money is integer picodollars (`PICO`), so holds are released exactly and no rounding builds
up. A check and its update run with no await between them, so on one event loop no other call
can come in between: no lock is needed (as for `HttpEndpoint._pace`); an attempt that must wait
awaits an `anyio.Event` the next release sets, then checks again. `sim/budget.py` drives the
real pipeline at concurrency 64 to show it.
"""

from __future__ import annotations

import functools
import math
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from runner.jsontext import dumps
from runner.model import BUDGET, Attempt, Case, Exchange, Transport
from runner.usage import micro_usd, tokens_of

if TYPE_CHECKING:  # annotations only
    from runner.config import EndpointConfig, Price
    from runner.protocols.wire import Shape
    from runner.suite import Suite

PICO = 10**12  # picodollars per US dollar
REFUSED = BUDGET  # the error of an attempt the budget kept from being sent
TOOLS_ALLOWANCE = 600  # prompt tokens a provider may add to a request that offers tools
REQUEST_TIMEOUT = 408  # a server's own timeout: the model may have run, so never free

Key = tuple[str, str, int]


def usd(pico: int) -> float:
    """Picodollars as US dollars, to the micro-dollar (summary.json's `cost_usd` precision)."""
    return round(pico / PICO, 6)


@dataclass(frozen=True, slots=True)
class Meter:
    """One endpoint's calls as the run's budget sees them: what an attempt may cost, what a
    reply says it cost, and the budget they are kept against."""

    budget: Budget
    price: Price
    max_tokens: int
    body: Callable[[Case], Mapping[str, Any]]  # the JSON body a call of this endpoint sends

    def estimate(self, content: bytes, *, tools: bool) -> int:
        """The most an attempt sending `content` may cost, in picodollars (rounded up)."""
        prompt = len(content) + (TOOLS_ALLOWANCE if tools else 0)
        price = self.price
        rate = max(price.input_per_mtok, price.cached_input_per_mtok or 0.0)
        return math.ceil((prompt * rate + self.max_tokens * price.output_per_mtok) * 1e6)

    def estimate_body(self, body: Mapping[str, Any]) -> int:
        return self.estimate(dumps(body), tools="tools" in body)

    def estimate_case(self, case: Case) -> int:
        """The estimate of the body this endpoint sends for `case` (a recorded endpoint sends
        none: the body of the live endpoint it stands in for)."""
        return self.estimate_body(self.body(case))

    def cost(self, usage: Mapping[str, Any] | None) -> int | None:
        """What a reply's usage says it cost, in picodollars; None when it says no usage."""
        tokens = tokens_of(usage)
        if tokens is None:
            return None
        return round(micro_usd(tokens.prompt, tokens.completion, tokens.cached, self.price) * 1e6)

    @property
    def exhausted(self) -> bool:
        return self.budget.exhausted

    async def reserve(self, key: Key, estimate: int) -> bool:
        return await self.budget.reserve(key, self, estimate)

    def retried(self, key: Key, attempt: Attempt) -> None:
        self.budget.retried(key, attempt)


def meter_for(budget: Budget, cfg: EndpointConfig, shape: Shape) -> Meter:
    """An endpoint's meter; config loading made sure it has a price (`_check_budget`)."""
    from runner.protocols import wire_for

    kind = cfg.kind if cfg.kind != "recorded" else cfg.protocol or "openai-chat"
    wire = wire_for(kind)
    assert wire is not None and cfg.price is not None
    return Meter(budget, cfg.price, cfg.max_tokens, functools.partial(wire.body, cfg, shape))


def refusal(n: int) -> Attempt:
    """The attempt a budget refused: nothing was sent (`cancelled`, detail `budget`)."""
    return Attempt(n=n, transport=str(Transport.CANCELLED), elapsed_ms=0, error=REFUSED)


def refused(exchange: Exchange) -> bool:
    """Whether the budget kept this call's last attempt from being sent."""
    last = exchange.attempts[-1] if exchange.attempts else None
    return last is not None and last.error == REFUSED and last.transport == Transport.CANCELLED


def _free(attempt: Attempt) -> bool:
    """An attempt no model ran for: refused by the budget, never connected, or turned away by
    the server (a 4xx, 429 included, but not a 408, its own timeout)."""
    if attempt.error == REFUSED or attempt.transport in (
        Transport.CONNECT_ERROR,
        Transport.RATE_LIMITED,
    ):
        return True
    status = attempt.status
    return status is not None and 400 <= status < 500 and status != REQUEST_TIMEOUT


def attempt_spend(attempt: Attempt, cost: int | None, estimate: Callable[[], int]) -> int:
    """What one attempt counts against the budget, in picodollars: `cost` when its reply said
    its usage (a final attempt's), nothing when no model ran for it, else its estimate (a
    timeout, a lost connection, a reply without usage, an attempt that was retried, whose
    reply is not kept): fail closed, never zero."""
    if cost is not None:
        return cost
    return 0 if _free(attempt) else estimate()


def spend_of(exchange: Exchange, cost: int | None, estimate: Callable[[], int]) -> int:
    """What a whole call counts: each attempt by `attempt_spend`, `cost` the final one's."""
    last = len(exchange.attempts)
    return sum(
        attempt_spend(attempt, cost if n == last else None, estimate)
        for n, attempt in enumerate(exchange.attempts, 1)
    )


@dataclass(slots=True)
class _Hold:
    """What one call's attempt in flight (or awaiting its outcome row) holds."""

    meter: Meter
    estimate: int


@dataclass(frozen=True, slots=True)
class Cut:
    """The budget when it refused its first attempt: what was spent, what calls in flight
    held (none: it waits for them first), and the estimate that did not fit."""

    spent: int
    reserved: int
    estimate: int


class Budget:
    """One run's spend against its limit.

    An attempt that does not fit only because of what calls in flight hold waits for them to
    settle (their estimates are usually far above what they cost), so the run slows down near
    the limit instead of stopping early; only when nothing is held and the spend so far plus
    its estimate would pass the limit is it refused, and with it every attempt after.
    """

    def __init__(self, limit_usd: float) -> None:
        self.limit_usd = limit_usd
        self.limit = math.floor(limit_usd * PICO)
        self.spent = 0  # settled, picodollars
        self.reserved = 0  # held by attempts not yet settled
        self.exhausted = False  # once an attempt is refused, none starts again
        self.cut: Cut | None = None  # the first refusal in this process, if any
        self.cancelled: Counter[str] = Counter()  # calls not made, per side
        self._held: dict[Key, _Hold] = {}
        self._settled: anyio.Event | None = None  # set when a hold is let go
        self._line: deque[object] = deque()  # attempts waiting to reserve, first come first

    async def reserve(self, key: Key, meter: Meter, estimate: int) -> bool:
        """Whether one attempt of the call `key` may be sent; if so its estimate is held
        until the attempt is retried (`retried`) or its call's row is written (`settle`).

        Attempts are let through in the order they asked: one that waits is not overtaken
        by a later, cheaper one. Otherwise the side with the smaller estimates (a cheaper
        reference) takes every room that opens while the dearer side waits, and a run cut
        by its budget has one side's replies and no paired case to compare.
        """
        ticket = object()
        self._line.append(ticket)
        try:
            while not self.exhausted:
                first = self._line[0] is ticket
                if first and self.spent + self.reserved + estimate <= self.limit:
                    self._line.popleft()
                    self.reserved += estimate
                    self._held[key] = _Hold(meter, estimate)
                    return True
                if first and not self.reserved:  # nothing in flight can make room
                    self.exhausted = True
                    self.cut = Cut(self.spent, self.reserved, estimate)
                    break
                if self._settled is None:
                    self._settled = anyio.Event()
                await self._settled.wait()
            return False
        finally:
            if ticket in self._line:  # refused, or cancelled while it waited
                self._line.remove(ticket)
            self._wake()  # the next in line may fit now, or is refused too

    def _release(self, key: Key) -> _Hold | None:
        hold = self._held.pop(key, None)
        if hold is not None:
            self.reserved -= hold.estimate
            self._wake()
        return hold

    def _wake(self) -> None:
        if self._settled is not None:
            self._settled.set()
            self._settled = None

    def retried(self, key: Key, attempt: Attempt) -> None:
        """An attempt is retried: its hold becomes what it spent, so a call waiting out its
        backoff holds nothing (and no two retrying calls can wait on each other)."""
        hold = self._release(key)
        if hold is not None:
            estimate = hold.estimate
            self.spent += attempt_spend(attempt, None, lambda: estimate)

    def settle(self, exchange: Exchange, usage: Mapping[str, Any] | None) -> None:
        """A call's row is written: its final attempt's hold becomes what the reply says it
        cost (or its estimate: `attempt_spend`)."""
        hold = self._release(exchange.key)
        if hold is not None:
            estimate = hold.estimate
            self.spent += attempt_spend(
                exchange.attempts[-1], hold.meter.cost(usage), lambda: estimate
            )
        if refused(exchange):
            self.cancelled[exchange.side] += 1

    def count_ledgers(self, run_dir: Path, suite: Suite, meters: Mapping[str, Meter]) -> None:
        """Add what a run dir's ledgers already spent (a resume, a retry's copied rows, a
        replay) by the rule live calls settle by; a run the budget already cut stays cut."""
        from runner.regrade import read_exchanges, read_outcomes

        raw, outcomes = run_dir / "raw.jsonl", run_dir / "outcomes.jsonl"
        if not raw.exists():
            return
        usage = {}
        if outcomes.exists():
            usage = {o.key: o.usage for o in read_outcomes(outcomes) if o.usage is not None}
        for exchange in read_exchanges(raw):
            meter = meters.get(exchange.side)
            if meter is None:
                continue
            estimate = functools.partial(_estimate, exchange, meter, suite)
            self.spent += spend_of(exchange, meter.cost(usage.get(exchange.key)), estimate)
            if refused(exchange):
                self.cancelled[exchange.side] += 1
                self.exhausted = True

    def summary(self) -> dict[str, Any]:
        """summary.json's `budget`."""
        cut = self.cut
        return {
            "limit_usd": self.limit_usd,
            "spent_usd": usd(self.spent),
            "exhausted": self.exhausted,
            "cancelled": dict(sorted(self.cancelled.items())),
            "cut": None
            if cut is None
            else {
                "spent_usd": usd(cut.spent),
                "reserved_usd": usd(cut.reserved),
                "estimate_usd": usd(cut.estimate),
            },
        }


def _estimate(exchange: Exchange, meter: Meter, suite: Suite) -> int:
    """A recorded call's estimate: from the body it sent, else the body its endpoint sends for
    the case (a recorded endpoint's), else (a case gone from the fixtures) its reply alone."""
    body = exchange.request.get("body")
    if isinstance(body, Mapping):
        return meter.estimate_body(body)
    ref = suite.ref(exchange.case_id)
    if ref is None:
        return meter.estimate(b"", tools=False)
    return meter.estimate_case(suite.fixtures.load(ref))


def alert_fields(block: Mapping[str, Any]) -> dict[str, Any] | None:
    """`alert.budget`'s fields from summary.json's `budget`, or None when no call was cut."""
    cancelled = block.get("cancelled") or {}
    count = sum(cancelled.values())
    if not count:
        return None
    cut = block.get("cut") or {}
    return {
        "limit_usd": block.get("limit_usd"),
        "spent_usd": block.get("spent_usd"),
        "reserved_usd": cut.get("reserved_usd"),
        "estimate_usd": cut.get("estimate_usd"),
        "cancelled": cancelled,
        "count": count,
    }


def budget_line(summary: Mapping[str, Any]) -> str | None:
    """The summary's line about the budget (stderr, report.md, report.html), or None without
    one; read tolerantly, as every reader of a recorded summary is."""
    block = summary.get("budget")
    if not isinstance(block, Mapping):
        return None
    spent, limit = block.get("spent_usd"), block.get("limit_usd")
    if not isinstance(spent, int | float) or not isinstance(limit, int | float):
        return None
    line = f"budget: ${spent:.4f} spent of ${limit:.4f}"
    cancelled = block.get("cancelled")
    counts = cancelled if isinstance(cancelled, Mapping) else {}
    count = sum(n for n in counts.values() if isinstance(n, int))
    if count:
        sides = ", ".join(f"{side} {n}" for side, n in counts.items())
        line += (
            f"; {count} call(s) not made ({sides}): the next would have passed budget_usd. "
            "With a larger budget_usd, --retry-unscored makes them (its budget counts the "
            "scored rows it copies too)"
        )
    return line
