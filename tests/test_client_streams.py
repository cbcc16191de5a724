"""Specification of how a live call classifies a streamed reply (httpx.MockTransport units):
the stream's bytes are kept as received, how it ended decides the attempt's stamp, and its
first token (in virtual time) its ttft_ms."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import httpx
import pytest
from clockkit import VirtualClock

from runner.client.endpoint import HttpEndpoint
from runner.client.retry import decide_retry
from runner.config import EndpointConfig, RetryPolicy, Timeouts
from runner.grading.graders import GraderSet
from runner.model import Case, Exchange, Outcome
from runner.request.shape import Shape
from runner.stamps import stamp

SSE = {"content-type": "text/event-stream"}
RETRY = RetryPolicy(attempts=3, backoff_base=0.001, backoff_max=0.002, jitter=0.0)
CASE = Case(id="c1", prompt="Name the SKU.", expect={}, fixture_sha="f" * 16, path="s", line=1)
NONE = GraderSet.empty()


# the shape of a streaming side: the case as written, a stream asked for
STREAMED = Shape(None, None, {}, True, "5" * 16)


def cfg(kind: str = "openai-chat", **over: Any) -> EndpointConfig:
    data: dict[str, Any] = {
        "kind": kind,
        "base_url": "http://mock.test/v1",
        "model": "m",
        "timeout": Timeouts(connect=1, read=2, write=1, pool=1),
        "deadline": 5,
        "retry": RETRY,
    }
    data.update(over)
    return EndpointConfig(**data)


def events(*docs: Any) -> bytes:
    return "".join(f"data: {d if isinstance(d, str) else json.dumps(d)}\n\n" for d in docs).encode()


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "s1",
        "model": "m-s",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


WHOLE = events(chunk({"content": "SKU-9"}), chunk({}, "stop"), "[DONE]")
CUT = events(chunk({"content": "SKU-9"}))
ERRORED = events(
    chunk({"content": "SKU"}), {"error": {"type": "overloaded_error", "message": "busy"}}
)
MALFORMED = (
    events(chunk({"content": "SKU"})) + b'data: {"choi\n\n' + events(chunk({}, "stop"), "[DONE]")
)


async def call(
    handler: Callable[[httpx.Request], httpx.Response], config: EndpointConfig | None = None
) -> Exchange:
    ep = HttpEndpoint(
        "cand",
        config or cfg(),
        None,
        shape=STREAMED,
        transport=httpx.MockTransport(handler),
        rng=random.Random(3),
    )
    try:
        with anyio.fail_after(10):
            return await ep.call(CASE, "candidate", 0)
    finally:
        await ep.aclose()


def replies(
    *bodies: bytes, headers: dict[str, str] = SSE, status: int = 200
) -> Callable[[httpx.Request], httpx.Response]:
    """A server that answers the i-th request with the i-th body (the last one repeats)."""
    seen: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(1)
        return httpx.Response(
            status, headers=headers, content=bodies[min(len(seen), len(bodies)) - 1]
        )

    return handler


def outcome(exchange: Exchange) -> Outcome:
    return stamp(exchange, CASE, NONE)


pytestmark = pytest.mark.anyio


async def test_a_whole_stream_is_ok_and_keeps_its_bytes_and_first_token_time() -> None:
    """A stream that reaches its finish event is ok, stored as the bytes sent, with ttft."""
    exchange = await call(replies(WHOLE))
    assert [a.transport for a in exchange.attempts] == ["ok"]
    assert exchange.response is not None
    assert exchange.response.body == WHOLE.decode()
    assert isinstance(exchange.ttft_ms, int)
    assert 0 <= exchange.ttft_ms <= exchange.elapsed_ms
    assert (exchange.stream, exchange.request_sha) == (True, "5" * 16)
    row = outcome(exchange)
    assert (row.transport, row.schema, row.detail) == ("ok", "ok", "ok")
    assert (row.finish_reason, row.ttft_ms, row.request_sha) == ("stop", exchange.ttft_ms, "5" * 16)
    assert row.response_model == "m-s"


async def test_a_truncated_stream_is_a_lost_connection_and_retried() -> None:
    """No finish event: each attempt is connection_lost with error stream_truncated, retried
    like a reset; the row is unscored with that detail."""
    exchange = await call(replies(CUT))
    assert [(a.transport, a.error, a.status) for a in exchange.attempts] == [
        ("connection_lost", "stream_truncated", 200)
    ] * 3
    row = outcome(exchange)
    assert (row.transport, row.schema, row.task_score) == ("connection_lost", "skipped", None)
    assert row.detail.startswith("connection_lost: HTTP 200: stream_truncated")


async def test_a_truncated_stream_that_comes_whole_on_retry_is_ok() -> None:
    """The retry's complete stream is the one recorded and graded."""
    exchange = await call(replies(CUT, WHOLE))
    assert [a.transport for a in exchange.attempts] == ["connection_lost", "ok"]
    assert outcome(exchange).schema == "ok"


async def test_an_error_event_is_the_servers_error_and_retried_as_a_5xx() -> None:
    """An in-band error is http_error with error stream_error:<type> and status 200, and
    retried (a 200 http_error is otherwise final)."""
    exchange = await call(replies(ERRORED))
    assert [(a.transport, a.error) for a in exchange.attempts] == [
        ("http_error", "stream_error:overloaded_error")
    ] * 3
    assert outcome(exchange).detail.startswith(
        "http_error: HTTP 200: stream_error:overloaded_error"
    )


def test_in_band_errors_are_retried_whatever_the_status() -> None:
    """decide_retry: an http_error with status 200 is final unless it came in band."""
    rng = random.Random(1)
    assert not decide_retry(1, "http_error", 200, None, RETRY, rng).retry
    assert decide_retry(1, "http_error", 200, None, RETRY, rng, in_band=True).retry
    assert not decide_retry(3, "http_error", 200, None, RETRY, rng, in_band=True).retry


async def test_a_malformed_stream_is_ok_on_the_wire_and_a_schema_fail() -> None:
    """A chunk that is not JSON is the reply's fault, not the connection's: one attempt, ok,
    then schema fail stream_malformed."""
    exchange = await call(replies(MALFORMED))
    assert [a.transport for a in exchange.attempts] == ["ok"]
    row = outcome(exchange)
    assert (row.schema, row.detail) == ("fail", "stream_malformed")


async def test_a_json_reply_to_a_streamed_request_is_read_as_a_body() -> None:
    """A server that ignores `stream: true` sends JSON: read as a body, no ttft."""
    doc = {"choices": [{"message": {"content": "SKU-9"}, "finish_reason": "stop"}]}
    exchange = await call(
        replies(json.dumps(doc).encode(), headers={"content-type": "application/json"})
    )
    assert exchange.ttft_ms is None
    row = outcome(exchange)
    assert (row.transport, row.schema, row.finish_reason) == ("ok", "ok", "stop")


async def test_an_error_status_on_a_stream_keeps_its_stamp() -> None:
    """A 4xx event-stream reply is the status's http_error, never folded."""
    exchange = await call(replies(CUT, status=400))
    assert [(a.transport, a.error) for a in exchange.attempts] == [("http_error", None)]
    assert exchange.ttft_ms is None


async def test_a_stream_cut_by_the_network_is_the_exceptions_stamp() -> None:
    """A transport error mid-stream wins over how the bytes so far would fold."""

    async def cut() -> AsyncIterator[bytes]:
        yield CUT
        raise httpx.ReadError("connection reset")

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers=SSE, content=cut())

    exchange = await call(handler)
    assert [(a.transport, a.error) for a in exchange.attempts] == [
        ("connection_lost", "ReadError")
    ] * 3
    assert exchange.response is not None
    assert exchange.response.truncated


async def test_a_stream_past_the_size_cap_is_too_large() -> None:
    """The size cap holds for streams as for bodies."""
    big = events(*[chunk({"content": "x" * 500}) for _ in range(10)], chunk({}, "stop"), "[DONE]")
    exchange = await call(replies(big), cfg(max_response_bytes=2048))
    assert exchange.transport == "too_large"


async def test_a_stream_not_in_utf8_is_not_folded_on_the_wire() -> None:
    """Bytes that are no text stay ok on the wire and fail the schema as not_utf8."""
    exchange = await call(replies(b"data: \xff\xfe\n\n"))
    assert exchange.transport == "ok"
    assert outcome(exchange).detail == "not_utf8"


async def test_an_anthropic_stream_is_classified_by_its_own_events() -> None:
    """Anthropic's stream ends at message_stop; without it the attempt is truncated."""
    start = {"type": "message_start", "message": {"id": "m1", "model": "c", "usage": {}}}
    block = {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    delta = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": "hi"},
    }
    cut = events(start, block, delta)
    whole = cut + events({"type": "content_block_stop", "index": 0}, {"type": "message_stop"})
    truncated = await call(replies(cut), cfg("anthropic-messages"))
    assert truncated.attempts[0].error == "stream_truncated"
    finished = await call(replies(whole), cfg("anthropic-messages"))
    assert (finished.transport, outcome(finished).schema) == ("ok", "ok")


# -- time to first token, in virtual time -----------------------------------------------------

Piece = tuple[float, bytes]  # (virtual seconds after the request was sent, bytes that arrive)


async def timed(pieces: list[Piece], kind: str = "openai-chat", *, cut: bool = False) -> Exchange:
    """One attempt whose reply's pieces arrive at the given virtual times (then, with `cut`,
    the connection resets)."""
    clock = VirtualClock()

    async def body() -> AsyncIterator[bytes]:
        for at, piece in pieces:
            await clock.sleep(at - clock.time)
            yield piece
        if cut:
            raise httpx.ReadError("connection reset")

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers=SSE, content=body())

    ep = HttpEndpoint(
        "cand",
        cfg(kind, retry=RetryPolicy(attempts=1)),
        None,
        shape=STREAMED,
        transport=httpx.MockTransport(handler),
        now=clock.now,
        sleep=clock.sleep,
    )
    got: list[Exchange] = []

    async def one() -> None:
        got.append(await ep.call(CASE, "candidate", 0))

    try:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                group.start_soon(clock.run)
                await one()
                group.cancel_scope.cancel()
    finally:
        await ep.aclose()
    return got[0]


ROLE = events(chunk({"role": "assistant"}))
EMPTY = events(chunk({"role": "assistant", "content": ""}))
TOKEN = events(chunk({"content": "SKU-9"}))
FINISH = events(chunk({}, "stop"), "[DONE]")
CALL_NAMED = events(
    chunk({"tool_calls": [{"index": 0, "id": "t1", "function": {"name": "f", "arguments": ""}}]})
)
CALL_ARGS = events(chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"sku"'}}]}))
A_START = events({"type": "message_start", "message": {"id": "m1", "model": "c", "usage": {}}})
A_BLOCK = events(
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
)
A_PING = events({"type": "ping"})
A_TEXT = events(
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}}
)
A_TOOL = events(
    {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "tool_use", "id": "t1", "name": "f", "input": {}},
    }
)
A_NO_ARGS = events(
    {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "input_json_delta", "partial_json": ""},
    }
)
A_ARGS = events(
    {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "input_json_delta", "partial_json": '{"a"'},
    }
)
A_END = events({"type": "content_block_stop", "index": 0}, {"type": "message_stop"})


@pytest.mark.parametrize(
    ("kind", "pieces", "ttft_ms"),
    [
        # OpenAI: the role chunk and an empty content piece come first, the token at 2 s
        ("openai-chat", [(0.05, ROLE), (0.5, EMPTY), (2.0, TOKEN), (3.0, FINISH)], 2000),
        # an event counts once whole: half of it at 1 s, the rest and its blank line at 2.5 s
        ("openai-chat", [(0.05, ROLE), (1.0, TOKEN[:20]), (2.5, TOKEN[20:] + FINISH)], 2500),
        # a tool call's name carries no token; its first argument text does
        ("openai-chat", [(0.1, ROLE), (1.0, CALL_NAMED), (1.5, CALL_ARGS), (2.0, FINISH)], 1500),
        # Anthropic: message_start, an empty text block and a ping come before any token
        (
            "anthropic-messages",
            [(0.1, A_START), (0.2, A_BLOCK), (0.3, A_PING), (1.25, A_TEXT), (2.0, A_END)],
            1250,
        ),
        # a tool_use block starts with no arguments; an empty piece has none either
        (
            "anthropic-messages",
            [(0.1, A_START), (0.5, A_TOOL), (0.7, A_NO_ARGS), (0.9, A_ARGS), (1.0, A_END)],
            900,
        ),
        # no event ever carried a token: no ttft, however long the stream took
        ("openai-chat", [(0.1, ROLE), (0.5, EMPTY), (1.0, FINISH)], None),
    ],
    ids=["openai-text", "openai-split", "openai-tool", "anthropic-text", "anthropic-tool", "none"],
)
async def test_ttft_is_the_first_event_that_carries_a_token(
    kind: str, pieces: list[Piece], ttft_ms: int | None
) -> None:
    """A stream's ttft_ms dates its first event that carries content or tool-call arguments,
    never the role chunk, Anthropic's message_start, an empty block or a tool's name; the
    call's elapsed_ms is its last byte's time."""
    exchange = await timed(pieces, kind)
    assert exchange.transport == "ok"
    assert (exchange.ttft_ms, exchange.elapsed_ms) == (ttft_ms, round(pieces[-1][0] * 1000))
    assert outcome(exchange).ttft_ms == ttft_ms


async def test_a_stream_that_breaks_off_after_its_first_token_keeps_its_ttft() -> None:
    """A stream reset after its token, or one that ends without its finish event, is a lost
    connection, and still says how long its first token took; one cut before any has none."""
    reset = await timed([(0.05, ROLE), (1.0, TOKEN)], cut=True)
    assert (reset.transport, reset.attempts[0].error, reset.ttft_ms) == (
        "connection_lost",
        "ReadError",
        1000,
    )
    truncated = await timed([(0.05, ROLE), (0.75, TOKEN)])
    assert (truncated.attempts[0].error, truncated.ttft_ms) == ("stream_truncated", 750)
    early = await timed([(0.05, ROLE)], cut=True)
    assert (early.transport, early.ttft_ms) == ("connection_lost", None)
    assert outcome(reset).ttft_ms == 1000
