"""Specification of the Gemini reader (`gemini`): generateContent bodies and their SSE
responses in, Messages out, each stream ending as DESIGN's stamps say."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.model import Reply, Response, Transport
from runner.protocols import first_token, gemini, read, stream_end
from runner.protocols.message import Message, RawToolCall, StreamFold, StreamStatus, graded

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
USAGE = {"promptTokenCount": 14, "candidatesTokenCount": 6, "totalTokenCount": 20}
KIND = gemini.WIRE.kind


def sse(*events: Any) -> str:
    out = []
    for event in events:
        data = event if isinstance(event, str) else json.dumps(event)
        out.append(f"data: {data}\n\n")
    return "".join(out)


def answer(*parts: Any, finish: str | None = "STOP", **extra: Any) -> dict[str, Any]:
    """One GenerateContentResponse; usage only with a finish, as Gemini streams it."""
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": list(parts)}, "index": 0}
    doc: dict[str, Any] = {"candidates": [candidate], "modelVersion": "gemini-x", **extra}
    doc.setdefault("responseId", "r1")
    if finish is not None:
        candidate["finishReason"] = finish
        doc.setdefault("usageMetadata", USAGE)
    return doc


def call(name: str, args: Any = None) -> dict[str, Any]:
    return {"functionCall": {"name": name, "args": {} if args is None else args}}


def ok(fold: StreamFold) -> Message:
    assert fold.status is StreamStatus.FINISHED, fold
    return fold.message


# --- bodies ---------------------------------------------------------------------------------


def test_a_body_reads_its_text_calls_and_what_it_says_of_itself() -> None:
    """Text parts joined (a thought summary read past), functionCall parts the calls with
    their args as objects, the finish reason, modelVersion, responseId and usageMetadata."""
    doc = answer(
        {"text": "thinking...", "thought": True},
        {"text": "Hello "},
        {"text": "there"},
        call("get_weather", {"city": "Oslo"}),
    )
    assert gemini.fold_body(json.dumps(doc)) == Message(
        content="Hello there",
        tool_calls=(RawToolCall(id=None, name="get_weather", arguments={"city": "Oslo"}),),
        finish_reason="STOP",
        response_model="gemini-x",
        response_id="r1",
        usage=USAGE,
    )


def test_a_call_keeps_the_id_gemini_gives_and_takes_no_args_as_none() -> None:
    doc = answer({"functionCall": {"name": "now", "id": "fc-1"}})
    got = gemini.fold_body(json.dumps(doc))
    assert isinstance(got, Message)
    assert got.tool_calls == (RawToolCall(id="fc-1", name="now", arguments={}),)
    assert got.content is None


def test_a_blocked_prompt_finishes_for_its_block_reason_with_no_content() -> None:
    doc = {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 3}}
    got = gemini.fold_body(json.dumps(doc))
    assert isinstance(got, Message)
    assert (got.finish_reason, got.content) == ("SAFETY", None)
    assert graded(got, expects_json=False) == "missing_content"


@pytest.mark.parametrize(
    ("doc", "detail"),
    [
        (answer(finish="SAFETY"), "missing_content"),  # no parts at all
        (answer(call("f", [1, 2])), "tool_args_not_json"),
        (answer(call("f", "{")), "tool_args_not_json"),
        (answer({"functionCall": {"args": {}}}), "tool_call_malformed"),
        (answer({"functionCall": "f"}), "tool_call_malformed"),
    ],
)
def test_bodies_that_say_nothing_gradable_fail_the_schema(doc: Any, detail: str) -> None:
    message = gemini.fold_body(json.dumps(doc))
    result = graded(message, expects_json=False) if isinstance(message, Message) else message
    assert result == detail


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("not json", "not_json"),
        ("[1]", "not_object"),
        ('{"modelVersion": "m"}', "missing_candidates"),
        ('{"candidates": []}', "missing_candidates"),
        ('{"candidates": [3]}', "missing_candidates"),
    ],
)
def test_a_body_that_is_no_response_is_a_schema_detail(text: str, detail: str) -> None:
    assert gemini.fold_body(text) == detail


def test_a_failed_body_still_names_its_model_and_usage() -> None:
    """Gemini's facts are not where OpenAI's are: a schema fail still reads them."""
    body = json.dumps({"modelVersion": "gemini-y", "responseId": "r9", "usageMetadata": USAGE})
    stored = Response(status=200, headers={"content-type": "application/json"}, body=body)
    got = read(KIND, stored, expects_json=False)
    assert (got.reply, got.detail) == (None, "missing_candidates")
    assert (got.facts.response_model, got.facts.response_id, got.facts.usage) == (
        "gemini-y",
        "r9",
        USAGE,
    )


# --- streams --------------------------------------------------------------------------------


def stream_of() -> list[Any]:
    """Text in pieces, then the call and the finish in the last response, as Gemini sends."""
    return [
        answer({"text": "Hello"}, finish=None),
        answer({"text": " there"}, finish=None),
        answer({"text": "!"}, call("get_weather", {"city": "Oslo"})),
    ]


def test_a_stream_concatenates_its_text_and_finishes_at_the_finish_reason() -> None:
    streamed = ok(gemini.fold_stream(sse(*stream_of())))
    whole = gemini.fold_body(
        json.dumps(answer({"text": "Hello there!"}, call("get_weather", {"city": "Oslo"})))
    )
    assert streamed == whole


def test_the_last_usage_counts_and_responses_after_the_finish_still_do() -> None:
    """Gemini may send usage in every response; the last one wins. A usage-only response
    after the finish is folded in too, and an error there still spoils the stream."""
    usage = {**USAGE, "candidatesTokenCount": 9}
    events = [*stream_of(), {"usageMetadata": usage, "modelVersion": "gemini-x"}]
    assert ok(gemini.fold_stream(sse(*events))).usage == usage
    spoiled = gemini.fold_stream(sse(*events, {"error": {"code": 503, "status": "UNAVAILABLE"}}))
    assert spoiled.status is StreamStatus.ERROR


def test_a_blocked_prompt_streamed_is_finished_not_truncated() -> None:
    fold = gemini.fold_stream(sse({"promptFeedback": {"blockReason": "OTHER"}}))
    assert fold.status is StreamStatus.FINISHED
    assert fold.message.finish_reason == "OTHER"


@pytest.mark.parametrize("cut", [1, 2, 3])
def test_a_stream_that_ends_without_a_finish_reason_is_truncated(cut: int) -> None:
    text = sse(*stream_of()[: 3 - cut])
    fold = gemini.fold_stream(text)
    assert (fold.status, fold.detail) == (StreamStatus.TRUNCATED, "stream_truncated")
    ended = stream_end(KIND, text)
    assert ended is not None
    assert (ended.transport, ended.error) == (Transport.CONNECTION_LOST, "stream_truncated")


@pytest.mark.parametrize(
    "event",
    [
        "not json",
        '{"candidates": [{"content": {"parts": [{"text": "He',
        "[1]",
        json.dumps({"candidates": []}),
        json.dumps({"candidates": "x"}),
    ],
)
def test_a_stream_with_one_broken_event_is_malformed(event: str) -> None:
    events = [sse(e) for e in stream_of()]
    events.insert(1, f"data: {event}\n\n")
    fold = gemini.fold_stream("".join(events))
    assert (fold.status, fold.detail) == (StreamStatus.MALFORMED, "stream_malformed")
    assert fold.message.response_model == "gemini-x"  # what came before is kept


def test_a_streamed_call_whose_args_are_no_object_keeps_its_name() -> None:
    """Arguments that are no object are the call's fault, not the stream's: it finishes, and
    grading says tool_args_not_json while the call's name and finish are still read."""
    fold = gemini.fold_stream(sse(answer(call("get_weather", 7))))
    message = ok(fold)
    assert [c.name for c in message.tool_calls] == ["get_weather"]
    assert graded(message, expects_json=False) == "tool_args_not_json"


@pytest.mark.parametrize(
    ("error", "detail"),
    [
        (
            {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"},
            "stream_error:RESOURCE_EXHAUSTED",
        ),
        ({"code": 500, "message": "boom"}, "stream_error:500"),
        ("broken", "stream_error:unknown"),
    ],
)
def test_an_error_in_a_stream_is_the_servers_error(error: Any, detail: str) -> None:
    text = sse(stream_of()[0], {"error": error})
    fold = gemini.fold_stream(text)
    assert (fold.status, fold.detail) == (StreamStatus.ERROR, detail)
    assert fold.message.content == "Hello"
    ended = stream_end(KIND, text)
    assert ended is not None and (ended.transport, ended.error) == (Transport.HTTP_ERROR, detail)


def test_a_stored_stream_reads_through_its_content_type() -> None:
    stored = Response(
        status=200, headers={"content-type": "text/event-stream"}, body=sse(*stream_of())
    )
    got = read(KIND, stored, expects_json=False)
    assert isinstance(got.reply, Reply)
    assert (got.reply.text, got.tool_names, got.finish_reason) == (
        "Hello there!",
        ("get_weather",),
        "STOP",
    )


# --- the first token ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("event", "token"),
    [
        (answer({"text": ""}, finish=None), False),
        (answer({"text": "Hi"}, finish=None), True),
        (answer({"text": "hm", "thought": True}, finish=None), False),
        (answer(call("f")), True),
        (answer(finish="STOP"), False),
        ({"usageMetadata": USAGE}, False),
        ({"candidates": [{"content": {"parts": "x"}}]}, False),
        ({"candidates": ["x"]}, False),
        ("[DONE]", False),
    ],
)
def test_which_events_carry_a_token(event: Any, token: bool) -> None:
    data = event if isinstance(event, str) else json.dumps(event)
    assert gemini.carries_token(data) is token


def test_the_first_token_is_the_first_response_with_text_or_a_call() -> None:
    empty = sse(answer({"text": ""}, finish=None))
    text = empty + sse(*stream_of())
    assert first_token(KIND, text) == len(empty) + len(sse(stream_of()[0]))


# --- a stream and its body agree, and nothing raises ----------------------------------------


names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12)
objects = st.dictionaries(st.text(max_size=6), st.integers() | st.text(max_size=5), max_size=3)


def split(draw: Callable[..., Any], text: str) -> list[str]:
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=4)))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


@st.composite
def replies(draw: Callable[..., Any]) -> tuple[str, str]:
    """A random reply as a body and as the stream that carries it: its text in pieces, its
    calls whole, the finish and usage in the last response."""
    text = draw(st.none() | st.text(max_size=20))
    calls = [call(n, a) for n, a in draw(st.lists(st.tuples(names, objects), max_size=3))]
    finish = draw(st.sampled_from(["STOP", "MAX_TOKENS"]))
    parts = ([] if text is None else [{"text": text}]) + calls
    whole = json.dumps(answer(*parts, finish=finish))
    pieces = [] if text is None else [p for p in split(draw, text) if p] or [text]
    events = [answer({"text": p}, finish=None) for p in pieces[:-1]]
    events.append(answer(*([{"text": pieces[-1]}] if pieces else []), *calls, finish=finish))
    return whole, sse(*events)


@FUZZ
@given(replies())
def test_a_stream_folds_to_the_message_of_the_same_body(reply: tuple[str, str]) -> None:
    whole, streamed = reply
    assert ok(gemini.fold_stream(streamed)) == gemini.fold_body(whole)


keys = st.sampled_from(
    [
        "candidates",
        "content",
        "parts",
        "text",
        "thought",
        "functionCall",
        "name",
        "args",
        "finishReason",
        "usageMetadata",
        "modelVersion",
        "error",
        "status",
        "promptFeedback",
        "blockReason",
    ]
)
values = st.sampled_from(["STOP", "model", "SAFETY", "{", 0, 1, -1])
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
    for fold in (gemini.fold_stream(text), gemini.fold_body(text)):
        message = fold.message if isinstance(fold, StreamFold) else fold
        if isinstance(message, Message):
            graded(message, expects_json=True)
            graded(message, expects_json=False)
    gemini.facts(text)
