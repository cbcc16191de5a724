"""What a server of a recorded endpoint's protocol would have sent for a cassette's reply.

A cassette row says what the model answered (text, tool calls, finish reason, usage); the
protocol the recorded endpoint stands in for writes it in its own wire format (its `Wire`'s
`Recorder`, `runner.protocols.recording`), so the body is judged by
the very code that judges a live one, and this module knows no protocol's shape: it sends a
body whole, or a stream's events, broken as a row's fault says.

A stream fault shapes those events as a live server's failure would: `stream_truncated` ends
the body cleanly where the protocol's finish event would start, `stream_malformed` cuts one
event's JSON in half and goes on to a normal finish, `stream_error` sends the protocol's in-band
error event after its first, and `disconnect` stops in the middle of an event (a reply sent
whole is cut in half).
"""

from __future__ import annotations

import json
import re
from enum import StrEnum

from runner.protocols import wire_for
from runner.protocols.recording import Event, RecordedReply, Recorder


class StreamFault(StrEnum):
    """How a recorded stream breaks, in the protocol's own events."""

    TRUNCATED = "stream_truncated"
    MALFORMED = "stream_malformed"
    ERROR = "stream_error"


DISCONNECT = "disconnect"  # a stream or a whole body, cut off mid-way: connection_lost


def _recorder(protocol: str) -> Recorder:
    """How the protocol writes a reply (the config lets a recorded endpoint speak only those
    protocols that have a `Recorder`)."""
    wire = wire_for(protocol)
    if wire is None or wire.recorded is None:
        raise ValueError(f"no recorded endpoint speaks {protocol!r}")
    return wire.recorded


def body(protocol: str, reply: RecordedReply) -> str:
    """The reply sent whole, as the protocol's JSON body (spaced as cassettes always were)."""
    return json.dumps(_recorder(protocol).body(reply), ensure_ascii=False)


def stream(protocol: str, reply: RecordedReply, fault: StreamFault | None = None) -> str:
    """The reply streamed as the protocol's SSE body, broken as `fault` says."""
    recorder = _recorder(protocol)
    events, finish_at = recorder.events(reply)
    if fault == StreamFault.TRUNCATED:
        events = events[:finish_at]
    elif fault == StreamFault.MALFORMED:
        # the first event after the stream's start (a piece of the reply), or the only one
        at = min(1, len(events) - 1)
        broken = events[at]
        events[at] = Event(broken.data[: len(broken.data) // 2], broken.name)
    elif fault == StreamFault.ERROR:
        events = [events[0], recorder.error]
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
