"""Server-Sent Events framing, as the WHATWG HTML standard's event-stream parser reads it.

A streamed reply is kept as the bytes it arrived in, and replay parses the same text again, so
framing is a pure function of the body: no reader state, no clock. It never raises and does
work linear in the body, since the body is whatever the server (or a hostile one) sent.

What the standard says, and what is kept: lines end in CRLF, LF or CR; one leading BOM is
dropped; a line starting with ":" is a comment; `field: value` loses one space after the
colon; `data` lines of one event are joined with LF; a blank line dispatches the event, and an
event with no `data` line is none. `event` names the event (Anthropic names every event; the
protocols read the type from the JSON as well). `id` and `retry` steer a browser's reconnects,
which a recorded body never makes, so they are read past. An event still open when the body
ends is not dispatched (the standard drops it): `SSEBody.complete` says whether that happened.
"""

from __future__ import annotations

import re
from collections.abc import Generator, Iterator

from runner.model import record

_LINE_END = re.compile(r"\r\n|\r|\n")
_BOM = "\ufeff"
DEFAULT_EVENT = "message"  # the type of an event with no `event` field


@record
class Event:
    """One dispatched event: its type (`event` field, else "message") and its data."""

    data: str
    event: str = DEFAULT_EVENT


@record
class SSEBody:
    """The events of a body, in order, and whether the body ended on an event boundary.

    `complete` is False when the body stops inside an event (fields read, no blank line yet)
    or inside a line: the cut event is not among `events`.
    """

    events: tuple[Event, ...]
    complete: bool


def parse(text: str) -> SSEBody:
    """Frame `text` into events; never raises, linear in `len(text)`."""
    walk = _walk(text)
    events: list[Event] = []
    try:
        while True:
            events.append(next(walk)[0])
    except StopIteration as ended:
        return SSEBody(events=tuple(events), complete=ended.value)


def dispatched(text: str) -> Iterator[tuple[Event, int]]:
    """The events of `text` one at a time, each with the offset just past the line that
    dispatched it: where in the body it could first be read, which is how the live client
    dates a stream's first token (`protocols.first_token`). Lazy, so a reader that stops at
    the first event it wants frames no more of the body."""
    return _walk(text)


def _lines(text: str, pos: int) -> Iterator[tuple[str, int]]:
    """Each whole line from `pos` on, without its line end, and the offset past that end;
    the text after the last line end is no line yet. Most bodies end lines in LF alone, split
    at C speed; one with a CR anywhere is read by the standard's three line ends."""
    if "\r" not in text:
        for line in text[pos:].split("\n")[:-1]:
            pos += len(line) + 1
            yield line, pos
        return
    for end in _LINE_END.finditer(text, pos):
        yield text[pos : end.start()], end.end()
        pos = end.end()


def _walk(text: str) -> Generator[tuple[Event, int], None, bool]:
    """Each dispatched event and the offset past its blank line; returns whether the body
    ended on an event boundary (`SSEBody.complete`)."""
    start = pos = len(_BOM) if text.startswith(_BOM) else 0
    data: list[str] = []
    name = ""
    pending = False  # a field line was read since the last dispatch
    for line, pos in _lines(text, start):  # pos: how far the lines were read
        if line == "":
            if data:
                yield Event(data="\n".join(data), event=name or DEFAULT_EVENT), pos
            data, name, pending = [], "", False
            continue
        if line.startswith(":"):
            continue
        field, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        pending = True
        if field == "data":
            data.append(value)
        elif field == "event":
            name = value
    # text after the last line end is an unfinished line
    return not pending and pos == len(text)
