"""Specification of the Responses API reader (`openai-responses`): response bodies and their
SSE events in, Messages out, each stream ending as DESIGN's stamps say."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.model import Reply, Response, Transport
from runner.protocols import first_token, openai_responses, read, stream_end
from runner.protocols.message import Message, RawToolCall, StreamFold, StreamStatus, graded

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
USAGE = {
    "input_tokens": 14,
    "input_tokens_details": {"cached_tokens": 4},
    "output_tokens": 6,
    "total_tokens": 20,
}
KIND = openai_responses.WIRE.kind


def sse(*events: Any) -> str:
    """An SSE body of JSON events (or raw strings), each named by its type as OpenAI does."""
    out = []
    for event in events:
        data = event if isinstance(event, str) else json.dumps(event)
        kind = event.get("type") if isinstance(event, dict) else None
        name = f"event: {kind}\n" if isinstance(kind, str) else ""
        out.append(f"{name}data: {data}\n\n")
    return "".join(out)


def text_item(text: str) -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": []}
    return {"type": "message", "id": "msg_1", "role": "assistant", "content": [part]}


def call_item(name: str, arguments: Any, call_id: str = "call_1") -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": "fc_1",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }


def response(*items: Any, status: str = "completed", **extra: Any) -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "model": "gpt-x",
        "status": status,
        "output": list(items),
        "usage": USAGE,
        **extra,
    }


def body(*items: Any, **extra: Any) -> str:
    return json.dumps(response(*items, **extra))


def created() -> dict[str, Any]:
    pending = {"id": "resp_1", "model": "gpt-x", "status": "in_progress", "output": []}
    return {"type": "response.created", "response": pending}


def added(index: int, item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "response.output_item.added", "output_index": index, "item": item}


def text_delta(index: int, delta: Any) -> dict[str, Any]:
    return {
        "type": "response.output_text.delta",
        "output_index": index,
        "content_index": 0,
        "delta": delta,
    }


def args_delta(index: int, delta: Any) -> dict[str, Any]:
    return {"type": "response.function_call_arguments.delta", "output_index": index, "delta": delta}


def completed(*items: Any, **extra: Any) -> dict[str, Any]:
    return {"type": "response.completed", "response": response(*items, **extra)}


def ok(fold: StreamFold) -> Message:
    assert fold.status is StreamStatus.FINISHED, fold
    return fold.message


# --- bodies ---------------------------------------------------------------------------------


def test_a_body_reads_its_text_calls_and_what_it_says_of_itself() -> None:
    """Message items' output_text parts are the content; function_call items the calls with
    their call_id; reasoning and refusal parts are read past; model, id and usage kept."""
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": []}
    refusal = {"type": "refusal", "refusal": "no"}
    message = text_item("Hello")
    message["content"].append(refusal)
    got = openai_responses.fold_body(
        body(reasoning, message, call_item("get_weather", '{"city": "Oslo"}'))
    )
    assert got == Message(
        content="Hello",
        tool_calls=(RawToolCall(id="call_1", name="get_weather", arguments='{"city": "Oslo"}'),),
        finish_reason="completed",
        response_model="gpt-x",
        response_id="resp_1",
        usage=USAGE,
    )


def test_an_incomplete_body_finishes_for_its_reason() -> None:
    """A reply cut by max_output_tokens is graded as chat's `length` is, its reason kept."""
    got = openai_responses.fold_body(
        body(
            text_item("Hel"),
            status="incomplete",
            incomplete_details={"reason": "max_output_tokens"},
        )
    )
    assert isinstance(got, Message)
    assert (got.content, got.finish_reason) == ("Hel", "max_output_tokens")


@pytest.mark.parametrize(
    ("items", "detail"),
    [
        ([], "missing_content"),  # said nothing at all
        (
            [{"type": "message", "role": "assistant", "content": [{"type": "refusal"}]}],
            "missing_content",
        ),
        ([call_item("f", "{")], "tool_args_not_json"),
        ([call_item("f", "[1]")], "tool_args_not_json"),
        ([call_item("f", 7)], "tool_args_not_json"),
        ([{"type": "function_call", "call_id": "c", "arguments": "{}"}], "tool_call_malformed"),
    ],
)
def test_bodies_that_say_nothing_gradable_fail_the_schema(items: list[Any], detail: str) -> None:
    message = openai_responses.fold_body(body(*items))
    result = graded(message, expects_json=False) if isinstance(message, Message) else message
    assert result == detail


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("not json", "not_json"),
        ("[1]", "not_object"),
        ('{"id": "r", "model": "m"}', "missing_output"),
    ],
)
def test_a_body_that_is_no_response_is_a_schema_detail(text: str, detail: str) -> None:
    assert openai_responses.fold_body(text) == detail


def test_a_failed_body_still_names_its_model_and_usage() -> None:
    """A body without output is a schema fail that keeps its top-level facts."""
    stored = Response(
        status=200,
        headers={"content-type": "application/json"},
        body=json.dumps({"id": "r", "model": "gpt-y", "usage": USAGE}),
    )
    got = read(KIND, stored, expects_json=False)
    assert (got.reply, got.detail, got.facts.response_model) == (None, "missing_output", "gpt-y")


# --- streams --------------------------------------------------------------------------------


def stream_of(text: str = "Hello there", arguments: str = '{"city": "Oslo"}') -> list[Any]:
    """A whole stream of one message and one call, as OpenAI sends it."""
    message, call = text_item(text), call_item("get_weather", arguments)
    events: list[Any] = [
        created(),
        {"type": "response.in_progress", "response": created()["response"]},
    ]
    events.append(added(0, {**message, "content": []}))
    events.append(
        {
            "type": "response.content_part.added",
            "output_index": 0,
            "content_index": 0,
            "part": {"type": "output_text", "text": ""},
        }
    )
    events += [text_delta(0, piece) for piece in ("Hello", " there")]
    events.append({"type": "response.output_text.done", "output_index": 0, "text": text})
    events.append({"type": "response.output_item.done", "output_index": 0, "item": message})
    events.append(added(1, {**call, "arguments": ""}))
    events += [args_delta(1, arguments[:5]), args_delta(1, arguments[5:])]
    events.append(
        {"type": "response.function_call_arguments.done", "output_index": 1, "arguments": arguments}
    )
    events.append({"type": "response.output_item.done", "output_index": 1, "item": call})
    events.append(completed(message, call))
    return events


def test_a_stream_folds_its_deltas_and_finishes_at_response_completed() -> None:
    """Text and argument deltas by output_index; the completed response's facts; the same
    Message as the body of that response."""
    events = stream_of()
    streamed = ok(openai_responses.fold_stream(sse(*events)))
    assert streamed == openai_responses.fold_body(json.dumps(events[-1]["response"]))
    assert streamed.content == "Hello there"
    assert streamed.tool_calls[0].arguments == '{"city": "Oslo"}'
    assert streamed.usage == USAGE


def test_nothing_after_response_completed_is_read() -> None:
    events = stream_of()
    assert ok(openai_responses.fold_stream(sse(*events, "not json", "[DONE]"))).content


def test_a_done_item_fills_in_what_no_delta_sent() -> None:
    """A server that sends items whole (no deltas) is read from its done items, and one that
    sends only the completed response from its output."""
    message, call = text_item("Hi"), call_item("f", '{"a": 1}')
    whole = [
        created(),
        added(0, {**message, "content": []}),
        {"type": "response.output_item.done", "output_index": 0, "item": message},
        added(1, {**call, "arguments": ""}),
        {"type": "response.output_item.done", "output_index": 1, "item": call},
        completed(message, call),
    ]
    folded = ok(openai_responses.fold_stream(sse(*whole)))
    assert (folded.content, folded.tool_calls[0].arguments) == ("Hi", '{"a": 1}')
    bare = ok(openai_responses.fold_stream(sse(created(), completed(message, call))))
    assert bare == folded


def test_unknown_events_are_read_past() -> None:
    events = stream_of()
    events.insert(3, {"type": "response.reasoning_summary_text.delta", "delta": "hm"})
    events.insert(3, {"type": "response.some_future_event"})
    assert ok(openai_responses.fold_stream(sse(*events))).content == "Hello there"


@pytest.mark.parametrize("cut", [0, 1, 4, 9, 12])
def test_a_stream_that_ends_without_response_completed_is_truncated(cut: int) -> None:
    """However far it got, a stream without its completed event is truncated, and a body
    that arrived whole so is `connection_lost` / `stream_truncated`; what came is kept."""
    text = sse(*stream_of()[: len(stream_of()) - 1 - cut])
    fold = openai_responses.fold_stream(text)
    assert (fold.status, fold.detail) == (StreamStatus.TRUNCATED, "stream_truncated")
    assert fold.message.response_model == "gpt-x"
    ended = stream_end(KIND, text)
    assert ended is not None and (ended.transport, ended.error) == (
        Transport.CONNECTION_LOST,
        "stream_truncated",
    )


@pytest.mark.parametrize(
    "event",
    [
        "not json",
        '{"type": "response.output_text.de',
        "[1, 2]",
        json.dumps({"no": "type"}),
        json.dumps(text_delta(0, 3)),  # a delta that is no text
        json.dumps(text_delta(1, "x")),  # to an item never added
        json.dumps(args_delta(0, "x")),  # arguments to a message
        json.dumps(text_delta("0", "x")),
        json.dumps(added(0, {"type": "message", "content": []})),  # index 0 added twice
        json.dumps(added(5, {"type": "function_call", "arguments": "{}"})),  # a call, no name
        json.dumps({"type": "response.completed", "response": "done"}),
        json.dumps(
            {"type": "response.output_item.done", "output_index": 0, "item": call_item("f", "{}")}
        ),  # done as another kind
    ],
)
def test_a_stream_with_one_broken_event_is_malformed(event: str) -> None:
    events = [sse(e) for e in stream_of()]
    events.insert(5, f"data: {event}\n\n")
    fold = openai_responses.fold_stream("".join(events))
    assert (fold.status, fold.detail) == (StreamStatus.MALFORMED, "stream_malformed")
    assert fold.message.response_model == "gpt-x"  # what came before is kept


@pytest.mark.parametrize(
    ("event", "detail"),
    [
        (
            {
                "type": "response.failed",
                "response": {
                    "id": "r",
                    "status": "failed",
                    "error": {"code": "server_error", "message": "boom"},
                },
            },
            "stream_error:server_error",
        ),
        (
            {
                "type": "response.incomplete",
                "response": {
                    "id": "r",
                    "status": "incomplete",
                    "incomplete_details": {"reason": "max_output_tokens"},
                },
            },
            "stream_error:max_output_tokens",
        ),
        (
            {"type": "error", "code": "rate_limit_exceeded", "message": "slow down"},
            "stream_error:rate_limit_exceeded",
        ),
        ({"type": "error", "code": None, "message": "?"}, "stream_error:unknown"),
        (
            {"type": "error", "error": {"type": "server_error", "code": None}},
            "stream_error:server_error",
        ),
        ({"type": "response.failed", "response": None}, "stream_error:unknown"),
    ],
)
def test_a_failed_incomplete_or_error_event_is_the_servers_error(
    event: dict[str, Any], detail: str
) -> None:
    """Each ends the stream as the server's error: http_error, stream_error:<code>."""
    text = sse(*stream_of()[:5], event)
    fold = openai_responses.fold_stream(text)
    assert (fold.status, fold.detail) == (StreamStatus.ERROR, detail)
    ended = stream_end(KIND, text)
    assert ended is not None and (ended.transport, ended.error) == (Transport.HTTP_ERROR, detail)


def test_an_event_named_error_is_an_error_whatever_its_data() -> None:
    fold = openai_responses.fold_stream(sse(created()) + "event: error\ndata: oops\n\n")
    assert (fold.status, fold.detail) == (StreamStatus.ERROR, "stream_error:unknown")


def test_a_stored_stream_reads_through_its_content_type() -> None:
    stored = Response(
        status=200, headers={"content-type": "text/event-stream"}, body=sse(*stream_of())
    )
    got = read(KIND, stored, expects_json=False)
    assert isinstance(got.reply, Reply)
    assert (got.reply.text, got.tool_names, got.finish_reason) == (
        "Hello there",
        ("get_weather",),
        "completed",
    )
    assert got.reply.tool_calls[0].arguments == {"city": "Oslo"}


# --- the first token ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("event", "token"),
    [
        (created(), False),
        (added(0, text_item("")), False),
        (added(1, call_item("f", "")), False),  # a call's name is no token
        (text_delta(0, ""), False),
        (text_delta(0, "Hi"), True),
        (text_delta(0, ["Hi"]), False),
        (args_delta(1, '{"a'), True),
        ({"type": "response.output_text.done", "text": "Hi"}, False),
        (completed(text_item("Hi")), False),
        ("[DONE]", False),
    ],
)
def test_which_events_carry_a_token(event: Any, token: bool) -> None:
    data = event if isinstance(event, str) else json.dumps(event)
    assert openai_responses.carries_token(data) is token


def test_the_first_token_is_the_first_text_or_arguments_delta() -> None:
    text = sse(*stream_of())
    end = first_token(KIND, text)
    assert end is not None and text[:end].endswith('"delta": "Hello"}\n\n')
    calls_only = sse(created(), added(0, call_item("f", "")), args_delta(0, "{}"), completed())
    end = first_token(KIND, calls_only)
    assert end is not None and calls_only[:end].endswith('"delta": "{}"}\n\n')


# --- a stream and its body agree, and nothing raises ----------------------------------------


names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12)
objects = st.dictionaries(st.text(max_size=6), st.integers() | st.text(max_size=5), max_size=3)


def split(draw: Callable[..., Any], text: str) -> list[str]:
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=4)))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


@st.composite
def replies(draw: Callable[..., Any]) -> tuple[str, str]:
    """A random reply as a response body and as the SSE stream that carries it."""
    kinds = draw(st.lists(st.text(max_size=20) | st.tuples(names, objects), max_size=4))
    items = [
        text_item(k) if isinstance(k, str) else call_item(k[0], json.dumps(k[1]), f"call_{i}")
        for i, k in enumerate(kinds)
    ]
    events: list[Any] = [created()]
    for index, item in enumerate(items):
        if item["type"] == "message":
            events.append(added(index, {**item, "content": []}))
            text = item["content"][0]["text"]
            events += [text_delta(index, p) for p in split(draw, text)]
        else:
            events.append(added(index, {**item, "arguments": ""}))
            events += [args_delta(index, p) for p in split(draw, item["arguments"])]
        if draw(st.booleans()):
            events.append(
                {"type": "response.output_item.done", "output_index": index, "item": item}
            )
    events.append(completed(*items))
    return body(*items), sse(*events)


@FUZZ
@given(replies())
def test_a_stream_folds_to_the_message_of_the_same_body(reply: tuple[str, str]) -> None:
    whole, streamed = reply
    assert ok(openai_responses.fold_stream(streamed)) == openai_responses.fold_body(whole)


keys = st.sampled_from(
    [
        "type",
        "output_index",
        "item",
        "delta",
        "response",
        "output",
        "content",
        "text",
        "name",
        "arguments",
        "call_id",
        "status",
        "error",
        "code",
    ]
)
values = st.sampled_from(
    [
        "response.created",
        "response.output_item.added",
        "message",
        "response.output_text.delta",
        "response.function_call_arguments.delta",
        "response.output_item.done",
        "response.completed",
        "function_call",
        "output_text",
        "response.failed",
        "error",
        "{",
        0,
        1,
        -1,
    ]
)
shaped = st.recursive(
    st.none() | st.booleans() | st.text(max_size=6) | values,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(keys, c, max_size=5),
    max_leaves=20,
)


@FUZZ
@given(
    st.text(max_size=300)
    | st.lists(shaped.map(json.dumps), max_size=8).map(
        lambda es: "".join(f"data: {e}\n\n" for e in es)
    )
)
def test_folding_never_raises_on_any_text(text: str) -> None:
    end = first_token(KIND, text)
    assert end is None or 0 < end <= len(text)
    for fold in (openai_responses.fold_stream(text), openai_responses.fold_body(text)):
        message = fold.message if isinstance(fold, StreamFold) else fold
        if isinstance(message, Message):
            graded(message, expects_json=True)
            graded(message, expects_json=False)
