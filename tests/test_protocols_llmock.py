"""The protocol readers on llmock's recorded replies (tests/data/llmock/): every captured body
folds to what the recording's index says llmock was asked to send, faults included."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runner.model import Reply
from runner.protocols import anthropic_messages, gemini, openai_chat, openai_responses
from runner.protocols.message import Message, StreamStatus, graded

DATA = Path(__file__).parent / "data" / "llmock"
INDEX: dict[str, dict[str, Any]] = json.loads((DATA / "index.json").read_text())["cases"]
UNKNOWN_TOOL = "llmock_unknown_tool"
# each recording's prefix: its reader, and the finish reasons of a text and a tool reply
PROTOCOLS: dict[str, tuple[Any, tuple[str, str]]] = {
    "openai": (openai_chat, ("stop", "tool_calls")),
    "anthropic": (anthropic_messages, ("end_turn", "tool_use")),
    "responses": (openai_responses, ("completed", "completed")),
    "gemini": (gemini, ("STOP", "STOP")),
}


def protocol(name: str) -> Any:
    return PROTOCOLS[name.partition("-")[0]][0]


def fault(case: dict[str, Any], kind: str) -> str | None:
    """The kind of the case's scripted `kind` behaviour (stream_fault, tool_fault), if any."""
    return next((b["kind"] for b in case["scenario"] if b["type"] == kind), None)


def scripted_calls(case: dict[str, Any]) -> list[tuple[str, Any]] | None:
    reply = next((b for b in case["scenario"] if b["type"] == "reply"), None)
    return None if reply is None else [(c["name"], c["arguments"]) for c in reply["tool_calls"]]


def asked_format(case: dict[str, Any]) -> dict[str, Any] | None:
    """The structured output the request asked for, in chat's terms (type json_schema or
    json_object), whichever protocol asked."""
    request = case["request"]
    if "generationConfig" in request:
        config = request["generationConfig"]
        if "responseMimeType" not in config:
            return None
        return {"type": "json_schema" if "responseSchema" in config else "json_object"}
    asked = request.get("response_format") or request.get("output_format")
    return asked or request.get("text", {}).get("format")


def expects_json(case: dict[str, Any]) -> bool:
    return asked_format(case) is not None


def answered(request: dict[str, Any]) -> bool:
    """Whether the conversation's last turn is already a tool's result."""
    if "contents" in request:
        return "functionResponse" in request["contents"][-1]["parts"][0]
    if "input" in request:
        return request["input"][-1].get("type") == "function_call_output"
    last = request["messages"][-1]
    return last["role"] == "tool" or (
        isinstance(last["content"], list) and last["content"][0].get("type") == "tool_result"
    )


def generates_a_call(case: dict[str, Any]) -> bool:
    """tool_mode auto answers a request offering tools with a call, unless tool_choice is
    none or the last turn is already a tool's result."""
    request = case["request"]
    choice = request.get("tool_choice") or request.get("toolConfig")
    none = ("none", {"type": "none"}, {"functionCallingConfig": {"mode": "NONE"}})
    return (
        "tools" in request
        and case["flags"]["tool_mode"] == "auto"
        and choice not in none
        and not answered(request)
    )


def fold(name: str) -> tuple[Message, StreamStatus | None]:
    """The case's body folded: (message, None) sent whole, (message, status) streamed."""
    text = (DATA / name).read_text(encoding="utf-8")
    if name.endswith(".sse"):
        streamed = protocol(name).fold_stream(text)
        return streamed.message, streamed.status
    whole = protocol(name).fold_body(text)
    assert isinstance(whole, Message), whole
    return whole, None


REPLIES = sorted(name for name, case in INDEX.items() if case["status"] == 200)


def test_every_recorded_case_is_read_here() -> None:
    """The index names every file, and each is either a reply or an error answer."""
    assert sorted(INDEX) == sorted(p.name for p in DATA.iterdir() if p.name != "index.json")
    assert {case["status"] for case in INDEX.values()} <= {200, 400, 429, 500}


@pytest.mark.parametrize("name", sorted(n for n, c in INDEX.items() if c["status"] != 200))
def test_error_answers_are_never_graded_as_replies(name: str) -> None:
    """A 4xx/5xx error body (JSON, even for a streamed request) is no reply to grade."""
    whole = protocol(name).fold_body((DATA / name).read_text(encoding="utf-8"))
    assert not isinstance(whole, Message) or not isinstance(
        graded(whole, expects_json=False), Reply
    )


@pytest.mark.parametrize("name", REPLIES)
def test_each_recorded_reply_folds_to_what_llmock_was_asked_for(name: str) -> None:
    """Finish, truncation and malformation as the stream fault says; the scripted, broken or
    generated tool call, or text; a JSON answer when structured output was asked for; the
    model asked for, and usage when the stream was asked to include it."""
    case = INDEX[name]
    message, status = fold(name)
    stream_fault = fault(case, "stream_fault")
    if case["transport"] != "complete" or stream_fault == "truncate":
        assert status is StreamStatus.TRUNCATED
        return
    if stream_fault == "malformed":
        assert status is StreamStatus.MALFORMED
        return
    assert status in (None, StreamStatus.FINISHED)  # a stall changes no byte
    prefix = name.partition("-")[0]
    if prefix == "gemini":  # the model is in the path; llmock's whole replies omit modelVersion
        assert message.response_model == (None if status is None else "gemini-ref")
    else:
        assert message.response_model == case["request"]["model"]
    result = graded(message, expects_json=expects_json(case))
    tool_fault = fault(case, "tool_fault")
    # an object on the wire (Anthropic's `input` sent whole, Gemini's `args`) cannot be cut
    whole_object = prefix == "gemini" or (prefix == "anthropic" and status is None)
    if tool_fault == "malformed_arguments" and not whole_object:
        assert result == "tool_args_not_json"
        return
    assert isinstance(result, Reply), result
    calls = [(c.name, c.arguments) for c in result.tool_calls]
    text_finish, call_finish = PROTOCOLS[prefix][1]
    if tool_fault == "malformed_arguments":  # llmock sends the broken call's args as {}
        assert calls == [("get_weather", {})]
    elif tool_fault == "unknown_tool":
        assert [n for n, _ in calls] == [UNKNOWN_TOOL]
        assert "city" in calls[0][1]
    elif scripted_calls(case) is not None:
        assert calls == scripted_calls(case)
    elif generates_a_call(case):
        assert [n for n, _ in calls] == ["get_weather"]
        assert "city" in calls[0][1]  # the schema's one required argument
    else:
        assert calls == []
        assert result.text.strip()
        assert result.finish_reason == text_finish
    if calls:
        assert result.finish_reason == call_finish
        assert all(c.id for c in result.tool_calls) == (prefix != "gemini")  # Gemini sends none
    if expects_json(case):
        assert isinstance(result.answer, dict)
        asked = asked_format(case)
        assert asked is not None
        if asked["type"] == "json_schema":  # the answer holds what the schema requires
            assert {"city", "temperature_c", "conditions", "alerts"} <= set(result.answer)
    if case["request"].get("stream_options", {}).get("include_usage"):
        usage = message.usage or {}
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0


def has_sound_twin(name: str) -> bool:
    """A clean stream recorded whole too (a broken call is broken differently in each)."""
    case = INDEX[name]
    return (
        name.endswith(".sse")
        and name.replace(".sse", ".json") in INDEX
        and fault(case, "stream_fault") is None
        and fault(case, "tool_fault") != "malformed_arguments"
    )


@pytest.mark.parametrize("name", [n for n in REPLIES if has_sound_twin(n)])
def test_a_recorded_stream_grades_as_its_recorded_whole_twin(name: str) -> None:
    """The streamed and non-streamed recording of one case give the graders the same text,
    answer, calls and finish reason (ids aside: llmock makes new ones per reply)."""
    case = INDEX[name]
    streamed, status = fold(name)
    whole, _ = fold(name.replace(".sse", ".json"))
    assert status is StreamStatus.FINISHED
    a, b = (graded(m, expects_json=expects_json(case)) for m in (streamed, whole))
    assert isinstance(a, Reply) and isinstance(b, Reply)
    assert (a.text, a.answer, a.finish_reason) == (b.text, b.answer, b.finish_reason)
    assert [(c.name, c.arguments) for c in a.tool_calls] == [
        (c.name, c.arguments) for c in b.tool_calls
    ]
