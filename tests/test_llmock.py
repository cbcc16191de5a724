"""llmock as our fixture sees it: the harness works, and the behaviour our tests rely on holds.

These test a third-party server (tests/llmockkit.py), not parallax: an llmock upgrade that
changes what it sends fails here first, before the protocol tests built on it go wrong.
"""

from __future__ import annotations

import json
from importlib.metadata import version
from typing import Any

import jsonschema
import pytest
from llmockcases import (
    CASES,
    DATA,
    KEPT_HEADERS,
    MODELS,
    STALL_SECONDS,
    WEATHER,
    Case,
    load_index,
    normalized,
    run,
)
from llmockkit import (
    UNKNOWN_TOOL_NAME,
    Exchange,
    LlmockPool,
    LlmockServer,
    Match,
    Protocol,
    StreamFault,
    ToolFault,
    break_tool_call,
    delay,
    fail,
    reply,
    require_llmock,
    slow_first_token,
    stream_fault,
)

# llmock cuts a connection by closing it mid chunked body; h11 reports that as a protocol error
CUT = {"RemoteProtocolError", "ReadError"}


def _data(event: bytes) -> bytes:
    """The `data:` payload of one SSE event."""
    lines = [line for line in event.split(b"\n") if line.startswith(b"data: ")]
    assert len(lines) == 1, event
    return lines[0][len(b"data: ") :]


def _finished(protocol: Protocol, events: list[bytes]) -> bool:
    """Whether the stream carries the protocol's finish event."""
    if protocol is Protocol.ANTHROPIC:
        return any(_data(e) == b'{"type":"message_stop"}' for e in events)
    if protocol is Protocol.RESPONSES:
        return any(_data(e).startswith(b'{"type":"response.completed"') for e in events)
    if protocol is Protocol.GEMINI:
        return any(b'"finishReason":' in _data(e) for e in events)
    return any(_data(e) == b"[DONE]" for e in events)


# what a tool reply's body says of its finish, per protocol
CALL_FINISH = {
    Protocol.OPENAI: b'"tool_calls"',
    Protocol.ANTHROPIC: b'"stop_reason":"tool_use"',
    Protocol.RESPONSES: b'"status":"completed"',
    Protocol.GEMINI: b'"finishReason":"STOP"',
}
FINISH_MARKS = (b'"finish_reason":"', b'"stop_reason":"', b"response.completed", b"finishReason")


def _probe(protocol: Protocol, *, stream: bool, tools: bool = False) -> Case:
    return Case("probe", protocol, stream=stream, tools=tools)


def _request(protocol: Protocol, *, stream: bool, tools: bool = False) -> dict[str, Any]:
    return _probe(protocol, stream=stream, tools=tools).request()


def _post(
    server: LlmockServer, protocol: Protocol, *, stream: bool, tools: bool = False
) -> Exchange:
    """One probe request of that protocol, to its own path."""
    probe = _probe(protocol, stream=stream, tools=tools)
    return server.post(probe.path, probe.request(), headers=protocol.headers)


def _tool_calls(protocol: Protocol, exchange: Exchange) -> list[tuple[str, str]]:
    """(name, arguments as sent) of every tool call in a reply, streamed or not."""
    if protocol is Protocol.GEMINI:  # whole or streamed, a call comes whole in its part
        docs = (
            [json.loads(exchange.body)]
            if exchange.headers["content-type"].startswith("application/json")
            else [json.loads(_data(e)) for e in exchange.events()]
        )
        parts = [p for d in docs for p in d["candidates"][0]["content"]["parts"]]
        calls = [p["functionCall"] for p in parts if "functionCall" in p]
        return [(c["name"], json.dumps(c["args"])) for c in calls]
    if exchange.headers["content-type"].startswith("application/json"):
        doc = json.loads(exchange.body)
        if protocol is Protocol.OPENAI:
            calls = doc["choices"][0]["message"]["tool_calls"] or []
            return [(c["function"]["name"], c["function"]["arguments"]) for c in calls]
        if protocol is Protocol.RESPONSES:
            items = [i for i in doc["output"] if i["type"] == "function_call"]
            return [(i["name"], i["arguments"]) for i in items]
        blocks = [b for b in doc["content"] if b["type"] == "tool_use"]
        return [(b["name"], json.dumps(b["input"])) for b in blocks]
    names: dict[int, str] = {}
    args: dict[int, str] = {}
    for event in exchange.events():
        data = json.loads(_data(event)) if _data(event) != b"[DONE]" else {}
        if protocol is Protocol.RESPONSES:
            if (
                data["type"] == "response.output_item.added"
                and data["item"]["type"] == "function_call"
            ):
                names[data["output_index"]] = data["item"]["name"]
                args[data["output_index"]] = ""
            elif data["type"] == "response.function_call_arguments.delta":
                args[data["output_index"]] += data["delta"]
        elif protocol is Protocol.OPENAI:
            for choice in data.get("choices", []):
                for call in choice["delta"].get("tool_calls", []):
                    if "id" in call:
                        names[call["index"]] = call["function"]["name"]
                    args[call["index"]] = (
                        args.get(call["index"], "") + call["function"]["arguments"]
                    )
        elif (
            data.get("type") == "content_block_start"
            and data["content_block"]["type"] == "tool_use"
        ):
            names[data["index"]] = data["content_block"]["name"]
            args[data["index"]] = ""
        elif (
            data.get("type") == "content_block_delta"
            and data["delta"]["type"] == "input_json_delta"
        ):
            args[data["index"]] += data["delta"]["partial_json"]
    return [(names[i], args[i]) for i in sorted(names)]


def test_installed_llmock_is_the_one_the_goldens_were_recorded_from() -> None:
    """The llmock installed here is the version tests/data/llmock/ was recorded from."""
    require_llmock()
    assert version("llmock") == load_index()["llmock"]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.file)
def test_llmock_still_sends_the_recorded_bytes(llmock_pool: LlmockPool, case: Case) -> None:
    """Each recorded case, sent again, gets the same status, headers, end and bytes (ids and
    timestamps aside)."""
    recorded = load_index()["cases"][case.file]
    exchange = run(llmock_pool.get(case.flags), case)
    headers = {k: exchange.headers[k] for k in KEPT_HEADERS if k in exchange.headers}
    assert (exchange.status, headers, exchange.error or "complete") == (
        recorded["status"],
        recorded["headers"],
        recorded["transport"],
    )
    assert recorded["request"] == case.request()
    assert normalized(exchange.body) == normalized((DATA / case.file).read_bytes())


def test_every_recorded_file_belongs_to_a_case() -> None:
    """tests/data/llmock/ holds exactly the cases' files and the index, nothing stale."""
    on_disk = {p.name for p in DATA.iterdir()}
    assert on_disk == {c.file for c in CASES} | {"index.json"}
    assert set(load_index()["cases"]) == {c.file for c in CASES}


@pytest.mark.parametrize("protocol", Protocol)
def test_replies_echo_the_requested_model(llmock: LlmockServer, protocol: Protocol) -> None:
    """The `model` in a reply and in every streamed event is the one the request named;
    Gemini's `modelVersion` is the model in the path, in every streamed response but never
    in a whole one (llmock's reply model leaves it out), which then names no served model."""
    key = b'"modelVersion":"' if protocol is Protocol.GEMINI else b'"model":"'
    named = key + MODELS[protocol].encode() + b'"'
    for stream in (False, True):
        exchange = _post(llmock, protocol, stream=stream)
        whole_gemini = protocol is Protocol.GEMINI and not stream
        assert (exchange.body.count(named) >= 1) is not whole_gemini
        assert key not in exchange.body.replace(named, b"")


@pytest.mark.parametrize("protocol", Protocol)
def test_truncate_ends_the_body_cleanly_without_the_finish_event(
    llmock: LlmockServer, protocol: Protocol
) -> None:
    """`truncate` after 2 events is a clean end of the chunked body after exactly those 2
    events, with no finish reason, `[DONE]` or `message_stop`."""
    llmock.script(stream_fault(StreamFault.TRUNCATE, after_chunks=2))
    exchange = _post(llmock, protocol, stream=True)
    events = exchange.events()
    assert (exchange.status, exchange.error, len(events)) == (200, None, 2)
    assert exchange.body.endswith(b"\n\n")
    assert not _finished(protocol, events)
    assert not any(mark in exchange.body for mark in FINISH_MARKS)


@pytest.mark.parametrize("protocol", Protocol)
def test_disconnect_cuts_the_connection_after_whole_events(
    llmock: LlmockServer, protocol: Protocol
) -> None:
    """`disconnect` after 2 events sends those 2 events whole, then closes the connection
    mid-body, so httpx raises a connection error."""
    clean = _post(llmock, protocol, stream=True)
    llmock.script(stream_fault(StreamFault.DISCONNECT, after_chunks=2))
    cut = _post(llmock, protocol, stream=True)
    assert cut.error_class in CUT, cut.error
    assert normalized(cut.body) == normalized(b"".join(e + b"\n\n" for e in clean.events()[:2]))


@pytest.mark.parametrize("protocol", Protocol)
def test_malformed_corrupts_exactly_one_event_and_the_stream_goes_on(
    llmock: LlmockServer, protocol: Protocol
) -> None:
    """`malformed` after 2 events cuts the JSON of event 2 (0-based) in half, keeps its framing,
    and leaves every other event, the finish event included, as in a clean stream."""
    clean = [normalized(e) for e in _post(llmock, protocol, stream=True).events()]
    llmock.script(stream_fault(StreamFault.MALFORMED, after_chunks=2))
    broken = _post(llmock, protocol, stream=True)
    events = [normalized(e) for e in broken.events()]
    assert (broken.error, len(events)) == (None, len(clean))
    differ = [i for i, (a, b) in enumerate(zip(clean, events, strict=True)) if a != b]
    assert differ == [2]
    assert clean[2].startswith(events[2])  # a prefix: the event line and half the data
    with pytest.raises(json.JSONDecodeError):
        json.loads(_data(events[2]))
    assert _finished(protocol, broken.events())


@pytest.mark.parametrize("protocol", Protocol)
def test_stall_pauses_before_an_event_then_sends_the_whole_stream(
    llmock: LlmockServer, protocol: Protocol
) -> None:
    """`stall` after 2 events holds event 2 back for stall_seconds, then sends the rest: the
    bytes are a clean stream's and llmock's journal says where it waited."""
    clean = _post(llmock, protocol, stream=True)
    llmock.reset()
    llmock.script(stream_fault(StreamFault.STALL, after_chunks=2, stall_seconds=STALL_SECONDS))
    stalled = _post(llmock, protocol, stream=True)
    assert (stalled.error, normalized(stalled.body)) == (None, normalized(clean.body))
    # only lower bounds (asyncio may wake a millisecond early): event 2 cannot come sooner
    third = len(b"".join(e + b"\n\n" for e in stalled.events()[:3]))
    seen = 0
    for at, chunk in stalled.reads:
        seen += len(chunk)
        if seen >= third:
            assert at >= 0.9 * STALL_SECONDS
            break
    [record] = llmock.requests()
    assert record["fault"] == "stream:stall@2"
    assert record["stall_waited"] >= 0.9 * STALL_SECONDS


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("protocol", Protocol)
def test_tool_mode_auto_calls_the_best_tool_with_schema_valid_arguments(
    llmock: LlmockServer, protocol: Protocol, stream: bool
) -> None:
    """A request offering tools gets one call to the tool whose name matches the prompt, with
    arguments that validate against that tool's JSON Schema, and a tool-call finish reason."""
    exchange = _post(llmock, protocol, stream=stream, tools=True)
    [(name, arguments)] = _tool_calls(protocol, exchange)
    assert name == WEATHER["name"]
    jsonschema.validate(json.loads(arguments), WEATHER["parameters"])
    assert CALL_FINISH[protocol] in exchange.body


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("protocol", Protocol)
def test_malformed_arguments_are_cut_json_but_anthropic_json_replies_send_empty_input(
    llmock: LlmockServer, protocol: Protocol, stream: bool
) -> None:
    """`malformed_arguments` cuts the call's JSON arguments in half, except where the wire
    carries them as an object (a non-streamed Anthropic reply's `input`, Gemini's `args`,
    streamed or not): there they become `{}`."""
    llmock.script(break_tool_call(ToolFault.MALFORMED_ARGUMENTS))
    exchange = _post(llmock, protocol, stream=stream, tools=True)
    [(name, arguments)] = _tool_calls(protocol, exchange)
    assert name == WEATHER["name"]
    if (protocol is Protocol.ANTHROPIC and not stream) or protocol is Protocol.GEMINI:
        assert arguments == "{}"
    else:
        with pytest.raises(json.JSONDecodeError):
            json.loads(arguments)


@pytest.mark.parametrize("protocol", Protocol)
def test_unknown_tool_renames_the_call(llmock: LlmockServer, protocol: Protocol) -> None:
    """`unknown_tool` keeps the generated arguments and names the call llmock_unknown_tool."""
    llmock.script(break_tool_call(ToolFault.UNKNOWN_TOOL))
    exchange = _post(llmock, protocol, stream=True, tools=True)
    [(name, arguments)] = _tool_calls(protocol, exchange)
    assert name == UNKNOWN_TOOL_NAME
    jsonschema.validate(json.loads(arguments), WEATHER["parameters"])


def test_a_scenario_matches_on_the_model_never_on_the_prompt(llmock: LlmockServer) -> None:
    """A behaviour matched to one model is left queued by another model's request, whatever
    the prompt, and consumed by the first request of its own model."""
    llmock.script(reply("scripted answer", match=Match(model="cand-model")))
    other = llmock.post(Protocol.OPENAI, _request(Protocol.OPENAI, stream=False))
    assert b"scripted answer" not in other.body
    assert len(llmock.pending()) == 1
    body = {**_request(Protocol.OPENAI, stream=False), "model": "cand-model"}
    mine = llmock.post(Protocol.OPENAI, body)
    assert json.loads(mine.body)["choices"][0]["message"]["content"] == "scripted answer"
    assert llmock.pending() == []


def test_an_error_scenario_answers_a_stream_with_json_and_retry_after(llmock: LlmockServer) -> None:
    """A 429 for a streamed request is a JSON error body, not a stream, with Retry-After in
    whole seconds (rounded up) and Retry-After-Ms exact."""
    llmock.script(fail(429, retry_after=0.25))
    exchange = llmock.post(Protocol.OPENAI, _request(Protocol.OPENAI, stream=True))
    assert exchange.status == 429
    assert exchange.headers["content-type"] == "application/json"
    assert (exchange.headers["retry-after"], exchange.headers["retry-after-ms"]) == ("1", "250")
    assert json.loads(exchange.body)["error"]["type"] == "rate_limit_error"


def test_the_http_api_refuses_the_pytest_helpers_fault_name(llmock: LlmockServer) -> None:
    """The HTTP API calls the corrupted-chunk fault `malformed`; the pytest helper's `corrupt`
    is refused with a 400, which the harness raises."""
    with pytest.raises(ValueError, match="400"):
        llmock.script({"type": "stream_fault", "kind": "corrupt", "after_chunks": 2})
    assert llmock.pending() == []


@pytest.mark.parametrize("protocol", Protocol)
def test_delay_and_slow_first_token_hold_the_reply_back_without_changing_it(
    llmock: LlmockServer, protocol: Protocol
) -> None:
    """`delay` holds a whole reply and `slow_first_token` a stream's first event back for the
    seconds asked, and the bytes stay those of a clean reply."""
    for behavior, stream in (
        (delay(STALL_SECONDS), False),
        (slow_first_token(STALL_SECONDS), True),
    ):
        clean = _post(llmock, protocol, stream=stream)
        llmock.script(behavior)
        held = _post(llmock, protocol, stream=stream)
        assert normalized(held.body) == normalized(clean.body)
        assert held.reads[0][0] >= 0.9 * STALL_SECONDS  # a lower bound only


def test_clear_drops_what_is_queued(llmock: LlmockServer) -> None:
    """A cleared scenario leaves nothing queued, so the next request gets a generated reply."""
    llmock.script(fail(503, times=None))
    assert len(llmock.pending()) == 1
    llmock.clear()
    assert llmock.pending() == []
    assert llmock.post(Protocol.OPENAI, _request(Protocol.OPENAI, stream=False)).status == 200
