"""Specification of how a stored reply reads back through its protocol (`protocols.read`):
a Reply for the graders, or the schema-fail detail, and what the reply said of itself."""

from __future__ import annotations

import base64
import json
import sys
from typing import Any

import pytest

from runner.jsontext import MAX_DEPTH
from runner.model import Facts, Reply, Response, ToolCall
from runner.protocols import read


def response(
    body: str | dict[str, Any] | list[Any], *, encoding: str = "utf-8", stream: bool = False
) -> Response:
    text = body if isinstance(body, str) else json.dumps(body)
    headers = {"content-type": "text/event-stream; charset=utf-8" if stream else "application/json"}
    return Response(status=200, headers=headers, body=text, encoding=encoding)


def parse(
    adapter: str, stored: Response, *, expects_json: bool, answer_pointer: str | None = None
) -> Reply | str:
    """The reply graders get, or the schema-fail detail."""
    got = read(adapter, stored, expects_json=expects_json, answer_pointer=answer_pointer)
    return got.reply if got.reply is not None else got.detail


def chat(content: Any) -> dict[str, Any]:
    return {"choices": [{"message": {"role": "assistant", "content": content}}]}


# --- well-formed bodies -------------------------------------------------------------


def test_openai_reply_carries_text_and_metadata() -> None:
    """Text from choices[0].message.content; model, id, fingerprint and usage kept."""
    body = {
        **chat("SKU-9 ships."),
        "model": "served",
        "id": "r1",
        "system_fingerprint": "fp",
        "usage": {"total_tokens": 3},
    }
    expected = Reply(
        text="SKU-9 ships.",
        answer=None,
        facts=Facts(
            response_model="served",
            response_id="r1",
            system_fingerprint="fp",
            usage={"total_tokens": 3},
        ),
    )
    assert expected == parse("openai-chat", response(body), expects_json=False)


def test_non_string_metadata_is_dropped() -> None:
    """A numeric model or a list usage never leaks into the reply as the wrong type."""
    body = {**chat("x"), "model": 7, "id": ["r"], "usage": [1]}
    reply = parse("openai-chat", response(body), expects_json=False)
    assert isinstance(reply, Reply)
    expected = (None, None, None)
    assert expected == (reply.facts.response_model, reply.facts.response_id, reply.facts.usage)


def test_anthropic_reply_joins_text_blocks_and_reads_tool_use_blocks_as_calls() -> None:
    """type=text blocks make the text, in order; tool_use blocks are the calls; other
    kinds (thinking) are read past."""
    body = {
        "content": [
            {"type": "text", "text": "SKU-9 "},
            {"type": "thinking", "thinking": "hm"},
            {"type": "tool_use", "id": "t", "name": "ship", "input": {"sku": "SKU-9"}},
            {"type": "text", "text": "ships."},
        ],
        "model": "claude-x",
        "stop_reason": "tool_use",
    }
    reply = parse("anthropic-messages", response(body), expects_json=False)
    assert isinstance(reply, Reply)
    expected = ("SKU-9 ships.", "claude-x", "tool_use")
    assert expected == (reply.text, reply.facts.response_model, reply.finish_reason)
    assert reply.tool_calls == (ToolCall("t", "ship", {"sku": "SKU-9"}),)


def test_anthropic_empty_content_is_an_empty_completion() -> None:
    """An empty content list is a valid schema with empty text (a task miss later)."""
    reply = parse("anthropic-messages", response({"content": []}), expects_json=False)
    assert isinstance(reply, Reply)
    expected = ""
    assert expected == reply.text


def test_empty_openai_content_is_a_valid_schema() -> None:
    """An empty string content passes the schema stamp."""
    reply = parse("openai-chat", response(chat("")), expects_json=False)
    assert isinstance(reply, Reply)
    expected = ""
    assert expected == reply.text


def test_http_json_reads_the_answer_at_the_json_pointer() -> None:
    """The answer pointer is RFC 6901, with ~1 and ~0 escapes and list indices."""
    body = {"out": {"a/b": [{"x~y": "SKU-9"}]}}
    reply = parse(
        "http-json", response(body), expects_json=False, answer_pointer="/out/a~1b/0/x~0y"
    )
    assert isinstance(reply, Reply)
    expected = "SKU-9"
    assert expected == reply.text


def test_http_json_object_answer_is_the_json_answer_and_canonical_text() -> None:
    """An object at the pointer is the parsed answer, and its text is sorted-key JSON."""
    body = {"answer": {"country": "France", "city": "Paris"}}
    reply = parse("http-json", response(body), expects_json=True, answer_pointer="/answer")
    assert isinstance(reply, Reply)
    expected = {"city": "Paris", "country": "France"}
    assert expected == reply.answer
    expected = '{"city": "Paris", "country": "France"}'
    assert expected == reply.text


def test_http_json_string_answer_is_parsed_when_the_case_expects_json() -> None:
    """A JSON document inside a string answer is accepted as the answer."""
    body = {"answer": '{"city": "Paris"}'}
    reply = parse("http-json", response(body), expects_json=True, answer_pointer="/answer")
    assert isinstance(reply, Reply)
    expected = {"city": "Paris"}
    assert expected == reply.answer


def test_http_json_empty_pointer_is_the_whole_document() -> None:
    """The pointer "" names the root object."""
    reply = parse("http-json", response({"city": "Paris"}), expects_json=True, answer_pointer="")
    assert isinstance(reply, Reply)
    expected = {"city": "Paris"}
    assert expected == reply.answer


@pytest.mark.parametrize(
    "content",
    [
        '```json\n{"city": "Paris"}\n```',
        '```\n{"city": "Paris"}\n```',
        '  ```JSON\n{"city": "Paris"}\n```  \n',
        '```{"city": "Paris"}```',
        '{"city": "Paris"}',
    ],
)
def test_a_fenced_json_answer_is_accepted(content: str) -> None:
    """Models wrap JSON in ``` fences; the fenced object is still the answer."""
    reply = parse("openai-chat", response(chat(content)), expects_json=True)
    assert isinstance(reply, Reply)
    expected = {"city": "Paris"}
    assert expected == reply.answer
    assert content == reply.text


def test_a_json_list_answer_is_accepted() -> None:
    """A JSON array is a JSON answer too."""
    reply = parse("openai-chat", response(chat("[1, 2]")), expects_json=True)
    assert isinstance(reply, Reply)
    expected = [1, 2]
    assert expected == reply.answer


def test_a_text_case_does_not_parse_the_answer() -> None:
    """A case that does not expect JSON keeps answer None even for JSON-looking text."""
    reply = parse("openai-chat", response(chat('{"a": 1}')), expects_json=False)
    assert isinstance(reply, Reply)
    assert reply.answer is None


# --- schema failures ----------------------------------------------------------------


NOT_UTF8 = base64.b64encode(b"\xff\xfe{").decode("ascii")


@pytest.mark.parametrize(
    ("adapter", "body", "expects_json", "pointer", "expected"),
    [
        ("openai-chat", "<html>busy</html>", False, None, "not_json"),
        ("openai-chat", "", False, None, "not_json"),
        ("openai-chat", '{"choices": [', False, None, "not_json"),
        ("openai-chat", "[1, 2]", False, None, "not_object"),
        ("openai-chat", '"text"', False, None, "not_object"),
        ("anthropic-messages", "null", False, None, "not_object"),
        ("openai-chat", {"id": "r"}, False, None, "missing_choices"),
        ("openai-chat", {"choices": []}, False, None, "missing_choices"),
        ("openai-chat", {"choices": "x"}, False, None, "missing_choices"),
        ("openai-chat", {"choices": ["x"]}, False, None, "missing_choices"),
        ("openai-chat", {"choices": [{}]}, False, None, "missing_content"),
        ("openai-chat", {"choices": [{"message": "hi"}]}, False, None, "missing_content"),
        ("openai-chat", chat(None), False, None, "missing_content"),
        ("openai-chat", chat(["a"]), False, None, "missing_content"),
        ("anthropic-messages", {"model": "m"}, False, None, "missing_content"),
        ("anthropic-messages", {"content": "text"}, False, None, "missing_content"),
        ("anthropic-messages", {"content": [{"type": "thinking"}]}, False, None, "missing_content"),
        (
            "anthropic-messages",
            {"content": [{"type": "tool_use"}]},
            False,
            None,
            "tool_call_malformed",
        ),
        (
            "anthropic-messages",
            {"content": [{"type": "tool_use", "name": "f", "input": 3}]},
            False,
            None,
            "tool_args_not_json",
        ),
        (
            "openai-chat",
            {
                "choices": [
                    {
                        "message": {
                            "content": None,
                            "tool_calls": [{"function": {"name": "f", "arguments": "{"}}],
                        }
                    }
                ]
            },
            False,
            None,
            "tool_args_not_json",
        ),
        (
            "openai-chat",
            {"choices": [{"message": {"content": None, "tool_calls": [{"id": "x"}]}}]},
            False,
            None,
            "tool_call_malformed",
        ),
        ("openai-chat", chat("Paris"), True, None, "answer_not_json"),
        ("openai-chat", chat("42"), True, None, "answer_not_json"),
        ("openai-chat", chat('```json\n{"a": \n```'), True, None, "answer_not_json"),
        (
            "anthropic-messages",
            {"content": [{"type": "text", "text": "no"}]},
            True,
            None,
            "answer_not_json",
        ),
        ("http-json", {"result": "x"}, False, "/answer", "missing_answer"),
        ("http-json", {"answer": ["x"]}, False, "/answer/3", "missing_answer"),
        ("http-json", {"answer": ["x"]}, False, "/answer/-1", "missing_answer"),
        ("http-json", {"answer": "x"}, False, "/answer/deeper", "missing_answer"),
        ("http-json", {"answer": 7}, False, "/answer", "answer_not_text"),
        ("http-json", {"answer": None}, False, "/answer", "answer_not_text"),
        ("http-json", {"answer": "Paris"}, True, "/answer", "answer_not_json"),
        ("soap", {"a": 1}, False, None, "unknown_adapter:soap"),
    ],
)
def test_malformed_bodies_give_a_schema_detail(
    adapter: str, body: Any, expects_json: bool, pointer: str | None, expected: str
) -> None:
    """Every malformed shape returns its detail string instead of a Reply."""
    actual = parse(adapter, response(body), expects_json=expects_json, answer_pointer=pointer)
    assert expected == actual


def test_a_body_that_is_not_utf8_is_a_schema_fail() -> None:
    """A body stored as base64 because it was not UTF-8 fails with not_utf8."""
    actual = parse("openai-chat", response(NOT_UTF8, encoding="base64"), expects_json=False)
    expected = "not_utf8"
    assert expected == actual


def test_a_base64_body_that_is_not_valid_base64_is_not_utf8() -> None:
    """Garbage in a base64 body is reported, not raised."""
    actual = parse("openai-chat", response("!!!", encoding="base64"), expects_json=False)
    expected = "not_utf8"
    assert expected == actual


DEPTHS = [50, 500, 990, 1000, sys.getrecursionlimit(), 5_000, 100_000]


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize(("adapter", "pointer"), [("openai-chat", None), ("http-json", "")])
def test_a_deeply_nested_body_never_raises(depth: int, adapter: str, pointer: str | None) -> None:
    """Past MAX_DEPTH levels a body is not_json, whatever the depth; never a RecursionError."""
    body = '{"a":' * depth + "1" + "}" * depth
    actual = parse(adapter, response(body), expects_json=True, answer_pointer=pointer)
    if depth > MAX_DEPTH:
        assert actual == "not_json"
    else:
        assert actual != "not_json"


@pytest.mark.parametrize("depth", DEPTHS)
def test_a_deeply_nested_answer_never_raises(depth: int) -> None:
    """A JSON answer nested past MAX_DEPTH is answer_not_json; one within it is parsed."""
    content = "[" * depth + "]" * depth
    actual = parse("openai-chat", response(chat(content)), expects_json=True)
    if depth > MAX_DEPTH:
        assert actual == "answer_not_json"
    else:
        assert isinstance(actual, Reply)


def _at_stack_depth(frames: int, body: str) -> Reply | str:
    if frames:
        return _at_stack_depth(frames - 1, body)
    return parse("http-json", response(body), expects_json=True, answer_pointer="")


@pytest.mark.parametrize("depth", [MAX_DEPTH, MAX_DEPTH + 1])
def test_a_deep_reply_grades_the_same_however_deep_the_caller_is(depth: int) -> None:
    """The stamp of a reply cannot depend on the stack it is parsed on: a live run and its
    replay call the adapter from different depths, and must agree."""
    body = '{"a":' * (depth - 1) + '["\\ud800", 1]' + "}" * (depth - 1)
    shallow = _at_stack_depth(0, body)
    deep = _at_stack_depth(sys.getrecursionlimit() - 250, body)
    assert shallow == deep
    assert (shallow == "not_json") is (depth > MAX_DEPTH)


def test_a_lone_surrogate_deep_in_a_body_is_replaced_not_raised() -> None:
    body = '{"a":' * 120 + '"x\\udfff"' + "}" * 120
    reply = parse("http-json", response(body), expects_json=True, answer_pointer="")
    assert isinstance(reply, Reply)
    assert "x\ufffd" in reply.text
    assert "\udfff" not in reply.text


def test_an_http_json_answer_at_any_depth_never_raises() -> None:
    """Re-encoding a nested http-json answer near the recursion limit does not raise either."""
    for depth in range(0, sys.getrecursionlimit() + 40, 3):
        body = '{"answer":' + "[" * depth + "]" * depth + "}"
        actual = parse("http-json", response(body), expects_json=False, answer_pointer="/answer")
        assert isinstance(actual, Reply | str), depth


# --- what a reply says of itself, and streams ------------------------------------------------


def sse(*events: Any) -> str:
    return "".join(f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in events)


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {"id": "s1", "model": "gpt-s", "choices": [choice], **extra}


def test_a_body_that_fails_the_schema_still_names_its_model_and_usage() -> None:
    """missing_choices, with the model, id and usage the body named kept as facts."""
    body = {"model": "gpt-x", "id": "r9", "usage": {"total_tokens": 4}}
    got = read("openai-chat", response(body), expects_json=False)
    assert (got.reply, got.detail) == (None, "missing_choices")
    assert got.facts == Facts(response_model="gpt-x", response_id="r9", usage={"total_tokens": 4})


def test_a_call_with_broken_arguments_keeps_its_name_and_finish_reason() -> None:
    """tool_args_not_json is a schema fail, and the row still says what was called and why
    the reply ended."""
    call = {"id": "c", "function": {"name": "get_weather", "arguments": '{"city": "Par'}}
    body = chat(None)
    body["choices"][0] |= {"finish_reason": "tool_calls"}
    body["choices"][0]["message"]["tool_calls"] = [call]
    got = read("openai-chat", response(body), expects_json=False)
    assert (got.reply, got.detail) == (None, "tool_args_not_json")
    assert (got.tool_names, got.finish_reason) == (("get_weather",), "tool_calls")


def test_an_event_stream_body_is_folded_as_a_stream() -> None:
    """A 2xx text/event-stream body is read as SSE: content joined, usage and finish kept."""
    body = sse(
        chunk({"content": "SKU-"}),
        chunk({"content": "9"}, "stop"),
        {"id": "s1", "model": "gpt-s", "choices": [], "usage": {"total_tokens": 5}},
        "[DONE]",
    )
    got = read("openai-chat", response(body, stream=True), expects_json=False)
    assert isinstance(got.reply, Reply)
    assert (got.reply.text, got.finish_reason, got.facts.usage) == (
        "SKU-9",
        "stop",
        {"total_tokens": 5},
    )


def test_a_stream_folded_when_stamped_is_read_as_its_own_text_and_protocol_read_it() -> None:
    """`stream_end` keeps its fold for `read` a moment later: what `read` gives is what a
    fresh fold of that very text by that protocol gives, never another text's or another
    protocol's fold of the same text."""
    from runner.protocols import stream_end

    done = sse(chunk({"content": "SKU-"}), chunk({"content": "9"}, "stop"), "[DONE]")
    other = sse(chunk({"content": "SKU-"}), chunk({"content": "7"}, "stop"), "[DONE]")
    fresh = read("openai-chat", response(done, stream=True), expects_json=False)
    assert stream_end("openai-chat", done) is None  # finished: kept for read
    assert read("openai-chat", response(done, stream=True), expects_json=False) == fresh
    assert stream_end("openai-chat", done) is None
    got = read("openai-chat", response(other, stream=True), expects_json=False)
    assert got.reply is not None and got.reply.text == "SKU-7"
    anthropic = read("anthropic-messages", response(done, stream=True), expects_json=False)
    assert anthropic.reply is None and anthropic.detail != ""
    assert read("openai-chat", response(done, stream=True), expects_json=False) == fresh


def test_the_content_type_not_the_request_decides_how_a_body_is_read() -> None:
    """The same SSE text sent as application/json is no JSON; a JSON reply to a streamed
    request (a server that ignored `stream`) is read as the body it is."""
    text = sse(chunk({"content": "x"}, "stop"), "[DONE]")
    assert read("openai-chat", response(text), expects_json=False).detail == "not_json"
    whole = read("openai-chat", response(chat("x")), expects_json=False)
    assert whole.reply is not None
    assert read("http-json", response(text, stream=True), expects_json=False).detail == "not_json"


def test_a_malformed_stream_is_a_schema_fail_that_keeps_its_facts() -> None:
    """A chunk that is not JSON is stream_malformed; the model the stream named is kept."""
    body = sse(chunk({"content": "SKU"}), '{"id": "s1", "choi', chunk({}, "stop"), "[DONE]")
    got = read("openai-chat", response(body, stream=True), expects_json=False)
    assert (got.reply, got.detail, got.facts.response_model) == (None, "stream_malformed", "gpt-s")


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (sse(chunk({"content": "SKU"})), "stream_truncated"),
        (
            sse(chunk({"content": "SKU"}), {"error": {"type": "overloaded"}}),
            "stream_error:overloaded",
        ),
    ],
)
def test_a_broken_stream_stamped_ok_is_never_graded(body: str, detail: str) -> None:
    """A truncated or errored stream the client would have stamped a transport failure, found
    in a row stamped ok (a hand-written cassette), fails the schema with its detail."""
    assert read("openai-chat", response(body, stream=True), expects_json=False).detail == detail


def test_an_anthropic_stream_reads_its_tool_call() -> None:
    """Anthropic's events build a tool_use call from its partial JSON pieces."""
    events = [
        {
            "type": "message_start",
            "message": {"id": "m1", "model": "claude-s", "usage": {"input_tokens": 3}},
        },
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": '{"city": '},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": '"Oslo"}'},
        },
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use"},
            "usage": {"output_tokens": 7},
        },
        {"type": "message_stop"},
    ]
    got = read("anthropic-messages", response(sse(*events), stream=True), expects_json=False)
    assert isinstance(got.reply, Reply)
    assert got.reply.tool_calls == (ToolCall("t1", "get_weather", {"city": "Oslo"}),)
    assert (got.reply.text, got.tool_names, got.finish_reason) == ("", ("get_weather",), "tool_use")
    assert got.facts.usage == {"input_tokens": 3, "output_tokens": 7}
