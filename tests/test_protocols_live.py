"""Live calls through `HttpEndpoint.call` and `stamp`, against a real third-party server
(llmock, tests/llmockkit.py) and our own fault server for what llmock cannot do: both
protocols, tools, structured output and every stream fault, each stamped as DESIGN says, and
each replayed from its stored exchange to the identical outcome row."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from faultserver import FaultServer
from llmockcases import ANSWER_SCHEMA, WEATHER
from llmockkit import (
    UNKNOWN_TOOL_NAME,
    LlmockServer,
    Protocol,
    StreamFault,
    ToolFault,
    break_tool_call,
    stream_fault,
    tool_call,
)

from runner.client.endpoint import HttpEndpoint
from runner.config import EndpointConfig, RetryPolicy, Timeouts
from runner.grading.graders import GraderSet
from runner.jsontext import dumps
from runner.model import Case, Exchange, Outcome, Reply
from runner.protocols import read
from runner.request.shape import Shape
from runner.stamps import stamp

FINISH = {Protocol.OPENAI: ("stop", "tool_calls"), Protocol.ANTHROPIC: ("end_turn", "tool_use")}
NONE = GraderSet.empty()
ONCE = RetryPolicy(attempts=1)
TWICE = RetryPolicy(attempts=2, backoff_base=0.01, backoff_max=0.02, jitter=0.0)
SHA = "7" * 16
TOOLS = ({"type": "function", "function": WEATHER},)
STREAMS = pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
PROTOCOLS = pytest.mark.parametrize("protocol", list(Protocol), ids=["openai", "anthropic"])


def case(**over: Any) -> Case:
    fields: dict[str, Any] = {
        "id": "weather",
        "prompt": "What is the weather in Paris?",
        "expect": {},
        "fixture_sha": "c" * 16,
        "path": "live.jsonl",
        "line": 1,
        "system": "You are a weather assistant.",
    }
    return Case(**{**fields, **over})


async def call(
    base_url: str,
    kind: str,
    the_case: Case,
    *,
    stream: bool,
    retry: RetryPolicy = ONCE,
    read_timeout: float = 20.0,
    deadline: float = 40.0,
) -> Exchange:
    cfg = EndpointConfig(
        kind=kind,
        base_url=base_url,
        model="cand-live",
        max_tokens=64,
        timeout=Timeouts(connect=5, read=read_timeout, write=5, pool=5),
        deadline=deadline,
        retry=retry,
    )
    shape = Shape(None, None, {}, stream, SHA)
    ep = HttpEndpoint("cand", cfg, None, shape=shape)
    try:
        with anyio.fail_after(60):
            return await ep.call(the_case, "candidate", 0)
    finally:
        await ep.aclose()


def graded(exchange: Exchange, the_case: Case) -> Outcome:
    """The outcome row, and proof that replaying the stored exchange gives it byte for byte."""
    row = stamp(exchange, the_case, NONE)
    stored = Exchange.from_json(json.loads(dumps(exchange.to_json())))
    assert dumps(stamp(stored, the_case, NONE).to_json()) == dumps(row.to_json())
    assert (row.request_sha, row.ttft_ms) == (SHA, exchange.ttft_ms)
    return row


def reply_of(exchange: Exchange, the_case: Case) -> Reply:
    assert exchange.response is not None
    got = read(exchange.adapter, exchange.response, expects_json=the_case.expects_json)
    assert got.reply is not None, got.detail
    return got.reply


def attempts(exchange: Exchange) -> list[tuple[str, str | None]]:
    return [(a.transport, a.error) for a in exchange.attempts]


pytestmark = pytest.mark.anyio


# --- replies, tools and structured output ---------------------------------------------------


@STREAMS
@PROTOCOLS
async def test_a_text_reply_is_ok_with_its_finish_reason(
    llmock: LlmockServer, protocol: Protocol, stream: bool
) -> None:
    """A plain reply, whole or streamed: ok/ok, the model echoed, its finish reason; a stream
    has a time to first bytes, and OpenAI's reports usage since parallax asks for it."""
    the_case = case()
    exchange = await call(llmock.base_url(protocol), protocol.kind, the_case, stream=stream)
    row = graded(exchange, the_case)
    assert (row.transport, row.schema, row.tool_calls) == ("ok", "ok", ())
    assert (row.response_model, row.finish_reason) == ("cand-live", FINISH[protocol][0])
    assert reply_of(exchange, the_case).text.strip()
    assert exchange.stream is stream
    if stream:
        assert exchange.ttft_ms is not None
        assert 0 <= exchange.ttft_ms <= exchange.elapsed_ms
        assert row.usage
    else:
        assert exchange.ttft_ms is None


@STREAMS
@PROTOCOLS
async def test_offered_tools_get_a_call_whose_arguments_parse(
    llmock: LlmockServer, protocol: Protocol, stream: bool
) -> None:
    """tool_mode auto answers with a call generated from the tool's schema: the row names
    it, the graders get its arguments as an object."""
    the_case = case(tools=TOOLS)
    exchange = await call(llmock.base_url(protocol), protocol.kind, the_case, stream=stream)
    row = graded(exchange, the_case)
    assert (row.schema, row.tool_calls, row.finish_reason) == (
        "ok",
        ("get_weather",),
        FINISH[protocol][1],
    )
    (called,) = reply_of(exchange, the_case).tool_calls
    assert isinstance(called.arguments["city"], str)
    assert called.id


@STREAMS
@PROTOCOLS
async def test_a_scripted_call_arrives_exactly(
    llmock: LlmockServer, protocol: Protocol, stream: bool
) -> None:
    """A call llmock is told to make comes through with exactly its arguments, forced by a
    named tool_choice sent in the protocol's own form."""
    llmock.script(tool_call("get_weather", {"city": "Oslo", "days": 3}))
    choice = {"type": "function", "function": {"name": "get_weather"}}
    the_case = case(tools=TOOLS, tool_choice=choice)
    exchange = await call(llmock.base_url(protocol), protocol.kind, the_case, stream=stream)
    graded(exchange, the_case)
    calls = reply_of(exchange, the_case).tool_calls
    assert [(c.name, c.arguments) for c in calls] == [("get_weather", {"city": "Oslo", "days": 3})]
    (sent,) = llmock.requests()
    expected = choice if protocol is Protocol.OPENAI else {"type": "tool", "name": "get_weather"}
    assert sent["body"]["tool_choice"] == expected


@STREAMS
@PROTOCOLS
async def test_malformed_arguments_are_tool_args_not_json(
    llmock: LlmockServer, protocol: Protocol, stream: bool
) -> None:
    """Arguments cut in half fail the schema with tool_args_not_json, the call's name kept;
    a non-streamed Anthropic reply cannot carry cut JSON (its `input` is an object), so
    llmock sends `input: {}`, a valid call with no arguments."""
    llmock.script(break_tool_call(ToolFault.MALFORMED_ARGUMENTS))
    the_case = case(tools=TOOLS)
    exchange = await call(llmock.base_url(protocol), protocol.kind, the_case, stream=stream)
    row = graded(exchange, the_case)
    assert row.transport == "ok"
    assert row.tool_calls == ("get_weather",)
    if protocol is Protocol.ANTHROPIC and not stream:
        assert row.schema == "ok"
        assert [c.arguments for c in reply_of(exchange, the_case).tool_calls] == [{}]
    else:
        assert (row.schema, row.detail, row.task_score) == ("fail", "tool_args_not_json", None)


@STREAMS
@PROTOCOLS
async def test_a_call_to_a_tool_not_offered_is_passed_through(
    llmock: LlmockServer, protocol: Protocol, stream: bool
) -> None:
    """An unknown tool's name is recorded as called; judging it is the graders' business."""
    llmock.script(break_tool_call(ToolFault.UNKNOWN_TOOL))
    the_case = case(tools=TOOLS)
    exchange = await call(llmock.base_url(protocol), protocol.kind, the_case, stream=stream)
    row = graded(exchange, the_case)
    assert (row.schema, row.tool_calls) == ("ok", (UNKNOWN_TOOL_NAME,))


@STREAMS
@PROTOCOLS
async def test_structured_output_is_a_json_answer(
    llmock: LlmockServer, protocol: Protocol, stream: bool
) -> None:
    """A json_schema response format (Anthropic's output_format) brings a JSON answer that
    holds the schema; the case's JSON keys grade it."""
    response_format = {
        "type": "json_schema",
        "json_schema": {"name": "weather", "strict": True, "schema": ANSWER_SCHEMA},
    }
    the_case = case(response_format=response_format, expect={"json_schema": ANSWER_SCHEMA})
    exchange = await call(llmock.base_url(protocol), protocol.kind, the_case, stream=stream)
    row = graded(exchange, the_case)
    assert (row.schema, row.task_score) == ("ok", 1.0)
    assert set(reply_of(exchange, the_case).answer) >= set(ANSWER_SCHEMA["required"])


# the events llmock streams before its first token: OpenAI's role chunk (with an empty
# content), Anthropic's message_start, empty text block and ping
BEFORE_TOKEN = {Protocol.OPENAI: 1, Protocol.ANTHROPIC: 3}


@PROTOCOLS
async def test_ttft_is_the_wait_for_the_first_token_not_the_first_bytes(
    llmock: LlmockServer, protocol: Protocol
) -> None:
    """The events before any token arrive at once, then the stream stalls 0.3 s before its
    first token: ttft is at least that (a lower bound only), though bytes came before it."""
    llmock.script(
        stream_fault(StreamFault.STALL, after_chunks=BEFORE_TOKEN[protocol], stall_seconds=0.3)
    )
    exchange = await call(llmock.base_url(protocol), protocol.kind, case(), stream=True)
    assert exchange.transport == "ok"
    assert exchange.ttft_ms is not None
    assert 300 <= exchange.ttft_ms <= exchange.elapsed_ms
    assert graded(exchange, case()).ttft_ms == exchange.ttft_ms


@PROTOCOLS
async def test_ttft_on_our_server_is_the_first_token_whether_or_not_the_stream_then_breaks(
    fault_server: FaultServer, protocol: Protocol
) -> None:
    """`ssewait`: the events before any token at once, the token 0.3 s later; the stream
    then finishes, or the connection closes short of its length (connection_lost), and
    either way its ttft is at least 0.3 s. A reply whose content is empty has no token."""
    whole = await call(
        fault_url(fault_server, "ssewait:0.3", protocol), protocol.kind, case(), stream=True
    )
    assert whole.transport == "ok"
    assert whole.ttft_ms is not None and 300 <= whole.ttft_ms <= whole.elapsed_ms
    cut = await call(
        fault_url(fault_server, "ssewait:0.3:cut", protocol), protocol.kind, case(), stream=True
    )
    assert [t for t, _ in attempts(cut)] == ["connection_lost"]
    assert cut.ttft_ms is not None and cut.ttft_ms >= 300
    assert graded(cut, case()).ttft_ms == cut.ttft_ms
    fault_server.replies[case().prompt] = ""
    try:
        empty = await call(
            fault_url(fault_server, "ssewait:0.1", protocol), protocol.kind, case(), stream=True
        )
    finally:
        del fault_server.replies[case().prompt]
    assert (empty.transport, empty.ttft_ms) == ("ok", None)


# --- the four stream faults -----------------------------------------------------------------


@PROTOCOLS
async def test_a_disconnected_stream_is_connection_lost_and_retried(
    llmock: LlmockServer, protocol: Protocol
) -> None:
    """The connection dropped mid-stream: connection_lost (the exception wins), retried."""
    llmock.script(stream_fault(StreamFault.DISCONNECT, after_chunks=2, times=None))
    exchange = await call(
        llmock.base_url(protocol), protocol.kind, case(), stream=True, retry=TWICE
    )
    assert [t for t, _ in attempts(exchange)] == ["connection_lost"] * 2
    row = graded(exchange, case())
    assert (row.transport, row.schema, row.task_score) == ("connection_lost", "skipped", None)
    # cut at event 2: after OpenAI's first token, before Anthropic's (its time is kept)
    assert (row.ttft_ms is not None) == (protocol is Protocol.OPENAI)


@PROTOCOLS
async def test_a_truncated_stream_is_connection_lost_stream_truncated(
    llmock: LlmockServer, protocol: Protocol
) -> None:
    """A body that ends cleanly with no finish event is a lost connection, retried."""
    llmock.script(stream_fault(StreamFault.TRUNCATE, after_chunks=2, times=None))
    exchange = await call(
        llmock.base_url(protocol), protocol.kind, case(), stream=True, retry=TWICE
    )
    assert attempts(exchange) == [("connection_lost", "stream_truncated")] * 2
    row = graded(exchange, case())
    assert (row.transport, row.schema) == ("connection_lost", "skipped")
    assert "stream_truncated" in row.detail


@PROTOCOLS
async def test_a_malformed_stream_is_a_schema_fail(
    llmock: LlmockServer, protocol: Protocol
) -> None:
    """An event whose JSON is cut is the reply's fault: ok on the wire, schema
    stream_malformed, not retried."""
    llmock.script(stream_fault(StreamFault.MALFORMED, after_chunks=2, times=None))
    exchange = await call(
        llmock.base_url(protocol), protocol.kind, case(), stream=True, retry=TWICE
    )
    assert attempts(exchange) == [("ok", None)]
    row = graded(exchange, case())
    assert (row.schema, row.detail, row.response_model) == ("fail", "stream_malformed", "cand-live")


@PROTOCOLS
async def test_a_stall_past_the_read_timeout_is_a_timeout(
    llmock: LlmockServer, protocol: Protocol
) -> None:
    """A stream that goes quiet for longer than the read timeout is timeout, retried."""
    llmock.script(stream_fault(StreamFault.STALL, after_chunks=2, stall_seconds=5, times=None))
    exchange = await call(
        llmock.base_url(protocol),
        protocol.kind,
        case(),
        stream=True,
        retry=TWICE,
        read_timeout=0.4,
    )
    assert attempts(exchange) == [("timeout", "ReadTimeout")] * 2
    row = graded(exchange, case())
    assert (row.transport, row.schema, row.task_score) == ("timeout", "skipped", None)
    assert (row.ttft_ms is not None) == (protocol is Protocol.OPENAI)  # as for a disconnect


# --- what llmock cannot do: our fault server ------------------------------------------------


def fault_url(server: FaultServer, mode: str, protocol: Protocol) -> str:
    return server.url(mode, suffix="/v1" if protocol is Protocol.OPENAI else "")


@PROTOCOLS
async def test_a_stream_that_drips_forever_is_stopped_by_the_deadline(
    fault_server: FaultServer, protocol: Protocol
) -> None:
    """Bytes keep coming, so no read times out: the attempt's deadline ends it as timeout."""
    exchange = await call(
        fault_url(fault_server, "ssedrip", protocol),
        protocol.kind,
        case(),
        stream=True,
        read_timeout=5,
        deadline=1,
    )
    assert attempts(exchange) == [("timeout", "TimeoutError")]
    assert "deadline" in (exchange.attempts[0].message or "")
    assert graded(exchange, case()).transport == "timeout"
    assert exchange.ttft_ms is not None  # its first piece carried a token before the drip


@PROTOCOLS
async def test_an_error_event_in_a_stream_is_an_http_error_retried_like_a_5xx(
    fault_server: FaultServer, protocol: Protocol
) -> None:
    """An in-band error event is http_error stream_error:<type>; the retry's clean stream is
    the one graded."""
    broken = await call(
        fault_url(fault_server, "sseerror", protocol),
        protocol.kind,
        case(),
        stream=True,
        retry=TWICE,
    )
    assert attempts(broken) == [("http_error", "stream_error:overloaded_error")] * 2
    assert graded(broken, case()).detail.startswith("http_error: HTTP 200: stream_error:overloaded")
    healed = await call(
        fault_url(fault_server, "seq:sseerror+sse", protocol),
        protocol.kind,
        case(),
        stream=True,
        retry=TWICE,
    )
    assert [t for t, _ in attempts(healed)] == ["http_error", "ok"]
    row = graded(healed, case())
    assert (row.schema, row.finish_reason) == ("ok", FINISH[protocol][0])
    assert reply_of(healed, case()).text == "echo: What is the weather in Paris?"
