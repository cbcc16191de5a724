"""The run's budget: estimates, the spend rule, reservations under concurrency, and whole runs
that the budget cuts (recorded, then against llmock), resumed, replayed and retried."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from faultserver import FaultServer
from hypothesis import given
from hypothesis import strategies as st
from llmockkit import LlmockServer, Protocol
from relkit import RUN_TIMEOUT, run_parallax

from runner.client.endpoint import HttpEndpoint
from runner.config import EndpointConfig, Price, RetryPolicy, Timeouts, load_config
from runner.cost.budget import (
    PICO,
    TOOLS_ALLOWANCE,
    Budget,
    Key,
    Meter,
    attempt_spend,
    budget_line,
    meter_for,
    refused,
    spend_of,
)
from runner.cost.usage import micro_usd
from runner.errors import ConfigError
from runner.jsontext import dumps
from runner.model import Attempt, Case, Exchange, Transport
from runner.protocols import wire_for
from runner.request.shape import PLAIN

PRICE = Price(input_per_mtok=10, output_per_mtok=30)
CASE = Case(id="c", prompt="Name the SKU.", expect={}, fixture_sha="f" * 16, path="x", line=1)


def _meter(budget: Budget, *, price: Price = PRICE, max_tokens: int = 100) -> Meter:
    return Meter(budget, price, max_tokens, lambda case: {"prompt": case.prompt}, "openai-chat")


def _exchange(*attempts: Attempt, side: str = "candidate", case_id: str = "c") -> Exchange:
    return Exchange(
        case_id=case_id,
        side=side,
        sample=0,
        fixture_sha="f" * 16,
        endpoint="e",
        adapter="openai-chat",
        model_alias="m",
        request={"method": "POST", "url": "u", "body": None},
        attempts=attempts,
        transport=attempts[-1].transport,
        response=None,
        started_at="2026-12-01T00:00:00+00:00",
        elapsed_ms=0,
    )


def _case(case_id: str) -> Case:
    return Case(id=case_id, prompt="p", expect={}, fixture_sha="f" * 16, path="x", line=1)


async def _ask(meter: Meter, key: Key, estimate: int, attempt: int = 1) -> bool:
    """Reserve for one attempt of the call `key`, of a case named by the key."""
    return await meter.reserve(key, estimate, _case(key[0]), attempt)


def _attempt(transport: Transport, status: int | None = None, n: int = 1) -> Attempt:
    return Attempt(n=n, transport=str(transport), elapsed_ms=1, status=status)


# -- the arithmetic --------------------------------------------------------------------------


def test_an_estimate_is_a_token_per_request_byte_and_max_tokens_at_their_rates() -> None:
    """1,000 body bytes at $10/Mtok and 100 reply tokens at $30/Mtok: $0.013, in picodollars."""
    meter = _meter(Budget(1.0))
    assert meter.estimate(b"x" * 1000, tools=False) == (1000 * 10 + 100 * 30) * 10**6
    assert meter.estimate(b"x" * 1000, tools=True) == ((1000 + TOOLS_ALLOWANCE) * 10 + 3000) * 10**6
    dear = _meter(
        Budget(1.0), price=Price(input_per_mtok=1, output_per_mtok=2, cached_input_per_mtok=4)
    )
    assert dear.estimate(b"x" * 10, tools=False) == (10 * 4 + 100 * 2) * 10**6  # dearer rate


def test_an_estimate_is_of_the_exact_body_a_case_sends() -> None:
    """`estimate_case` measures the compact JSON body the endpoint builds for the case."""
    meter = _meter(Budget(1.0))
    assert meter.estimate_case(CASE) == meter.estimate(dumps({"prompt": CASE.prompt}), tools=False)


@given(
    prompt=st.integers(0, 10**6),
    completion=st.integers(0, 10**5),
    cached=st.integers(0, 10**6),
    rates=st.tuples(*(st.floats(0, 100, allow_nan=False) for _ in range(3))),
)
def test_a_reply_costs_what_its_usage_says_and_never_more_than_the_estimate_bounds(
    prompt: int, completion: int, cached: int, rates: tuple[float, float, float]
) -> None:
    """A reply's cost is the usage module's formula; within the estimate's bounds (no more
    prompt tokens than bytes, no more reply tokens than max_tokens) it never passes it."""
    cached = min(cached, prompt)
    price = Price(input_per_mtok=rates[0], output_per_mtok=rates[1], cached_input_per_mtok=rates[2])
    meter = _meter(Budget(1.0), price=price, max_tokens=max(completion, 1))
    usage = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }
    cost = meter.cost(usage)
    assert cost == round(micro_usd(prompt, completion, cached, price) * 1e6)
    assert cost <= meter.estimate(b"x" * prompt, tools=False) + 1  # +1: float rounding
    assert meter.cost({"prompt_tokens": 3}) is None  # no completion count: unknown, not zero


def test_the_spend_rule_is_the_cost_when_known_nothing_when_no_model_ran_else_the_estimate() -> (
    None
):
    """Connect errors, 429s, 4xx and refusals are free; a 408, a 5xx, a timeout, a lost
    connection and a 2xx without usage keep their estimate; a reply's usage is its cost."""
    estimate = lambda: 7  # noqa: E731 - the rule asks for it lazily
    free = [
        _attempt(Transport.CONNECT_ERROR),
        _attempt(Transport.RATE_LIMITED, 429),
        _attempt(Transport.HTTP_ERROR, 400),
        _attempt(Transport.HTTP_ERROR, 404),
        Attempt(n=1, transport="cancelled", elapsed_ms=0, error="budget"),
    ]
    kept = [
        _attempt(Transport.HTTP_ERROR, 408),
        _attempt(Transport.HTTP_ERROR, 500),
        _attempt(Transport.HTTP_ERROR, 529),
        _attempt(Transport.TIMEOUT),
        _attempt(Transport.CONNECTION_LOST, 200),
        _attempt(Transport.TOO_LARGE, 200),
        _attempt(Transport.OK, 200),
    ]
    assert [attempt_spend(a, None, estimate) for a in free] == [0] * len(free)
    assert [attempt_spend(a, None, estimate) for a in kept] == [7] * len(kept)
    assert attempt_spend(_attempt(Transport.OK, 200), 3, estimate) == 3
    # a call: two retried 503s keep their estimates, the final reply its cost
    call = _exchange(
        _attempt(Transport.HTTP_ERROR, 503, 1),
        _attempt(Transport.RATE_LIMITED, 429, 2),
        _attempt(Transport.HTTP_ERROR, 503, 3),
        _attempt(Transport.OK, 200, 4),
    )
    assert spend_of(call, 3, estimate) == 7 + 0 + 7 + 3


# -- reservations ----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_an_attempt_that_fits_only_once_others_settle_waits_for_them() -> None:
    """Held reservations make an attempt wait, not fail; it is refused only when nothing is
    in flight and the spend plus its estimate would pass the limit."""
    budget = Budget(10 / 10**6)  # 10 micro-dollars
    meter = _meter(budget)
    unit = PICO // 10**6  # one micro-dollar
    assert await _ask(meter, ("a", "candidate", 0), 6 * unit)
    got: list[bool] = []

    async def second() -> None:
        got.append(await _ask(meter, ("b", "candidate", 0), 6 * unit))

    async with anyio.create_task_group() as group:
        group.start_soon(second)
        await anyio.wait_all_tasks_blocked()
        assert got == []  # waiting: 6 + 6 > 10 while "a" holds its estimate
        budget.settle(_exchange(_attempt(Transport.OK, 200), case_id="a"), None)
    assert got == [False]  # "a" kept its 6 (no usage): 6 + 6 > 10 with nothing in flight
    assert budget.exhausted and budget.spent == 6 * unit and budget.reserved == 0
    assert budget.cut is not None and (budget.cut.spent, budget.cut.estimate) == (
        6 * unit,
        6 * unit,
    )
    assert not await _ask(meter, ("c", "candidate", 0), 1)  # none starts after a refusal


@pytest.mark.anyio
async def test_a_waiting_attempt_is_not_overtaken_by_a_cheaper_one_that_asked_later() -> None:
    """Attempts reserve in the order they asked: while a dear candidate call waits for room,
    a cheap reference call that would fit waits behind it, so neither side takes all of it."""
    budget = Budget(10 / 10**6)  # 10 micro-dollars
    meter = _meter(budget)
    unit = PICO // 10**6
    assert await _ask(meter, ("a", "reference", 0), 5 * unit)
    order: list[str] = []

    async def ask(key: Key, estimate: int) -> None:
        if await _ask(meter, key, estimate):
            order.append(key[0])

    async with anyio.create_task_group() as group:
        group.start_soon(ask, ("b", "candidate", 0), 6 * unit)  # 5 + 6 > 10: waits
        await anyio.wait_all_tasks_blocked()
        group.start_soon(ask, ("c", "reference", 0), 2 * unit)  # 5 + 2 fits, but b asked first
        await anyio.wait_all_tasks_blocked()
        assert order == []
        budget.settle(
            _exchange(_attempt(Transport.OK, 200), side="reference", case_id="a"),
            {"prompt_tokens": 0, "completion_tokens": 0},
        )
    assert order == ["b", "c"]  # a cost nothing: b (6) then c (2) fit in 10
    assert budget.reserved == 8 * unit and not budget.exhausted


@given(
    data=st.data(),
    calls=st.integers(1, 60),
    limit=st.integers(1, 400),
    workers=st.integers(1, 64),
)
def test_concurrent_calls_never_spend_past_the_limit_and_stop_within_one_estimate(
    data: st.DataObject, calls: int, limit: int, workers: int
) -> None:
    """Calls interleaving at random (retries, replies cheaper than their estimate, replies
    without usage) never bring the spend past the limit, leave nothing held, and a refusal
    comes only when the spend plus that estimate would pass it."""
    plans = [
        (
            data.draw(st.integers(1, 40), label="estimate"),
            data.draw(
                st.lists(st.sampled_from(["503", "429", "ok", "nousage"]), min_size=1, max_size=3)
            ),
            data.draw(st.integers(0, 5), label="yields"),
        )
        for _ in range(calls)
    ]
    budget = Budget(limit / PICO)
    meter = _meter(budget)
    refusals: list[tuple[int, int]] = []

    async def call(i: int) -> None:
        estimate, outcomes, yields = plans[i]
        key = (f"c{i}", "candidate", 0)
        attempts: list[Attempt] = []
        usage = None
        for n, outcome in enumerate(outcomes, 1):
            if not await _ask(meter, key, estimate, n):
                refusals.append((budget.spent, estimate))
                attempts.append(Attempt(n=n, transport="cancelled", elapsed_ms=0, error="budget"))
                break
            for _ in range(yields):
                await anyio.lowlevel.checkpoint()
            if outcome in ("503", "429") and n < len(outcomes):
                status = int(outcome)
                stamp = Transport.RATE_LIMITED if status == 429 else Transport.HTTP_ERROR
                meter.retried(key, _attempt(stamp, status, n))
                attempts.append(_attempt(stamp, status, n))
                continue
            attempts.append(_attempt(Transport.OK, 200, n))
            if outcome != "nousage":  # a reply cheaper than its estimate
                usage = {"prompt_tokens": 0, "completion_tokens": 0}
            break
        await anyio.lowlevel.checkpoint()
        budget.settle(_exchange(*attempts, case_id=f"c{i}"), usage)
        assert budget.spent + budget.reserved <= budget.limit

    async def main() -> None:
        limiter = anyio.CapacityLimiter(workers)

        async def limited(i: int) -> None:
            async with limiter:
                await call(i)

        async with anyio.create_task_group() as group:
            for i in range(calls):
                group.start_soon(limited, i)

    anyio.run(main)
    assert budget.spent <= budget.limit and budget.reserved == 0
    assert all(spent + estimate > budget.limit for spent, estimate in refusals[:1])
    assert budget.exhausted == bool(refusals)


# -- a case is the unit -----------------------------------------------------------------------


def _planned(limit: float, *, samples: int = 1, workers: int = 4, done: Any = ()) -> Meter:
    """A meter whose budget knows the run's plan: both sides priced alike."""
    budget = Budget(limit)
    meter = _meter(budget)
    sides = {"reference": meter, "candidate": meter}
    budget.plan(sides, dict.fromkeys(sides, workers), samples, set(done))
    return meter


@pytest.mark.anyio
async def test_a_case_reserves_all_its_calls_at_its_first_and_they_go_out_on_their_parts() -> None:
    """The first call of a case to ask holds the estimates of the case's calls on both sides
    in every sample; those calls then go out on their parts without asking, even behind a
    case that waits, and even once the budget is exhausted."""
    case = _case("a")
    est = _meter(Budget(1.0)).estimate_case(case)
    meter = _planned(4.5 * est / PICO, samples=2)
    budget = meter.budget
    assert await meter.reserve(("a", "candidate", 1), est, case, 1)
    assert budget.reserved == 4 * est  # 2 sides x 2 samples
    got: list[bool] = []

    async def second_case() -> None:
        got.append(await _ask(meter, ("b", "reference", 0), est))

    async with anyio.create_task_group() as group:
        group.start_soon(second_case)
        await anyio.wait_all_tasks_blocked()
        assert got == []  # 4 + 4 estimates > 4.5: case b waits
        for key in (("a", "reference", 0), ("a", "reference", 1), ("a", "candidate", 0)):
            assert await meter.reserve(key, est, case, 1)  # on a's parts, past b in line
        assert budget.reserved == 4 * est and got == []
        for sample, side in (
            (0, "reference"),
            (1, "reference"),
            (0, "candidate"),
            (1, "candidate"),
        ):
            done = _exchange(_attempt(Transport.OK, 200), side=side, case_id="a")
            budget.settle(
                Exchange(**{**vars_of(done), "sample": sample}),
                {"prompt_tokens": 0, "completion_tokens": 0},
            )
    assert got == [True] and budget.reserved == 4 * est  # case b whole, once a cost nothing
    assert not budget.exhausted


def vars_of(exchange: Exchange) -> dict[str, Any]:
    return {name: getattr(exchange, name) for name in exchange.__dataclass_fields__}


@pytest.mark.anyio
async def test_a_case_that_does_not_fit_whole_is_refused_though_one_call_would_fit() -> None:
    """A budget of one and a half calls' estimates admits no case of two calls: nothing is
    spent on a case whose other side could not be paid for. Calls already in the ledgers
    (a resume's) are not reserved again."""
    case = _case("a")
    est = _meter(Budget(1.0)).estimate_case(case)
    meter = _planned(1.5 * est / PICO)
    assert not await meter.reserve(("a", "reference", 0), est, case, 1)
    assert meter.budget.exhausted and meter.budget.cut is not None
    assert meter.budget.cut.estimate == 2 * est  # the whole case's estimate did not fit
    resumed = _planned(1.5 * est / PICO, done={("a", "candidate", 0)})
    assert await resumed.reserve(("a", "reference", 0), est, case, 1)
    assert resumed.budget.reserved == est


@pytest.mark.anyio
async def test_a_case_waiting_on_a_side_whose_workers_all_wait_is_refused_not_stuck() -> None:
    """Case a holds a part for the candidate, whose one worker waits in line behind case b;
    once nothing is in flight, waiting for that part would never end: b is refused (and the
    candidate's call, a retry that asked behind it, too), and the run goes on."""
    case_a, case_b = _case("a"), _case("b")
    est = _meter(Budget(1.0)).estimate_case(case_a)
    meter = _planned(3.5 * est / PICO, workers=1)
    budget = meter.budget
    assert await meter.reserve(("a", "reference", 0), est, case_a, 1)  # holds a's candidate part
    got: list[tuple[str, bool]] = []

    async def ask(key: Key, case: Case, attempt: int) -> None:
        got.append((key[0], await meter.reserve(key, est, case, attempt)))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(ask, ("b", "reference", 0), case_b, 1)  # 2 + 2 > 3.5: waits
            await anyio.wait_all_tasks_blocked()
            group.start_soon(ask, ("z", "candidate", 0), _case("z"), 2)  # a retry, behind b
            await anyio.wait_all_tasks_blocked()
            assert got == []
            # a's reference call settles: nothing in flight, and the candidate's only worker
            # waits in line, so a's candidate part can never start while b waits
            budget.settle(
                _exchange(_attempt(Transport.OK, 200), side="reference", case_id="a"), None
            )
    assert got == [("b", False), ("z", False)] and budget.exhausted
    assert await meter.reserve(("a", "candidate", 0), est, case_a, 1)  # its part still goes


@pytest.mark.parametrize(
    ("usage", "alerted"),
    [
        ({"prompt_tokens": 3, "completion_tokens": 100}, False),  # at max_tokens: within
        ({"prompt_tokens": 3, "completion_tokens": 101}, True),  # past the request's cap
        ({"prompt_tokens": 10**6, "completion_tokens": 1}, True),  # past the estimate
        (None, False),  # no usage: nothing to compare (it keeps its estimate)
    ],
)
def test_a_reply_whose_usage_passes_its_requests_bound_is_alerted(
    usage: dict[str, int] | None, alerted: bool
) -> None:
    """`alert.usage_over_estimate` names the call whose usage passed max_tokens or its
    estimate: the budget's promise stands on that bound, so a server that ignores it is
    told, with the figures."""
    from structlog.testing import capture_logs

    budget = Budget(1.0)
    meter = _meter(budget)  # max_tokens 100
    est = meter.estimate(b"x" * 50, tools=False)

    async def ask() -> None:
        assert await meter.reserve(("c", "candidate", 0), est, CASE, 1)

    anyio.run(ask)
    with capture_logs() as events:
        budget.settle(_exchange(_attempt(Transport.OK, 200)), usage)
    found = [e for e in events if e["event"] == "alert.usage_over_estimate"]
    assert bool(found) == alerted and budget.over_estimate == int(alerted)
    if found:
        (event,) = found
        assert (event["case_id"], event["side"], event["max_tokens"]) == ("c", "candidate", 100)
        assert event["completion_tokens"] == usage["completion_tokens"]  # type: ignore[index]
        assert event["estimate_usd"] == round(est / PICO, 6)


def test_a_live_run_whose_server_ignores_max_tokens_says_so(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """Against a real server that answers five-word replies to `max_tokens = 1`, every call
    logs alert.usage_over_estimate with its case, side and figures, as a JSON line."""
    rows = [{"id": f"c{i}", "prompt": f"Say hi to {i}.", "expect": {}} for i in range(2)]
    (tmp_path / "f.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    endpoints = "".join(
        f'[endpoints.{name}]\nkind = "openai-chat"\nbase_url = "{fault_server.url("ok", name)}"\n'
        f'model = "m"\nmax_tokens = 1\n{PRICED}'
        for name in ("ref", "cand")
    )
    (tmp_path / "parallax.toml").write_text(BASE + "budget_usd = 1\n" + endpoints + SUITE, "utf-8")
    done = run_parallax("run", "--config", "parallax.toml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    alerts = _events(done.stdout, "alert.usage_over_estimate")
    assert sorted((a["case_id"], a["side"]) for a in alerts) == [
        (case, side) for case in ("c0", "c1") for side in ("candidate", "reference")
    ]
    assert all(a["completion_tokens"] == 5 and a["max_tokens"] == 1 for a in alerts), alerts
    assert all(a["level"] == "warning" for a in alerts)


CASES_256 = 300


def test_a_budget_cut_at_concurrency_256_spends_on_paired_cases(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """The issue's run: both sides at concurrency 256 with equal prices under $0.05, against
    a real loopback server. The budget cuts the run (exit 2), and at least 90% of the calls
    it made belong to cases both of whose sides were called: a case is reserved whole, so
    the side whose 512 workers ask first cannot take all the room (before, none was paired)."""
    rows = [
        {"id": f"c{i:03d}", "prompt": f"Say hi to {i}.", "expect": {}} for i in range(CASES_256)
    ]
    (tmp_path / "f.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    endpoints = "".join(
        f'[endpoints.{name}]\nkind = "openai-chat"\nbase_url = "{fault_server.url("ok", name)}"\n'
        f'model = "m"\nconcurrency = 256\nmax_tokens = 64\nretry = {{ attempts = 1 }}\n{PRICED}'
        for name in ("ref", "cand")
    )
    (tmp_path / "parallax.toml").write_text(
        BASE + "budget_usd = 0.05\n" + endpoints + SUITE, "utf-8"
    )
    done = run_parallax("run", "--config", "parallax.toml", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    (run_dir,) = _run_dirs(tmp_path)
    out = _outcomes(run_dir)
    made = [r for r in out if r["detail"] != "cancelled: budget"]
    sides: dict[str, set[str]] = {}
    for r in made:
        sides.setdefault(r["case_id"], set()).add(r["side"])
    paired = [r for r in made if len(sides[r["case_id"]]) == 2]
    assert len(made) >= 40  # the budget let a good number through before it cut
    assert len(paired) >= 0.9 * len(made), (len(paired), len(made))
    assert len(fault_server.received()) == len(made)
    block = _summary(run_dir)["budget"]
    assert block["exhausted"] and block["spent_usd"] <= 0.05
    assert _summary(run_dir)["usage"]["sides"]["candidate"]["calls"] > 0


# -- the live client: retries count ------------------------------------------------------------


def _live_cfg(base_url: str, attempts: int = 4) -> EndpointConfig:
    return EndpointConfig(
        kind="openai-chat",
        base_url=base_url,
        model="m",
        max_tokens=100,
        timeout=Timeouts(connect=1, read=2, write=1, pool=1),
        deadline=5,
        retry=RetryPolicy(attempts=attempts, backoff_base=0.01, backoff_max=0.02),
        price=PRICE,
    )


def _estimate_of(cfg: EndpointConfig) -> int:
    """The estimate of the one body the live endpoint sends for CASE."""
    wire = wire_for(cfg.kind)
    assert wire is not None
    return meter_for(Budget(1.0), cfg, PLAIN).estimate_body(wire.body(cfg, PLAIN, CASE))


async def _one_live_call(cfg: EndpointConfig, budget: Budget) -> Exchange:
    endpoint = HttpEndpoint("e", cfg, None, meter=meter_for(budget, cfg, PLAIN))
    try:
        with anyio.fail_after(20):
            exchange = await endpoint.call(CASE, "candidate", 0)
    finally:
        await endpoint.aclose()
    budget.settle(exchange, None)
    return exchange


@pytest.mark.anyio
async def test_each_retry_of_a_live_call_is_reserved_and_the_one_past_the_limit_is_not_sent(
    fault_server: FaultServer,
) -> None:
    """Against a server that answers 500 every time, two attempts fit a budget of two and a
    half estimates; the third is not sent and the call ends cancelled with detail budget."""
    cfg = _live_cfg(fault_server.url("status:500"))
    estimate = _estimate_of(cfg)
    budget = Budget(estimate * 2.5 / PICO)
    exchange = await _one_live_call(cfg, budget)
    assert [a.transport for a in exchange.attempts] == ["http_error", "http_error", "cancelled"]
    assert exchange.attempts[-1].error == "budget" and refused(exchange)
    assert len(fault_server.received("status:500")) == 2
    assert budget.spent == 2 * estimate  # a 5xx keeps its estimate
    assert budget.cancelled == {"candidate": 1} and budget.reserved == 0


@pytest.mark.anyio
async def test_attempts_a_server_turned_away_cost_nothing(fault_server: FaultServer) -> None:
    """Four 429s under a budget of one estimate are all sent (each fits alone) and spend 0."""
    cfg = _live_cfg(fault_server.url("status:429:0"))
    estimate = _estimate_of(cfg)
    budget = Budget(estimate * 1.001 / PICO)  # one estimate (and float rounding) fits
    exchange = await _one_live_call(cfg, budget)
    assert [a.transport for a in exchange.attempts] == ["rate_limited"] * 4
    assert (budget.spent, budget.reserved, budget.exhausted) == (0, 0, False)


@pytest.mark.anyio
async def test_a_call_waiting_for_the_budget_holds_no_concurrency_slot(
    fault_server: FaultServer,
) -> None:
    """Behind `concurrency = 1`, case b's call waits for the budget while case a's second
    sample goes out on its part: a call waiting for the budget holds no slot, so the part it
    waits on can always be sent (held, the one slot would leave both waiting forever)."""
    cfg = _live_cfg(fault_server.url("ok")).model_copy(update={"concurrency": 1})
    est = _estimate_of(cfg)
    budget = Budget(2.5 * est / PICO)
    meter = meter_for(budget, cfg, PLAIN)
    budget.plan({"candidate": meter}, {"candidate": 2}, 2, set())
    case_a = Case(id="a", prompt=CASE.prompt, expect={}, fixture_sha="f" * 16, path="x", line=1)
    case_b = Case(id="b", prompt=CASE.prompt, expect={}, fixture_sha="f" * 16, path="x", line=1)
    assert await meter.reserve(("a", "candidate", 0), est, case_a, 1)  # a whole: 2 estimates
    # a's first sample is done and cost nothing; its second sample's part is still held
    budget.settle(
        _exchange(_attempt(Transport.OK, 200), case_id="a"),
        {"prompt_tokens": 0, "completion_tokens": 0},
    )
    endpoint = HttpEndpoint("e", cfg, None, meter=meter)
    got: dict[str, Exchange] = {}

    async def call(case: Case, sample: int) -> None:
        exchange = await endpoint.call(case, "candidate", sample)
        budget.settle(exchange, {"prompt_tokens": 0, "completion_tokens": 0})
        got[case.id] = exchange

    try:
        with anyio.fail_after(20):
            async with anyio.create_task_group() as group:
                group.start_soon(call, case_b, 0)  # 1 + 2 > 2.5 estimates: waits for a's part
                await anyio.wait_all_tasks_blocked()
                group.start_soon(call, case_a, 1)  # on its part, through the one slot
    finally:
        await endpoint.aclose()
    assert (got["a"].transport, got["b"].transport) == ("ok", "ok")
    assert (got["b"].queued_ms or 0) >= (got["a"].queued_ms or 0)
    assert not budget.exhausted and budget.reserved == est  # b's second sample's part


@pytest.mark.anyio
async def test_a_call_a_stop_keeps_from_its_slot_lets_its_reservation_go(
    fault_server: FaultServer,
) -> None:
    """A call that reserved and then waited for the one slot is not sent once a stop comes:
    it holds nothing of the budget after (nothing could ever wait on it)."""
    from runner.shutdown import NotStarted, Shutdown

    cfg = _live_cfg(fault_server.url("gate:slot")).model_copy(update={"concurrency": 1})
    budget = Budget(1.0)
    meter = meter_for(budget, cfg, PLAIN)
    endpoint = HttpEndpoint("e", cfg, None, meter=meter)
    stop = Shutdown()
    second = _case("second")
    first_est, second_est = meter.estimate_case(CASE), meter.estimate_case(second)
    outcome: list[str] = []

    async def waits_for_the_slot() -> None:
        try:
            await endpoint.call(second, "candidate", 0)
        except NotStarted:
            outcome.append("not started")

    try:
        with anyio.fail_after(20), stop.guarded(10):
            async with anyio.create_task_group() as group:
                group.start_soon(endpoint.call, CASE, "candidate", 0)  # holds the slot
                with anyio.fail_after(10):
                    while not fault_server.received("gate:slot"):
                        await anyio.sleep(0.01)
                group.start_soon(waits_for_the_slot)
                await anyio.wait_all_tasks_blocked()
                assert budget.reserved == first_est + second_est  # reserved, no slot yet
                stop.request("SIGTERM")
                fault_server.gate("slot").set()
    finally:
        await endpoint.aclose()
    assert outcome == ["not started"]
    assert budget.reserved == first_est  # the first call's, which no writer settled here


# -- config ----------------------------------------------------------------------------------


BASE = 'runs_dir = "runs"\nsnapshots_dir = "snapshots"\n'
PRICED = "price = { input_per_mtok = 10, output_per_mtok = 30 }\n"
SUITE = '[suites.s]\nfixtures = "f.jsonl"\nreference = "ref"\ncandidate = "cand"\n'


@pytest.mark.parametrize(
    ("config", "line"),
    [
        (
            BASE + "budget_usd = 1\n"
            f'[endpoints.ref]\nkind = "recorded"\nmax_tokens = 64\n{PRICED}'
            '[endpoints.cand]\nkind = "recorded"\nmax_tokens = 64\n' + SUITE,
            "parallax.toml: endpoints.cand.price: required by budget_usd: a budget cannot "
            "count the cost of a call without a price",
        ),
        (
            BASE + f'[endpoints.ref]\nkind = "recorded"\nmax_tokens = 64\n{PRICED}'
            f'[endpoints.cand]\nkind = "openai-chat"\nbase_url = "http://127.0.0.1:9/v1"\n'
            f'model = "m"\n{PRICED}' + SUITE + "budget_usd = 2\n",
            "parallax.toml: endpoints.cand.max_tokens: required by suites.s.budget_usd: a "
            "call's estimate bounds its reply by max_tokens, so set the most tokens a reply "
            "may cost (it is sent with every request)",
        ),
        (
            BASE + f'[endpoints.ref]\nkind = "recorded"\nmax_tokens = 64\n{PRICED}'
            '[endpoints.cand]\nkind = "http-json"\nbase_url = "http://127.0.0.1:9"\n'
            f'body_template = {{ q = "{{{{prompt}}}}" }}\n{PRICED}' + SUITE + "budget_usd = 2\n",
            "parallax.toml: endpoints.cand.kind: an http-json endpoint cannot run under "
            "suites.s.budget_usd: its body_template sends no max_tokens, so no call's cost is "
            "bounded before it is made",
        ),
        (
            BASE + "budget_usd = 0\n" + f'[endpoints.ref]\nkind = "recorded"\n{PRICED}'
            f'[endpoints.cand]\nkind = "recorded"\n{PRICED}' + SUITE,
            "parallax.toml: budget_usd: Input should be greater than 0",
        ),
    ],
)
def test_a_budget_that_could_not_be_kept_is_a_config_error(
    tmp_path: Path, config: str, line: str
) -> None:
    """No price, or a reply no max_tokens of the endpoint's own bounds (an http-json body
    sends none; the default is no bound anyone chose), under a budget: one line naming the
    key, exit 78, from `validate` and `run` alike; never an unlimited run."""
    (tmp_path / "parallax.toml").write_text(config, "utf-8")
    (tmp_path / "f.jsonl").write_text('{"id": "a", "prompt": "hi", "expect": {}}\n', "utf-8")
    with pytest.raises(ConfigError) as raised:
        load_config(tmp_path / "parallax.toml")
    assert raised.value.exit_code == 78
    for command in ("validate", "run"):
        done = run_parallax(command, "--config", "parallax.toml", cwd=tmp_path)
        assert done.returncode == 78, done.stderr
        assert done.stderr.strip().splitlines()[-1].endswith(line), done.stderr
        assert "Traceback" not in done.stderr
    assert not (tmp_path / "runs").exists()


def test_a_suite_budget_overrides_the_top_level_one(tmp_path: Path) -> None:
    """`budget_usd` in a suite wins over the top level's; a suite without one takes it."""
    (tmp_path / "parallax.toml").write_text(
        BASE
        + "budget_usd = 5\n"
        + f'[endpoints.ref]\nkind = "recorded"\nmax_tokens = 64\n{PRICED}'
        + f'[endpoints.cand]\nkind = "recorded"\nmax_tokens = 64\n{PRICED}'
        + SUITE
        + "budget_usd = 0.5\n"
        + '[suites.t]\nfixtures = "f.jsonl"\nreference = "ref"\ncandidate = "cand"\n',
        "utf-8",
    )
    loaded = load_config(tmp_path / "parallax.toml")
    assert (loaded.budget_usd("s"), loaded.budget_usd("t")) == (0.5, 5)


# -- whole runs ------------------------------------------------------------------------------

CASES = 12
USAGE = {"prompt_tokens": 20, "completion_tokens": 10}  # 20 x 10 + 10 x 30 = 500 micro-dollars


def _recorded_suite(root: Path, budget: float) -> None:
    rows = [{"id": f"c{i:02d}", "prompt": f"Say hi to {i}.", "expect": {}} for i in range(CASES)]
    (root / "f.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    cassette = [{"case_id": r["id"], "completion": "hi", "usage": USAGE} for r in rows]
    (root / "tape.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cassette), "utf-8")
    _write_config(root, budget)


def _write_config(root: Path, budget: float) -> None:
    endpoints = "".join(
        f'[endpoints.{name}]\nkind = "recorded"\ncassette = "tape.jsonl"\nmodel = "{name}"\n'
        f"max_tokens = 100\n{PRICED}"
        for name in ("ref", "cand")
    )
    (root / "parallax.toml").write_text(
        BASE + f"budget_usd = {budget}\n" + endpoints + SUITE, "utf-8"
    )


def _run_dirs(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.glob("runs/s/*/manifest.json"))


def _summary(run_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run_dir / "summary.json").read_text("utf-8"))
    return data


def _events(stdout: str, event: str) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for line in stdout.splitlines()
        if line.startswith("{") and f'"{event}"' in line
    ]


def _outcomes(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "outcomes.jsonl").read_text("utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_a_recorded_run_the_budget_cuts_is_incomplete_and_a_larger_budget_retry_finishes_it(
    tmp_path: Path,
) -> None:
    """Calls of $0.0005 estimated at about $0.0043 each, so cases of $0.001 estimated at
    about $0.0086: a $0.016 budget makes the 16 calls of the first 8 cases (the ninth's
    estimate would pass it once they are spent), both sides of each, of the 24
    calls, stamps the rest cancelled/budget, logs alert.budget once and exits 2; a retry
    under the same budget makes none (it counts the rows it copies), one under $1 makes all."""
    _recorded_suite(tmp_path, 0.016)
    done = run_parallax("run", "--config", "parallax.toml", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    (run_dir,) = _run_dirs(tmp_path)
    rows = _outcomes(run_dir)
    cut = [r for r in rows if r["transport"] == "cancelled"]
    made = [r for r in rows if r["transport"] == "ok"]
    assert len(rows) == 2 * CASES and len(made) == 16 and len(cut) == 2 * CASES - 16
    assert {r["case_id"] for r in made} == {f"c{i:02d}" for i in range(8)}  # whole pairs
    assert {r["detail"] for r in cut} == {"cancelled: budget"}
    assert all(r["task_score"] is None and r["usage"] is None for r in cut)
    raw = [json.loads(line) for line in (run_dir / "raw.jsonl").read_text("utf-8").splitlines()]
    assert {(a["transport"], a["error"]) for e in raw for a in e["attempts"]} >= {
        ("cancelled", "budget")
    }
    summary = _summary(run_dir)
    block = summary["budget"]
    spent = round(len(made) * 0.0005, 6)
    assert (block["limit_usd"], block["spent_usd"], block["exhausted"]) == (0.016, spent, True)
    by_side = {side: sum(r["side"] == side for r in cut) for side in ("candidate", "reference")}
    assert block["cancelled"] == {side: n for side, n in by_side.items() if n}
    assert (
        block["spent_usd"] <= block["limit_usd"] < block["spent_usd"] + block["cut"]["estimate_usd"]
    )
    usage = summary["usage"]["sides"]
    assert usage["reference"]["calls"] + usage["candidate"]["calls"] == len(made)  # cut: no call
    assert usage["candidate"]["cost_unknown_calls"] == 0
    (alert,) = _events(done.stdout, "alert.budget")
    assert (alert["limit_usd"], alert["spent_usd"], alert["reserved_usd"]) == (0.016, spent, 0.0)
    assert (alert["count"], alert["cancelled"]) == (len(cut), block["cancelled"])
    assert alert["estimate_usd"] == block["cut"]["estimate_usd"] > 0.016 - spent
    assert f"budget: ${spent:.4f} spent of $0.0160; {len(cut)} call(s) not made" in done.stderr
    assert "cancelled (budget)" in done.stderr
    assert f"{len(cut)} call(s) not made" in (run_dir / "report.md").read_text("utf-8")
    assert f"{len(cut)} call(s) not made" in (run_dir / "report.html").read_text("utf-8")

    again = run_parallax(
        "run", "--config", "parallax.toml", "--retry-unscored", run_dir, cwd=tmp_path
    )
    assert again.returncode == 2, again.stderr
    (same,) = [d for d in _run_dirs(tmp_path) if d != run_dir]
    assert _summary(same)["budget"]["spent_usd"] == spent  # the copied rows' spend
    assert sum(r["transport"] == "cancelled" for r in _outcomes(same)) == len(cut)

    _write_config(tmp_path, 1.0)
    more = run_parallax(
        "run", "--config", "parallax.toml", "--retry-unscored", run_dir, cwd=tmp_path
    )
    assert more.returncode == 0, more.stderr
    (full,) = [d for d in _run_dirs(tmp_path) if d not in (run_dir, same)]
    assert all(r["transport"] == "ok" for r in _outcomes(full))
    final = _summary(full)["budget"]
    assert final == {
        "limit_usd": 1.0,
        "spent_usd": round(2 * CASES * 0.0005, 6),  # the copied rows' and the retry's own
        "exhausted": False,
        "cancelled": {},
        "cut": None,
    }
    assert not _events(more.stdout, "alert.budget")


def test_a_resume_and_a_replay_count_what_the_run_dir_already_spent(tmp_path: Path) -> None:
    """A run killed half way is resumed to the same spend as the whole run, and so is its
    replay, which calls nothing: the ledgers' spend is read back by the rule calls settle by."""
    _recorded_suite(tmp_path, 1.0)
    assert run_parallax("run", "--config", "parallax.toml", cwd=tmp_path).returncode == 0
    (whole,) = _run_dirs(tmp_path)
    expected = _summary(whole)["budget"]
    assert expected["spent_usd"] == round(2 * CASES * 0.0005, 6)
    # the same run as a kill half way would have left it
    half = tmp_path / "runs" / "s" / "20000101T000000Z-aaaaaa"
    half.mkdir()
    for name in ("raw.jsonl", "outcomes.jsonl"):
        lines = (whole / name).read_text("utf-8").splitlines(keepends=True)
        (half / name).write_text("".join(lines[: len(lines) // 2]), "utf-8")
    manifest = json.loads((whole / "manifest.json").read_text("utf-8"))
    manifest |= {"run_id": half.name, "finished_at": None}
    (half / "manifest.json").write_text(json.dumps(manifest), "utf-8")
    _write_config(tmp_path, 1.0)
    resumed = run_parallax("run", "--config", "parallax.toml", "--resume", half, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert _summary(half)["budget"]["spent_usd"] == expected["spent_usd"]
    # under a budget with room for one more call's estimate once the first half is counted,
    # the resume cuts the rest (were the first half not counted, all twelve would fit)
    cut_dir = tmp_path / "runs" / "s" / "20000101T000001Z-bbbbbb"
    cut_dir.mkdir()
    for name in ("raw.jsonl", "outcomes.jsonl"):
        lines = (whole / name).read_text("utf-8").splitlines(keepends=True)
        (cut_dir / name).write_text("".join(lines[: len(lines) // 2]), "utf-8")
    (cut_dir / "manifest.json").write_text(json.dumps(manifest | {"run_id": cut_dir.name}), "utf-8")
    _write_config(tmp_path, round(CASES * 0.0005 + 0.0045, 6))
    short = run_parallax("run", "--config", "parallax.toml", "--resume", cut_dir, cwd=tmp_path)
    assert short.returncode == 2, short.stderr
    block = _summary(cut_dir)["budget"]
    assert block["spent_usd"] <= block["limit_usd"] and block["exhausted"]
    assert sum(block["cancelled"].values()) >= CASES - 2
    # a replay calls nothing and counts what the run dir it regrades spent
    _write_config(tmp_path, 1.0)
    replay = run_parallax("replay", "--config", "parallax.toml", whole, cwd=tmp_path)
    assert replay.returncode == 0, replay.stderr
    (replayed,) = [d for d in _run_dirs(tmp_path) if d not in (whole, half, cut_dir)]
    assert _summary(replayed)["budget"] == expected


@pytest.mark.parametrize("protocol", [Protocol.OPENAI, Protocol.ANTHROPIC])
def test_a_live_run_against_llmock_stops_at_its_budget(
    tmp_path: Path, llmock: LlmockServer, protocol: Protocol
) -> None:
    """Against a real server that returns usage, a budget of a few calls' estimates cuts the
    run (exit 2, alert.budget), and what it spent is what the served replies' usage costs."""
    rows = [
        {"id": f"c{i}", "prompt": f"Say hi to {i}.", "must_not_include": ["zzqq"]} for i in range(8)
    ]
    (tmp_path / "f.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    endpoints = "".join(
        llmock.endpoint_toml(name, protocol, concurrency=4, price=(10, 30))
        for name in ("b-ref", "b-cand")
    )
    # one estimate is about (170 bytes x 10 + 64 x 30) micro-dollars = $0.0036
    (tmp_path / "parallax.toml").write_text(
        BASE
        + "budget_usd = 0.006\n"
        + endpoints
        + '[suites.s]\nfixtures = "f.jsonl"\nreference = "b-ref"\ncandidate = "b-cand"\n',
        "utf-8",
    )
    done = run_parallax("run", "--config", "parallax.toml", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    (run_dir,) = _run_dirs(tmp_path)
    rows_out = _outcomes(run_dir)
    made = [r for r in rows_out if r["transport"] == "ok"]
    cut = [r for r in rows_out if r["detail"] == "cancelled: budget"]
    assert made and cut and len(made) + len(cut) == 16
    spent = sum(
        r["usage"].get("prompt_tokens", r["usage"].get("input_tokens")) * 10
        + r["usage"].get("completion_tokens", r["usage"].get("output_tokens")) * 30
        for r in made
    )
    block = _summary(run_dir)["budget"]
    assert block["spent_usd"] == round(spent / 1e6, 6) <= 0.006
    assert block["spent_usd"] + block["cut"]["estimate_usd"] > 0.006
    (alert,) = _events(done.stdout, "alert.budget")
    assert alert["count"] == len(cut)


def test_the_budget_line_reads_a_summary_tolerantly() -> None:
    """No budget, or a hand-edited one, prints no line; a cut one says what to do."""
    assert budget_line({}) is None
    assert budget_line({"budget": {"spent_usd": "x", "limit_usd": 1}}) is None
    assert budget_line({"budget": {"spent_usd": 0.5, "limit_usd": 1, "cancelled": {}}}) == (
        "budget: $0.5000 spent of $1.0000"
    )
    line = budget_line(
        {"budget": {"spent_usd": 0.9, "limit_usd": 1, "cancelled": {"candidate": 3}}}
    )
    assert line is not None and "3 call(s) not made (candidate 3)" in line


def test_the_budget_simulation_never_overshoots(tmp_path: Path) -> None:
    """sim/budget.py drives real runs at concurrency 64 against a local server with random
    reply sizes, latencies and faults; a small version holds the invariant: the worst
    overshoot over the limit is at most one call's estimate (in fact none)."""
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, str(root / "sim" / "budget.py"), "--trials", "3", "--cases", "60"],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
        cwd=tmp_path,
        env={**os.environ, "NO_PROXY": "127.0.0.1"},
    )
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["trials"] == 3 and figures["concurrency"] == 64
    assert figures["worst_overshoot_estimates"] <= 1
    assert figures["worst_billed_overshoot_estimates"] <= 1
    assert figures["cut_trials"] >= 1  # the budget did cut runs: the invariant was exercised


def _worked_example(root: Path, budget: float) -> None:
    """The README's budget example: three cases whose request bodies are 400 bytes, replies
    of 100 prompt and 200 completion tokens, two prices, max_tokens 256."""
    models = ("m-ref", "m-cnd")  # one length: both sides' bodies are the same size
    prices = (
        "{ input_per_mtok = 0.5, output_per_mtok = 1.5 }",
        "{ input_per_mtok = 3, output_per_mtok = 15 }",
    )
    endpoints = "".join(
        f'[endpoints.{m}]\nkind = "recorded"\nmodel = "{m}"\ncassette = "tape.jsonl"\n'
        f"max_tokens = 256\nprice = {p}\n"
        for m, p in zip(models, prices, strict=True)
    )
    (root / "parallax.toml").write_text(
        BASE
        + f"budget_usd = {budget}\n"
        + endpoints
        + '[suites.s]\nfixtures = "f.jsonl"\nreference = "m-ref"\ncandidate = "m-cnd"\n',
        "utf-8",
    )
    wire = wire_for("openai-chat")
    assert wire is not None
    cfg = EndpointConfig(kind="recorded", model="m-ref", max_tokens=256)
    rows = []
    for i in range(3):
        prompt = f"Question {i}: "
        case = Case(id=f"c{i}", prompt=prompt, expect={}, fixture_sha="f" * 16, path="x", line=1)
        size = len(dumps(wire.body(cfg, PLAIN, case)))
        rows.append({"id": f"c{i}", "prompt": prompt + "x" * (400 - size), "expect": {}})
    (root / "f.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    usage = {"prompt_tokens": 100, "completion_tokens": 200}
    (root / "tape.jsonl").write_text(
        "".join(
            json.dumps({"case_id": r["id"], "completion": "hi", "usage": usage}) + "\n"
            for r in rows
        ),
        "utf-8",
    )


def test_the_readme_budget_example_spends_what_the_readme_says(tmp_path: Path) -> None:
    """The README's worked example: under $0.01 the third case is cut at $0.0073, both its
    calls (its estimate, $0.005624, would pass the limit); a retry under $0.02 makes both and
    reports $0.01095."""
    _worked_example(tmp_path, 0.01)
    loaded = load_config(tmp_path / "parallax.toml")
    for name, estimate in (("m-ref", 584), ("m-cnd", 5040)):
        meter = meter_for(Budget(1.0), loaded.endpoint(name), loaded.shape(name))
        case = Case(
            id="c0",
            prompt=json.loads((tmp_path / "f.jsonl").read_text("utf-8").splitlines()[0])["prompt"],
            expect={},
            fixture_sha="f" * 16,
            path="x",
            line=1,
        )
        assert len(dumps(meter.body(case))) == 400
        assert meter.estimate_case(case) == estimate * 10**6  # micro-dollars, in picodollars
    done = run_parallax("run", "--config", "parallax.toml", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    (run_dir,) = _run_dirs(tmp_path)
    block = _summary(run_dir)["budget"]
    assert block["spent_usd"] == 0.0073
    assert block["cancelled"] == {"candidate": 1, "reference": 1}
    assert block["cut"]["estimate_usd"] == 0.005624
    _worked_example(tmp_path, 0.02)
    again = run_parallax(
        "run", "--config", "parallax.toml", "--retry-unscored", run_dir, cwd=tmp_path
    )
    assert again.returncode == 0, again.stderr
    (retried,) = [d for d in _run_dirs(tmp_path) if d != run_dir]
    assert _summary(retried)["budget"]["spent_usd"] == 0.01095
