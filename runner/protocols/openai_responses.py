"""OpenAI's Responses API: the request for a case, and its reply, whole or streamed.

The request maps the case's OpenAI-style turns (`wire.turns`) to `input` items: a leading
system turn is the top-level `instructions`, user and assistant turns are messages (text
parts as `input_text`, or `output_text` for the assistant's own), an assistant turn's
`tool_calls` are `function_call` items after its text, and a `tool` turn is a
`function_call_output` for its `call_id`. Tools are flat (`{"type": "function", "name",
"description", "parameters", "strict"}`; `strict` is false unless the case says true, as
chat completions read a tool without it, where the Responses API would default to true);
`tool_choice` names a function flat as well; a response format is `text.format` (a
json_schema's `name`, `schema` and `strict` beside its type). `max_tokens` is
`max_output_tokens`. Then the endpoint's `params`, and `"stream": true` for a stream.

A reply is a list of `output` items: `message` items' `output_text` parts are joined into
the content, `function_call` items are the tool calls (their `call_id` is the call's id), and
other kinds (reasoning, refusals, built-in tools) are read past. Its finish reason is the
response's `status`, or for an incomplete one the reason it gives (`max_output_tokens`).

Streamed, items are built from events by `output_index`: `response.output_item.added` opens
one, `response.output_text.delta` and `response.function_call_arguments.delta` add to it, and
`response.output_item.done` fills in what no delta sent. `response.completed` finishes the
stream with the response's id, model, status and usage; nothing after it is read. A
`response.failed` or `response.incomplete` event, or an `error` event, is the server's error
(`stream_error:<code>`). Event types this module does not know are read past, as OpenAI's
SDK lets new ones pass.

Usage is `input_tokens` and `output_tokens`, the cached part of the input
`input_tokens_details.cached_tokens` (a usage without those details counts none cached). A
recorded reply is written as a whole response (`incomplete` for the reason a row's finish names),
or streamed as `response.created`, then per item its added event, deltas and done item, then
`response.completed`; its error event is an `error` with code `server_error`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from runner.model import Case
from runner.protocols import sse
from runner.protocols.message import (
    STREAM_MALFORMED,
    STREAM_TRUNCATED,
    TOOL_CALL_MALFORMED,
    Message,
    RawToolCall,
    StreamFold,
    StreamStatus,
    error_detail,
    load_json,
    str_or_none,
)
from runner.protocols.recording import (
    ERROR_MESSAGE,
    PIECE,
    Event,
    RecordedReply,
    Recorder,
    dumps,
    halves,
    named,
)
from runner.protocols.wire import (
    ASSISTANT,
    SYSTEM,
    TOOL,
    Kind,
    Tokens,
    Wire,
    bearer,
    cached_in_prompt,
    count,
    json_headers,
    plain,
    text_of,
    turns,
    with_params,
)
from runner.request.shape import Shape

if TYPE_CHECKING:
    from runner.config import EndpointConfig

NOT_JSON = "not_json"
NOT_OBJECT = "not_object"
MISSING_OUTPUT = "missing_output"
MESSAGE = "message"
FUNCTION_CALL = "function_call"
OUTPUT_TEXT = "output_text"
INCOMPLETE = "incomplete"
# the events that end a stream as the server's error, and where each names its code
FAILED = "response.failed"
INCOMPLETE_EVENT = "response.incomplete"
ERROR = "error"


def url(cfg: EndpointConfig) -> str:
    return (cfg.base_url or "").rstrip("/") + "/responses"


def headers(cfg: EndpointConfig, api_key: str | None) -> dict[str, str]:
    return {**json_headers(cfg), **bearer(api_key)}


def body(cfg: EndpointConfig, shape: Shape, case: Case) -> dict[str, Any]:
    """The JSON body for one call; temperature 0 by default so nights stay comparable."""
    sent: dict[str, Any] = {"model": cfg.model}
    said = turns(shape, case)
    if said and said[0].get("role") == SYSTEM:
        sent["instructions"] = text_of(said.pop(0).get("content"))
    sent["input"] = [item for turn in said for item in _items(turn)]
    sent["temperature"] = cfg.temperature
    sent["max_output_tokens"] = cfg.max_tokens
    if case.tools:
        sent["tools"] = [_tool(tool) for tool in case.tools]
    if case.tool_choice is not None:
        sent["tool_choice"] = _tool_choice(case.tool_choice)
    if case.response_format is not None:
        sent["text"] = {"format": _format(case.response_format)}
    with_params(sent, shape.params)
    if shape.stream:
        sent["stream"] = True
    return sent


def _items(turn: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One turn as input items: a message, then (an assistant's) function calls, or (a tool's)
    the output of the call it answers."""
    role = turn.get("role")
    content = turn.get("content")
    if role == TOOL:
        output = {"type": "function_call_output", "call_id": turn.get("tool_call_id")}
        return [{**output, "output": text_of(content)}]
    items: list[dict[str, Any]] = []
    calls = turn.get("tool_calls") if role == ASSISTANT else None
    if not calls or content:  # an assistant turn that only calls tools says no message
        items.append({"role": role, "content": _content(content, role)})
    for call in calls or ():
        function = call.get("function") if isinstance(call, Mapping) else None
        function = function if isinstance(function, Mapping) else {}
        arguments = function.get("arguments")
        items.append(
            {
                "type": FUNCTION_CALL,
                "call_id": call.get("id") if isinstance(call, Mapping) else None,
                "name": function.get("name"),
                "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
            }
        )
    return items


def _content(content: Any, role: Any) -> Any:
    """A turn's content: text as it is, OpenAI's text parts as the Responses API's (an
    assistant's are `output_text`), the rest as given."""
    if not isinstance(content, list):
        return content
    kind = OUTPUT_TEXT if role == ASSISTANT else "input_text"
    return [
        {"type": kind, "text": part["text"]}
        if isinstance(part, dict)
        and part.get("type") == "text"
        and isinstance(part.get("text"), str)
        else plain(part)
        for part in content
    ]


def _tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI chat function tool, flat: its function's keys beside `"type": "function"`."""
    function = tool.get("function")
    function = function if isinstance(function, Mapping) else {}
    out: dict[str, Any] = {"type": "function", "name": function.get("name")}
    if function.get("description") is not None:
        out["description"] = function["description"]
    parameters = function.get("parameters")
    out["parameters"] = plain(parameters) if parameters is not None else {"type": "object"}
    out["strict"] = function.get("strict") is True
    return out


def _tool_choice(choice: Any) -> Any:
    """auto/none/required as they are; a named function flat, `{"type": "function", "name"}`."""
    if isinstance(choice, Mapping) and choice.get("type") == "function":
        function = choice.get("function")
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            return {"type": "function", "name": function["name"]}
    return plain(choice)


def _format(response_format: Mapping[str, Any]) -> dict[str, Any]:
    """A response format as `text.format`: a json_schema's spec flat beside its type."""
    spec = response_format.get("json_schema")
    if response_format.get("type") == "json_schema" and isinstance(spec, Mapping):
        return {"type": "json_schema", **plain(spec)}
    return dict(plain(response_format))


class _Item:
    """One output item: a message's text pieces, or a function call's name, id and argument
    pieces (`input`: its arguments when no piece came); `kind` "" for one read past."""

    __slots__ = ("call_id", "input", "kind", "name", "pieces")

    def __init__(self, kind: str, *, name: str = "", call_id: str | None = None) -> None:
        self.kind = kind
        self.name = name
        self.call_id = call_id
        self.input: str | dict[str, Any] = ""
        self.pieces: list[str] = []


def _item(doc: Any) -> _Item | str | None:
    """An item of a reply's `output` (or a stream's added or done item), or the schema detail
    of a call without a name; None when it is no object with a type."""
    kind = doc.get("type") if isinstance(doc, dict) else None
    if not isinstance(kind, str):
        return None
    if kind == MESSAGE:
        item = _Item(MESSAGE)
        parts = doc.get("content")
        item.pieces = [
            part["text"]
            for part in (parts if isinstance(parts, list) else ())
            if isinstance(part, dict)
            and part.get("type") == OUTPUT_TEXT
            and isinstance(part.get("text"), str)
        ]
        return item
    if kind == FUNCTION_CALL:
        name, arguments = doc.get("name"), doc.get("arguments")
        if not isinstance(name, str):
            return TOOL_CALL_MALFORMED
        call = _Item(FUNCTION_CALL, name=name, call_id=str_or_none(doc.get("call_id")))
        if isinstance(arguments, str | dict):
            call.input = arguments
        elif arguments is not None:  # judged as text, so the call's name is kept
            call.input = json.dumps(arguments, ensure_ascii=False)
        return call
    return _Item("")


def _message(items: list[_Item], response: Mapping[str, Any]) -> Message:
    """The Message of a reply's items, in their order, and what its response object says."""
    # a message with no output_text part (a refusal) says no text, as chat's null content
    texts = ["".join(item.pieces) for item in items if item.kind == MESSAGE and item.pieces]
    calls = tuple(
        RawToolCall(id=item.call_id, name=item.name, arguments="".join(item.pieces) or item.input)
        for item in items
        if item.kind == FUNCTION_CALL
    )
    usage = response.get("usage")
    return Message(
        content="".join(texts) if texts else None,
        tool_calls=calls,
        finish_reason=_finish(response),
        response_model=str_or_none(response.get("model")),
        response_id=str_or_none(response.get("id")),
        usage=usage if isinstance(usage, dict) else None,
    )


def _finish(response: Mapping[str, Any]) -> str | None:
    """The response's status, or for an incomplete one the reason it gives."""
    status = str_or_none(response.get("status"))
    details = response.get("incomplete_details")
    if (
        status == INCOMPLETE
        and isinstance(details, dict)
        and isinstance(details.get("reason"), str)
    ):
        return str(details["reason"])
    return status


def _output(output: list[Any]) -> list[_Item] | str:
    items = []
    for doc in output:
        item = _item(doc)
        if isinstance(item, str):
            return item
        items.append(item if item is not None else _Item(""))
    return items


def fold_body(text: str, answer_pointer: str | None = None) -> Message | str:
    """A non-streamed reply body as a Message, or the schema-fail detail saying why not.

    The answer is the message items' text: `answer_pointer` is http-json's, unused here.
    """
    ok, doc = load_json(text)
    if not ok:
        return NOT_JSON
    if not isinstance(doc, dict):
        return NOT_OBJECT
    output = doc.get("output")
    if not isinstance(output, list):
        return MISSING_OUTPUT
    items = _output(output)
    return items if isinstance(items, str) else _message(items, doc)


class _Stream:
    """The state of one stream's fold: the response object so far and the items by index."""

    def __init__(self) -> None:
        self.response: dict[str, Any] = {}
        self.items: dict[int, _Item] = {}

    def message(self) -> Message:
        return _message([item for _, item in sorted(self.items.items())], self.response)

    def event(self, kind: str, doc: Mapping[str, Any]) -> bool:
        """Fold one event in; False when it is not that event's shape."""
        if kind in ("response.created", "response.in_progress", "response.completed"):
            return self.respond(doc.get("response"), whole=kind == "response.completed")
        if kind not in _ITEM_EVENTS:
            return True  # content parts, `.done` texts, reasoning and types added later
        index = doc.get("output_index")
        if type(index) is not int or index < 0:
            return False
        if kind == "response.output_item.added":
            return index not in self.items and self.open(index, doc.get("item"))
        item = self.items.get(index)
        if item is None:
            return False
        if kind == "response.output_item.done":
            return self.close(item, doc.get("item"))
        delta = doc.get("delta")
        wanted = MESSAGE if kind == "response.output_text.delta" else FUNCTION_CALL
        if not isinstance(delta, str) or item.kind != wanted:
            return False
        item.pieces.append(delta)
        return True

    def respond(self, response: Any, *, whole: bool) -> bool:
        """A response object's facts; the finished one's status and usage too, and its
        output when the stream sent no items of its own."""
        if not isinstance(response, dict):
            return False
        for key in ("id", "model"):
            self.response.setdefault(key, str_or_none(response.get(key)))
        if not whole:
            return True
        for key in ("status", "incomplete_details", "usage"):
            self.response[key] = response.get(key)
        output = response.get("output")
        if not self.items and isinstance(output, list):
            items = _output(output)
            if isinstance(items, str):
                return False
            self.items = dict(enumerate(items))
        return True

    def open(self, index: int, doc: Any) -> bool:
        item = _item(doc)
        if not isinstance(item, _Item):
            return False
        self.items[index] = item
        return True

    def close(self, item: _Item, doc: Any) -> bool:
        """The done item fills in what no delta sent: text, arguments, a call's id."""
        done = _item(doc)
        if not isinstance(done, _Item) or done.kind != item.kind:
            return False
        if not item.pieces:
            item.pieces, item.input = done.pieces, done.input
        item.call_id = item.call_id or done.call_id
        item.name = item.name or done.name
        return True


_ITEM_EVENTS = frozenset(
    {
        "response.output_item.added",
        "response.output_item.done",
        "response.output_text.delta",
        "response.function_call_arguments.delta",
    }
)


def _error_code(kind: str, doc: Mapping[str, Any]) -> str:
    """`stream_error:<code>`: a failed response's error code, an incomplete one's reason, or
    an error event's code (that of an error object it carries, else that object's type)."""
    response = doc.get("response")
    response = response if isinstance(response, dict) else {}
    if kind == INCOMPLETE_EVENT:
        details = response.get("incomplete_details")
        return error_detail(details.get("reason") if isinstance(details, dict) else None)
    if kind != FAILED and not isinstance(doc.get("error"), dict):
        return error_detail(doc.get("code"))  # the event's own code: its type is "error"
    error = response.get("error") if kind == FAILED else doc["error"]
    error = error if isinstance(error, dict) else {}
    code = error.get("code")
    return error_detail(code if isinstance(code, str) else error.get("type"))


def fold_stream(text: str) -> StreamFold:
    """A streamed reply body folded into a Message, and how the stream ended."""
    state = _Stream()
    for event in sse.parse(text).events:
        ok, doc = load_json(event.data)
        kind = doc.get("type") if isinstance(doc, dict) else None
        if event.event == ERROR or kind in (ERROR, FAILED, INCOMPLETE_EVENT):
            detail = _error_code(str(kind), doc if isinstance(doc, dict) else {})
            if isinstance(doc, dict):
                state.respond(doc.get("response"), whole=False)
            return StreamFold(state.message(), StreamStatus.ERROR, detail)
        if not ok or not isinstance(doc, dict) or not isinstance(kind, str):
            return StreamFold(state.message(), StreamStatus.MALFORMED, STREAM_MALFORMED)
        if not state.event(kind, doc):
            return StreamFold(state.message(), StreamStatus.MALFORMED, STREAM_MALFORMED)
        if kind == "response.completed":
            return StreamFold(state.message(), StreamStatus.FINISHED)
    return StreamFold(state.message(), StreamStatus.TRUNCATED, STREAM_TRUNCATED)


# the deltas that carry the reply's tokens: its text and a tool call's arguments
_TOKEN_EVENTS = frozenset({"response.output_text.delta", "response.function_call_arguments.delta"})


def carries_token(data: str) -> bool:
    """Whether one streamed event carries a token of the reply: a text or function-call
    arguments delta with text in it. `response.created`, an added item (a call's name), the
    `.done` events and `response.completed` carry none, so a stream's `ttft_ms` is dated by
    the first event that does."""
    ok, doc = load_json(data)
    kind = doc.get("type") if ok and isinstance(doc, dict) else None
    if not isinstance(kind, str) or kind not in _TOKEN_EVENTS:
        return False
    delta = doc.get("delta")
    return isinstance(delta, str) and delta != ""


def tokens(usage: Mapping[str, Any]) -> Tokens | None:
    """`input_tokens` (its cached part in `input_tokens_details`) and `output_tokens`."""
    details = usage.get("input_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
    prompt, completion = count(usage.get("input_tokens")), count(usage.get("output_tokens"))
    return cached_in_prompt(prompt, completion, cached)


COMPLETED = "completed"  # the status of a reply that ended by itself


def _recorded_items(reply: RecordedReply) -> list[dict[str, Any]]:
    """The output items: a message when there is content, then the calls."""
    items: list[dict[str, Any]] = []
    if reply.content is not None:
        part = {"type": "output_text", "text": reply.content, "annotations": []}
        items.append(
            {
                "type": "message",
                "id": f"msg_{reply.id}",
                "role": "assistant",
                "status": COMPLETED,
                "content": [part],
            }
        )
    for call in reply.tool_calls:
        items.append(
            {
                "type": "function_call",
                "id": f"fc_{call.id}",
                "call_id": call.id,
                "name": call.name,
                "arguments": call.argument_text,
                "status": COMPLETED,
            }
        )
    return items


def recorded_body(reply: RecordedReply) -> dict[str, Any]:
    """The whole response: completed, or incomplete for the reason a row's finish names."""
    finish = reply.finish(COMPLETED)
    doc: dict[str, Any] = {
        "id": reply.id,
        "object": "response",
        "model": reply.model,
        "status": COMPLETED if finish == COMPLETED else "incomplete",
        "output": _recorded_items(reply),
    }
    if finish != COMPLETED:
        doc["incomplete_details"] = {"reason": finish}
    if reply.usage:
        doc["usage"] = dict(reply.usage)
    return doc


def recorded_events(reply: RecordedReply) -> tuple[list[Event], int]:
    """The named events of the reply, and the index of `response.completed`."""
    whole = recorded_body(reply)
    pending = {"id": reply.id, "object": "response", "model": reply.model, "output": []}
    events = [named("response.created", response={**pending, "status": "in_progress"})]
    for index, item in enumerate(whole["output"]):
        if item["type"] == "message":
            added = {**item, "status": "in_progress", "content": []}
            events.append(named("response.output_item.added", output_index=index, item=added))
            for piece in PIECE.findall(item["content"][0]["text"]):
                events.append(
                    named(
                        "response.output_text.delta",
                        output_index=index,
                        content_index=0,
                        delta=piece,
                    )
                )
        else:
            added = {**item, "status": "in_progress", "arguments": ""}
            events.append(named("response.output_item.added", output_index=index, item=added))
            for piece in halves(item["arguments"]):
                events.append(
                    named("response.function_call_arguments.delta", output_index=index, delta=piece)
                )
        events.append(named("response.output_item.done", output_index=index, item=item))
    finish_at = len(events)
    events.append(named("response.completed", response=whole))
    return events, finish_at


WIRE = Wire(
    kind=Kind.OPENAI_RESPONSES,
    url=url,
    headers=headers,
    body=body,
    fold_body=fold_body,
    tokens=tokens,
    fold_stream=fold_stream,
    carries_token=carries_token,
    recorded=Recorder(
        recorded_body,
        recorded_events,
        Event(dumps({"type": "error", "code": "server_error", "message": ERROR_MESSAGE}), "error"),
    ),
)
