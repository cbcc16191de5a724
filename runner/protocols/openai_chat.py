"""OpenAI chat completions: the request for a case, and its reply, whole or streamed.

The request is the case's turns as written (`wire.turns`), `tools`, `tool_choice` and
`response_format` as given, the endpoint's `params`, and for a stream `"stream": true` with
`stream_options.include_usage`, so a streamed reply reports its tokens as a whole one does.

Only the first choice is read (parallax asks for one). Streamed, a reply is a run of
`chat.completion.chunk` objects: content pieces are concatenated, tool-call pieces merged by
their `index` (id and name come first, argument text follows in fragments), and usage may come
last in a chunk with no choices (`stream_options.include_usage`). The stream has finished once
the first choice has a `finish_reason` or `data: [DONE]` came; nothing after `[DONE]` is read,
as the OpenAI SDK stops there too. Chunks after a finish reason still count (the usage chunk
follows it), so an error or a broken chunk there still spoils the stream.

Usage is `prompt_tokens` and `completion_tokens`, the cached part of the prompt
`prompt_tokens_details.cached_tokens`. A recorded reply is written as a `chat.completion`, or
streamed as chunks: a role chunk, a content piece per word, each tool call's id and name then
its arguments in two halves, the finish chunk, the usage chunk and `data: [DONE]`; its error
event is a data-only `{"error": ...}`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from runner.model import Case
from runner.protocols import sse
from runner.protocols.message import (
    STREAM_MALFORMED,
    STREAM_TRUNCATED,
    TOOL_ARGS_NOT_JSON,
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
)
from runner.protocols.wire import (
    Kind,
    Tokens,
    Wire,
    bearer,
    cached_in_prompt,
    count,
    json_headers,
    plain,
    turns,
    with_params,
)
from runner.request.shape import Shape

if TYPE_CHECKING:
    from runner.config import EndpointConfig

MISSING_CHOICES = "missing_choices"
NOT_JSON = "not_json"
NOT_OBJECT = "not_object"
DONE = "[DONE]"


def url(cfg: EndpointConfig) -> str:
    return (cfg.base_url or "").rstrip("/") + "/chat/completions"


def headers(cfg: EndpointConfig, api_key: str | None) -> dict[str, str]:
    return {**json_headers(cfg), **bearer(api_key)}


def body(cfg: EndpointConfig, shape: Shape, case: Case) -> dict[str, Any]:
    """The JSON body for one call; temperature 0 by default so nights stay comparable."""
    sent: dict[str, Any] = {
        "model": cfg.model,
        "messages": turns(shape, case),
        "temperature": cfg.temperature,
        "max_tokens": cfg.max_tokens,
    }
    if case.tools:  # JSON as the row held it, shared: a deep copy was half a body's CPU
        sent["tools"] = list(case.tools)
    if case.tool_choice is not None:
        sent["tool_choice"] = plain(case.tool_choice)
    if case.response_format is not None:
        sent["response_format"] = plain(case.response_format)
    with_params(sent, shape.params)
    if shape.stream:
        sent["stream"] = True
        sent["stream_options"] = {"include_usage": True}
    return sent


def fold_body(text: str, answer_pointer: str | None = None) -> Message | str:
    """A non-streamed reply body as a Message, or the schema-fail detail saying why not.

    The answer is the first choice's content: `answer_pointer` is http-json's, unused here.
    """
    ok, doc = load_json(text)
    if not ok:
        return NOT_JSON
    if not isinstance(doc, dict):
        return NOT_OBJECT
    choices = doc.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return MISSING_CHOICES
    message = choices[0].get("message")
    if not isinstance(message, dict):
        message = {}
    calls = _body_tool_calls(message.get("tool_calls"))
    if isinstance(calls, str):
        return calls
    usage = doc.get("usage")
    return Message(
        content=str_or_none(message.get("content")),
        tool_calls=calls,
        finish_reason=str_or_none(choices[0].get("finish_reason")),
        response_model=str_or_none(doc.get("model")),
        response_id=str_or_none(doc.get("id")),
        system_fingerprint=str_or_none(doc.get("system_fingerprint")),
        usage=usage if isinstance(usage, dict) else None,
    )


def _body_tool_calls(value: Any) -> tuple[RawToolCall, ...] | str:
    if value is None:
        return ()
    if not isinstance(value, list):
        return TOOL_CALL_MALFORMED
    calls = []
    for item in value:
        function = item.get("function") if isinstance(item, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            return TOOL_CALL_MALFORMED
        arguments = function.get("arguments")
        if not isinstance(arguments, str | dict):
            return TOOL_ARGS_NOT_JSON
        calls.append(
            RawToolCall(id=str_or_none(item.get("id")), name=function["name"], arguments=arguments)
        )
    return tuple(calls)


class _Call:
    """One tool call being assembled from its pieces."""

    __slots__ = ("arguments", "id", "name_length", "names")

    def __init__(self) -> None:
        self.id: str | None = None
        self.names: list[str] = []  # pieces, joined once at the end: appending is linear
        self.name_length = 0
        self.arguments: list[str] = []

    @property
    def name(self) -> str:
        return "".join(self.names)

    def add(self, piece: Mapping[str, Any]) -> bool:
        """Merge one piece; False when it is not the shape a tool-call piece has."""
        call_id = piece.get("id")
        function = piece.get("function")
        if function is None:
            function = {}
        if not isinstance(function, dict) or not isinstance(call_id, str | None):
            return False
        name, arguments = function.get("name"), function.get("arguments")
        if not isinstance(name, str | None) or not isinstance(arguments, str | None):
            return False
        if call_id and self.id is None:
            self.id = call_id  # some servers send the id again with every piece
        if name and not (len(name) == self.name_length and name == self.name):
            self.names.append(name)  # a name sent again whole is not appended to itself
            self.name_length += len(name)
        if arguments:
            self.arguments.append(arguments)
        return True


class _Stream:
    """The state of one stream's fold: what the chunks so far said."""

    def __init__(self) -> None:
        self.content: list[str] | None = None  # None until a chunk carries content text
        self.calls: dict[int, _Call] = {}
        self.finish_reason: str | None = None
        self.model: str | None = None
        self.id: str | None = None
        self.fingerprint: str | None = None
        self.usage: Mapping[str, Any] | None = None

    def message(self) -> Message:
        calls = tuple(
            RawToolCall(id=call.id, name=call.name, arguments="".join(call.arguments))
            for _, call in sorted(self.calls.items())
        )
        return Message(
            content=None if self.content is None else "".join(self.content),
            tool_calls=calls,
            finish_reason=self.finish_reason,
            response_model=self.model,
            response_id=self.id,
            system_fingerprint=self.fingerprint,
            usage=self.usage,
        )

    def chunk(self, doc: Mapping[str, Any]) -> bool:
        """Fold one chunk in; False when it is not a chunk's shape."""
        self.model = self.model or str_or_none(doc.get("model"))
        self.id = self.id or str_or_none(doc.get("id"))
        self.fingerprint = self.fingerprint or str_or_none(doc.get("system_fingerprint"))
        usage = doc.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        choices = doc.get("choices")
        if choices is None:
            return True
        if not isinstance(choices, list):
            return False
        for choice in choices:
            if not isinstance(choice, dict):
                return False
            index = choice.get("index", 0)
            if not _is_index(index):
                return False
            if index == 0 and not self.choice(choice):
                return False
        return True

    def choice(self, choice: Mapping[str, Any]) -> bool:
        delta = choice.get("delta")
        if delta is None:
            delta = {}
        finish = choice.get("finish_reason")
        if not isinstance(delta, dict) or not isinstance(finish, str | None):
            return False
        if finish is not None:
            self.finish_reason = finish
        content = delta.get("content")
        if isinstance(content, str):
            if self.content is None:
                self.content = []
            self.content.append(content)
        elif content is not None:
            return False
        pieces = delta.get("tool_calls")
        if pieces is None:
            return True
        if not isinstance(pieces, list):
            return False
        for position, piece in enumerate(pieces):
            if not isinstance(piece, dict):
                return False
            index = piece.get("index", position)
            if not _is_index(index):
                return False
            if not self.calls.setdefault(index, _Call()).add(piece):
                return False
        return True


def _is_index(value: Any) -> bool:
    return type(value) is int and value >= 0


def fold_stream(text: str) -> StreamFold:
    """A streamed reply body folded into a Message, and how the stream ended."""
    state = _Stream()
    finished = False
    for event in sse.parse(text).events:
        if event.data.strip() == DONE:
            finished = True
            break
        ok, doc = load_json(event.data)
        if event.event == "error" or (isinstance(doc, dict) and _is_error(doc)):
            return StreamFold(state.message(), StreamStatus.ERROR, _error_detail(doc))
        if not ok or not isinstance(doc, dict) or not state.chunk(doc):
            return StreamFold(state.message(), StreamStatus.MALFORMED, STREAM_MALFORMED)
        finished = finished or state.finish_reason is not None
    if not finished:
        return StreamFold(state.message(), StreamStatus.TRUNCATED, STREAM_TRUNCATED)
    return StreamFold(state.message(), StreamStatus.FINISHED)


def carries_token(data: str) -> bool:
    """Whether one streamed chunk carries a token of the reply: content text or a tool call's
    argument text in its first choice. The role chunk, a tool call's name, the finish and the
    usage chunk carry none, so a stream's `ttft_ms` is dated by the first chunk that does."""
    ok, doc = load_json(data)
    choices = doc.get("choices") if ok and isinstance(doc, dict) else None
    if not isinstance(choices, list):
        return False
    for choice in choices:
        if isinstance(choice, dict) and choice.get("index", 0) == 0:
            delta = choice.get("delta")
            return isinstance(delta, dict) and (_said(delta) or _argued(delta.get("tool_calls")))
    return False


def _said(delta: Mapping[str, Any]) -> bool:
    content = delta.get("content")
    return isinstance(content, str) and content != ""


def _argued(pieces: Any) -> bool:
    """Whether tool-call pieces carry argument text."""
    if not isinstance(pieces, list):
        return False
    for piece in pieces:
        function = piece.get("function") if isinstance(piece, dict) else None
        arguments = function.get("arguments") if isinstance(function, dict) else None
        if isinstance(arguments, str) and arguments:
            return True
    return False


def _is_error(doc: Mapping[str, Any]) -> bool:
    """OpenAI puts `error` in the chunk; some compatible servers send `object: "error"`."""
    return doc.get("error") is not None or doc.get("object") == "error"


def _error_detail(doc: Any) -> str:
    if not isinstance(doc, dict):
        return error_detail(None)
    error = doc.get("error")
    source = error if isinstance(error, dict) else doc
    kind = source.get("type")
    return error_detail(kind if isinstance(kind, str) else source.get("code"))


def tokens(usage: Mapping[str, Any]) -> Tokens | None:
    """`prompt_tokens` (its cached part in `prompt_tokens_details`) and `completion_tokens`."""
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
    prompt, completion = count(usage.get("prompt_tokens")), count(usage.get("completion_tokens"))
    return cached_in_prompt(prompt, completion, cached)


def _ended(reply: RecordedReply) -> str:
    return reply.finish("tool_calls" if reply.tool_calls else "stop")


def recorded_body(reply: RecordedReply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.argument_text},
            }
            for call in reply.tool_calls
        ]
    doc: dict[str, Any] = {
        "id": reply.id,
        "object": "chat.completion",
        "model": reply.model,
        "choices": [{"index": 0, "message": message, "finish_reason": _ended(reply)}],
    }
    if reply.system_fingerprint:
        doc["system_fingerprint"] = reply.system_fingerprint
    if reply.usage:
        doc["usage"] = dict(reply.usage)
    return doc


def recorded_events(reply: RecordedReply) -> tuple[list[Event], int]:
    """The chunks of the reply, and the index of the finish chunk (where truncation cuts)."""
    head: dict[str, Any] = {"id": reply.id, "object": "chat.completion.chunk", "model": reply.model}
    if reply.system_fingerprint:
        head["system_fingerprint"] = reply.system_fingerprint

    def chunk(delta: Mapping[str, Any], finish: str | None = None) -> Event:
        choice = {"index": 0, "delta": dict(delta), "finish_reason": finish}
        return Event(dumps({**head, "choices": [choice]}))

    events = [chunk({"role": "assistant"})]
    if reply.content is not None:
        events += [chunk({"content": p}) for p in PIECE.findall(reply.content) or [""]]
    for index, call in enumerate(reply.tool_calls):
        function = {"name": call.name, "arguments": ""}
        first = {"index": index, "id": call.id, "type": "function", "function": function}
        events.append(chunk({"tool_calls": [first]}))
        for piece in halves(call.argument_text):
            events.append(
                chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            )
    finish_at = len(events)
    events.append(chunk({}, _ended(reply)))
    if reply.usage:
        events.append(Event(dumps({**head, "choices": [], "usage": dict(reply.usage)})))
    events.append(Event(DONE))
    return events, finish_at


WIRE = Wire(
    kind=Kind.OPENAI_CHAT,
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
        Event(dumps({"error": {"type": "server_error", "message": ERROR_MESSAGE}})),
    ),
)
