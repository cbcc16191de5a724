"""Specification of the wire formats: request bodies out, Replies or schema details in."""

from __future__ import annotations

import base64
import json
import sys
from typing import Any

import pytest

from runner.adapters import (
    auth_headers,
    parse,
    protocol_headers,
    request_body,
    request_url,
)
from runner.config import EndpointConfig
from runner.jsontext import MAX_DEPTH
from runner.model import Case, Facts, Reply, Response


def case(system: str | None = None) -> Case:
    return Case(
        id="c1",
        prompt="Name the SKU.",
        expect={},
        fixture_sha="0" * 16,
        path="s.jsonl",
        line=1,
        system=system,
    )


def endpoint(kind: str, **extra: Any) -> EndpointConfig:
    base: dict[str, Any] = {"kind": kind, "base_url": "https://api.example.com/v1/"}
    if kind == "http-json":
        base["body_template"] = {"q": "{{prompt}}"}
    else:
        base["model"] = "model-x"
    return EndpointConfig(**{**base, **extra})


def response(body: str | dict[str, Any] | list[Any], *, encoding: str = "utf-8") -> Response:
    text = body if isinstance(body, str) else json.dumps(body)
    return Response(status=200, headers={}, body=text, encoding=encoding)


def chat(content: Any) -> dict[str, Any]:
    return {"choices": [{"message": {"role": "assistant", "content": content}}]}


# --- requests ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("openai-chat", "https://api.example.com/v1/chat/completions"),
        ("anthropic-messages", "https://api.example.com/v1/v1/messages"),
        ("http-json", "https://api.example.com/v1/"),
    ],
)
def test_request_url_per_kind(kind: str, expected: str) -> None:
    """openai-chat and anthropic append their paths; http-json posts to base_url as given."""
    assert expected == request_url(endpoint(kind))


def test_openai_body_puts_the_system_prompt_first_at_temperature_zero() -> None:
    """A system prompt becomes the first message; temperature defaults to 0."""
    expected = {
        "model": "model-x",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Name the SKU."},
        ],
        "temperature": 0.0,
        "max_tokens": 512,
    }
    assert expected == request_body(endpoint("openai-chat"), case(system="Be brief."))


def test_openai_body_without_a_system_prompt_has_only_the_user_message() -> None:
    """No system prompt, no system message."""
    body = request_body(endpoint("openai-chat"), case())
    expected = [{"role": "user", "content": "Name the SKU."}]
    assert expected == body["messages"]


def test_anthropic_body_carries_the_system_prompt_at_top_level() -> None:
    """Anthropic takes `system` beside `messages`, never as a message."""
    expected = {
        "model": "model-x",
        "max_tokens": 512,
        "temperature": 0.0,
        "messages": [{"role": "user", "content": "Name the SKU."}],
        "system": "Be brief.",
    }
    assert expected == request_body(endpoint("anthropic-messages"), case(system="Be brief."))


def test_anthropic_body_without_a_system_prompt_has_no_system_key() -> None:
    """An absent system prompt is left out, not sent empty."""
    assert "system" not in request_body(endpoint("anthropic-messages"), case())


def test_configured_temperature_and_max_tokens_are_sent() -> None:
    """Non-default sampling settings reach the body."""
    body = request_body(endpoint("openai-chat", temperature=0.7, max_tokens=64), case())
    expected = (0.7, 64)
    assert expected == (body["temperature"], body["max_tokens"])


def test_http_json_body_fills_the_template_recursively() -> None:
    """{{prompt}}, {{system}} and {{model}} are filled in nested objects and lists."""
    template = {
        "input": {"text": "{{prompt}}", "sys": "{{system}}"},
        "tags": ["{{model}}", 3, None],
        "fixed": True,
    }
    cfg = endpoint("http-json", body_template=template, model="m-1")
    expected = {
        "input": {"text": "Name the SKU.", "sys": "Be brief."},
        "tags": ["m-1", 3, None],
        "fixed": True,
    }
    assert expected == request_body(cfg, case(system="Be brief."))


def test_auth_headers_per_kind() -> None:
    """Anthropic sends x-api-key, the others a bearer token, and no key sends nothing."""
    expected = {"x-api-key": "k"}
    assert expected == auth_headers(endpoint("anthropic-messages"), "k")
    expected = {"Authorization": "Bearer k"}
    assert expected == auth_headers(endpoint("openai-chat"), "k")
    expected = {}
    assert expected == auth_headers(endpoint("openai-chat"), None)


def test_protocol_headers_add_anthropic_version_and_configured_headers() -> None:
    """JSON content headers, anthropic-version, then the endpoint's own headers."""
    cfg = endpoint("anthropic-messages", headers={"X-Team": "evals"})
    expected = {
        "Content-Type": "application/json",
        "Accept": "application/json",
        "anthropic-version": "2023-06-01",
        "X-Team": "evals",
    }
    assert expected == protocol_headers(cfg)


# --- parse: well-formed bodies -------------------------------------------------------------


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


def test_anthropic_reply_joins_text_blocks_and_skips_others() -> None:
    """Only type=text blocks make the text, in order."""
    body = {
        "content": [
            {"type": "text", "text": "SKU-9 "},
            {"type": "tool_use", "id": "t"},
            {"type": "text", "text": "ships."},
        ],
        "model": "claude-x",
    }
    reply = parse("anthropic-messages", response(body), expects_json=False)
    assert isinstance(reply, Reply)
    expected = ("SKU-9 ships.", "claude-x")
    assert expected == (reply.text, reply.facts.response_model)


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


# --- parse: schema failures ----------------------------------------------------------------


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
        ("anthropic-messages", {"content": [{"type": "tool_use"}]}, False, None, "missing_content"),
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
