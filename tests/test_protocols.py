"""Specification of the protocol readers: reply bodies and SSE streams in, Messages out, and
the one judge (`graded`) of what a Message gives the graders."""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.jsontext import MAX_DEPTH
from runner.model import NO_FACTS, Reply
from runner.protocols import anthropic_messages, first_token, openai_chat
from runner.protocols.message import (
    Message,
    RawToolCall,
    StreamFold,
    StreamStatus,
    ToolCall,
    error_detail,
    graded,
)

WEATHER = {"city": "Oslo", "days": 3}


def sse(*events: Any, names: bool = False) -> str:
    """An SSE body of JSON events (or raw strings), each `event:`-named by its type if asked."""
    out = []
    for event in events:
        data = event if isinstance(event, str) else json.dumps(event)
        kind = event.get("type") if names and isinstance(event, dict) else None
        name = f"event: {kind}\n" if isinstance(kind, str) else ""
        out.append(f"{name}data: {data}\n\n")
    return "".join(out)


def bare(result: Reply | str) -> Reply | str:
    """A graded reply without the facts its message carried, to compare what graders see."""
    return dataclasses.replace(result, facts=NO_FACTS) if isinstance(result, Reply) else result


def ok(fold: StreamFold) -> Message:
    assert fold.status is StreamStatus.FINISHED, fold
    assert fold.detail == ""
    return fold.message


# --- OpenAI chat: bodies and chunks ----------------------------------------------------------


def oa_body(message: dict[str, Any], **extra: Any) -> str:
    choice = {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": "stop"}
    return json.dumps({"id": "cmpl-1", "model": "gpt-x", "choices": [choice], **extra})


def oa_chunk(
    delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any
) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {
        "id": "cmpl-1",
        "object": "chat.completion.chunk",
        "model": "gpt-x",
        "choices": choices,
        **extra,
    }


def oa_call(
    index: int, *, call_id: str | None = None, name: str | None = None, args: str | None = None
) -> dict[str, Any]:
    piece: dict[str, Any] = {"index": index, "function": {}}
    if call_id is not None:
        piece |= {"id": call_id, "type": "function"}
    if name is not None:
        piece["function"]["name"] = name
    if args is not None:
        piece["function"]["arguments"] = args
    return piece


def oa_text_stream(*pieces: str, done: bool = True) -> str:
    chunks: list[Any] = [oa_chunk({"role": "assistant", "content": ""})]
    chunks += [oa_chunk({"content": p}) for p in pieces]
    chunks.append(oa_chunk({}, "stop"))
    return sse(*chunks, *(["[DONE]"] if done else []))


def test_openai_body_reads_content_finish_reason_and_what_the_reply_says_of_itself() -> None:
    """Content, finish reason, model, id, fingerprint and usage come from the body."""
    body = oa_body({"content": "Paris"}, system_fingerprint="fp_1", usage={"total_tokens": 9})
    assert openai_chat.fold_body(body) == Message(
        content="Paris",
        finish_reason="stop",
        response_model="gpt-x",
        response_id="cmpl-1",
        system_fingerprint="fp_1",
        usage={"total_tokens": 9},
    )


def test_openai_body_tool_calls_keep_their_wire_arguments() -> None:
    """Each tool call keeps id, name and the arguments' JSON text as sent, in order."""
    calls = [
        {
            "id": "c1",
            "type": "function",
            "function": {"name": "weather", "arguments": '{"city":"Oslo"}'},
        },
        {"id": "c2", "type": "function", "function": {"name": "time", "arguments": "{}"}},
    ]
    message = openai_chat.fold_body(oa_body({"content": None, "tool_calls": calls}))
    assert isinstance(message, Message)
    assert message.content is None
    assert message.tool_calls == (
        RawToolCall(id="c1", name="weather", arguments='{"city":"Oslo"}'),
        RawToolCall(id="c2", name="time", arguments="{}"),
    )


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ("not json", "not_json"),
        ("[1]", "not_object"),
        ('{"choices": []}', "missing_choices"),
        ('{"choices": [3]}', "missing_choices"),
        ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "not_json"),
        (oa_body({"tool_calls": {"id": "c1"}}), "tool_call_malformed"),
        (
            oa_body({"tool_calls": [{"id": "c1", "function": {"arguments": "{}"}}]}),
            "tool_call_malformed",
        ),
        (
            oa_body({"tool_calls": [{"function": {"name": "f", "arguments": 7}}]}),
            "tool_args_not_json",
        ),
    ],
)
def test_openai_bodies_that_are_no_chat_completion_are_schema_details(
    body: str, detail: str
) -> None:
    """A body that is not a chat completion, or whose calls have no name, is a detail string."""
    assert openai_chat.fold_body(body) == detail


def test_openai_body_content_of_another_type_reads_as_absent() -> None:
    """Content that is neither text nor null is no content (missing_content when graded)."""
    message = openai_chat.fold_body(oa_body({"content": ["a"]}))
    assert isinstance(message, Message)
    assert graded(message, expects_json=False) == "missing_content"


def test_openai_stream_concatenates_content_and_reads_chunk_facts() -> None:
    """Content pieces are joined; model and id come from the chunks; [DONE] ends it."""
    message = ok(openai_chat.fold_stream(oa_text_stream("Par", "is", " it is")))
    assert message == Message(
        content="Paris it is", finish_reason="stop", response_model="gpt-x", response_id="cmpl-1"
    )


def test_openai_stream_usage_comes_in_a_last_chunk_without_choices() -> None:
    """With include_usage, a chunk with empty choices after the finish carries the usage."""
    usage = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
    text = sse(
        oa_chunk({"content": "hi"}, usage=None),
        oa_chunk({}, "stop", usage=None),
        oa_chunk(None, usage=usage),
        "[DONE]",
    )
    assert ok(openai_chat.fold_stream(text)).usage == usage


def test_openai_stream_merges_interleaved_tool_call_pieces_by_index() -> None:
    """Parallel calls' pieces arrive interleaved; each is merged by its index, in index order."""
    text = sse(
        oa_chunk({"role": "assistant", "content": None}),
        oa_chunk({"tool_calls": [oa_call(1, call_id="c2", name="time", args="")]}),
        oa_chunk({"tool_calls": [oa_call(0, call_id="c1", name="weather", args='{"ci')]}),
        oa_chunk(
            {"tool_calls": [oa_call(1, args='{"tz": "UTC"}'), oa_call(0, args='ty": "Oslo"')]}
        ),
        oa_chunk({"tool_calls": [oa_call(0, args=', "days": 3}')]}),
        oa_chunk({}, "tool_calls"),
        "[DONE]",
    )
    message = ok(openai_chat.fold_stream(text))
    assert message.finish_reason == "tool_calls"
    assert bare(graded(message, expects_json=False)) == Reply(
        text="",
        tool_calls=(
            ToolCall(id="c1", name="weather", arguments=WEATHER),
            ToolCall(id="c2", name="time", arguments={"tz": "UTC"}),
        ),
        finish_reason="tool_calls",
    )


def test_openai_stream_pieces_with_one_index_in_one_chunk_are_merged() -> None:
    """Two pieces for index 0 in the same chunk both count (the first one is not stranded)."""
    text = sse(
        oa_chunk(
            {"tool_calls": [oa_call(0, call_id="c1", name="f"), oa_call(0, args="{}")]},
            "tool_calls",
        )
    )
    assert ok(openai_chat.fold_stream(text)).tool_calls == (RawToolCall("c1", "f", "{}"),)


def test_openai_stream_ids_and_names_sent_again_are_not_doubled() -> None:
    """A server that repeats id and name in every piece still gives one id and one name;
    a name sent in fragments is joined."""
    text = sse(
        oa_chunk({"tool_calls": [oa_call(0, call_id="c1", name="get_", args="")]}),
        oa_chunk({"tool_calls": [oa_call(0, call_id="c1", name="weather", args="{")]}),
        oa_chunk({"tool_calls": [oa_call(0, call_id="c1", name="get_weather", args="}")]}),
        oa_chunk({}, "tool_calls"),
    )
    assert ok(openai_chat.fold_stream(text)).tool_calls == (RawToolCall("c1", "get_weather", "{}"),)


def test_openai_stream_piece_without_index_takes_its_place_in_the_list() -> None:
    """A tool-call piece with no index is the call at its position in the chunk's list."""
    piece = {"id": "c1", "function": {"name": "f", "arguments": "{}"}}
    text = sse(oa_chunk({"tool_calls": [piece]}, "tool_calls"))
    assert ok(openai_chat.fold_stream(text)).tool_calls == (RawToolCall("c1", "f", "{}"),)


def test_openai_stream_reads_only_the_first_choice() -> None:
    """Choices other than index 0 are not part of the reply (parallax asks for one)."""
    other = {"index": 1, "delta": {"content": "other"}, "finish_reason": None}
    text = sse(
        oa_chunk({"content": "mine"})
        | {"choices": [other, {"index": 0, "delta": {"content": "mine"}}]},
        oa_chunk({}, "stop"),
    )
    assert ok(openai_chat.fold_stream(text)).content == "mine"


def test_openai_stream_finishes_on_a_finish_reason_without_done() -> None:
    """A finish reason on the first choice is the end even if [DONE] never comes."""
    assert ok(openai_chat.fold_stream(oa_text_stream("hi", done=False))).content == "hi"


def test_openai_stream_finishes_on_done_without_a_finish_reason() -> None:
    """[DONE] alone ends the stream too; its message has no finish reason."""
    message = ok(openai_chat.fold_stream(sse(oa_chunk({"content": "hi"}), "[DONE]")))
    assert (message.content, message.finish_reason) == ("hi", None)


def test_openai_stream_stops_reading_at_done() -> None:
    """Nothing after [DONE] is read, broken or not (the OpenAI SDK stops there too)."""
    text = oa_text_stream("hi") + sse("{broken", oa_chunk({"content": " more"}))
    assert ok(openai_chat.fold_stream(text)).content == "hi"


def test_openai_stream_that_ends_without_a_finish_event_is_truncated() -> None:
    """No finish reason and no [DONE]: truncated, with what came so far kept."""
    text = sse(oa_chunk({"role": "assistant", "content": ""}), oa_chunk({"content": "Par"}))
    fold = openai_chat.fold_stream(text)
    assert (fold.status, fold.detail) == (StreamStatus.TRUNCATED, "stream_truncated")
    assert (fold.message.content, fold.message.response_model) == ("Par", "gpt-x")


def test_openai_stream_cut_inside_its_finish_chunk_is_truncated() -> None:
    """A finish chunk without its blank line is not dispatched: the stream is truncated."""
    text = sse(oa_chunk({"content": "hi"})) + "data: " + json.dumps(oa_chunk({}, "stop"))
    assert openai_chat.fold_stream(text).status is StreamStatus.TRUNCATED


@pytest.mark.parametrize(
    "event",
    [
        '{"id": "cmpl-1", "choices": [{"ind',  # cut in half, as llmock's `malformed` does
        "[DON",
        "[1, 2]",
        {"choices": {"index": 0}},
        {"choices": [{"index": "0", "delta": {}}]},
        {"choices": [{"index": True, "delta": {}}]},
        {"choices": [{"index": 0, "delta": "hi"}]},
        {"choices": [{"index": 0, "delta": {"content": 5}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": 1}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": {"index": 0}}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": -1}]}}]},
        {
            "choices": [
                {"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": {}}}]}}
            ]
        },
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": 3}]}}]},
        "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1),
    ],
)
def test_openai_stream_with_one_broken_chunk_is_malformed(event: Any) -> None:
    """One chunk that is not JSON or not a chunk's shape makes the stream malformed, even when
    a normal finish follows it."""
    text = sse(oa_chunk({"content": "hi"}), event) + oa_text_stream(" there")
    fold = openai_chat.fold_stream(text)
    assert (fold.status, fold.detail) == (StreamStatus.MALFORMED, "stream_malformed")
    assert fold.message.content == "hi"


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        (
            sse({"error": {"message": "overloaded", "type": "server_error", "code": None}}),
            "stream_error:server_error",
        ),
        (
            sse({"error": {"message": "slow down", "code": "rate_limit_exceeded"}}),
            "stream_error:rate_limit_exceeded",
        ),
        (
            sse({"object": "error", "message": "bad", "type": "BadRequestError", "code": 400}),
            "stream_error:BadRequestError",
        ),
        ("event: error\ndata: not json\n\n", "stream_error:unknown"),
    ],
)
def test_openai_stream_error_events_are_reported_with_their_type(text: str, detail: str) -> None:
    """An error object in the stream (or an event named `error`) ends it as an error."""
    fold = openai_chat.fold_stream(sse(oa_chunk({"content": "hi"})) + text + oa_text_stream("x"))
    assert (fold.status, fold.detail) == (StreamStatus.ERROR, detail)
    assert fold.message.content == "hi"


def test_openai_stream_error_after_the_finish_reason_still_counts() -> None:
    """Chunks after a finish reason are read (usage comes there), so an error there counts."""
    text = sse(oa_chunk({"content": "hi"}, "stop"), {"error": {"type": "server_error"}})
    assert openai_chat.fold_stream(text).status is StreamStatus.ERROR


def test_openai_stream_scrubs_lone_surrogates_from_pieces() -> None:
    """A lone surrogate escape in a piece becomes U+FFFD, so the reply can be written."""
    text = sse(
        '{"choices": [{"index": 0, "delta": {"content": "a\\ud800b"}, "finish_reason": "stop"}]}'
    )
    assert ok(openai_chat.fold_stream(text)).content == "a\ufffdb"


# --- Anthropic messages: bodies and events ---------------------------------------------------


def an_body(content: Any, **extra: Any) -> str:
    doc = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x"}
    return json.dumps({**doc, "content": content, "stop_reason": "end_turn", **extra})


def an_stream(
    *blocks: list[dict[str, Any]], stop: str | None = "end_turn", end: bool = True
) -> str:
    """Events of a stream whose blocks are given as their own event lists."""
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": "claude-x",
            "stop_reason": None,
            "usage": {"input_tokens": 5, "output_tokens": 1},
        },
    }
    events: list[Any] = [start, *[e for b in blocks for e in b]]
    if stop is not None:
        events.append(
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 4},
            }
        )
    if end:
        events.append({"type": "message_stop"})
    return sse(*events, names=True)


def an_text(index: int, *pieces: str) -> list[dict[str, Any]]:
    return [
        {
            "type": "content_block_start",
            "index": index,
            "content_block": {"type": "text", "text": ""},
        },
        *(
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "text_delta", "text": p},
            }
            for p in pieces
        ),
        {"type": "content_block_stop", "index": index},
    ]


def an_tool(index: int, call_id: str, name: str, *partials: str) -> list[dict[str, Any]]:
    block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
    return [
        {"type": "content_block_start", "index": index, "content_block": block},
        *(
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "input_json_delta", "partial_json": p},
            }
            for p in partials
        ),
        {"type": "content_block_stop", "index": index},
    ]


def test_anthropic_body_joins_text_blocks_and_reads_tool_use_blocks() -> None:
    """Text blocks are the content, tool_use blocks the calls with their input object."""
    body = an_body(
        [
            {"type": "text", "text": "Let me "},
            {"type": "thinking", "thinking": "hm", "signature": "s"},
            {"type": "text", "text": "check."},
            {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": WEATHER},
        ],
        stop_reason="tool_use",
        usage={"input_tokens": 5, "output_tokens": 4},
    )
    assert anthropic_messages.fold_body(body) == Message(
        content="Let me check.",
        tool_calls=(RawToolCall("toolu_1", "weather", WEATHER),),
        finish_reason="tool_use",
        response_model="claude-x",
        response_id="msg_1",
        usage={"input_tokens": 5, "output_tokens": 4},
    )


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ([], ""),  # a reply that said nothing: empty_completion for the graders
        ([{"type": "thinking", "thinking": "hm"}], "missing_content"),
        ([{"type": "text", "text": 5}], "missing_content"),
        ("Paris", "missing_content"),
        (None, "missing_content"),
    ],
)
def test_anthropic_body_without_text_blocks(content: Any, expected: str) -> None:
    """No blocks is an empty reply; blocks without text (or no block list) have no content."""
    message = anthropic_messages.fold_body(an_body(content))
    assert isinstance(message, Message)
    result = graded(message, expects_json=False)
    assert (result.text if isinstance(result, Reply) else result) == expected
    assert message.response_model == "claude-x"  # said of itself, whatever the stamp


@pytest.mark.parametrize(
    ("content", "detail"),
    [
        ([{"type": "tool_use", "id": "t", "input": {}}], "tool_call_malformed"),
        ([{"type": "tool_use", "id": "t", "name": "f", "input": [1]}], "tool_args_not_json"),
    ],
)
def test_anthropic_body_tool_use_without_name_or_object_input(content: Any, detail: str) -> None:
    """A tool_use block needs a name and an object (or JSON text) as input."""
    assert anthropic_messages.fold_body(an_body(content)) == detail


@pytest.mark.parametrize(("body", "detail"), [("{", "not_json"), ('"hi"', "not_object")])
def test_anthropic_body_that_is_no_object(body: str, detail: str) -> None:
    """A body that is not a JSON object is a detail string."""
    assert anthropic_messages.fold_body(body) == detail


def test_anthropic_stream_builds_text_and_usage_from_its_events() -> None:
    """Text deltas are joined; id, model and input tokens from message_start, the stop reason
    and output tokens from message_delta; ping is read past."""
    events = an_text(0, "Par", "is")
    events.insert(1, {"type": "ping"})
    message = ok(anthropic_messages.fold_stream(an_stream(events)))
    assert message == Message(
        content="Paris",
        finish_reason="end_turn",
        response_model="claude-x",
        response_id="msg_1",
        usage={"input_tokens": 5, "output_tokens": 4},
    )


def test_anthropic_stream_tool_calls_join_their_partial_json() -> None:
    """Each tool_use block's partial JSON is its arguments; blocks keep their order."""
    text = an_stream(
        an_text(0, "Checking."),
        an_tool(1, "toolu_1", "weather", '{"city": "Os', 'lo", "days"', ": 3}"),
        an_tool(2, "toolu_2", "llmock_unknown_tool", ""),
        stop="tool_use",
    )
    message = ok(anthropic_messages.fold_stream(text))
    assert message.tool_calls == (
        RawToolCall("toolu_1", "weather", '{"city": "Oslo", "days": 3}'),
        RawToolCall("toolu_2", "llmock_unknown_tool", {}),  # no piece: the block's input
    )
    assert bare(graded(message, expects_json=False)) == Reply(
        text="Checking.",
        tool_calls=(
            ToolCall("toolu_1", "weather", WEATHER),
            ToolCall("toolu_2", "llmock_unknown_tool", {}),
        ),
        finish_reason="tool_use",
    )


def test_anthropic_stream_finishes_on_message_stop_or_a_stop_reason() -> None:
    """message_stop ends the stream; so does a message_delta naming its stop reason."""
    assert ok(anthropic_messages.fold_stream(an_stream(an_text(0, "a"), stop=None))).content == "a"
    assert ok(anthropic_messages.fold_stream(an_stream(an_text(0, "a"), end=False))).content == "a"


def test_anthropic_stream_stops_reading_at_message_stop() -> None:
    """Nothing after message_stop is read."""
    text = an_stream(an_text(0, "a")) + sse("{broken")
    assert ok(anthropic_messages.fold_stream(text)).content == "a"


def test_anthropic_stream_without_its_finish_events_is_truncated() -> None:
    """No stop reason and no message_stop: truncated, what came so far kept."""
    fold = anthropic_messages.fold_stream(an_stream(an_text(0, "Par"), stop=None, end=False))
    assert (fold.status, fold.detail) == (StreamStatus.TRUNCATED, "stream_truncated")
    assert (fold.message.content, fold.message.response_id) == ("Par", "msg_1")


def test_anthropic_stream_reads_past_unknown_events_and_deltas() -> None:
    """New event types, thinking blocks and their deltas are let pass, as Anthropic asks."""
    thinking = [
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": ""},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "hm"},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "signature_delta", "signature": "s"},
        },
        {"type": "content_block_stop", "index": 0},
        {"type": "brand_new_event", "whatever": 1},
    ]
    message = ok(anthropic_messages.fold_stream(an_stream(thinking, an_text(1, "ok"))))
    assert message.content == "ok"


@pytest.mark.parametrize(
    "event",
    [
        '{"type": "content_block_delta", "index": 0, "delta": {"type": "text_de',
        {"type": 7},
        {"no": "type"},
        {"type": "message_start", "message": "hi"},
        {"type": "message_delta", "delta": {"stop_reason": 3}},
        {"type": "content_block_delta", "index": 9, "delta": {"type": "text_delta", "text": "x"}},
        {"type": "content_block_delta", "index": "0", "delta": {"type": "text_delta", "text": "x"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": 1}},
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": "{}"},
        },
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "t"},
        },
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "text", "text": None},
        },
    ],
)
def test_anthropic_stream_with_one_broken_event_is_malformed(event: Any) -> None:
    """One event that is not JSON or not its type's shape makes the stream malformed."""
    text = an_stream([*an_text(0, "hi")[:2], event, *an_text(1, " there")])
    fold = anthropic_messages.fold_stream(text)
    assert (fold.status, fold.detail) == (StreamStatus.MALFORMED, "stream_malformed")
    assert fold.message.content == "hi"


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        (
            sse(
                {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
                names=True,
            ),
            "stream_error:overloaded_error",
        ),
        ("event: error\ndata: {\n\n", "stream_error:unknown"),
        (
            sse({"type": "error", "error": {"type": "a:b/c" * 40}}),
            "stream_error:" + ("a_b_c" * 40)[:64],
        ),
    ],
)
def test_anthropic_stream_error_events_are_reported_with_their_type(text: str, detail: str) -> None:
    """An `error` event ends the stream as an error, its type cut to a short safe name."""
    fold = anthropic_messages.fold_stream(an_stream(an_text(0, "hi"), stop=None, end=False) + text)
    assert (fold.status, fold.detail) == (StreamStatus.ERROR, detail)
    assert fold.message.content == "hi"


# --- graded: the one judge -------------------------------------------------------------------


def test_graded_parses_tool_arguments_into_objects() -> None:
    """JSON text arguments are decoded; object arguments pass as they are."""
    message = Message(
        content=None,
        tool_calls=(RawToolCall("a", "f", '{"x": 1}'), RawToolCall("b", "g", {"y": [2]})),
    )
    result = graded(message, expects_json=False)
    assert isinstance(result, Reply)
    assert result.tool_calls == (ToolCall("a", "f", {"x": 1}), ToolCall("b", "g", {"y": [2]}))


@pytest.mark.parametrize(
    "arguments", ['{"city": "Os', "", "[1, 2]", '"text"', "null", "{" * (MAX_DEPTH + 1)]
)
def test_graded_tool_arguments_that_are_no_json_object_fail_the_schema(arguments: str) -> None:
    """Arguments cut in half, empty, or JSON that is not an object: tool_args_not_json."""
    message = Message(content="ok", tool_calls=(RawToolCall("a", "f", arguments),))
    assert graded(message, expects_json=False) == "tool_args_not_json"


def test_graded_tool_call_without_a_name_fails_the_schema() -> None:
    """A streamed call whose name never came has no name: tool_call_malformed."""
    message = Message(content=None, tool_calls=(RawToolCall("a", "", "{}"),))
    assert graded(message, expects_json=False) == "tool_call_malformed"


def test_graded_unknown_tool_names_pass_to_the_graders() -> None:
    """Whether a tool was offered is the graders' call (tool_unknown), not the schema's."""
    message = Message(content=None, tool_calls=(RawToolCall("a", "llmock_unknown_tool", "{}"),))
    result = graded(message, expects_json=False)
    assert isinstance(result, Reply)
    assert result.tool_calls[0].name == "llmock_unknown_tool"


def test_graded_content_rules() -> None:
    """None content and no call is missing_content; "" alone is a valid (empty) reply; a
    call with no content gives the graders empty text."""
    assert graded(Message(content=None), expects_json=False) == "missing_content"
    assert bare(graded(Message(content=""), expects_json=False)) == Reply(text="")
    with_call = Message(content="", tool_calls=(RawToolCall("a", "f", "{}"),))
    assert bare(graded(with_call, expects_json=False)) == Reply(
        text="", tool_calls=(ToolCall("a", "f", {}),)
    )


def test_graded_json_answers_follow_the_existing_rule() -> None:
    """A JSON-expecting case needs a JSON answer (fenced counts), tool call or not."""
    fenced = Message(content='```json\n{"sku": "A1"}\n```')
    assert bare(graded(fenced, expects_json=True)) == Reply(
        text=fenced.content or "", answer={"sku": "A1"}
    )
    assert graded(Message(content="A1"), expects_json=True) == "answer_not_json"
    call_only = Message(content=None, tool_calls=(RawToolCall("a", "f", "{}"),))
    assert graded(call_only, expects_json=True) == "answer_not_json"


def test_error_detail_names_unknown_for_a_missing_type() -> None:
    """A server that names no error type gives stream_error:unknown."""
    assert [error_detail(None), error_detail(""), error_detail(5)] == ["stream_error:unknown"] * 3


# --- properties: a stream folds to what the same reply sent whole folds to -------------------

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12)
scalars = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=8)
objects = st.dictionaries(
    st.text(max_size=6),
    st.recursive(
        scalars,
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
        max_leaves=6,
    ),
    max_size=4,
)
calls = st.lists(st.tuples(st.text(min_size=1, max_size=8), names, objects), max_size=3)
usages = st.none() | st.dictionaries(
    st.sampled_from(["prompt_tokens", "completion_tokens", "total_tokens"]),
    st.integers(0, 10**6),
    min_size=1,
)


def split(draw: Callable[..., Any], text: str) -> list[str]:
    """`text` cut at random places into pieces (at least one piece, maybe empty ones)."""
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=5)))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


@st.composite
def openai_replies(draw: Callable[..., Any]) -> tuple[str, str]:
    """A random reply as a chat completion body and as the SSE stream that carries it."""
    content = draw(st.none() | st.text(max_size=30))
    tools = draw(calls)
    finish = draw(st.sampled_from(["stop", "length", "tool_calls"]))
    usage = draw(usages)
    fingerprint = draw(st.none() | st.just("fp_1"))
    wire = [
        {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
        for i, n, a in tools
    ]
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if wire or draw(st.booleans()):
        message["tool_calls"] = wire
    facts = {"id": "cmpl-1", "model": "gpt-x", "system_fingerprint": fingerprint}
    body = {
        **facts,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage,
    }

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {**facts, "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}

    chunks: list[Any] = [chunk({"role": "assistant", "content": None if content is None else ""})]
    if content:
        chunks += [chunk({"content": p}) for p in split(draw, content)]
    # each call's pieces in order, the calls' pieces interleaved at random
    queues = [
        [{"index": k, "id": i, "type": "function", "function": {"name": n, "arguments": ""}}]
        + [{"index": k, "function": {"arguments": p}} for p in split(draw, json.dumps(a))]
        for k, (i, n, a) in enumerate(tools)
    ]
    while any(queues):
        k = draw(st.sampled_from([k for k, q in enumerate(queues) if q]))
        chunks.append(chunk({"tool_calls": [queues[k].pop(0)]}))
    chunks.append(chunk({}, finish))
    if usage is not None:
        chunks.append({**facts, "choices": [], "usage": usage})
    if draw(st.booleans()):
        chunks.append("[DONE]")
    return json.dumps(body), sse(*chunks)


@st.composite
def anthropic_replies(draw: Callable[..., Any]) -> tuple[str, str]:
    """A random reply as a messages body and as the SSE stream that carries it."""
    kinds = draw(
        st.lists(
            st.text(max_size=20) | st.tuples(st.text(min_size=1, max_size=8), names, objects),
            max_size=4,
        )
    )
    stop = draw(st.sampled_from(["end_turn", "max_tokens", "tool_use"]))
    tokens_in, tokens_out = draw(st.integers(0, 10**6)), draw(st.integers(0, 10**6))
    content = [
        {"type": "text", "text": k}
        if isinstance(k, str)
        else {"type": "tool_use", "id": k[0], "name": k[1], "input": k[2]}
        for k in kinds
    ]
    body = an_body(
        content, stop_reason=stop, usage={"input_tokens": tokens_in, "output_tokens": tokens_out}
    )
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": "claude-x",
            "stop_reason": None,
            "usage": {"input_tokens": tokens_in, "output_tokens": 1},
        },
    }
    events: list[Any] = [start]
    for index, k in enumerate(kinds):
        if isinstance(k, str):
            events += an_text(index, *split(draw, k))
        else:
            events += an_tool(index, k[0], k[1], *split(draw, json.dumps(k[2])))
        if draw(st.booleans()):
            events.append({"type": "ping"})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": tokens_out},
        }
    )
    if draw(st.booleans()):
        events.append({"type": "message_stop"})
    return body, sse(*events, names=draw(st.booleans()))


@FUZZ
@given(openai_replies())
def test_openai_stream_folds_to_the_message_of_the_same_body(reply: tuple[str, str]) -> None:
    """A stream built from a reply's chunks folds to the very Message its whole body does."""
    body, stream = reply
    assert ok(openai_chat.fold_stream(stream)) == openai_chat.fold_body(body)


@FUZZ
@given(anthropic_replies())
def test_anthropic_stream_grades_as_the_same_body(reply: tuple[str, str]) -> None:
    """A stream built from a reply's events folds to the body's Message, but for arguments
    in their streamed wire form (JSON text, not an object), and grades the same."""
    body, stream = reply
    whole, streamed = anthropic_messages.fold_body(body), ok(anthropic_messages.fold_stream(stream))
    assert isinstance(whole, Message)
    assert [(c.id, c.name) for c in streamed.tool_calls] == [
        (c.id, c.name) for c in whole.tool_calls
    ]
    assert streamed.__class__(**{**vars_of(streamed), "tool_calls": whole.tool_calls}) == whole
    assert graded(streamed, expects_json=False) == graded(whole, expects_json=False)


def vars_of(message: Message) -> dict[str, Any]:
    return {name: getattr(message, name) for name in message.__dataclass_fields__}


protocol_keys = st.sampled_from(
    [
        "type",
        "index",
        "delta",
        "choices",
        "content",
        "tool_calls",
        "function",
        "name",
        "arguments",
        "id",
        "finish_reason",
        "usage",
        "message",
        "content_block",
        "text",
        "partial_json",
        "stop_reason",
        "error",
        "object",
        "input",
    ]
)
protocol_values = st.sampled_from(
    [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
        "text",
        "tool_use",
        "text_delta",
        "input_json_delta",
        "error",
        "ping",
        "[DONE]",
        "stop",
        "{",
        "}",
    ]
)
json_like = st.recursive(
    scalars | protocol_values | st.integers(-1, 3),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(protocol_keys, c, max_size=5),
    max_leaves=20,
)
events = st.lists(st.one_of(json_like.map(json.dumps), st.text(max_size=20)), max_size=8)


@FUZZ
@given(st.text(max_size=400) | events.map(lambda es: "".join(f"data: {e}\n\n" for e in es)))
@pytest.mark.parametrize("protocol", [openai_chat, anthropic_messages])
def test_folding_never_raises_on_any_text(protocol: Any, text: str) -> None:
    """Any text, and any run of protocol-shaped JSON events, folds (and grades) and is looked
    through for its first token without raising."""
    end = first_token(protocol.WIRE.kind, text)
    assert end is None or 0 < end <= len(text)
    for fold in (protocol.fold_stream(text), protocol.fold_body(text)):
        message = fold.message if isinstance(fold, StreamFold) else fold
        if isinstance(message, Message):
            graded(message, expects_json=True)
            graded(message, expects_json=False)


def _said_something(message: Message) -> bool:
    """Whether a folded reply holds a token: content text, or a call's argument text."""
    return bool(message.content) or any(
        call.arguments if isinstance(call.arguments, str) else call.arguments != {}
        for call in message.tool_calls
    )


@FUZZ
@given(openai_replies())
def test_an_openai_stream_has_a_first_token_exactly_when_its_reply_says_something(
    reply: tuple[str, str],
) -> None:
    """The first token is the first chunk with content or argument text: a stream has one
    exactly when its folded reply has content or arguments, and it ends an event."""
    _, stream = reply
    end = first_token(openai_chat.WIRE.kind, stream)
    assert (end is not None) == _said_something(ok(openai_chat.fold_stream(stream)))
    assert end is None or stream[:end].endswith("\n\n")


@FUZZ
@given(anthropic_replies())
def test_an_anthropic_stream_has_a_first_token_exactly_when_its_reply_says_something(
    reply: tuple[str, str],
) -> None:
    """The same for Anthropic's events: a text delta or block with text, or a tool's input."""
    _, stream = reply
    end = first_token(anthropic_messages.WIRE.kind, stream)
    assert (end is not None) == _said_something(ok(anthropic_messages.fold_stream(stream)))


@pytest.mark.parametrize(
    ("protocol", "event", "token"),
    [
        (openai_chat, {"choices": [{"index": 0, "delta": {"role": "assistant"}}]}, False),
        (openai_chat, {"choices": [{"index": 0, "delta": {"content": ""}}]}, False),
        (openai_chat, {"choices": [{"index": 1, "delta": {"content": "other choice"}}]}, False),
        (openai_chat, {"choices": [{"delta": {"content": "x"}}]}, True),
        (
            openai_chat,
            {"choices": [{"delta": {"tool_calls": [{"function": {"name": "f"}}]}}]},
            False,
        ),
        (
            openai_chat,
            {"choices": [{"delta": {"tool_calls": [{"function": {"arguments": "{"}}]}}]},
            True,
        ),
        (openai_chat, {"choices": [], "usage": {"completion_tokens": 3}}, False),
        (openai_chat, {"choices": [{"delta": {"content": ["x"]}}]}, False),
        (openai_chat, {"choices": [{"delta": {"tool_calls": "x"}}]}, False),
        (openai_chat, "[DONE]", False),
        (anthropic_messages, {"type": "message_start", "message": {"content": []}}, False),
        (
            anthropic_messages,
            {"type": "content_block_start", "content_block": {"type": "text", "text": ""}},
            False,
        ),
        (
            anthropic_messages,
            {"type": "content_block_start", "content_block": {"type": "text", "text": "Hi"}},
            True,
        ),
        (
            anthropic_messages,
            {"type": "content_block_start", "content_block": {"type": "tool_use", "input": {}}},
            False,
        ),
        (
            anthropic_messages,
            {
                "type": "content_block_start",
                "content_block": {"type": "tool_use", "input": {"a": 1}},
            },
            True,
        ),
        (
            anthropic_messages,
            {"type": "content_block_delta", "delta": {"type": "thinking_delta", "thinking": "hm"}},
            False,
        ),
        (
            anthropic_messages,
            {"type": "content_block_delta", "delta": {"type": ["text_delta"], "text": "x"}},
            False,
        ),
        (
            anthropic_messages,
            {"type": "content_block_delta", "delta": {"type": "text_delta", "text": 3}},
            False,
        ),
        (
            anthropic_messages,
            {
                "type": "content_block_delta",
                "delta": {"type": "input_json_delta", "partial_json": "{"},
            },
            True,
        ),
        (anthropic_messages, {"type": "ping"}, False),
    ],
)
def test_which_events_carry_a_token(protocol: Any, event: Any, token: bool) -> None:
    """Content or argument text is a token; the role, a name, usage, thinking, an empty
    block and a piece of the wrong type are none (and never raise)."""
    data = event if isinstance(event, str) else json.dumps(event)
    assert protocol.carries_token(data) is token


def test_hostile_streams_of_many_small_events_fold_whole() -> None:
    """20,000 name fragments, usage keys or blocks (out of order) are all kept: pieces are
    gathered and joined once, never re-copied per event."""
    n = 20_000
    names = sse(*(oa_chunk({"tool_calls": [oa_call(0, name="ab"[i % 2])]}) for i in range(n)))
    fold = openai_chat.fold_stream(names)
    assert fold.status is StreamStatus.TRUNCATED
    assert fold.message.tool_calls[0].name == "ab" * (n // 2)
    usage = sse(*({"type": "message_delta", "delta": {}, "usage": {f"k{i}": i}} for i in range(n)))
    assert len(anthropic_messages.fold_stream(usage).message.usage or {}) == n
    start = {"type": "content_block_start", "content_block": {"type": "text", "text": "x"}}
    blocks = sse(*({**start, "index": n - i} for i in range(n)))
    assert anthropic_messages.fold_stream(blocks).message.content == "x" * n
