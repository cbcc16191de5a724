"""Anthropic messages: a reply body, or its SSE stream, folded into a `Message`.

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
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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

NOT_JSON = "not_json"
NOT_OBJECT = "not_object"
TEXT = "text"
TOOL_USE = "tool_use"
OTHER = ""  # a block of a kind read past (no wire type is empty)


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


def fold_body(text: str) -> Message | str:
    """A non-streamed reply body as a Message, or the schema-fail detail saying why not."""
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
