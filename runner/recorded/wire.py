"""What a server of each protocol would have sent for a recorded reply, whole or streamed.

A cassette row says what the model answered (text, tool calls, finish reason, usage); this
module writes it in the wire format of the protocol the recorded endpoint stands in for, so
the body is judged by the very code that judges a live one. A stream is written as the
provider streams it: OpenAI `chat.completion.chunk`s (a role chunk, content pieces, tool-call
pieces merged by index, a finish chunk, a usage chunk, `data: [DONE]`); Anthropic's named
events (`message_start`, one `content_block_*` run per block, `message_delta` with the stop
reason, `message_stop`).

A stream fault shapes those events as a live server's failure would: `stream_truncated` ends
the body cleanly where the finish would start, `stream_malformed` cuts one event's JSON in
half and goes on to a normal finish, `stream_error` sends the provider's in-band error event,
and `disconnect` stops in the middle of an event (a reply sent whole is cut in half).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from runner.model import record
from runner.protocols import Kind

OPENAI_CHAT = Kind.OPENAI_CHAT.value
ANTHROPIC = Kind.ANTHROPIC_MESSAGES.value
PROTOCOLS = (OPENAI_CHAT, ANTHROPIC)
_PIECE = re.compile(r"\S+\s*|\s+")  # a word and the space after it: one content delta each
_ERROR_MESSAGE = "recorded stream error"


class StreamFault(StrEnum):
    """How a recorded stream breaks, in the protocol's own events."""

    TRUNCATED = "stream_truncated"
    MALFORMED = "stream_malformed"
    ERROR = "stream_error"


DISCONNECT = "disconnect"  # a stream or a whole body, cut off mid-way: connection_lost


@record
class RecordedCall:
    """A tool call as the cassette recorded it; a string `arguments` is sent as written."""

    id: str
    name: str
    arguments: str | Mapping[str, Any]

    @property
    def argument_text(self) -> str:
        """The arguments as JSON text, as OpenAI sends them (a string is kept as it is)."""
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, ensure_ascii=False)


@record
class RecordedReply:
    """What the model answered, in no protocol yet; `finish_reason` None is the default."""

    content: str | None
    tool_calls: tuple[RecordedCall, ...] = ()
    finish_reason: str | None = None
    model: str = "recorded"
    id: str = "recorded"
    system_fingerprint: str | None = None
    usage: Mapping[str, Any] | None = None

    def finish(self, protocol: str) -> str:
        """The finish (stop) reason: the recorded one, else what the protocol says for a
        reply that ended by itself, with or without a tool call."""
        if self.finish_reason is not None:
            return self.finish_reason
        if protocol == ANTHROPIC:
            return "tool_use" if self.tool_calls else "end_turn"
        return "tool_calls" if self.tool_calls else "stop"


@record
class _Event:
    """One SSE event: Anthropic names its events, OpenAI's are all `data` only."""

    data: str
    name: str | None = None

    def text(self) -> str:
        head = f"event: {self.name}\n" if self.name else ""
        return f"{head}data: {self.data}\n\n"


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _halves(text: str) -> list[str]:
    """Argument text in two pieces, as providers send it in fragments; no empty piece."""
    middle = len(text) // 2
    return [piece for piece in (text[:middle], text[middle:]) if piece]


def body(protocol: str, reply: RecordedReply) -> str:
    """The reply sent whole, as the protocol's JSON body (spaced as cassettes always were)."""
    doc = _anthropic_body(reply) if protocol == ANTHROPIC else _openai_body(reply)
    return json.dumps(doc, ensure_ascii=False)


def _openai_body(reply: RecordedReply) -> dict[str, Any]:
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
        "choices": [{"index": 0, "message": message, "finish_reason": reply.finish(OPENAI_CHAT)}],
    }
    if reply.system_fingerprint:
        doc["system_fingerprint"] = reply.system_fingerprint
    if reply.usage:
        doc["usage"] = dict(reply.usage)
    return doc


def _anthropic_body(reply: RecordedReply) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = []
    if reply.content is not None:
        blocks.append({"type": "text", "text": reply.content})
    for call in reply.tool_calls:
        arguments = call.arguments if isinstance(call.arguments, str) else dict(call.arguments)
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": arguments})
    doc: dict[str, Any] = {
        "id": reply.id,
        "type": "message",
        "role": "assistant",
        "model": reply.model,
        # no text and no call: no content list at all, which is missing_content as in OpenAI
        "content": blocks if blocks else None,
        "stop_reason": reply.finish(ANTHROPIC),
        "stop_sequence": None,
    }
    if reply.usage:
        doc["usage"] = dict(reply.usage)
    return doc


def _openai_events(reply: RecordedReply) -> tuple[list[_Event], int]:
    """The chunks of the reply, and the index of the finish chunk (where truncation cuts)."""
    head: dict[str, Any] = {"id": reply.id, "object": "chat.completion.chunk", "model": reply.model}
    if reply.system_fingerprint:
        head["system_fingerprint"] = reply.system_fingerprint

    def chunk(delta: Mapping[str, Any], finish: str | None = None) -> _Event:
        choice = {"index": 0, "delta": dict(delta), "finish_reason": finish}
        return _Event(_dumps({**head, "choices": [choice]}))

    events = [chunk({"role": "assistant"})]
    if reply.content is not None:
        events += [chunk({"content": p}) for p in _PIECE.findall(reply.content) or [""]]
    for index, call in enumerate(reply.tool_calls):
        function = {"name": call.name, "arguments": ""}
        first = {"index": index, "id": call.id, "type": "function", "function": function}
        events.append(chunk({"tool_calls": [first]}))
        for piece in _halves(call.argument_text):
            events.append(
                chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            )
    finish_at = len(events)
    events.append(chunk({}, reply.finish(OPENAI_CHAT)))
    if reply.usage:
        events.append(_Event(_dumps({**head, "choices": [], "usage": dict(reply.usage)})))
    events.append(_Event("[DONE]"))
    return events, finish_at


def _anthropic_events(reply: RecordedReply) -> tuple[list[_Event], int]:
    """The named events of the reply, and the index of `message_delta` (where the stop reason
    comes, so where truncation cuts)."""

    def event(kind: str, **fields: Any) -> _Event:
        return _Event(_dumps({"type": kind, **fields}), kind)

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
    events = [event("message_start", message=message)]
    index = 0
    if reply.content is not None:
        events.append(
            event("content_block_start", index=index, content_block={"type": "text", "text": ""})
        )
        for piece in _PIECE.findall(reply.content):
            delta = {"type": "text_delta", "text": piece}
            events.append(event("content_block_delta", index=index, delta=delta))
        events.append(event("content_block_stop", index=index))
        index += 1
    for call in reply.tool_calls:
        block = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
        events.append(event("content_block_start", index=index, content_block=block))
        for piece in _halves(call.argument_text):
            delta = {"type": "input_json_delta", "partial_json": piece}
            events.append(event("content_block_delta", index=index, delta=delta))
        events.append(event("content_block_stop", index=index))
        index += 1
    finish_at = len(events)
    delta = {"stop_reason": reply.finish(ANTHROPIC), "stop_sequence": None}
    events.append(event("message_delta", delta=delta, **({"usage": output} if output else {})))
    events.append(event("message_stop"))
    return events, finish_at


def _error_event(protocol: str) -> _Event:
    """The provider's in-band error event (an overloaded Anthropic, a failing OpenAI)."""
    if protocol == ANTHROPIC:
        error = {"type": "overloaded_error", "message": _ERROR_MESSAGE}
        return _Event(_dumps({"type": "error", "error": error}), "error")
    return _Event(_dumps({"error": {"type": "server_error", "message": _ERROR_MESSAGE}}))


def stream(protocol: str, reply: RecordedReply, fault: StreamFault | None = None) -> str:
    """The reply streamed as the protocol's SSE body, broken as `fault` says."""
    events, finish_at = (_anthropic_events if protocol == ANTHROPIC else _openai_events)(reply)
    if fault == StreamFault.TRUNCATED:
        events = events[:finish_at]
    elif fault == StreamFault.MALFORMED:
        broken = events[1]  # the first event after the stream's start: a piece of the reply
        events[1] = _Event(broken.data[: len(broken.data) // 2], broken.name)
    elif fault == StreamFault.ERROR:
        events = [events[0], _error_event(protocol)]
    return "".join(e.text() for e in events)


def disconnected(text: str, *, streamed: bool) -> str:
    """What came before the connection dropped: a stream up to the middle of an event (its
    events before that intact), a whole body up to its middle."""
    if not streamed:
        return text[: len(text) // 2]
    ends = [m.end() for m in re.finditer("\n\n", text)]
    if len(ends) < 2:
        return text[: len(text) // 2]
    cut = ends[len(ends) // 2 - 1]  # after the events of the first half
    following = ends[len(ends) // 2]
    return text[: cut + (following - cut) // 2]
