"""Anthropic messages: the request for a case, and its reply, whole or streamed.

The request maps the case's OpenAI-style turns (`wire.turns`) to Anthropic's: system turns go
to the top-level `system` (joined by a blank line when there are several), an assistant turn's
`tool_calls` become `tool_use` blocks after its text, and `tool` turns become `tool_result`
blocks of one user turn (consecutive results together, as the API wants every result of one
assistant turn in the next user turn). Tools are `{name, description, input_schema}`;
`tool_choice` auto/none/required/a named function is `{"type": "auto"|"none"|"any"|"tool"}`;
a `json_schema` response format is `output_format` (Anthropic's structured outputs), while
`json_object` has no Anthropic form and is not sent: the case's JSON keys still grade the
answer. Then the endpoint's `params`, and `"stream": true` for a stream.

A reply is a list of content blocks: `text` blocks are joined into the content and `tool_use`
blocks are the tool calls; other kinds (thinking, server tools) are read past. A reply whose
blocks hold no text has no content (None), unless it has no blocks at all, which is a reply
that said nothing (""), as before tools were read.

Streamed, the blocks are built from events: `message_start` (id, model, input usage),
`content_block_start` / `content_block_delta` (`text_delta` text, `input_json_delta`
partial JSON) / `content_block_stop` per block by `index`, `message_delta` (stop reason,
output usage) and `message_stop`. The stream has finished at `message_stop`, or once a
`message_delta` names its stop reason; nothing after `message_stop` is read. Event types and
delta types this module does not know are skipped: Anthropic's versioning policy says new
ones may be added and clients must let them pass. A streamed tool call's arguments are its
partial JSON concatenated, or the block's `input` when no piece came.

Usage is `input_tokens` and `output_tokens`; the prompt's cache reads
(`cache_read_input_tokens`) and writes (`cache_creation_input_tokens`) are counted in the
prompt as OpenAI counts them, the reads as cached. A recorded reply is written as a `message`,
or streamed as those events, the stop reason and output usage in `message_delta`; its error
event is an `overloaded_error`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from runner.errors import FixtureError
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
    named,
)
from runner.protocols.wire import (
    ASSISTANT,
    SYSTEM,
    TOOL,
    USER,
    Kind,
    Tokens,
    Wire,
    count,
    json_headers,
    past,
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
TEXT = "text"
TOOL_USE = "tool_use"
OTHER = ""  # a block of a kind read past (no wire type is empty)


# OpenAI's tool_choice strings, as Anthropic spells them
_CHOICES = {"auto": "auto", "none": "none", "required": "any"}


def url(cfg: EndpointConfig) -> str:
    return (cfg.base_url or "").rstrip("/") + "/v1/messages"


def headers(cfg: EndpointConfig, api_key: str | None) -> dict[str, str]:
    sent = json_headers(cfg, {"anthropic-version": cfg.anthropic_version})
    if api_key is not None:
        sent["x-api-key"] = api_key
    return sent


def body(cfg: EndpointConfig, shape: Shape, case: Case) -> dict[str, Any]:
    """The JSON body for one call; temperature 0 by default so nights stay comparable."""
    systems: list[str] = []
    messages: list[dict[str, Any]] = []
    results: list[Any] | None = None  # the tool_result blocks of the user turn being built
    for n, turn in enumerate(turns(shape, case)):
        role = turn.get("role")
        if role == TOOL:
            result = {
                "type": "tool_result",
                "tool_use_id": turn.get("tool_call_id"),
                "content": _content(turn.get("content")),
            }
            if results is None:
                results = []
                messages.append({"role": USER, "content": results})
            results.append(result)
            continue
        results = None
        if role == SYSTEM:
            systems.append(text_of(turn.get("content")))
        elif role == ASSISTANT and turn.get("tool_calls"):
            messages.append({"role": ASSISTANT, "content": _uses(turn, case, n)})
        else:
            messages.append({"role": role, "content": _content(turn.get("content"))})
    sent: dict[str, Any] = {
        "model": cfg.model,
        "max_tokens": cfg.max_tokens,
        "temperature": cfg.temperature,
        "messages": messages,
    }
    if systems:
        sent["system"] = "\n\n".join(systems)
    if case.tools:
        sent["tools"] = [_tool(tool) for tool in case.tools]
    if case.tool_choice is not None:
        sent["tool_choice"] = _tool_choice(case.tool_choice)
    output_format = _output_format(case.response_format)
    if output_format is not None:
        sent["output_format"] = output_format
    with_params(sent, shape.params)
    if shape.stream:
        sent["stream"] = True
    return sent


def _content(content: Any) -> Any:
    """A turn's content: text as it is, OpenAI's text parts as text blocks, the rest as given."""
    if not isinstance(content, list):
        return content
    return [
        {"type": TEXT, "text": part["text"]}
        if isinstance(part, dict) and part.get("type") == TEXT and isinstance(part.get("text"), str)
        else part
        for part in content
    ]


def _uses(turn: Mapping[str, Any], case: Case, n: int) -> list[Any]:
    """An assistant turn that called tools: its text (if any) then one tool_use per call, its
    arguments an object (OpenAI writes them as JSON text)."""
    blocks: list[Any] = []
    content = turn.get("content")
    if isinstance(content, list):
        blocks.extend(_content(content))
    elif isinstance(content, str) and content:
        blocks.append({"type": TEXT, "text": content})
    for m, call in enumerate(turn.get("tool_calls") or ()):
        function = call.get("function") if isinstance(call, dict) else None
        function = function if isinstance(function, dict) else {}
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            ok, arguments = load_json(arguments)
            if not ok or not isinstance(arguments, dict):
                where = f"messages[{n}].tool_calls[{m}].function.arguments"
                raise FixtureError(
                    case.path,
                    f"case {case.id!r}: {where} is not a JSON object, which Anthropic's "
                    "tool_use input must be",
                    line=case.line,
                )
        blocks.append(
            {
                "type": TOOL_USE,
                "id": call.get("id") if isinstance(call, dict) else None,
                "name": function.get("name"),
                "input": arguments if arguments is not None else {},
            }
        )
    return blocks


def _tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI function tool as Anthropic's: its parameters are the input schema."""
    function = tool.get("function")
    function = function if isinstance(function, Mapping) else {}
    parameters = function.get("parameters")
    out: dict[str, Any] = {"name": function.get("name")}
    if function.get("description") is not None:
        out["description"] = function["description"]
    out["input_schema"] = plain(parameters) if parameters is not None else {"type": "object"}
    return out


def _tool_choice(choice: Any) -> Any:
    """OpenAI's tool_choice in Anthropic's words; a form it has none for is sent as given."""
    if isinstance(choice, str) and choice in _CHOICES:
        return {"type": _CHOICES[choice]}
    if isinstance(choice, Mapping) and choice.get("type") == "function":
        function = choice.get("function")
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            return {"type": "tool", "name": function["name"]}
    return plain(choice)


def _output_format(response_format: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A json_schema response format as Anthropic's output_format; nothing for the others
    (json_object and text have no Anthropic form)."""
    if response_format is None or response_format.get("type") != "json_schema":
        return None
    spec = response_format.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, Mapping) else None
    return {"type": "json_schema", "schema": plain(schema) if schema is not None else {}}


class _Block:
    """One content block: text pieces, or a tool call's id, name and argument pieces."""

    __slots__ = ("id", "input", "kind", "name", "pieces")

    def __init__(self, kind: str, *, name: str = "", call_id: str | None = None) -> None:
        self.kind = kind
        self.name = name
        self.id = call_id
        self.input: str | dict[str, Any] = {}  # a tool call's arguments when no piece comes
        self.pieces: list[str] = []


def _message(blocks: list[_Block] | None, facts: Mapping[str, Any]) -> Message:
    """The Message of a reply's blocks (None: the reply had no list of them), in their
    order, and its other fields."""
    read = blocks or []
    texts = ["".join(b.pieces) for b in read if b.kind == TEXT]
    calls = tuple(
        RawToolCall(id=b.id, name=b.name, arguments="".join(b.pieces) or b.input)
        for b in read
        if b.kind == TOOL_USE
    )
    usage = facts.get("usage")
    return Message(
        content="".join(texts) if texts or blocks == [] else None,  # [] said nothing: ""
        tool_calls=calls,
        finish_reason=str_or_none(facts.get("stop_reason")),
        response_model=str_or_none(facts.get("model")),
        response_id=str_or_none(facts.get("id")),
        usage=usage if isinstance(usage, dict) else None,
    )


def fold_body(text: str, answer_pointer: str | None = None) -> Message | str:
    """A non-streamed reply body as a Message, or the schema-fail detail saying why not.

    The answer is the text blocks: `answer_pointer` is http-json's, unused here.
    """
    ok, doc = load_json(text)
    if not ok:
        return NOT_JSON
    if not isinstance(doc, dict):
        return NOT_OBJECT
    content = doc.get("content")
    if not isinstance(content, list):
        return _message(None, doc)  # no blocks to read: missing_content, when graded
    blocks = []
    for item in content:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == TEXT and isinstance(item.get("text"), str):
            block = _Block(TEXT)
            block.pieces.append(item["text"])
        elif kind == TOOL_USE:
            if not isinstance(item.get("name"), str):
                return TOOL_CALL_MALFORMED
            arguments = item.get("input")
            if not isinstance(arguments, str | dict):
                return TOOL_ARGS_NOT_JSON
            block = _Block(TOOL_USE, name=item["name"], call_id=str_or_none(item.get("id")))
            block.input = arguments
        else:
            block = _Block(OTHER)  # read past, but still a block
        blocks.append(block)
    return _message(blocks, doc)


class _Stream:
    """The state of one stream's fold: the message facts and the blocks by index."""

    def __init__(self) -> None:
        self.facts: dict[str, Any] = {}
        self.blocks: dict[int, _Block] = {}

    def message(self) -> Message:
        return _message([b for _, b in sorted(self.blocks.items())], self.facts)

    def event(self, kind: Any, doc: Mapping[str, Any]) -> bool:
        """Fold one event in; False when it is not that event's shape."""
        if kind == "message_start":
            return self.start(doc.get("message"))
        if kind == "message_delta":
            return self.delta(doc.get("delta"), doc.get("usage"))
        if kind not in ("content_block_start", "content_block_delta", "content_block_stop"):
            return isinstance(kind, str)  # ping, and types added after this was written
        index = doc.get("index")
        if type(index) is not int:
            return False
        if kind == "content_block_start":
            return index not in self.blocks and self.open(index, doc.get("content_block"))
        block = self.blocks.get(index)
        if block is None:
            return False
        return kind == "content_block_stop" or self.piece(block, doc.get("delta"))

    def start(self, message: Any) -> bool:
        if not isinstance(message, dict):
            return False
        for key in ("id", "model"):
            self.facts.setdefault(key, str_or_none(message.get(key)))
        self.add_usage(message.get("usage"))
        return True

    def delta(self, delta: Any, usage: Any) -> bool:
        if not isinstance(delta, dict) or not isinstance(delta.get("stop_reason"), str | None):
            return False
        if delta.get("stop_reason") is not None:
            self.facts["stop_reason"] = delta["stop_reason"]
        self.add_usage(usage)  # output_tokens so far; input_tokens came at the start
        return True

    def add_usage(self, usage: Any) -> None:
        """Merge counts in, the later ones winning, into a dict of this fold's own."""
        if isinstance(usage, dict):
            self.facts.setdefault("usage", {}).update(usage)

    def open(self, index: int, block: Any) -> bool:
        kind = block.get("type") if isinstance(block, dict) else None
        if not isinstance(kind, str):
            return False
        opened = _Block(kind)
        if kind == TEXT:
            if not isinstance(block.get("text"), str):
                return False
            opened.pieces.append(block["text"])
        elif kind == TOOL_USE:
            name, call_id, arguments = block.get("name"), block.get("id"), block.get("input")
            if not isinstance(name, str) or not isinstance(call_id, str | None):
                return False
            opened = _Block(TOOL_USE, name=name, call_id=call_id)
            if isinstance(arguments, str | dict):
                opened.input = arguments
        self.blocks[index] = opened
        return True

    def piece(self, block: _Block, delta: Any) -> bool:
        kind = delta.get("type") if isinstance(delta, dict) else None
        if kind == "text_delta":
            field = "text"
        elif kind == "input_json_delta":
            field = "partial_json"
        else:
            return isinstance(kind, str)  # thinking, signature, citations: read past
        value = delta.get(field)
        if not isinstance(value, str) or block.kind != (TEXT if field == "text" else TOOL_USE):
            return False
        block.pieces.append(value)
        return True


# the delta types that carry the reply's tokens, and the field each carries them in
_TOKEN_FIELDS = {"text_delta": "text", "input_json_delta": "partial_json"}


def carries_token(data: str) -> bool:
    """Whether one streamed event carries a token of the reply: a text or tool-argument delta
    with text in it, or a block that starts with some. `message_start`, an empty block start,
    pings, thinking and the stop events carry none, so a stream's `ttft_ms` is dated by the
    first event that does."""
    ok, doc = load_json(data)
    kind = doc.get("type") if ok and isinstance(doc, dict) else None
    if kind == "content_block_delta":
        delta = doc.get("delta")
        if not isinstance(delta, dict) or not isinstance(delta.get("type"), str):
            return False
        name = _TOKEN_FIELDS.get(delta["type"])
        return name is not None and _nonempty(delta.get(name))
    if kind == "content_block_start":
        block = doc.get("content_block")
        if not isinstance(block, dict):
            return False
        if block.get("type") == TEXT:
            return _nonempty(block.get("text"))
        if block.get("type") == TOOL_USE:
            arguments = block.get("input")
            return _nonempty(arguments) or (isinstance(arguments, dict) and bool(arguments))
    return False


def _nonempty(value: Any) -> bool:
    return isinstance(value, str) and value != ""


def fold_stream(text: str) -> StreamFold:
    """A streamed reply body folded into a Message, and how the stream ended."""
    state = _Stream()
    finished = False
    for event in sse.parse(text).events:
        ok, doc = load_json(event.data)
        kind = doc.get("type") if isinstance(doc, dict) else None
        if event.event == "error" or kind == "error":
            error = doc.get("error") if isinstance(doc, dict) else None
            kind = error.get("type") if isinstance(error, dict) else None
            return StreamFold(state.message(), StreamStatus.ERROR, error_detail(kind))
        if not ok or not isinstance(doc, dict) or not state.event(kind, doc):
            return StreamFold(state.message(), StreamStatus.MALFORMED, STREAM_MALFORMED)
        if kind == "message_stop":
            finished = True
            break
        finished = finished or "stop_reason" in state.facts
    if not finished:
        return StreamFold(state.message(), StreamStatus.TRUNCATED, STREAM_TRUNCATED)
    return StreamFold(state.message(), StreamStatus.FINISHED)


def tokens(usage: Mapping[str, Any]) -> Tokens | None:
    """`input_tokens` with the cache's reads and writes as the prompt, `output_tokens`."""
    prompt, completion = count(usage.get("input_tokens")), count(usage.get("output_tokens"))
    read, written = usage.get("cache_read_input_tokens"), usage.get("cache_creation_input_tokens")
    if prompt is None or completion is None or past(read) or past(written):
        return None
    read, written = count(read) or 0, count(written) or 0
    return Tokens(prompt + read + written, completion, read)


def _ended(reply: RecordedReply) -> str:
    return reply.finish("tool_use" if reply.tool_calls else "end_turn")


def recorded_body(reply: RecordedReply) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = []
    if reply.content is not None:
        blocks.append({"type": "text", "text": reply.content})
    for call in reply.tool_calls:
        blocks.append(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": call.argument_value}
        )
    doc: dict[str, Any] = {
        "id": reply.id,
        "type": "message",
        "role": "assistant",
        "model": reply.model,
        # no text and no call: no content list at all, which is missing_content as in OpenAI
        "content": blocks if blocks else None,
        "stop_reason": _ended(reply),
        "stop_sequence": None,
    }
    if reply.usage:
        doc["usage"] = dict(reply.usage)
    return doc


def recorded_events(reply: RecordedReply) -> tuple[list[Event], int]:
    """The named events of the reply, and the index of `message_delta` (where the stop reason
    comes, so where truncation cuts)."""
    usage = dict(reply.usage or {})
    output = {k: usage.pop(k) for k in ("output_tokens",) if k in usage}
    message: dict[str, Any] = {
        "id": reply.id,
        "type": "message",
        "role": "assistant",
        "model": reply.model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
    }
    if usage:
        message["usage"] = usage
    events = [named("message_start", message=message)]
    index = 0
    if reply.content is not None:
        events.append(
            named("content_block_start", index=index, content_block={"type": "text", "text": ""})
        )
        for piece in PIECE.findall(reply.content):
            delta = {"type": "text_delta", "text": piece}
            events.append(named("content_block_delta", index=index, delta=delta))
        events.append(named("content_block_stop", index=index))
        index += 1
    for call in reply.tool_calls:
        block = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
        events.append(named("content_block_start", index=index, content_block=block))
        for piece in halves(call.argument_text):
            delta = {"type": "input_json_delta", "partial_json": piece}
            events.append(named("content_block_delta", index=index, delta=delta))
        events.append(named("content_block_stop", index=index))
        index += 1
    finish_at = len(events)
    delta = {"stop_reason": _ended(reply), "stop_sequence": None}
    events.append(named("message_delta", delta=delta, **({"usage": output} if output else {})))
    events.append(named("message_stop"))
    return events, finish_at


WIRE = Wire(
    kind=Kind.ANTHROPIC_MESSAGES,
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
        Event(
            dumps(
                {"type": "error", "error": {"type": "overloaded_error", "message": ERROR_MESSAGE}}
            ),
            "error",
        ),
    ),
)
