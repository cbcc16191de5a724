"""The live endpoint: stamps, retries and the recorded Exchange, against real socket faults."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import random
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import anyio
import httpx
import pytest
from faultserver import BacklogFull, FaultServer
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from runner import logs
from runner.client.endpoint import MESSAGE_CHARS, HttpEndpoint, request_problem
from runner.client.record import plain_headers
from runner.client.retry import RetryDecision, decide_retry, parse_retry_after
from runner.client.stamp import CONFIG_ERRORS, NOT_TRANSPORT, BodyTooLarge, classify
from runner.config import EndpointConfig, RetryPolicy, Timeouts
from runner.errors import ConfigError
from runner.model import Case, Exchange, Transport

KEY = "sk-test-SECRET-0123456789"
CASE = Case(
    id="sku", prompt="Name the SKU that ships.", expect={}, fixture_sha="f" * 16, path="x", line=1
)
FAST_RETRY = RetryPolicy(
    attempts=3, backoff_base=0.01, backoff_max=0.02, jitter=0.5, retry_after_cap=0.05
)


def make_cfg(base_url: str, **over: Any) -> EndpointConfig:
    data: dict[str, Any] = {
        "kind": "openai-chat",
        "base_url": base_url,
        "model": "gpt-ref",
        "timeout": Timeouts(connect=1, read=2, write=1, pool=1),
        "deadline": 5,
        "retry": FAST_RETRY,
        "max_response_bytes": 65536,
    }
    data.update(over)
    return EndpointConfig(**data)


class FakeClock:
    """The endpoint's loop clock, moved only by the endpoint's own sleeps, which return at
    once: `wakes` are the times the endpoint decided to wait until, however busy the
    machine."""

    def __init__(self) -> None:
        self.time = 0.0
        self.wakes: list[float] = []

    def now(self) -> float:
        return self.time

    async def sleep(self, seconds: float) -> None:
        self.time += seconds
        self.wakes.append(self.time)
        await anyio.lowlevel.checkpoint()


async def call_once(
    cfg: EndpointConfig,
    *,
    case: Case = CASE,
    key: str | None = KEY,
    transport: httpx.AsyncBaseTransport | None = None,
    clock: FakeClock | None = None,
) -> Exchange:
    now, sleep = (clock.now, clock.sleep) if clock else (anyio.current_time, anyio.sleep)
    endpoint = HttpEndpoint(
        "ep", cfg, key, transport=transport, rng=random.Random(7), now=now, sleep=sleep
    )
    try:
        with anyio.fail_after(10):
            return await endpoint.call(case, "candidate", 0)
    finally:
        await endpoint.aclose()


def stamps(exchange: Exchange) -> list[str]:
    return [a.transport for a in exchange.attempts]


def content_of(exchange: Exchange) -> Any:
    assert exchange.response is not None
    return json.loads(exchange.response.body)["choices"][0]["message"]["content"]


# -- the loopback server: one test per fault ------------------------------------------------


@pytest.mark.anyio
async def test_ok_records_the_whole_exchange(fault_server: FaultServer) -> None:
    """A good reply is stamped ok after one attempt and recorded with request and body."""
    cfg = make_cfg(fault_server.url("ok"))
    exchange = await call_once(cfg)
    assert stamps(exchange) == ["ok"]
    assert exchange.transport == "ok"
    assert exchange.response is not None
    assert exchange.response.status == 200
    assert content_of(exchange) == "echo: Name the SKU that ships."
    assert exchange.request["method"] == "POST"
    assert fault_server.url("ok") + "/chat/completions" == exchange.request["url"]
    assert exchange.request["body"]["model"] == "gpt-ref"
    assert (
        exchange.adapter,
        exchange.model_alias,
        exchange.answer_pointer,
    ) == ("openai-chat", "gpt-ref", None)
    assert (*exchange.key, exchange.endpoint) == ("sku", "candidate", 0, "ep")
    assert datetime.fromisoformat(exchange.started_at).utcoffset() == timedelta(0)
    assert exchange.attempts[0].status == 200
    assert exchange.attempts[0].error is None


@pytest.mark.anyio
async def test_response_headers_are_allow_listed(fault_server: FaultServer) -> None:
    """Only allow-listed response headers are kept; cookies and unknown headers are dropped."""
    exchange = await call_once(make_cfg(fault_server.url("ok")))
    assert exchange.response is not None
    headers = exchange.response.headers
    assert headers["x-request-id"] == "req-fault"
    assert headers["x-ratelimit-remaining-requests"] == "99"
    assert {"content-type", "content-length", "date", "server"} <= set(headers)
    assert "set-cookie" not in headers
    assert "x-internal-trace" not in headers


@pytest.mark.anyio
async def test_api_key_reaches_server_but_not_the_exchange(fault_server: FaultServer) -> None:
    """The bearer token is sent on the wire and appears nowhere in the recorded Exchange."""
    exchange = await call_once(make_cfg(fault_server.url("ok")))
    (request,) = fault_server.received()
    assert f"Bearer {KEY}" == request.headers["authorization"]
    dumped = json.dumps(exchange.to_json())
    assert KEY not in dumped
    assert "authorization" not in dumped.lower()


@pytest.mark.anyio
async def test_anthropic_key_header_stays_out_of_the_exchange(fault_server: FaultServer) -> None:
    """An Anthropic endpoint sends x-api-key and anthropic-version, records neither secret."""
    cfg = make_cfg(fault_server.url("ok", suffix=""), kind="anthropic-messages")
    exchange = await call_once(cfg)
    (request,) = fault_server.received()
    assert request.headers["x-api-key"] == KEY
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert exchange.transport == "ok"
    assert KEY not in json.dumps(exchange.to_json())
    assert "x-api-key" not in json.dumps(exchange.to_json())


@pytest.mark.anyio
async def test_scripted_reply_and_model_map(fault_server: FaultServer) -> None:
    """The server answers a scripted content per prompt and can claim another model."""
    fault_server.replies[CASE.prompt] = "SKU-9 ships."
    fault_server.model_map["gpt-ref"] = "gpt-ref-2024-09"
    exchange = await call_once(make_cfg(fault_server.url("ok")))
    assert exchange.response is not None
    doc = json.loads(exchange.response.body)
    assert doc["choices"][0]["message"]["content"] == "SKU-9 ships."
    assert doc["model"] == "gpt-ref-2024-09"


@pytest.mark.anyio
async def test_http_json_endpoint_records_answer_pointer(fault_server: FaultServer) -> None:
    """An http-json endpoint posts its filled template and records where the answer sits."""
    cfg = make_cfg(
        fault_server.url("ok", suffix="/answer"),
        kind="http-json",
        model=None,
        body_template={"q": "{{prompt}}", "prompt": "{{prompt}}"},
    )
    exchange = await call_once(cfg)
    assert exchange.transport == "ok"
    assert exchange.answer_pointer == "/answer"
    assert exchange.response is not None
    assert f"echo: {CASE.prompt}" == json.loads(exchange.response.body)["answer"]


@pytest.mark.anyio
async def test_slow_reply_past_read_timeout_is_timeout_and_retried(
    fault_server: FaultServer,
) -> None:
    """A reply slower than the read timeout is `timeout`, retried up to the attempt bound."""
    cfg = make_cfg(
        fault_server.url("slow:1"), timeout=Timeouts(connect=1, read=0.2, write=1, pool=1)
    )
    exchange = await call_once(cfg)
    assert stamps(exchange) == ["timeout"] * 3
    assert {"ReadTimeout"} == {a.error for a in exchange.attempts}
    assert len(fault_server.received()) == 3
    assert exchange.response is None


@pytest.mark.anyio
async def test_hang_is_timeout(fault_server: FaultServer) -> None:
    """A server that accepts and never answers gives a read timeout, not a hang."""
    cfg = make_cfg(
        fault_server.url("hang"),
        timeout=Timeouts(connect=1, read=0.2, write=1, pool=1),
        retry=FAST_RETRY.model_copy(update={"attempts": 1}),
    )
    exchange = await call_once(cfg)
    assert stamps(exchange) == ["timeout"]
    assert exchange.attempts[0].error == "ReadTimeout"


@pytest.mark.anyio
async def test_drip_is_cut_by_the_per_attempt_deadline(fault_server: FaultServer) -> None:
    """A byte every 0.2 s never trips the read timeout; the per-attempt deadline stops it, and
    never before it is due (how long after depends on the machine, so is not asserted)."""
    cfg = make_cfg(
        fault_server.url("drip"),
        deadline=1.5,  # the headers come at once: long enough for them on a busy machine
        retry=FAST_RETRY.model_copy(update={"attempts": 2}),
    )
    exchange = await call_once(cfg)
    assert stamps(exchange) == ["timeout", "timeout"]
    first = exchange.attempts[0]
    assert first.error == "TimeoutError"
    assert first.message == "attempt exceeded the 1.5s deadline"
    assert first.elapsed_ms >= 1500
    assert exchange.response is not None
    assert exchange.response.status == 200
    assert exchange.response.truncated


@pytest.mark.anyio
async def test_reset_mid_body_is_connection_lost(fault_server: FaultServer) -> None:
    """An RST after half the body is `connection_lost`, retried up to the bound."""
    exchange = await call_once(make_cfg(fault_server.url("reset")))
    assert stamps(exchange) == ["connection_lost"] * 3
    assert {a.error for a in exchange.attempts} <= {"ReadError", "RemoteProtocolError"}
    assert len(fault_server.received()) == 3


@pytest.mark.anyio
async def test_short_body_is_connection_lost(fault_server: FaultServer) -> None:
    """A body shorter than its Content-Length is `connection_lost`, the partial body kept."""
    cfg = make_cfg(fault_server.url("short"), retry=FAST_RETRY.model_copy(update={"attempts": 1}))
    exchange = await call_once(cfg)
    assert stamps(exchange) == ["connection_lost"]
    assert exchange.attempts[0].error == "RemoteProtocolError"
    assert exchange.response is not None
    assert exchange.response.truncated
    assert exchange.response.body.startswith('{"id": "chatcmpl-fault-')


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("mode", "stamp", "tries"),
    [
        ("reset:503", "http_error", 3),
        ("short:503", "http_error", 3),
        ("short:400", "http_error", 1),
        ("reset:429", "rate_limited", 3),
    ],
)
async def test_an_error_status_keeps_its_stamp_when_its_body_breaks_off(
    fault_server: FaultServer, mode: str, stamp: str, tries: int
) -> None:
    """The status line is the server's answer: a body that then breaks off is kept as far as
    it came (truncated), and the stamp, the retries and AIMD follow the status, so a cut 400
    is not retried and a cut 429 still halves the limit."""
    cfg = make_cfg(fault_server.url(mode), retry=FAST_RETRY)
    endpoint = HttpEndpoint("ep", cfg, KEY, rng=random.Random(7))
    try:
        with capture_logs() as events, anyio.fail_after(10):
            exchange = await endpoint.call(CASE, "candidate", 0)
    finally:
        await endpoint.aclose()
    code = int(mode.partition(":")[2])
    assert stamps(exchange) == [stamp] * tries
    assert {a.status for a in exchange.attempts} == {code}
    assert {a.error for a in exchange.attempts} <= {"ReadError", "RemoteProtocolError"}
    assert exchange.response is not None and exchange.response.truncated
    halved = [e for e in events if e["event"] == logs.ENDPOINT_BACKOFF]
    assert bool(halved) == (stamp == "rate_limited")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("mode", "last"),
    [("seq:status:503+close", "connection_lost"), ("seq:status:429:0+hang", "timeout")],
)
async def test_the_response_kept_is_the_final_attempts(
    fault_server: FaultServer, mode: str, last: str
) -> None:
    """An exchange whose final attempt got no reply keeps no response: an earlier attempt's
    status and body, stored beside the final stamp, read as what the call ended with."""
    retry = FAST_RETRY.model_copy(update={"attempts": 2})
    timeouts = Timeouts(connect=1, read=0.5, write=1, pool=1)
    exchange = await call_once(make_cfg(fault_server.url(mode), retry=retry, timeout=timeouts))
    assert stamps(exchange)[-1] == last
    assert exchange.attempts[0].status in (503, 429)
    assert exchange.response is None


@pytest.mark.anyio
async def test_a_date_past_the_year_9999_is_no_crash(fault_server: FaultServer) -> None:
    """A Retry-After or Date header whose year overflows the date parser is ignored (backoff):
    it crashed the whole run with a traceback."""
    for mode in ("status:429:Fri, 31 Dec 99999999999 23:59:59 GMT", "farfuture"):
        fault_server.prompt_modes[CASE.prompt] = mode
        cfg = make_cfg(fault_server.url("ok"), retry=FAST_RETRY.model_copy(update={"attempts": 2}))
        exchange = await call_once(cfg)
        assert stamps(exchange) == ["rate_limited"] * 2
        expected = None if mode.startswith("status") else 1.0
        assert [a.retry_after for a in exchange.attempts] == [expected] * 2


@pytest.mark.anyio
async def test_close_without_response_is_connection_lost(fault_server: FaultServer) -> None:
    """A server that closes without a status line is `connection_lost` with no response."""
    exchange = await call_once(make_cfg(fault_server.url("close")))
    assert stamps(exchange) == ["connection_lost"] * 3
    assert exchange.response is None


@pytest.mark.anyio
async def test_refused_port_is_connect_error(closed_port: int) -> None:
    """Nothing listening is `connect_error`, retried, with no response recorded."""
    exchange = await call_once(make_cfg(f"http://127.0.0.1:{closed_port}/v1"))
    assert stamps(exchange) == ["connect_error"] * 3
    assert {"ConnectError"} == {a.error for a in exchange.attempts}
    assert exchange.response is None


@pytest.mark.anyio
async def test_full_backlog_is_connect_timeout(full_backlog: BacklogFull) -> None:
    """A dropped SYN is a connect timeout, stamped `timeout`."""
    cfg = make_cfg(
        f"http://127.0.0.1:{full_backlog.port}/v1",
        timeout=Timeouts(connect=0.2, read=1, write=1, pool=1),
        retry=FAST_RETRY.model_copy(update={"attempts": 2}),
    )
    exchange = await call_once(cfg)
    assert stamps(exchange) == ["timeout", "timeout"]
    assert {"ConnectTimeout"} == {a.error for a in exchange.attempts}


@pytest.mark.anyio
async def test_429_retry_after_seconds_is_honoured(fault_server: FaultServer) -> None:
    """`Retry-After: 1` under the cap is waited in full before the next attempt."""
    retry = RetryPolicy(attempts=2, backoff_base=0, backoff_max=0, retry_after_cap=5)
    clock = FakeClock()
    exchange = await call_once(make_cfg(fault_server.url("status:429"), retry=retry), clock=clock)
    assert stamps(exchange) == ["rate_limited", "rate_limited"]
    assert exchange.attempts[0].retry_after == 1.0
    assert len(fault_server.received()) == 2
    [wait] = clock.wakes
    assert 1.0 <= wait < 2.0
    assert exchange.response is not None
    assert exchange.response.status == 429
    assert exchange.response.headers["retry-after"] == "1"


@pytest.mark.anyio
async def test_429_retry_after_above_cap_waits_the_cap(fault_server: FaultServer) -> None:
    """A Retry-After longer than the cap is waited only for the cap."""
    clock = FakeClock()
    exchange = await call_once(make_cfg(fault_server.url("status:429:30")), clock=clock)
    assert stamps(exchange) == ["rate_limited"] * 3
    assert exchange.attempts[0].retry_after == 30.0
    assert len(fault_server.received()) == 3
    waits = [b - a for a, b in itertools.pairwise([0.0, *clock.wakes])]
    assert len(waits) == 2
    assert all(FAST_RETRY.retry_after_cap <= wait < 1.0 for wait in waits), waits


@pytest.mark.anyio
async def test_429_retry_after_http_date_is_parsed(fault_server: FaultServer) -> None:
    """An HTTP-date Retry-After is measured against the server's Date header."""
    exchange = await call_once(make_cfg(fault_server.url("retrydate:7")))
    assert stamps(exchange) == ["rate_limited"] * 3
    assert {7.0} == {a.retry_after for a in exchange.attempts}


@pytest.mark.anyio
@pytest.mark.parametrize("code", [500, 502, 503])
async def test_5xx_is_http_error_and_retried(fault_server: FaultServer, code: int) -> None:
    """A 5xx is `http_error` with its status kept, retried up to the bound."""
    exchange = await call_once(make_cfg(fault_server.url(f"status:{code}")))
    assert stamps(exchange) == ["http_error"] * 3
    assert [code] * 3 == [a.status for a in exchange.attempts]
    assert exchange.response is not None
    assert code == exchange.response.status
    assert "fault status" in json.loads(exchange.response.body)["error"]["message"]


@pytest.mark.anyio
async def test_a_408_is_retried_and_every_attempt_recorded(fault_server: FaultServer) -> None:
    """A 408 is retried: the server's first answer is a 408 and the second attempt succeeds."""
    exchange = await call_once(make_cfg(fault_server.url("flaky:1:408")))
    expected = (["http_error", "ok"], [408, 200], "ok", 2)
    actual = (
        stamps(exchange),
        [a.status for a in exchange.attempts],
        exchange.transport,
        len(fault_server.received()),
    )
    assert expected == actual


@pytest.mark.anyio
async def test_a_final_408_stays_http_error_with_its_status(fault_server: FaultServer) -> None:
    """A 408 on every attempt ends `http_error` with status 408, after all attempts."""
    exchange = await call_once(make_cfg(fault_server.url("status:408")))
    assert exchange.response is not None
    expected = (["http_error"] * 3, [408] * 3, "http_error", 408)
    actual = (
        stamps(exchange),
        [a.status for a in exchange.attempts],
        exchange.transport,
        exchange.response.status,
    )
    assert expected == actual


@pytest.mark.anyio
@pytest.mark.parametrize("code", [600, 999])
async def test_a_status_past_5xx_is_not_retried(fault_server: FaultServer, code: int) -> None:
    """Only 5xx is retried: a 600 is no server error HTTP defines, so one attempt."""
    exchange = await call_once(make_cfg(fault_server.url(f"status:{code}")))
    assert stamps(exchange) == ["http_error"]
    assert len(fault_server.received()) == 1


@pytest.mark.anyio
@pytest.mark.parametrize("code", [400, 401, 404])
async def test_4xx_is_http_error_and_not_retried(fault_server: FaultServer, code: int) -> None:
    """A 4xx other than 429 is `http_error` after exactly one attempt."""
    exchange = await call_once(make_cfg(fault_server.url(f"status:{code}")))
    assert stamps(exchange) == ["http_error"]
    assert len(fault_server.received()) == 1


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["garbage", "nochoices", "nullcontent"])
async def test_bad_bodies_are_transport_ok(fault_server: FaultServer, mode: str) -> None:
    """A 200 whose body is wrong is still transport `ok`: the body is the schema's business."""
    exchange = await call_once(make_cfg(fault_server.url(mode)))
    assert stamps(exchange) == ["ok"]
    assert exchange.response is not None
    assert exchange.response.encoding == "utf-8"
    assert not exchange.response.truncated
    if mode == "garbage":
        assert exchange.response.body == "<html>not json</html>"
    elif mode == "nullcontent":
        assert content_of(exchange) is None
    else:
        assert "choices" not in json.loads(exchange.response.body)


@pytest.mark.anyio
async def test_oversize_body_is_too_large_and_truncated(fault_server: FaultServer) -> None:
    """A body past the cap is `too_large`, never retried, its first cap bytes kept."""
    cfg = make_cfg(fault_server.url("big:5000"), max_response_bytes=1024)
    exchange = await call_once(cfg)
    assert stamps(exchange) == ["too_large"]
    assert exchange.attempts[0].error == "BodyTooLarge"
    assert exchange.response is not None
    assert exchange.response.truncated
    assert len(exchange.response.body.encode("utf-8")) == 1024
    assert exchange.response.body.startswith('{"id": "chatcmpl-fault-')
    assert len(fault_server.received()) == 1


@pytest.mark.anyio
async def test_non_utf8_body_is_kept_as_base64(fault_server: FaultServer) -> None:
    """A body that is not UTF-8 is stored byte-exact as base64."""
    exchange = await call_once(make_cfg(fault_server.url("badutf8")))
    assert stamps(exchange) == ["ok"]
    assert exchange.response is not None
    assert exchange.response.encoding == "base64"
    assert base64.b64decode(exchange.response.body) == b'{"bytes": "\xff\xfe\xfa"}'


@pytest.mark.anyio
async def test_flaky_recovers_within_the_bound(fault_server: FaultServer) -> None:
    """Two 503s then a good reply: ok on the third attempt, every attempt recorded."""
    exchange = await call_once(make_cfg(fault_server.url("flaky:2")))
    assert stamps(exchange) == ["http_error", "http_error", "ok"]
    assert [a.n for a in exchange.attempts] == [1, 2, 3]
    assert exchange.response is not None
    assert exchange.response.status == 200
    assert exchange.transport == "ok"


@pytest.mark.anyio
async def test_flaky_beyond_the_bound_keeps_the_last_error(fault_server: FaultServer) -> None:
    """When every allowed attempt fails, the final stamp and response are the last 503."""
    exchange = await call_once(make_cfg(fault_server.url("flaky:5")))
    assert stamps(exchange) == ["http_error"] * 3
    assert exchange.response is not None
    assert exchange.response.status == 503


@pytest.mark.anyio
async def test_429_halves_the_limit_and_success_restores_it(fault_server: FaultServer) -> None:
    """AIMD: a 429 halves the concurrency limit, a run of successes adds one back."""
    cfg = make_cfg(fault_server.url("flaky:1:429"), concurrency=2)
    endpoint = HttpEndpoint("ep", cfg, KEY)
    try:
        with capture_logs() as events, anyio.fail_after(10):
            exchange = await endpoint.call(CASE, "reference", 0)
    finally:
        await endpoint.aclose()
    assert stamps(exchange) == ["rate_limited", "ok"]
    aimd = [(e["event"], e["endpoint"], e["old"], e["new"]) for e in events]
    assert aimd == [
        (logs.ENDPOINT_BACKOFF, "ep", 2, 1),
        (logs.ENDPOINT_RECOVER, "ep", 1, 2),
    ]
    assert endpoint.limit == 2


@pytest.mark.anyio
async def test_a_burst_of_429s_halves_the_limit_once(fault_server: FaultServer) -> None:
    """Concurrent 429s that all began under the old limit cut it once, not once each."""
    retry = FAST_RETRY.model_copy(update={"attempts": 1})
    cfg = make_cfg(fault_server.url("status:429"), concurrency=8, retry=retry)
    endpoint = HttpEndpoint("ep", cfg, KEY)
    try:
        with capture_logs() as events, anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                for i in range(8):
                    tg.start_soon(endpoint.call, CASE, "candidate", i)
    finally:
        await endpoint.aclose()
    assert endpoint.limit == 4
    assert [e["event"] for e in events] == [logs.ENDPOINT_BACKOFF]


@pytest.mark.anyio
async def test_concurrency_bounds_requests_in_flight(fault_server: FaultServer) -> None:
    """No more than `concurrency` requests are in flight at once."""
    cfg = make_cfg(fault_server.url("together:2:0.15"), concurrency=2)
    endpoint = HttpEndpoint("ep", cfg, KEY)
    try:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                for i in range(6):
                    tg.start_soon(endpoint.call, CASE, "candidate", i)
    finally:
        await endpoint.aclose()
    assert len(fault_server.received()) == 6
    assert fault_server.max_inflight == 2


@pytest.mark.anyio
async def test_rpm_spaces_request_starts(fault_server: FaultServer) -> None:
    """With `rpm` set, request starts are spaced 60/rpm seconds apart."""
    cfg = make_cfg(fault_server.url("ok"), rpm=600)  # one start every 0.1 s
    clock = FakeClock()
    endpoint = HttpEndpoint("ep", cfg, KEY, now=clock.now, sleep=clock.sleep)
    try:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                for i in range(4):
                    tg.start_soon(endpoint.call, CASE, "candidate", i)
    finally:
        await endpoint.aclose()
    assert len(fault_server.received()) == 4
    assert clock.wakes == pytest.approx([0.1, 0.2, 0.3])  # the first starts at once, at 0


@pytest.mark.anyio
async def test_cancellation_propagates(fault_server: FaultServer) -> None:
    """A cancelled call re-raises cancellation instead of returning a stamped Exchange."""
    endpoint = HttpEndpoint("ep", make_cfg(fault_server.url("hang")), KEY)
    result: list[Exchange] = []
    try:
        with anyio.fail_after(5), anyio.move_on_after(0.2) as scope:
            result.append(await endpoint.call(CASE, "candidate", 0))
    finally:
        await endpoint.aclose()
    assert scope.cancelled_caught
    assert result == []


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["Retry-After", "retry-after", "X-Ratelimit-Remaining", "Date"])
            | st.text("abcXYZ-\u00e9", min_size=1, max_size=6),
            st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF), max_size=8),
        ),
        max_size=6,
    ),
    st.sampled_from(["utf-8", "latin-1"]),
)
def test_plain_headers_read_as_httpx_reads_them(
    pairs: list[tuple[str, str]], encoding: str
) -> None:
    """A response's headers as one dict: names lower-cased and values decoded as
    `httpx.Headers.multi_items` gives them, repeated names joined with ", "."""
    try:
        headers = httpx.Headers([(k.encode(encoding), v.encode(encoding)) for k, v in pairs])
    except UnicodeEncodeError:
        return
    expected: dict[str, str] = {}
    for name, value in headers.multi_items():
        expected[name] = f"{expected[name]}, {value}" if name in expected else value
    assert plain_headers(headers) == expected


# -- MockTransport units ------------------------------------------------------------------


@pytest.mark.anyio
async def test_each_request_carries_what_httpx_would_build_for_its_own_body() -> None:
    """The endpoint builds its requests from headers made once: each is still the request
    httpx builds from its body (the same headers in the same order, Host first, its own
    Content-Length last), a longer body after a short one included."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"choices": [{"message": {"content": "ok"}}]})

    cfg = make_cfg("http://mock.test:8080/v1", headers={"X-Team": "search"})
    endpoint = HttpEndpoint("ep", cfg, KEY, transport=httpx.MockTransport(handler))
    short = Case(id="s", prompt="p", expect={}, fixture_sha="f" * 16, path="x", line=1)
    long = Case(id="l", prompt="p" * 5000, expect={}, fixture_sha="f" * 16, path="x", line=2)
    try:
        for case in (short, long, short):
            await endpoint.call(case, "candidate", 0)
    finally:
        await endpoint.aclose()
    assert len(seen) == 3
    for request in seen:
        expected = httpx.Request(
            "POST",
            "http://mock.test:8080/v1/chat/completions",
            headers={
                "Accept": "*/*",
                "Accept-Encoding": "gzip, deflate",
                "Connection": "keep-alive",
                "User-Agent": "parallax",
                "Content-Type": "application/json",
                "Accept": "application/json",  # noqa: F601 - the wire's, in the first's place
                "X-Team": "search",
                "Authorization": f"Bearer {KEY}",
            },
            content=request.content,
        )
        assert (request.method, request.url) == (expected.method, expected.url)
        assert request.headers.raw == expected.headers.raw
    assert len(seen[0].content) < len(seen[1].content)
    assert seen[0].content == seen[2].content


@pytest.mark.anyio
async def test_error_message_is_scrubbed_and_truncated() -> None:
    """An exception message carrying the key is masked and cut to about 300 characters."""

    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"cannot reach with {KEY} " + "x" * 500, request=request)

    cfg = make_cfg("http://mock.test/v1", retry=FAST_RETRY.model_copy(update={"attempts": 1}))
    exchange = await call_once(cfg, transport=httpx.MockTransport(handler))
    (attempt,) = exchange.attempts
    assert attempt.transport == "connect_error"
    assert attempt.message is not None
    assert KEY not in attempt.message
    assert "***" in attempt.message
    assert len(attempt.message) <= MESSAGE_CHARS


@pytest.mark.anyio
async def test_retry_after_ms_is_preferred() -> None:
    """OpenAI's `retry-after-ms` is used before the coarser Retry-After."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(429, headers={"retry-after-ms": "1500", "retry-after": "2"})

    exchange = await call_once(
        make_cfg("http://mock.test/v1"), transport=httpx.MockTransport(handler)
    )
    assert [a.retry_after for a in exchange.attempts] == [1.5, 1.5, 1.5]


@pytest.mark.anyio
async def test_a_negative_retry_after_ms_falls_back_to_retry_after() -> None:
    """An unusable `retry-after-ms` (a sign) is ignored, not an instant retry that overrides
    the server's valid Retry-After."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(429, headers={"retry-after-ms": "-100", "retry-after": "0.03"})

    exchange = await call_once(
        make_cfg("http://mock.test/v1"), transport=httpx.MockTransport(handler)
    )
    assert [a.retry_after for a in exchange.attempts] == [0.03, 0.03, 0.03]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"llm_provider-retry-after": "0.03"}, 0.03),
        ({"llm_provider-retry-after-ms": "40", "llm_provider-retry-after": "1"}, 0.04),
        # two hops: the longer wait wins, since a shorter one is a sure second 429
        ({"retry-after": "0.02", "llm_provider-retry-after": "0.05"}, 0.05),
        ({"retry-after-ms": "60", "llm_provider-retry-after": "0.01"}, 0.06),
    ],
)
async def test_a_gateways_renamed_retry_after_is_understood(
    headers: dict[str, str], expected: float
) -> None:
    """LiteLLM's `llm_provider-retry-after(-ms)` is read as a Retry-After, and kept."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(429, headers=headers)

    exchange = await call_once(
        make_cfg("http://mock.test/v1"), transport=httpx.MockTransport(handler)
    )
    assert [a.retry_after for a in exchange.attempts] == [expected] * 3
    assert exchange.response is not None
    assert headers == {k: v for k, v in exchange.response.headers.items() if k in headers}


@pytest.mark.anyio
@pytest.mark.parametrize(
    "exc",
    [httpx.UnsupportedProtocol("nope"), httpx.InvalidURL("bad"), httpx.LocalProtocolError("x")],
)
async def test_config_errors_raise_config_error(exc: Exception) -> None:
    """A request that could never be sent is a ConfigError (exit 78), not a stamp."""

    def handler(request: httpx.Request) -> httpx.Response:
        raise exc

    with pytest.raises(ConfigError) as info:
        await call_once(make_cfg("http://mock.test/v1"), transport=httpx.MockTransport(handler))
    assert info.value.exit_code == 78
    assert "endpoint 'ep'" in str(info.value)


def test_request_problem_accepts_a_good_config() -> None:
    """A well-formed endpoint has no request problem."""
    assert request_problem(make_cfg("http://127.0.0.1:9/v1")) is None


def test_request_problem_names_an_invalid_url() -> None:
    """A URL httpx cannot build is reported for `validate`, before any run."""
    problem = request_problem(make_cfg("http://ho\x00st/v1"))
    assert problem is not None
    assert problem.startswith("InvalidURL: ")


@pytest.mark.anyio
async def test_invalid_url_at_call_time_is_a_config_error() -> None:
    """The same URL reaching `call` raises ConfigError rather than stamping a fake outcome."""
    with pytest.raises(ConfigError, match="InvalidURL"):
        await call_once(make_cfg("http://ho\x00st/v1"))


def test_recorded_endpoint_is_refused() -> None:
    """A recorded endpoint has no HTTP side; building an HttpEndpoint for it is a bug."""
    with pytest.raises(ValueError, match="recorded"):
        HttpEndpoint("rec", EndpointConfig(kind="recorded", cassette="c.jsonl"), None)


# -- classify ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (httpx.ConnectTimeout("t"), Transport.TIMEOUT),
        (httpx.ReadTimeout("t"), Transport.TIMEOUT),
        (httpx.WriteTimeout("t"), Transport.TIMEOUT),
        (httpx.PoolTimeout("t"), Transport.TIMEOUT),
        (TimeoutError(), Transport.TIMEOUT),
        (httpx.ConnectError("c"), Transport.CONNECT_ERROR),
        (httpx.ProxyError("p"), Transport.CONNECT_ERROR),
        (httpx.ReadError("r"), Transport.CONNECTION_LOST),
        (httpx.WriteError("w"), Transport.CONNECTION_LOST),
        (httpx.CloseError("c"), Transport.CONNECTION_LOST),
        (httpx.RemoteProtocolError("r"), Transport.CONNECTION_LOST),
        (httpx.DecodingError("d"), Transport.CONNECTION_LOST),
        (BodyTooLarge(1024), Transport.TOO_LARGE),
        (asyncio.CancelledError(), Transport.CANCELLED),
    ],
)
def test_classify_by_exception(exc: BaseException, expected: Transport) -> None:
    """Each exception family maps to its DESIGN stamp, whatever the status."""
    assert expected == classify(exc, None)
    assert expected == classify(exc, 200)


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (200, Transport.OK),
        (204, Transport.OK),
        (301, Transport.HTTP_ERROR),
        (400, Transport.HTTP_ERROR),
        (404, Transport.HTTP_ERROR),
        (429, Transport.RATE_LIMITED),
        (500, Transport.HTTP_ERROR),
        (503, Transport.HTTP_ERROR),
    ],
)
def test_classify_by_status(status: int, expected: Transport) -> None:
    """Without an exception the status decides: 2xx ok, 429 rate_limited, else http_error."""
    assert expected == classify(None, status)


def test_classify_refuses_non_outcomes() -> None:
    """Config errors, non-transport classes and an empty call are refused, not guessed."""
    for exc in (httpx.InvalidURL("u"), httpx.StreamConsumed(), ValueError("v")):
        with pytest.raises(ValueError, match=r"not a transport outcome|config error"):
            classify(exc, None)
    with pytest.raises(ValueError, match="needs an exception or a status"):
        classify(None, None)


@pytest.mark.anyio
async def test_classify_knows_the_running_backends_cancellation() -> None:
    """Inside an event loop, the backend's own cancellation class is `cancelled`."""
    assert classify(anyio.get_cancelled_exc_class()(), None) == Transport.CANCELLED


def test_every_httpx_exception_is_mapped_or_declared() -> None:
    """Every exception class httpx exports has a stamp or is declared config / not transport."""
    classes = [
        getattr(httpx, n)
        for n in httpx.__all__
        if isinstance(getattr(httpx, n), type) and issubclass(getattr(httpx, n), Exception)
    ]
    assert len(classes) >= 28
    declared = set(CONFIG_ERRORS) | set(NOT_TRANSPORT)
    assert not set(CONFIG_ERRORS) & set(NOT_TRANSPORT)
    unmapped = []
    for cls in classes:
        if cls in declared:
            continue
        try:
            stamp = classify(cls.__new__(cls), None)
        except ValueError:
            unmapped.append(cls.__name__)
        else:
            assert stamp in set(Transport)
    assert unmapped == []


# -- decide_retry --------------------------------------------------------------------------

POLICY = RetryPolicy(attempts=4, backoff_base=0.5, backoff_max=3.0, jitter=0.5, retry_after_cap=5)


@pytest.mark.parametrize(
    ("stamp", "status"),
    [
        (Transport.OK, 200),
        (Transport.TOO_LARGE, 200),
        (Transport.CANCELLED, None),
        (Transport.HTTP_ERROR, 400),
        (Transport.HTTP_ERROR, 401),
        (Transport.HTTP_ERROR, 404),
        (Transport.HTTP_ERROR, 301),
    ],
)
def test_never_retried(stamp: Transport, status: int | None) -> None:
    """ok, too_large, cancelled and non-429 4xx are never retried."""
    decision = decide_retry(1, stamp, status, None, POLICY, random.Random(1))
    assert not decision.retry
    assert decision.wait == 0.0


@pytest.mark.parametrize(
    ("stamp", "status"),
    [
        (Transport.TIMEOUT, None),
        (Transport.CONNECT_ERROR, None),
        (Transport.CONNECTION_LOST, 200),
        (Transport.RATE_LIMITED, 429),
        (Transport.HTTP_ERROR, 500),
        (Transport.HTTP_ERROR, 503),
        (Transport.HTTP_ERROR, 408),
    ],
)
def test_retried_until_the_attempt_bound(stamp: Transport, status: int | None) -> None:
    """Retryable stamps are retried while attempts remain, never on the last one."""
    rng = random.Random(1)
    assert all(decide_retry(n, stamp, status, None, POLICY, rng).retry for n in (1, 2, 3))
    assert RetryDecision(False, 0.0, "attempts_exhausted") == decide_retry(
        4, stamp, status, None, POLICY, rng
    )


def test_backoff_doubles_up_to_the_max_without_jitter() -> None:
    """With jitter 0 the wait is exactly min(backoff_max, base * 2**(n-1))."""
    policy = POLICY.model_copy(update={"jitter": 0.0, "attempts": 10})
    waits = [
        decide_retry(n, Transport.TIMEOUT, None, None, policy, random.Random(1)).wait
        for n in range(1, 7)
    ]
    assert waits == [0.5, 1.0, 2.0, 3.0, 3.0, 3.0]


def test_jitter_stays_in_its_fraction() -> None:
    """With jitter j the wait falls in [backoff * (1 - j), backoff] and actually varies."""
    rng = random.Random(42)
    waits = [decide_retry(2, Transport.TIMEOUT, None, None, POLICY, rng).wait for _ in range(500)]
    assert all(0.5 <= w <= 1.0 for w in waits)
    assert max(waits) - min(waits) > 0.3


class FixedRandom(random.Random):
    """A random source that always draws `value`: the edges of the jitter, exactly."""

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


def test_retry_after_is_honoured_up_to_the_cap() -> None:
    """Retry-After replaces backoff; beyond the cap the cap is waited (at the jitter's floor)."""
    rng = FixedRandom(0.0)
    assert RetryDecision(True, 2.0, "retry_after") == decide_retry(
        1, Transport.RATE_LIMITED, 429, 2.0, POLICY, rng
    )
    assert RetryDecision(True, 5.0, "retry_after_capped") == decide_retry(
        1, Transport.RATE_LIMITED, 429, 120.0, POLICY, rng
    )
    assert decide_retry(1, Transport.HTTP_ERROR, 503, 0.0, POLICY, rng).wait == 0.0


def test_retry_after_gets_jitter_on_top_never_below() -> None:
    """A Retry-After wait is the server's value plus up to `jitter` of it, never less."""
    top = FixedRandom(1.0)
    assert RetryDecision(True, 3.0, "retry_after") == decide_retry(
        1, Transport.RATE_LIMITED, 429, 2.0, POLICY, top
    )
    assert RetryDecision(True, 7.5, "retry_after_capped") == decide_retry(
        1, Transport.RATE_LIMITED, 429, 120.0, POLICY, top
    )
    rng = random.Random(42)
    waits = [
        decide_retry(1, Transport.RATE_LIMITED, 429, 2.0, POLICY, rng).wait for _ in range(500)
    ]
    assert all(2.0 <= w <= 3.0 for w in waits)
    assert max(waits) - min(waits) > 0.8


def test_a_retry_after_of_zero_is_spread_over_the_backoff() -> None:
    """`Retry-After: 0` sends a burst back spread over the backoff step, not all at once."""
    waits = [
        decide_retry(2, Transport.RATE_LIMITED, 429, 0.0, POLICY, FixedRandom(edge)).wait
        for edge in (0.0, 1.0)
    ]
    assert waits == [0.0, 0.5]  # backoff at attempt 2 is 1.0; jitter 0.5 of it on top


def test_a_408_is_retried_and_other_4xx_are_not() -> None:
    """A 408 (the server's own timeout) is retried like a 5xx; a 400 or 409 is not."""
    rng = FixedRandom(0.0)
    expected = [
        RetryDecision(True, 0.25, "backoff"),
        RetryDecision(False, 0.0, "not_retryable:http_400"),
        RetryDecision(False, 0.0, "not_retryable:http_409"),
    ]
    actual = [decide_retry(1, Transport.HTTP_ERROR, s, None, POLICY, rng) for s in (408, 400, 409)]
    assert expected == actual


def test_decision_is_frozen() -> None:
    """A decision is a value: it cannot be changed after it is made."""
    decision = RetryDecision(True, 1.0, "backoff")
    with pytest.raises(AttributeError):
        decision.wait = 2.0  # type: ignore[misc]


# -- parse_retry_after ---------------------------------------------------------------------

NOW = datetime(2024, 3, 10, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("", None),
        ("  ", None),
        ("soon", None),
        ("nan", None),
        ("inf", None),
        ("Sun, 99 Foo 2024 00:00:00 GMT", None),
        ("5", 5.0),
        (" 12 ", 12.0),
        ("1.5", 1.5),
        ("0", 0.0),
        ("-3", None),  # RFC 9110's delta-seconds has no sign: backoff, not an instant retry
        ("+3", None),
        ("1_0", None),
        ("\u0661\u0662", None),  # Arabic-Indic digits that float() would read as 12
        ("1e3", None),
        ("Fri, 31 Dec 99999999999 23:59:59 GMT", None),  # overflowed the date parser
        (format_datetime(NOW + timedelta(seconds=30), usegmt=True), 30.0),
        (format_datetime(NOW - timedelta(seconds=30), usegmt=True), 0.0),
        ("Sun, 10 Mar 2024 12:00:20 -0000", 20.0),
    ],
)
def test_parse_retry_after(value: str | None, expected: float | None) -> None:
    """Delta-seconds and HTTP-dates become seconds; past dates 0; garbage None."""
    assert expected == parse_retry_after(value, NOW)


def test_parse_retry_after_measures_against_any_aware_zone() -> None:
    """An aware `now` in another zone is the same instant, so the same wait."""
    from zoneinfo import ZoneInfo

    berlin = NOW.astimezone(ZoneInfo("Europe/Berlin"))
    value = format_datetime(NOW + timedelta(seconds=10), usegmt=True)
    assert parse_retry_after(value, berlin) == 10.0


def test_parse_retry_after_refuses_a_naive_now() -> None:
    """A naive clock would shift an HTTP-date wait by the host's UTC offset: refused."""
    with pytest.raises(ValueError, match="aware"):
        parse_retry_after("5", NOW.replace(tzinfo=None))
