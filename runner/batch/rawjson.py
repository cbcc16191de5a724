"""The text of one member of a JSON result line, exactly as the provider wrote it.

A batch's result line wraps each reply (`response.body` in OpenAI's files, `result.message`
in Anthropic's), and that reply is the call's raw response: raw.jsonl keeps it byte for byte,
as it keeps a live call's body, so what a replay grades is what the provider sent and not
parallax's re-encoding of it (key order, spacing and escapes kept). The line has already been
parsed whole (`jsontext.loads`, depth-bounded); this only finds where a member's value starts
and ends, with the stdlib's own decoder, so it reads no JSON the parse did not accept.
"""

from __future__ import annotations

import json
import re

_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")


def member(line: str, *path: str) -> str | None:
    """The text of the value at `path` (keys of nested objects) in `line`; None when the line
    is not an object holding that path."""
    start, end = 0, len(line)
    try:
        for key in path:
            found = _spans(line, start).get(key)
            if found is None:
                return None
            start, end = found
    except (ValueError, IndexError):
        return None
    return line[start:end]


def _spans(text: str, pos: int) -> dict[str, tuple[int, int]]:
    """Where each member's value of the object at `pos` starts and ends (a key given twice:
    the last, as the parse keeps it)."""
    pos = _skip(text, pos)
    if text[pos] != "{":
        raise ValueError("not an object")
    spans: dict[str, tuple[int, int]] = {}
    pos = _skip(text, pos + 1)
    if text[pos] == "}":
        return spans
    while True:
        if text[pos] != '"':
            raise ValueError("no key")
        key, pos = _DECODER.raw_decode(text, pos)
        pos = _skip(text, pos)
        if text[pos] != ":":
            raise ValueError("no colon")
        start = _skip(text, pos + 1)
        _, pos = _DECODER.raw_decode(text, start)
        spans[key] = (start, pos)
        pos = _skip(text, pos)
        if text[pos] == "}":
            return spans
        if text[pos] != ",":
            raise ValueError("no comma")
        pos = _skip(text, pos + 1)


def _skip(text: str, pos: int) -> int:
    """Past the whitespace at `pos`."""
    found = _SPACE.match(text, pos)
    return found.end() if found is not None else pos
