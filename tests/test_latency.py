"""Latency is the model's, never parallax's own waiting (DESIGN): an attempt's time runs from
handing its request to the transport to its last byte, the exchange's is its final attempt's,
and what a call waited for a concurrency slot, `rpm` pacing or a retry's backoff is recorded
apart (`queued_ms`, `backoff_ms`). First in virtual time (exact figures on any machine), then
a real run against one loopback server whose two sides wait very differently."""

from __future__ import annotations

import json
import random
import statistics
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from clockkit import VirtualClock
from faultserver import FaultServer
from relkit import run_parallax

from runner.client.endpoint import HttpEndpoint
from runner.config import EndpointConfig, RetryPolicy
from runner.model import Case, Exchange

CASE = Case(id="c", prompt="Name the SKU.", expect={}, fixture_sha="f" * 16, path="x", line=1)
REPLY = {
    "model": "m",
    "choices": [{"index": 0, "message": {"content": "SKU-9"}, "finish_reason": "stop"}],
}


def _cfg(**over: Any) -> EndpointConfig:
    return EndpointConfig(kind="openai-chat", base_url="http://mock.test/v1", model="m", **over)


Handler = Callable[[httpx.Request], Awaitable[httpx.Response]]


def _server(clock: VirtualClock, *replies: tuple[float, int, dict[str, str]]) -> Handler:
    """A server that takes `seconds` of virtual time over its i-th reply (the last repeats),
    answering that status with those headers."""
    served: list[int] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        served.append(1)
        seconds, status, headers = replies[min(len(served), len(replies)) - 1]
        await clock.sleep(seconds)
        return httpx.Response(status, headers=headers, json=REPLY if status == 200 else {})

    return handler


async def _calls(
    cfg: EndpointConfig, handler: Handler, clock: VirtualClock, n: int
) -> list[Exchange]:
    """`n` calls of one endpoint at once, in virtual time; the exchanges by sample."""
    endpoint = HttpEndpoint(
        "ep",
        cfg,
        None,
        transport=httpx.MockTransport(handler),
        rng=random.Random(1),
        now=clock.now,
        sleep=clock.sleep,
    )
    got: list[Exchange] = []

    async def one(sample: int) -> None:
        got.append(await endpoint.call(CASE, "candidate", sample))

    try:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                group.start_soon(clock.run)
                async with anyio.create_task_group() as callers:
                    for sample in range(n):
                        callers.start_soon(one, sample)
                group.cancel_scope.cancel()
    finally:
        await endpoint.aclose()
    return sorted(got, key=lambda e: e.sample)


pytestmark = pytest.mark.anyio


async def test_a_call_waiting_for_its_concurrency_slot_is_queued_not_slow() -> None:
    """Behind `concurrency = 1`, three calls to a server that takes 3 s each take 3 s each:
    the second and third waited 3 and 6 s for the slot, and that is their queued_ms."""
    clock = VirtualClock()
    exchanges = await _calls(_cfg(concurrency=1), _server(clock, (3.0, 200, {})), clock, 3)
    assert [e.elapsed_ms for e in exchanges] == [3000, 3000, 3000]
    assert [[a.elapsed_ms for a in e.attempts] for e in exchanges] == [[3000]] * 3
    assert sorted(e.queued_ms or 0 for e in exchanges) == [0, 3000, 6000]
    assert [e.backoff_ms for e in exchanges] == [0, 0, 0]
    assert clock.time == 9.0


async def test_rpm_pacing_is_queued_not_slow() -> None:
    """`rpm = 60` starts a call a second: three calls to a server that takes 0.5 s each are
    0.5 s calls that waited 0, 1 and 2 s for their start."""
    clock = VirtualClock()
    cfg = _cfg(concurrency=8, rpm=60)
    exchanges = await _calls(cfg, _server(clock, (0.5, 200, {})), clock, 3)
    assert [e.elapsed_ms for e in exchanges] == [500, 500, 500]
    assert sorted(e.queued_ms or 0 for e in exchanges) == [0, 1000, 2000]


async def test_a_retried_call_is_as_slow_as_its_final_attempt_and_its_backoff_is_apart() -> None:
    """A 429 (Retry-After 1.5 s), a 503, then a reply: each attempt keeps its own time on the
    wire, the exchange the graded reply's (the final attempt's), and the 1.5 s and 2 s the
    call slept between them are its backoff_ms."""
    clock = VirtualClock()
    policy = RetryPolicy(attempts=3, backoff_base=2.0, backoff_max=2.0, jitter=0.0)
    handler = _server(clock, (0.05, 429, {"retry-after": "1.5"}), (0.1, 503, {}), (0.25, 200, {}))
    (exchange,) = await _calls(_cfg(retry=policy), handler, clock, 1)
    assert [(a.transport, a.elapsed_ms) for a in exchange.attempts] == [
        ("rate_limited", 50),
        ("http_error", 100),
        ("ok", 250),
    ]
    assert (exchange.elapsed_ms, exchange.backoff_ms, exchange.queued_ms) == (250, 3500, 0)


async def test_the_waits_reach_raw_and_outcome_rows() -> None:
    """queued_ms and backoff_ms are written with the exchange and copied to its outcome row;
    a row written before they existed reads them as unknown."""
    from runner.grading.graders import GraderSet
    from runner.stamps import stamp

    clock = VirtualClock()
    policy = RetryPolicy(attempts=2, backoff_base=1.0, backoff_max=1.0, jitter=0.0)
    handler = _server(clock, (0.1, 503, {}), (0.2, 200, {}))
    exchanges = await _calls(_cfg(concurrency=1, retry=policy), handler, clock, 2)
    for exchange in exchanges:
        row = json.loads(json.dumps(exchange.to_json()))
        assert (row["queued_ms"], row["backoff_ms"]) == (exchange.queued_ms, exchange.backoff_ms)
        out = stamp(Exchange.from_json(row), CASE, GraderSet.empty()).to_json()
        assert (out["elapsed_ms"], out["queued_ms"], out["backoff_ms"]) == (
            exchange.elapsed_ms,
            exchange.queued_ms,
            exchange.backoff_ms,
        )
        del row["queued_ms"], row["backoff_ms"]
        old = Exchange.from_json(row)
        assert (old.queued_ms, old.backoff_ms) == (None, None)
    # the server's first reply, to whichever call came first, was the 503 that one retried
    assert sorted(e.backoff_ms or 0 for e in exchanges) == [0, 1000]
    assert max(e.queued_ms or 0 for e in exchanges) > 0  # one waited for the other's slot


# -- a real run: one server, two sides that wait differently ---------------------------------

CASES = 16
SERVER_S = 0.2  # what the server takes over every reply that counts


def _config(server: FaultServer) -> str:
    """Both sides call the same server, which takes 0.2 s over each reply. The reference has
    room (concurrency 8); the candidate has one slot, an rpm of 300 (a start every 0.2 s),
    and is first answered 503 on every case, then retried after a 0.3 s backoff."""
    ref, cand = (
        server.url(f"slow:{SERVER_S}", "ref"),
        server.url(f"seq:status:503+slow:{SERVER_S}", "cand"),
    )
    return (
        'runs_dir = "runs"\nsnapshots_dir = "snapshots"\n'
        "[thresholds]\nlatency_ratio_max = 1.5\n"
        f'[endpoints.ref]\nkind = "openai-chat"\nbase_url = "{ref}"\n'
        'model = "m"\nconcurrency = 8\n'
        f'[endpoints.cand]\nkind = "openai-chat"\nbase_url = "{cand}"\n'
        'model = "m"\nconcurrency = 1\nrpm = 300\n'
        "retry = { attempts = 3, backoff_base = 0.3, backoff_max = 0.3, jitter = 0 }\n"
        '[suites.s]\nfixtures = "f.jsonl"\nreference = "ref"\ncandidate = "cand"\n'
        'fail_on = ["latency_regression"]\n'
    )


def test_sides_that_wait_differently_on_one_server_show_its_latency_and_no_gate(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """The candidate queues for its slot and its rpm and backs off a retry on every case; the
    reference waits for nothing. Both sides' latencies are the server's (at least its 0.2 s,
    medians alike), the waits are in queued_ms and backoff_ms, and the latency gate finds no
    regression. Bounds are generous: nothing here depends on how fast the machine is."""
    rows = [{"id": f"c{i:02d}", "prompt": f"Question {i}.", "expect": {}} for i in range(CASES)]
    (tmp_path / "f.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    (tmp_path / "parallax.toml").write_text(_config(fault_server), "utf-8")
    done = run_parallax("run", "--config", "parallax.toml", cwd=tmp_path)
    (run_dir,) = [p.parent for p in tmp_path.glob("runs/s/*/manifest.json")]
    summary = json.loads((run_dir / "summary.json").read_text("utf-8"))
    latency = summary["regressions"]["latency"]
    assert (latency["finding"], latency["fires"], latency["pairs"]) == (
        "no_regression",
        False,
        CASES,
    ), latency
    assert done.returncode == 0, done.stderr
    outcomes = [json.loads(line) for line in (run_dir / "outcomes.jsonl").read_text().splitlines()]
    side = {name: [r for r in outcomes if r["side"] == name] for name in ("reference", "candidate")}
    assert all(r["transport"] == "ok" for r in outcomes)
    assert all(r["elapsed_ms"] >= SERVER_S * 1000 for r in outcomes)  # the server's own wait
    assert [r["attempts"] for r in side["candidate"]] == [2] * CASES
    assert all(r["backoff_ms"] >= 290 for r in side["candidate"])  # slept 0.3 s: apart
    assert all(r["backoff_ms"] == 0 for r in side["reference"])
    assert max(r["queued_ms"] for r in side["candidate"]) >= 200  # a slot and the rpm: apart
    medians = {name: statistics.median(r["elapsed_ms"] for r in got) for name, got in side.items()}
    # the wrong figure was x38.99; a loaded machine's own jitter stays well inside x3
    assert 1 / 3 <= medians["candidate"] / medians["reference"] <= 3.0, medians
    # the exchange's figure is its final attempt's, the reply that was graded
    for line in (run_dir / "raw.jsonl").read_text("utf-8").splitlines():
        exchange = json.loads(line)
        assert exchange["elapsed_ms"] == exchange["attempts"][-1]["elapsed_ms"]
