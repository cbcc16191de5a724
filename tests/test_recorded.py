"""Specification of the recorded endpoint: cassette rows become the exchanges a server sends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from runner.errors import DataError
from runner.grading.graders import GraderSet
from runner.history import run_dirs
from runner.model import Case, Exchange, Reply
from runner.protocols import anthropic_messages, openai_chat, read, sse
from runner.protocols.message import (
    Message,
    StreamFold,
    StreamStatus,
    ToolCall,
    graded,
)
from runner.recorded.endpoint import RecordedEndpoint, load_cassette
from runner.stamps import stamp

pytestmark = pytest.mark.anyio


def case(case_id: str = "c1", completion: str | None = None) -> Case:
    return Case(
        id=case_id,
        prompt="p",
        expect={"must_include": ["Paris"]},
        fixture_sha="b" * 16,
        path="s.jsonl",
        line=1,
        completion=completion,
    )


def cassette_file(tmp_path: Path, rows: list[Any]) -> Path:
    path = tmp_path / "cassette.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def endpoint(
    tmp_path: Path, rows: list[dict[str, Any]], *, suite: str = "s", model: str | None = "rec-m"
) -> RecordedEndpoint:
    cassette = load_cassette(cassette_file(tmp_path, rows))
    return RecordedEndpoint("cand", suite=suite, model=model, cassette=cassette)


def content_of(exchange: Exchange) -> Any:
    assert exchange.response is not None
    return json.loads(exchange.response.body)["choices"][0]["message"]["content"]


# --- load_cassette -------------------------------------------------------------------------


def test_load_cassette_keys_rows_by_suite_case_and_sample(tmp_path: Path) -> None:
    """Rows are keyed (suite, side, case, sample), None where a row does not narrow."""
    rows = [
        {"case_id": "c1", "completion": "a"},
        {"case_id": "c1", "sample": 1, "completion": "b"},
        {"case_id": "c1", "suite": "s", "completion": "c"},
        {"case_id": "c1", "side": "candidate", "completion": "d"},
    ]
    expected = {
        (None, None, "c1", None),
        (None, None, "c1", 1),
        ("s", None, "c1", None),
        (None, "candidate", "c1", None),
    }
    assert expected == set(load_cassette(cassette_file(tmp_path, rows)))


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        (["c1"], "cassette row must be a JSON object"),
        ({"case_id": "c1", "completoin": "x"}, "unknown cassette key 'completoin'"),
        ({"completion": "x"}, "cassette row needs a string case_id"),
        ({"case_id": "", "completion": "x"}, "cassette row needs a string case_id"),
        ({"case_id": 7}, "cassette row needs a string case_id"),
        ({"case_id": "c1", "fault": "ok"}, "unknown fault 'ok'"),
        ({"case_id": "c1", "fault": "http_error"}, "unknown fault 'http_error'"),
        ({"case_id": "c1", "status": "503"}, "status must be an integer"),
        ({"case_id": "c1", "status": True}, "status must be an integer"),
        ({"case_id": "c1", "body": {"a": 1}}, "body must be a string"),
        ({"case_id": "c1", "sample": "1"}, "sample must be an integer"),
        ({"case_id": "c1", "suite": [1]}, "suite must be a string"),
        ({"case_id": "c1", "suite": 3}, "suite must be a string"),
        ({"case_id": "c1", "side": ["reference"]}, "side must be one of"),
        ({"case_id": "c0", "completion": "dup"}, "duplicate cassette entry for 'c0'"),
        ({"case_id": "c1", "completion": "half \ud800 a pair"}, "lone surrogate escape"),
    ],
)
def test_a_bad_cassette_row_names_file_and_line(tmp_path: Path, row: Any, reason: str) -> None:
    """Each malformed row is a DataError (exit 65) reading `path:line: reason`."""
    path = cassette_file(tmp_path, [{"case_id": "c0", "completion": "ok"}, row])
    with pytest.raises(DataError) as info:
        load_cassette(path)
    assert str(info.value).startswith(f"{path}:2: {reason}")
    expected = 65
    assert expected == info.value.exit_code


def test_a_torn_cassette_line_is_an_error(tmp_path: Path) -> None:
    """Cassettes are written by hand: a truncated last line is reported, not skipped."""
    path = tmp_path / "c.jsonl"
    path.write_text('{"case_id": "c1"}\n{"case_id": ', encoding="utf-8")
    with pytest.raises(DataError) as info:
        load_cassette(path)
    assert f"{path}:2: truncated last line" == str(info.value)


def test_the_same_case_in_two_suites_is_not_a_duplicate(tmp_path: Path) -> None:
    """suite narrows the key, so one case id may appear once per suite."""
    rows = [
        {"case_id": "c1", "suite": "a", "completion": "x"},
        {"case_id": "c1", "suite": "b", "completion": "y"},
    ]
    expected = 2
    assert expected == len(load_cassette(cassette_file(tmp_path, rows)))


# --- RecordedEndpoint.call -----------------------------------------------------------------


async def test_a_text_completion_is_an_ok_openai_body(tmp_path: Path) -> None:
    """A completion becomes a 200 openai-chat body that parses to the same text."""
    ep = endpoint(tmp_path, [{"case_id": "c1", "completion": "Paris", "model": "served-x"}])
    ex = await ep.call(case(), "candidate", 0)
    expected = ("ok", 200, "openai-chat", "cand", "rec-m")
    assert expected == (
        ex.transport,
        ex.response.status if ex.response else None,
        ex.adapter,
        ex.endpoint,
        ex.model_alias,
    )
    expected = (("c1", "candidate", 0), "b" * 16)
    assert expected == (ex.key, ex.fixture_sha)
    reply = read(ex.adapter, ex.response, expects_json=False).reply if ex.response else None
    assert isinstance(reply, Reply)
    expected = ("Paris", "served-x", "rec-c1")
    assert expected == (reply.text, reply.facts.response_model, reply.facts.response_id)
    expected = ("ok", None)
    assert expected == (ex.attempts[0].transport, ex.attempts[0].error)


async def test_the_endpoint_model_is_served_when_the_row_names_none(tmp_path: Path) -> None:
    """Without a row model the body reports the endpoint's configured model."""
    ep = endpoint(tmp_path, [{"case_id": "c1", "completion": "x"}])
    ex = await ep.call(case(), "candidate", 0)
    assert ex.response is not None
    expected = "rec-m"
    assert expected == json.loads(ex.response.body)["model"]


async def test_id_fingerprint_and_usage_are_recorded_in_the_body(tmp_path: Path) -> None:
    """id, system_fingerprint and usage from the row reach the body."""
    row = {
        "case_id": "c1",
        "completion": "x",
        "id": "r9",
        "system_fingerprint": "fp9",
        "usage": {"total_tokens": 4},
    }
    ex = await endpoint(tmp_path, [row]).call(case(), "reference", 0)
    assert ex.response is not None
    doc = json.loads(ex.response.body)
    expected = ("r9", "fp9", {"total_tokens": 4})
    assert expected == (
        doc["id"],
        doc["system_fingerprint"],
        doc["usage"],
    )


async def test_a_json_completion_is_sent_as_json_text(tmp_path: Path) -> None:
    """A JSON value as completion is the content as JSON text."""
    ep = endpoint(tmp_path, [{"case_id": "c1", "completion": {"city": "Paris"}}])
    ex = await ep.call(case(), "candidate", 0)
    expected = {"city": "Paris"}
    assert expected == json.loads(content_of(ex))


async def test_a_null_completion_is_a_missing_content_schema_fail(tmp_path: Path) -> None:
    """completion null records a body whose content is null: schema fail missing_content."""
    ep = endpoint(tmp_path, [{"case_id": "c1", "completion": None}])
    ex = await ep.call(case(), "candidate", 0)
    assert content_of(ex) is None
    out = stamp(ex, case(), GraderSet.empty())
    expected = ("ok", "fail", "missing_content", None)
    assert expected == (
        out.transport,
        out.schema,
        out.detail,
        out.task_score,
    )


@pytest.mark.parametrize("fault", ["timeout", "connect_error", "connection_lost", "cancelled"])
async def test_a_fault_row_is_that_transport_stamp_with_no_response(
    tmp_path: Path, fault: str
) -> None:
    """A fault is the transport stamp itself; there is no response to grade."""
    ex = await endpoint(tmp_path, [{"case_id": "c1", "fault": fault}]).call(case(), "c", 0)
    assert (fault, None) == (ex.transport, ex.response)
    assert (fault, "recorded", f"recorded {fault}") == (
        ex.attempts[0].transport,
        ex.attempts[0].error,
        ex.attempts[0].message,
    )
    out = stamp(ex, case(), GraderSet.empty())
    assert ("skipped", None, f"{fault}: recorded {fault}") == (
        out.schema,
        out.task_score,
        out.detail,
    )


@pytest.mark.parametrize(
    ("status", "transport"), [(503, "http_error"), (429, "rate_limited"), (404, "http_error")]
)
async def test_a_status_row_is_stamped_from_the_status(
    tmp_path: Path, status: int, transport: str
) -> None:
    """A non-2xx status gives http_error (429: rate_limited) and keeps status and body."""
    row = {"case_id": "c1", "status": status, "body": "upstream busy"}
    ex = await endpoint(tmp_path, [row]).call(case(), "candidate", 0)
    assert (transport, status, "upstream busy") == (
        ex.transport,
        ex.response.status if ex.response else None,
        ex.response.body if ex.response else None,
    )


async def test_a_raw_body_row_is_a_200_with_that_body(tmp_path: Path) -> None:
    """body without status is a 200 whose raw body fails the schema stamp."""
    row = {"case_id": "c1", "body": "<html>not json</html>"}
    ex = await endpoint(tmp_path, [row]).call(case(), "candidate", 0)
    expected = ("ok", "<html>not json</html>")
    assert expected == (
        ex.transport,
        ex.response.body if ex.response else None,
    )
    out = stamp(ex, case(), GraderSet.empty())
    expected = ("fail", "not_json")
    assert expected == (out.schema, out.detail)


async def test_a_suite_row_wins_over_a_plain_row_in_that_suite_only(tmp_path: Path) -> None:
    """A row narrowed to suite s answers in s; other suites get the plain row."""
    rows = [
        {"case_id": "c1", "completion": "plain"},
        {"case_id": "c1", "suite": "s", "completion": "suite-s"},
    ]
    in_s = await endpoint(tmp_path, rows, suite="s").call(case(), "candidate", 0)
    in_t = await endpoint(tmp_path, rows, suite="t").call(case(), "candidate", 0)
    expected = ("suite-s", "plain")
    assert expected == (content_of(in_s), content_of(in_t))


async def test_a_sample_row_wins_over_the_row_for_every_sample(tmp_path: Path) -> None:
    """sample narrows a row to one sample; others fall back to the sample-less row."""
    rows = [
        {"case_id": "c1", "completion": "any"},
        {"case_id": "c1", "sample": 1, "completion": "second"},
    ]
    ep = endpoint(tmp_path, rows)
    first, second = await ep.call(case(), "candidate", 0), await ep.call(case(), "candidate", 1)
    expected = ("any", "second")
    assert expected == (content_of(first), content_of(second))


async def test_suite_narrowing_wins_over_sample_narrowing(tmp_path: Path) -> None:
    """Lookup order: suite+sample, suite, sample, plain."""
    rows = [
        {"case_id": "c1", "sample": 0, "completion": "sample-only"},
        {"case_id": "c1", "suite": "s", "completion": "suite-only"},
        {"case_id": "c1", "suite": "s", "sample": 0, "completion": "both"},
    ]
    ep = endpoint(tmp_path, rows)
    exact, suite_only = await ep.call(case(), "c", 0), await ep.call(case(), "c", 1)
    expected = ("both", "suite-only")
    assert expected == (content_of(exact), content_of(suite_only))


async def test_a_case_completion_is_the_fallback_reply(tmp_path: Path) -> None:
    """With no cassette row a seed-000 case's recorded completion is the reply."""
    ep = endpoint(tmp_path, [{"case_id": "other", "completion": "x"}])
    ex = await ep.call(case(completion="Paris it is"), "reference", 0)
    expected = ("ok", "Paris it is")
    assert expected == (ex.transport, content_of(ex))


async def test_a_cassette_row_wins_over_the_case_completion(tmp_path: Path) -> None:
    """A recorded row for the case replaces its fixture completion."""
    ep = endpoint(tmp_path, [{"case_id": "c1", "completion": "from cassette"}])
    ex = await ep.call(case(completion="from fixture"), "reference", 0)
    expected = "from cassette"
    assert expected == content_of(ex)


async def test_a_case_with_no_recording_is_an_http_404(tmp_path: Path) -> None:
    """No row and no completion: http_error 404 naming the case, never graded."""
    ep = endpoint(tmp_path, [{"case_id": "other", "completion": "x"}])
    ex = await ep.call(case("c1"), "candidate", 0)
    expected = ("http_error", 404)
    assert expected == (ex.transport, ex.response.status if ex.response else None)
    expected = "no recording for case 'c1'"
    assert expected == ex.attempts[0].message
    out = stamp(ex, case("c1"), GraderSet.empty())
    expected = ("skipped", None, ())
    assert expected == (out.schema, out.task_score, out.misses)


def test_a_side_row_answers_only_that_side(tmp_path: Path) -> None:
    """One cassette can hold both sides: a `side` row beats a row without one, for that side."""
    rows = [
        {"case_id": "c1", "completion": "shared"},
        {"case_id": "c1", "side": "candidate", "completion": "candidate only"},
    ]
    endpoint = RecordedEndpoint(
        "rec", suite="s", model="m", cassette=load_cassette(cassette_file(tmp_path, rows))
    )
    ref = anyio.run(endpoint.call, case("c1"), "reference", 0)
    cand = anyio.run(endpoint.call, case("c1"), "candidate", 0)
    assert (content_of(ref), content_of(cand)) == ("shared", "candidate only")


# --- tool calls, finish reasons and streams -------------------------------------------------

PROTOCOLS = ("openai-chat", "anthropic-messages")
WEATHER = {"name": "get_weather", "arguments": {"city": "Oslo", "unit": "celsius"}}


def proto_endpoint(tmp_path: Path, rows: list[dict[str, Any]], protocol: str) -> RecordedEndpoint:
    cassette = load_cassette(cassette_file(tmp_path, rows))
    return RecordedEndpoint("cand", suite="s", model="rec-m", cassette=cassette, protocol=protocol)


async def played(tmp_path: Path, row: dict[str, Any], protocol: str = "openai-chat") -> Exchange:
    return await proto_endpoint(tmp_path, [{"case_id": "c1", **row}], protocol).call(
        case(), "candidate", 0
    )


def folded(exchange: Exchange) -> Message | StreamFold | str:
    """The body read by the protocol's own fold, as a live reply of that framing is read."""
    assert exchange.response is not None
    module = openai_chat if exchange.adapter == "openai-chat" else anthropic_messages
    if exchange.response.headers["content-type"] == "text/event-stream":
        return module.fold_stream(exchange.response.body)
    return module.fold_body(exchange.response.body)


def message_of(exchange: Exchange) -> Message:
    fold = folded(exchange)
    if isinstance(fold, StreamFold):
        assert fold.status == StreamStatus.FINISHED, fold.detail
        return fold.message
    assert isinstance(fold, Message), fold
    return fold


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_recorded_tool_calls_are_the_calls_the_protocol_reads(
    tmp_path: Path, protocol: str
) -> None:
    """tool_calls become the protocol's own calls (OpenAI tool_calls, Anthropic tool_use blocks)
    with ids given or numbered, arguments as recorded, and the protocol's tool finish reason."""
    second = {"name": "get_time", "arguments": {}, "id": "toolu_9"}
    ex = await played(tmp_path, {"tool_calls": [WEATHER, second]}, protocol)
    message = message_of(ex)
    result = graded(message, expects_json=False)
    assert isinstance(result, Reply)
    expected_calls = (
        ToolCall(id="call_1", name="get_weather", arguments={"city": "Oslo", "unit": "celsius"}),
        ToolCall(id="toolu_9", name="get_time", arguments={}),
    )
    finish = "tool_calls" if protocol == "openai-chat" else "tool_use"
    assert (expected_calls, None, finish, "ok") == (
        result.tool_calls,
        message.content,
        result.finish_reason,
        ex.transport,
    )


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_string_of_arguments_records_malformed_ones(tmp_path: Path, protocol: str) -> None:
    """arguments given as a string are sent as written: a cut JSON is tool_args_not_json."""
    call = {"name": "get_weather", "arguments": '{"city": "Os'}
    ex = await played(tmp_path, {"tool_calls": [call]}, protocol)
    expected = "tool_args_not_json"
    assert expected == graded(message_of(ex), expects_json=False)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_recorded_finish_reason_is_the_reply_s(tmp_path: Path, protocol: str) -> None:
    """finish_reason replaces the protocol's default (stop / end_turn), streamed or not."""
    whole = await played(tmp_path, {"completion": "cut sh", "finish_reason": "length"}, protocol)
    sse = await played(
        tmp_path, {"completion": "cut sh", "finish_reason": "length", "stream": True}, protocol
    )
    plain = await played(tmp_path, {"completion": "done"}, protocol)
    default = "stop" if protocol == "openai-chat" else "end_turn"
    expected = ("length", "length", default)
    assert expected == tuple(message_of(x).finish_reason for x in (whole, sse, plain))


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(
    "reply",
    [
        {
            "completion": "It is 4 degrees in Oslo.",
            "usage": {"input_tokens": 9, "output_tokens": 7},
        },
        {"completion": "Checking.", "tool_calls": [WEATHER], "id": "r-7", "model": "served-9"},
        {"tool_calls": [WEATHER, {"name": "get_time", "arguments": {"tz": "CET"}}]},
        {"completion": {"city": "Oslo"}, "system_fingerprint": "fp-1"},
        {"completion": ""},
    ],
    ids=["text+usage", "text+call", "two-calls", "json", "empty"],
)
async def test_a_streamed_recording_folds_to_the_reply_sent_whole(
    tmp_path: Path, protocol: str, reply: dict[str, Any]
) -> None:
    """stream true writes the protocol's SSE body (text/event-stream), which folds, finished,
    into the reply the same row sent whole is: the same graded form and the same facts."""
    whole = await played(tmp_path, reply, protocol)
    sse = await played(tmp_path, {**reply, "stream": True}, protocol)
    assert sse.response is not None
    expected_end = "data: [DONE]\n\n" if protocol == "openai-chat" else 'message_stop"}\n\n'
    assert sse.response.body.endswith(expected_end)
    if protocol == "anthropic-messages":  # Anthropic has no fingerprint to stream or send
        assert message_of(whole).system_fingerprint is None
    whole_message, sse_message = message_of(whole), message_of(sse)
    expects_json = isinstance(reply.get("completion"), dict)
    assert graded(whole_message, expects_json=expects_json) == graded(
        sse_message, expects_json=expects_json
    )
    facts = ("response_model", "response_id", "system_fingerprint", "usage", "content")
    for name in facts:
        assert getattr(whole_message, name) == getattr(sse_message, name), name
    expected = ("ok", "text/event-stream")
    assert expected == (sse.transport, sse.response.headers["content-type"])


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_truncated_stream_is_a_lost_connection_with_its_bytes_kept(
    tmp_path: Path, protocol: str
) -> None:
    """fault stream_truncated ends the stream cleanly before its finish event: the stamp a live
    client gives it, connection_lost with the attempt error stream_truncated, body kept."""
    ex = await played(
        tmp_path, {"completion": "Oslo is cold", "fault": "stream_truncated"}, protocol
    )
    fold = folded(ex)
    assert isinstance(fold, StreamFold)
    assert ex.response is not None
    expected = ("connection_lost", "stream_truncated", 200, StreamStatus.TRUNCATED, "Oslo is cold")
    assert expected == (
        ex.transport,
        ex.attempts[0].error,
        ex.response.status,
        fold.status,
        fold.message.content,
    )
    assert sse.parse(ex.response.body).complete
    out = stamp(ex, case(), GraderSet.empty())
    expected_out = ("skipped", None)
    assert expected_out == (out.schema, out.task_score)
    assert "stream_truncated" in out.detail


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_malformed_stream_breaks_one_event_and_still_finishes(
    tmp_path: Path, protocol: str
) -> None:
    """fault stream_malformed cuts one event's JSON in half, then finishes as usual: transport
    ok, and the fold says malformed (schema fail stream_malformed)."""
    row = {"tool_calls": [WEATHER], "fault": "stream_malformed"}
    ex = await played(tmp_path, row, protocol)
    fold = folded(ex)
    assert isinstance(fold, StreamFold)
    assert ex.response is not None
    expected = ("ok", StreamStatus.MALFORMED, "stream_malformed")
    assert expected == (ex.transport, fold.status, fold.detail)
    intact = await played(tmp_path, {"tool_calls": [WEATHER], "stream": True}, protocol)
    assert intact.response is not None
    broken = sse.parse(ex.response.body).events
    whole = sse.parse(intact.response.body).events
    assert len(broken) == len(whole)
    assert [i for i, (a, b) in enumerate(zip(broken, whole, strict=True)) if a != b] == [1]


@pytest.mark.parametrize(
    ("protocol", "detail"),
    [
        ("openai-chat", "stream_error:server_error"),
        ("anthropic-messages", "stream_error:overloaded_error"),
    ],
)
async def test_a_stream_error_event_is_an_http_error_as_live(
    tmp_path: Path, protocol: str, detail: str
) -> None:
    """fault stream_error sends the provider's in-band error event after the stream's start:
    http_error with the attempt error naming the error type, as a live stream is stamped."""
    ex = await played(tmp_path, {"completion": "x", "fault": "stream_error"}, protocol)
    expected = ("http_error", detail, 200)
    assert expected == (
        ex.transport,
        ex.attempts[0].error,
        ex.response.status if ex.response else None,
    )


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_disconnect_cuts_a_stream_mid_event(tmp_path: Path, protocol: str) -> None:
    """fault disconnect with stream true: connection_lost, the body kept (marked truncated) up to
    the middle of an event, every event before it as sent."""
    row = {"completion": "one two three four five six", "stream": True}
    ex = await played(tmp_path, {**row, "fault": "disconnect"}, protocol)
    intact = await played(tmp_path, row, protocol)
    assert ex.response is not None and intact.response is not None
    cut = sse.parse(ex.response.body)
    expected = ("connection_lost", "recorded disconnect", True, False)
    assert expected == (
        ex.transport,
        ex.attempts[0].message,
        ex.response.truncated,
        cut.complete,
    )
    assert intact.response.body.startswith(ex.response.body)
    assert 0 < len(cut.events) < len(sse.parse(intact.response.body).events)
    out = stamp(ex, case(), GraderSet.empty())
    expected = ("skipped", None)
    assert expected == (out.schema, out.task_score)


async def test_a_disconnect_cuts_a_whole_body_in_half(tmp_path: Path) -> None:
    """fault disconnect without a stream: the JSON body stops half way, connection_lost."""
    ex = await played(tmp_path, {"completion": "Paris", "fault": "disconnect"})
    intact = await played(tmp_path, {"completion": "Paris"})
    assert ex.response is not None and intact.response is not None
    expected = ("connection_lost", intact.response.body[: len(intact.response.body) // 2])
    assert expected == (ex.transport, ex.response.body)


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ({"tool_calls": {"name": "f"}}, "tool_calls must be a list of {name, arguments, id?}"),
        ({"tool_calls": ["f"]}, "tool_calls[0] must be an object with name and arguments"),
        (
            {"tool_calls": [{"name": "f", "arguments": {}, "args": 1}]},
            "tool_calls[0]: unknown key 'args'",
        ),
        ({"tool_calls": [{"arguments": {}}]}, "tool_calls[0].name must be a non-empty string"),
        ({"tool_calls": [{"name": "", "arguments": {}}]}, "tool_calls[0].name must be"),
        (
            {"tool_calls": [WEATHER, {"name": "f"}]},
            "tool_calls[1].arguments must be an object, or a string",
        ),
        ({"tool_calls": [{"name": "f", "arguments": [1]}]}, "tool_calls[0].arguments must be"),
        (
            {"tool_calls": [{"name": "f", "arguments": {}, "id": 3}]},
            "tool_calls[0].id must be a non-empty string",
        ),
        ({"finish_reason": 1}, "finish_reason must be a non-empty string"),
        ({"finish_reason": None}, "finish_reason must be a non-empty string"),
        ({"stream": "yes"}, "stream must be true or false"),
        ({"body": "{}", "tool_calls": [WEATHER]}, "body is the raw reply as sent: tool_calls"),
        ({"body": "{}", "finish_reason": "stop"}, "body is the raw reply as sent: finish_reason"),
        ({"fault": "stream_truncated", "stream": False}, "fault stream_truncated breaks a stream"),
        (
            {"fault": "stream_malformed", "body": "data: x\n\n"},
            "fault stream_malformed writes its own",
        ),
        ({"fault": "disconnect", "status": 503}, "fault disconnect breaks a 2xx reply"),
        ({"fault": "stream_stall"}, "unknown fault 'stream_stall'"),
    ],
)
def test_a_bad_tool_or_stream_key_names_file_and_line(
    tmp_path: Path, row: dict[str, Any], reason: str
) -> None:
    """The new keys are checked when the cassette is read: `path:line: reason`, exit 65."""
    path = cassette_file(
        tmp_path, [{"case_id": "c0", "completion": "ok"}, {"case_id": "c1", **row}]
    )
    with pytest.raises(DataError) as info:
        load_cassette(path)
    assert str(info.value).startswith(f"{path}:2: {reason}")
    expected = 65
    assert expected == info.value.exit_code


async def test_a_raw_stream_body_is_classified_as_a_live_stream(tmp_path: Path) -> None:
    """body with stream true is an SSE body as written; one with no finish event is stamped as a
    live truncated stream would be."""
    body = 'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'
    ex = await played(tmp_path, {"body": body, "stream": True})
    expected = ("connection_lost", "stream_truncated", "text/event-stream")
    assert expected == (
        ex.transport,
        ex.attempts[0].error,
        ex.response.headers["content-type"] if ex.response else None,
    )


def test_a_recorded_anthropic_endpoint_runs_offline_in_its_protocol(tmp_path: Path) -> None:
    """`protocol = "anthropic-messages"` on a recorded endpoint: a real run's exchanges carry
    Anthropic bodies under that adapter, and they are graded as a live Anthropic reply is."""
    (tmp_path / "cases.jsonl").write_text(
        json.dumps(
            {"id": "c1", "prompt": "Capital of France?", "expect": {"must_include": ["Paris"]}}
        )
        + "\n"
    )
    cassette_file(tmp_path, [{"case_id": "c1", "completion": "Paris.", "model": "claude-rec"}])
    (tmp_path / "parallax.toml").write_text(
        'runs_dir = "runs"\nsnapshots_dir = "snapshots"\n'
        '[endpoints.rec]\nkind = "recorded"\nmodel = "claude-rec"\n'
        'protocol = "anthropic-messages"\ncassette = "cassette.jsonl"\n'
        '[suites.s]\nfixtures = "cases.jsonl"\nreference = "rec"\ncandidate = "rec"\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARALLAX_")}
    proc = subprocess.run(
        [sys.executable, "-m", "runner", "run", "--config", "parallax.toml"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    (run_dir,) = run_dirs(tmp_path / "runs" / "s")
    raw = [json.loads(line) for line in (run_dir / "raw.jsonl").read_text().splitlines()]
    outcomes = [json.loads(line) for line in (run_dir / "outcomes.jsonl").read_text().splitlines()]
    expected = {("anthropic-messages", "message")}
    assert expected == {(r["adapter"], json.loads(r["response"]["body"])["type"]) for r in raw}
    expected_out = {("ok", "ok", 1.0, "claude-rec")}
    assert expected_out == {
        (o["transport"], o["schema"], o["task_score"], o["response_model"]) for o in outcomes
    }


async def test_a_streaming_recorded_endpoint_streams_every_row_unless_one_says_not(
    tmp_path: Path,
) -> None:
    """The endpoint's `stream = true` streams each reply, a fixture completion too; a row with
    `"stream": false` is sent whole."""
    rows = [
        {"case_id": "c1", "completion": "a"},
        {"case_id": "c2", "completion": "b", "stream": False},
    ]
    cassette = load_cassette(cassette_file(tmp_path, rows))
    ep = RecordedEndpoint("cand", suite="s", model="m", cassette=cassette, stream=True)
    kinds = []
    for c in (case("c1"), case("c2"), case("c3", completion="c")):
        ex = await ep.call(c, "candidate", 0)
        assert ex.response is not None
        kinds.append(ex.response.headers["content-type"])
    expected = ["text/event-stream", "application/json", "text/event-stream"]
    assert expected == kinds


async def test_a_case_s_recorded_tool_calls_are_the_fallback_reply_too(tmp_path: Path) -> None:
    """With no cassette row, a case's recorded tool calls (and completion) are the reply."""
    calls = (ToolCall(id=None, name="get_weather", arguments={"city": "Oslo"}),)
    recorded = Case(
        id="c1",
        prompt="p",
        expect={},
        fixture_sha="b" * 16,
        path="s.jsonl",
        line=1,
        completion_calls=calls,
    )
    ex = await endpoint(tmp_path, [{"case_id": "other", "completion": "x"}]).call(
        recorded, "reference", 0
    )
    result = graded(message_of(ex), expects_json=False)
    assert isinstance(result, Reply)
    expected = ((ToolCall(id="call_1", name="get_weather", arguments={"city": "Oslo"}),), "")
    assert expected == (result.tool_calls, result.text)


ENDED = "the stream ended without its finish event"


def tool_case(expect: dict[str, Any]) -> Case:
    tools = ({"type": "function", "function": {"name": "get_weather", "parameters": {}}},)
    return Case(
        id="c1",
        prompt="p",
        expect=expect,
        fixture_sha="b" * 16,
        path="s.jsonl",
        line=1,
        tools=tools,
    )


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ({"tool_calls": [WEATHER]}, ("ok", "ok", "ok", ("get_weather",), "tool", 1.0)),
        (
            {"tool_calls": [{**WEATHER, "name": "get_wether"}]},
            (
                "ok",
                "ok",
                "tool_missing:get_weather,tool_unknown:get_wether",
                ("get_wether",),
                "tool",
                0.5,
            ),
        ),
        (
            {"tool_calls": [{"name": "get_weather", "arguments": '{"city": '}]},
            ("ok", "fail", "tool_args_not_json", ("get_weather",), "tool", None),
        ),
        (
            {"tool_calls": [WEATHER], "stream": True},
            ("ok", "ok", "ok", ("get_weather",), "tool", 1.0),
        ),
        (
            {"tool_calls": [WEATHER], "fault": "stream_malformed"},
            ("ok", "fail", "stream_malformed", (), None, None),
        ),
        (
            {"tool_calls": [WEATHER], "fault": "stream_truncated"},
            (
                "connection_lost",
                "skipped",
                f"connection_lost: HTTP 200: stream_truncated: {ENDED}",
                (),
                None,
                None,
            ),
        ),
        (
            {"completion": "x", "fault": "disconnect", "stream": True},
            (
                "connection_lost",
                "skipped",
                "connection_lost: HTTP 200: recorded disconnect",
                (),
                None,
                None,
            ),
        ),
    ],
    ids=[
        "call",
        "unknown",
        "malformed-args",
        "streamed",
        "malformed-stream",
        "truncated",
        "disconnect",
    ],
)
async def test_a_recorded_reply_is_stamped_and_graded_as_a_live_one(
    tmp_path: Path, protocol: str, row: dict[str, Any], expected: tuple[Any, ...]
) -> None:
    """Through `stamp`, recorded calls, broken arguments and broken streams give the outcome a
    live reply of that protocol gets: stamps, detail, the tools called, the finish reason, the
    score; a stream that carried a token has a time to its first, however it ended."""
    ex = await played(tmp_path, row, protocol)
    out = stamp(ex, tool_case({"tool_calls": [{"name": "get_weather"}]}), GraderSet.empty())
    finish = {"tool": "tool_calls" if protocol == "openai-chat" else "tool_use", None: None}
    transport, schema, detail, calls, finish_kind, score = expected
    assert (transport, schema, detail, calls, finish[finish_kind], score) == (
        out.transport,
        out.schema,
        out.detail,
        out.tool_calls,
        out.finish_reason,
        out.task_score,
    )
    # each fault here breaks a stream after its first token, whose time it keeps, as live
    streamed = row.get("stream", "fault" in row)
    assert (0 if streamed else None) == out.ttft_ms


def test_the_readme_cassette_example_loads(tmp_path: Path) -> None:
    """The cassette reference's example rows are a cassette as written."""
    import re

    formats = Path(__file__).resolve().parent.parent / "docs" / "reference" / "file-formats.md"
    section = formats.read_text(encoding="utf-8").split("## Cassette", 1)[1]
    (block,) = re.findall(r"```json\n(.*?)```", section.split("\n## ", 1)[0], re.DOTALL)
    path = tmp_path / "cassette.jsonl"
    path.write_text(block, encoding="utf-8")
    expected = 7
    assert expected == len(load_cassette(path))
