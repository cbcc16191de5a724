"""A cassette's reply in no protocol yet, and the pieces every protocol's writer of it shares.

A recorded endpoint (`runner.recorded`) answers with the bytes a server of its protocol would
have sent; each protocol writes them itself (its `Wire`'s `Recorder`), from the
`RecordedReply` here, so the knowledge of a wire shape stays in its protocol's module. The
pieces are cut alike for every protocol: content a word (and the space after it) per delta,
tool-call arguments in two halves, as providers send fragments.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from runner.model import record

PIECE = re.compile(r"\S+\s*|\s+")  # a word and the space after it: one content delta each
ERROR_MESSAGE = "recorded stream error"


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

    @property
    def argument_value(self) -> str | dict[str, Any]:
        """The arguments as an object, as Anthropic and Gemini send them (a string as it is)."""
        return self.arguments if isinstance(self.arguments, str) else dict(self.arguments)


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

    def finish(self, ended: str) -> str:
        """The finish (stop) reason: the recorded one, else `ended`, what the protocol says
        of a reply that ended by itself."""
        return self.finish_reason if self.finish_reason is not None else ended


@record
class Event:
    """One SSE event: Anthropic and the Responses API name theirs, OpenAI's and Gemini's are
    `data` only."""

    data: str
    name: str | None = None

    def text(self) -> str:
        head = f"event: {self.name}\n" if self.name else ""
        return f"{head}data: {self.data}\n\n"


def dumps(value: Any) -> str:
    """An event's JSON, compact as providers stream it."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def named(kind: str, **fields: Any) -> Event:
    """An event named by its `type`, as Anthropic's and the Responses API's are."""
    return Event(dumps({"type": kind, **fields}), kind)


def halves(text: str) -> list[str]:
    """Argument text in two pieces, as providers send it in fragments; no empty piece."""
    middle = len(text) // 2
    return [piece for piece in (text[:middle], text[middle:]) if piece]


@dataclass(frozen=True, slots=True)
class Recorder:
    """How one protocol writes a cassette's reply: `body(reply)` the JSON body sent whole,
    `events(reply)` a stream's events and the index of the one that finishes it (where a
    truncated stream ends), `error` the in-band error event a failing stream sends."""

    body: Callable[[RecordedReply], dict[str, Any]]
    events: Callable[[RecordedReply], tuple[list[Event], int]]
    error: Event
