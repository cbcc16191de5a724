"""Wire protocols: the one request/reply layer between a case and the graders.

One module per protocol (`openai_chat`, `openai_responses`, `anthropic_messages`, `gemini`,
`http_json`), each a `Wire` (`wire.py`): the request's URL, headers and body for a case, how a
stored reply reads back, sent whole (`fold_body`) or as Server-Sent Events (`fold_stream`;
`sse` frames it), what its usage counts (`tokens`), and how a cassette's reply is written in
its format (`recorded`; `recording`). `wire_for` picks one by its `Kind`: usage and cost
(`runner.cost`) and the recorded endpoint ask it rather than know any protocol's shape.
`message.graded` turns what any of them read into what graders see, or a schema-fail detail,
the same way for every protocol.

`read` is the schema stamp's only reader. It runs on a stored response, so the same code
judges a live call, a recorded cassette and a replay: a 2xx `text/event-stream` body is folded
as a stream (its content type, not the endpoint's flag, decides: a server that ignores
`stream: true` sends JSON, read as a body), anything else as a body. It never raises on what a
server sent: a hostile body is a detail string. What a served reply says about itself (model,
id, fingerprint, usage) is kept whatever its schema stamp, and `served_model` settles which
model served it: a gateway's header when the endpoint names one (or a known gateway sent its
own), else the body's `model`.
"""

from __future__ import annotations

import base64
from collections import OrderedDict
from collections.abc import Mapping

from runner.model import NO_FACTS, Facts, Reply, Response, Transport, record
from runner.protocols import (
    anthropic_messages,
    gemini,
    http_json,
    openai_chat,
    openai_responses,
    sse,
)
from runner.protocols.message import (
    STREAM_MALFORMED,
    STREAM_TRUNCATED,
    Message,
    StreamFold,
    StreamStatus,
    graded,
)
from runner.protocols.wire import Kind, Wire

__all__ = [
    "GATEWAY_MODEL_HEADERS",
    "Kind",
    "Read",
    "StreamEnd",
    "Wire",
    "first_token",
    "is_event_stream",
    "read",
    "served_model",
    "stream_end",
    "wire_for",
]

# Gateways that name the backend they routed to in a response header while the body's
# `model` is the alias asked for (LiteLLM); read when an endpoint names no header itself.
GATEWAY_MODEL_HEADERS: tuple[str, ...] = ("x-litellm-model-name",)
EVENT_STREAM = "text/event-stream"
NOT_UTF8 = "not_utf8"
UNKNOWN_ADAPTER = "unknown_adapter"  # + ":<kind>": a raw row names a protocol this is not

_WIRES: dict[str, Wire] = {
    wire.kind: wire
    for wire in (
        openai_chat.WIRE,
        openai_responses.WIRE,
        anthropic_messages.WIRE,
        gemini.WIRE,
        http_json.WIRE,
    )
}


# Streams folded when their attempt was stamped (`stream_end`), by protocol and body text,
# until they are graded (`read`): a fold is a pure function of the two, and a live stream
# was folded twice, a fifth of its call's CPU. The oldest go first (an attempt retried is
# never graded), so at most _FOLDS_KEPT are held.
_FOLDS: OrderedDict[tuple[str, str], StreamFold] = OrderedDict()
_FOLDS_KEPT = 1024


def wire_for(kind: str) -> Wire | None:
    """The protocol of that kind (an endpoint's `kind`, an exchange's `adapter`), or None."""
    return _WIRES.get(kind)


def is_event_stream(headers: Mapping[str, str]) -> bool:
    """Whether a response's (lower-cased) headers say its body is Server-Sent Events."""
    media = headers.get("content-type")
    if media is None or media.startswith("application/json"):  # most replies: no more work
        return False
    return media.partition(";")[0].strip().lower() == EVENT_STREAM


@record
class StreamEnd:
    """The transport stamp of a 2xx stream that arrived whole but did not end as one should,
    and what its attempt records as the error."""

    transport: Transport
    error: str  # stream_truncated, or stream_error:<type>
    message: str


def stream_end(kind: str, text: str) -> StreamEnd | None:
    """How a stream of that protocol ended, when that is a transport failure: one that ends
    without its finish event is a lost connection (`stream_truncated`), one carrying an error
    event the server's error (`stream_error:<type>`). A finished stream, one whose events are
    broken (a schema question, `stream_malformed`) and a protocol with no streams give None.

    The live client asks it when a stream's bytes are in, a cassette when it plays one back;
    the stamp is recorded on the attempt, so a replay reads it rather than asking again. The
    fold is kept for `read`, which grades the same text a moment later.
    """
    wire = wire_for(kind)
    if wire is None or wire.fold_stream is None:
        return None
    fold = _FOLDS[kind, text] = wire.fold_stream(text)
    if len(_FOLDS) > _FOLDS_KEPT:
        _FOLDS.popitem(last=False)
    if fold.status is StreamStatus.TRUNCATED:
        message = "the stream ended without its finish event"
        return StreamEnd(Transport.CONNECTION_LOST, STREAM_TRUNCATED, message)
    if fold.status is StreamStatus.ERROR:
        return StreamEnd(Transport.HTTP_ERROR, fold.detail, "the server sent an error event")
    return None


def first_token(kind: str, text: str) -> int | None:
    """Where a stream of that protocol could first be read to hold a token of the reply: the
    offset in `text` just past the event that first carried content or tool-call arguments,
    or None when none did (or the protocol has no streams). The role chunk and Anthropic's
    `message_start` come before any token and say nothing of how fast the model answered.

    Framed lazily: the events after that one are not read. A stream that broke off after it
    still has one, so a failed stream keeps the time its first token took.
    """
    wire = wire_for(kind)
    if wire is None or wire.carries_token is None:
        return None
    for event, end in sse.dispatched(text):
        if wire.carries_token(event.data):
            return end
    return None


@record
class Read:
    """A stored reply read through its protocol.

    `reply` is what graders get, or None with `detail` saying why (a schema fail). `facts`,
    `finish_reason` and `tool_names` are what the reply said of itself either way, as far as
    it could be read: a reply that breaks the schema still names the model that sent it.
    """

    reply: Reply | None
    detail: str = ""
    facts: Facts = NO_FACTS
    finish_reason: str | None = None
    tool_names: tuple[str, ...] = ()


def _text(response: Response) -> str | None:
    """The body as text, or None when it was not UTF-8 (stored as base64)."""
    if response.encoding == "utf-8":
        return response.body
    try:
        return base64.b64decode(response.body, validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return None


def read(
    adapter: str, response: Response, *, expects_json: bool, answer_pointer: str | None = None
) -> Read:
    """Read a stored 2xx response: the graded reply, or the schema-fail detail.

    A stream that folds MALFORMED is `stream_malformed`. One that is TRUNCATED or ended in an
    ERROR event was already stamped at call time (connection_lost, http_error); should such a
    body still reach here (a hand-written cassette), its detail is the schema fail: a broken
    stream is never graded.
    """
    wire = wire_for(adapter)
    if wire is None:
        return Read(None, f"{UNKNOWN_ADAPTER}:{adapter}")
    text = _text(response)
    if text is None:
        return Read(None, NOT_UTF8)
    message: Message | str
    if wire.fold_stream is not None and is_event_stream(response.headers):
        fold = _FOLDS.pop((adapter, text), None)
        if fold is None:
            fold = wire.fold_stream(text)
        message = fold.message
        if fold.status is not StreamStatus.FINISHED:
            detail = STREAM_MALFORMED if fold.status is StreamStatus.MALFORMED else fold.detail
            return _failed(message, detail)
    else:
        message = wire.fold_body(text, answer_pointer)
        if isinstance(message, str):
            return Read(None, message, wire.facts(text))
    result = graded(message, expects_json=expects_json)
    if isinstance(result, str):
        return _failed(message, result)
    calls = result.tool_calls
    names = tuple([call.name for call in calls]) if calls else ()  # most replies call none
    return Read(result, "", result.facts, result.finish_reason, names)


def _failed(message: Message, detail: str) -> Read:
    names = tuple([call.name for call in message.tool_calls])
    return Read(None, detail, message.facts, message.finish_reason, names)


def served_model(body_model: str | None, response: Response, header: str | None) -> str | None:
    """The model that served a call: the header the endpoint names (`served_model_header`),
    or with none named the first known gateway header present, when it holds a name; else
    the body's `model`. `header` "" means the body's `model` only."""
    names = GATEWAY_MODEL_HEADERS if header is None else (header,) if header else ()
    for name in names:
        value = response.headers.get(name)
        if value is not None and value.strip():
            return value.strip()
    return body_model
