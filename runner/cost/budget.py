"""A run's budget (`budget_usd`): checked before every attempt of every call, failing closed.

The unit it reserves for is the case: the first call of a case to ask (whichever side asked
first) reserves the estimates of all of the case's calls still to make, on every side and in
every sample, and the case's other calls then go out on their part of that reservation
without asking again. So a run the budget cuts has spent on whole cases, both sides of each,
and its paired comparison stands on them; reserving call by call, the side whose workers
asked first (at concurrency 256, all of them) took all the room and a cut run had no pair.

Before a case is admitted the run's spend so far, plus what is held (the attempts in flight
and the parts of admitted cases not yet called), plus the case's estimate must stay within
the limit; a retry (an attempt too) asks for its own estimate the same way. One that does not
fit waits for the attempts in flight to settle, and those that asked after it wait behind it;
once nothing that could make room is left and it still does not fit, it is refused, and so is
every case and retry after it (`Budget.exhausted`); the admitted cases' calls still go out on
their parts. A refused attempt is not sent: its call is stamped `cancelled` with detail
`budget`, unscored and re-callable by `--retry-unscored`. A call's hold is replaced by what it
spent once it is retried or its outcome row is written, by the rule a resume reads back from
the ledgers (`attempt_spend`), so a run, its resume and its replay count the same spend.

An estimate bounds what an attempt can cost (`Meter.estimate`). No tokenizer runs offline (and
Anthropic's is not public), so the prompt is counted as one token per UTF-8 byte of the exact
request body: a byte-level BPE or byte-fallback tokenizer never makes more tokens than bytes,
and the body's JSON keys and quotes outweigh a chat template's few tokens per message. A
request that offers tools gets `TOOLS_ALLOWANCE` more, for the system prompt a provider adds
(Anthropic documents up to 530 tokens). The reply is bounded by `max_tokens`, which a budget
requires each endpoint to set and every chat request sends, at the output rate; prompt tokens
at the dearer of the input and cached rates. So as long as no reply says it used more than
that, the spend never passes the limit; a reply that does is logged
(`alert.usage_over_estimate`).

Money is integer picodollars (`PICO`), so holds are released exactly and no rounding builds
up. A check and its update run with no await between them, so on one event loop no other call
can come in between: no lock is needed (as for `HttpEndpoint._pace`); an attempt that must wait
awaits an `anyio.Event` the next release sets, then checks again. `sim/budget.py` drives the
real pipeline at concurrency 64 to show it, and `tests/test_budget.py` at 256.
"""

from __future__ import annotations

import functools
import math
from collections import Counter, deque
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from runner import logs
from runner.cost.usage import micro_usd, tokens_of
from runner.jsontext import dumps
from runner.model import BUDGET, Attempt, Case, Exchange, Transport

if TYPE_CHECKING:  # annotations only
    from runner.config import EndpointConfig, Price
    from runner.request.shape import Shape
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
    kind: str  # the protocol it speaks, which reads a reply's usage

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
        tokens = tokens_of(self.kind, usage)
        if tokens is None:
            return None
        return round(micro_usd(tokens.prompt, tokens.completion, tokens.cached, self.price) * 1e6)

    def refuses(self, key: Key, attempt: int) -> bool:
        """Whether this attempt is refused without asking (`Budget.refuses`)."""
        return self.budget.refuses(key, attempt)

    async def reserve(self, key: Key, estimate: int, case: Case, attempt: int) -> bool:
        return await self.budget.reserve(key, self, estimate, case, attempt)

    def retried(self, key: Key, attempt: Attempt) -> None:
        self.budget.retried(key, attempt)

    def unsent(self, key: Key) -> None:
        self.budget.unsent(key)


def meter_for(budget: Budget, cfg: EndpointConfig, shape: Shape) -> Meter:
    """An endpoint's meter; config loading made sure it has a price (`_check_budget`)."""
    from runner.protocols import wire_for

    kind = cfg.wire_kind
    wire = wire_for(kind)
    price = cfg.charged_price  # a batch endpoint's at its batch_discount
    assert wire is not None and price is not None
    return Meter(budget, price, cfg.max_tokens, functools.partial(wire.body, cfg, shape), kind)


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
    """The budget when it refused its first attempt: what was spent, what was held (the
    parts of admitted cases not yet called; nothing in flight: it waits for that first), and
    the estimate that did not fit (a whole case's, or a retry's)."""

    spent: int
    reserved: int
    estimate: int


@dataclass(frozen=True, slots=True)
class _Plan:
    """The calls this process makes (`Budget.plan`): each ledger side's meter and workers,
    the samples per case, and the calls already in the ledgers, which are not made again."""

    meters: Mapping[str, Meter]
    workers: Mapping[str, int]
    samples: int
    done: Container[Key]


class Budget:
    """One run's spend against its limit.

    A case, or a retry, that does not fit only because of what is held waits for it to settle
    (estimates are usually far above what calls cost), so the run slows down near the limit
    instead of stopping early; it is refused, and with it every case and retry after it, only
    once nothing that could make room is left: no attempt in flight, and no admitted case's
    call that could still start (its side's workers are not all waiting here themselves).
    """

    def __init__(self, limit_usd: float) -> None:
        self.limit_usd = limit_usd
        self.limit = math.floor(limit_usd * PICO)
        self.spent = 0  # settled, picodollars
        self.reserved = 0  # held by attempts not yet settled and by admitted cases' parts
        self.exhausted = False  # once an attempt is refused, no case or retry starts again
        self.cut: Cut | None = None  # the first refusal in this process, if any
        self.cancelled: Counter[str] = Counter()  # calls not made, per side
        self.over_estimate = 0  # replies whose usage passed their request's bound
        self._held: dict[Key, _Hold] = {}
        # per admitted case, the estimates of its calls not yet started, by key
        self._parts: dict[str, dict[Key, int]] = {}
        self._parted: Counter[str] = Counter()  # parts not yet started, per side
        self._admitted: set[str] = set()  # the cases that reserved for all their calls
        self._waiting: Counter[str] = Counter()  # attempts waiting in the line, per side
        self._plan: _Plan | None = None
        self._settled: anyio.Event | None = None  # set when a hold is let go
        self._line: deque[object] = deque()  # attempts waiting to reserve, first come first

    def plan(
        self,
        meters: Mapping[str, Meter],
        workers: Mapping[str, int],
        samples: int,
        done: Container[Key],
    ) -> None:
        """Say what this process will call, so a case's first call reserves the whole case:
        per ledger side its meter and how many workers call it, the samples per case, and the
        keys already in the ledgers (a resume's, a retry's copied rows), which it does not."""
        self._plan = _Plan(meters, workers, samples, done)

    def refuses(self, key: Key, attempt: int) -> bool:
        """Whether an attempt is refused without waiting for anything: once the budget is
        exhausted, every attempt but the first of a call its case holds a part for."""
        return self.exhausted and not (attempt == 1 and key in self._parts.get(key[0], ()))

    async def reserve(
        self, key: Key, meter: Meter, estimate: int, case: Case, attempt: int
    ) -> bool:
        """Whether one attempt of the call `key` may be sent; if so its estimate is held
        until the attempt is retried (`retried`) or its call's row is written (`settle`).

        A call's first attempt goes out on its part when its case was admitted; a case's
        first call asks for the whole case (`_case_parts`), a retry for its own estimate.
        Asking is first come, first served: one that waits is not overtaken by a later,
        cheaper one, and one that waits while another call of its case gets the case
        admitted goes out on its part.
        """
        if attempt == 1 and self._take_part(key, meter, estimate):
            return True
        whole = attempt == 1 and case.id not in self._admitted  # its case's first to ask
        parts = self._case_parts(key, case) if whole else {}
        need = estimate + sum(parts.values())
        side = key[1]
        ticket = object()
        self._line.append(ticket)
        self._waiting[side] += 1
        if self._plan is not None and self._waiting[side] >= self._plan.workers.get(side, 0):
            self._wake()  # its side is all in line now: the first in line looks again
        try:
            while not self.exhausted:
                if attempt == 1 and self._take_part(key, meter, estimate):
                    return True
                first = self._line[0] is ticket
                if first and self.spent + self.reserved + need <= self.limit:
                    self.reserved += need
                    self._held[key] = _Hold(meter, estimate)
                    if whole:
                        self._admitted.add(case.id)
                    if parts:
                        self._parts[case.id] = parts
                        self._parted.update(k[1] for k in parts)
                    return True
                if first and not self._may_make_room():
                    self.exhausted = True
                    self.cut = Cut(self.spent, self.reserved, need)
                    break
                if self._settled is None:
                    self._settled = anyio.Event()
                await self._settled.wait()
            return False
        finally:
            self._waiting[side] -= 1
            if self._line[0] is ticket:  # admitted or refused, first in line
                self._line.popleft()
            elif ticket in self._line:  # on its case's part, or cancelled while it waited
                self._line.remove(ticket)
            self._wake()  # the next in line may fit now, or is refused too

    def reserve_batch(self, meter: Meter, calls: Sequence[tuple[Key, int, Case, int]]) -> set[Key]:
        """Which calls of a batch (key, estimate, case, attempt) may be sent in it, reserved
        before it is submitted. A first attempt its case holds a part for goes on that part;
        the others go together or not at all: their estimates (and, for a case this admits,
        its other calls' parts) must fit now, else they are refused and the budget is
        exhausted. It never waits: a batch's calls hold their estimates for as long as the
        batch is open, and a batch that waited for room could wait on itself."""
        sent: set[Key] = set()
        rest = []
        for key, estimate, case, attempt in calls:
            if attempt == 1 and self._take_part(key, meter, estimate):
                sent.add(key)
            else:
                rest.append((key, estimate, case, attempt))
        if not rest:
            return sent
        keys = {key for key, *_ in rest}
        need = sum(estimate for _, estimate, _, _ in rest)
        parts: dict[str, dict[Key, int]] = {}
        for key, _, case, attempt in rest:
            if attempt == 1 and case.id not in self._admitted and case.id not in parts:
                others = self._case_parts(key, case)
                parts[case.id] = {k: v for k, v in others.items() if k not in keys}
        need += sum(sum(found.values()) for found in parts.values())
        if self.exhausted or self.spent + self.reserved + need > self.limit:
            if not self.exhausted:
                self.exhausted = True
                self.cut = Cut(self.spent, self.reserved, need)
            self._wake()  # whoever waits in the line is refused now too
            return sent
        self.reserved += need
        for key, estimate, case, attempt in rest:
            self._held[key] = _Hold(meter, estimate)
            if attempt == 1:
                self._admitted.add(case.id)
        for case_id, found in parts.items():
            if found:
                self._parts[case_id] = found
                self._parted.update(k[1] for k in found)
        return sent | keys

    def hold(self, key: Key, meter: Meter, estimate: int) -> None:
        """An attempt already sent (in a batch a resume polls again) holds its estimate
        whatever the limit: it was spent, or is about to be."""
        if key in self._held or self._take_part(key, meter, estimate):
            return
        self.reserved += estimate
        self._held[key] = _Hold(meter, estimate)

    def _case_parts(self, key: Key, case: Case) -> dict[Key, int]:
        """The estimates of the case's other calls still to make, on every side and sample
        (none without a plan): what its first call reserves with its own."""
        plan = self._plan
        if plan is None:
            return {}
        parts: dict[Key, int] = {}
        for side, meter in plan.meters.items():
            each: int | None = None
            for sample in range(plan.samples):
                other = (case.id, side, sample)
                if other == key or other in plan.done or other in self._held:
                    continue
                if each is None:
                    each = meter.estimate_case(case)
                parts[other] = each
        return parts

    def _take_part(self, key: Key, meter: Meter, estimate: int) -> bool:
        """Send a call's first attempt on its admitted case's part, if it has one: the
        call's own estimate (of the same body: equal) replaces the part."""
        parts = self._parts.get(key[0])
        part = parts.pop(key, None) if parts is not None else None
        if part is None:
            return False
        if not parts:
            del self._parts[key[0]]
        self._parted[key[1]] -= 1
        self.reserved += estimate - part
        self._held[key] = _Hold(meter, estimate)
        return True

    def _may_make_room(self) -> bool:
        """Whether anything held may still settle and free room: an attempt in flight, or
        an admitted case's call on a side not all of whose workers wait in the line (one that
        is could only start once room was made: waiting for it would never end)."""
        if self._held:
            return True
        workers = self._plan.workers if self._plan is not None else {}
        return any(
            n > 0 and self._waiting[side] < workers.get(side, 0) for side, n in self._parted.items()
        )

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

    def unsent(self, key: Key) -> None:
        """An attempt that reserved was not sent after all (a stop came while it waited for
        its slot): its hold is let go, so nothing waits on it, and it costs nothing."""
        self._release(key)

    def settle(self, exchange: Exchange, usage: Mapping[str, Any] | None) -> None:
        """A call's row is written: its final attempt's hold becomes what the reply says it
        cost (or its estimate: `attempt_spend`). A reply that says it used more than its
        request's bound is logged: the budget's guarantee stands on that bound."""
        hold = self._release(exchange.key)
        if hold is not None:
            estimate = hold.estimate
            cost = hold.meter.cost(usage)
            self.spent += attempt_spend(exchange.attempts[-1], cost, lambda: estimate)
            if cost is not None:
                self._check_bound(exchange, hold, usage, cost)
        if refused(exchange):
            self.cancelled[exchange.side] += 1

    def _check_bound(
        self, exchange: Exchange, hold: _Hold, usage: Mapping[str, Any] | None, cost: int
    ) -> None:
        """`alert.usage_over_estimate` for a reply whose completion tokens passed the
        request's `max_tokens`, or whose cost passed the attempt's estimate."""
        tokens = tokens_of(hold.meter.kind, usage)
        if tokens is None:
            return
        cap = hold.meter.max_tokens
        if tokens.completion <= cap and cost <= hold.estimate:
            return
        self.over_estimate += 1
        logs.get_logger().warning(
            logs.ALERT_USAGE_OVER_ESTIMATE,
            case_id=exchange.case_id,
            side=exchange.side,
            sample=exchange.sample,
            endpoint=exchange.endpoint,
            prompt_tokens=tokens.prompt,
            completion_tokens=tokens.completion,
            max_tokens=cap,
            cost_usd=usd(cost),
            estimate_usd=usd(hold.estimate),
        )

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
