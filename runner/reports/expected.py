"""What a miss code was checked against: the expected value beside `field_mismatch:city`.

A miss code names the check, not its value (the value is the case's, and may be long). A
reviewer needs both, and what the reply had in its place: `city: expected "Paris", got
"Lyon"`. Each built-in code (DESIGN's tables) is explained from the case's expectation and
the reply's parsed answer and tool calls; a custom grader's code is shown as it is.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from runner.grading.tools import ANY, CONTAINS, REGEX, matcher
from runner.model import Miss as Code
from runner.model import ToolCall, record

VALUE_CAP = 300  # characters of one expected or received value
_QUOTED = re.compile(r'["\\]')  # what json.dumps escapes in printable ASCII
_BUILT_IN = {code.code: code for code in Code}  # a miss's code as its member
_TOOL_CODES = frozenset(
    {
        Code.TOOL_MISSING,
        Code.TOOL_ARG_MISSING,
        Code.TOOL_ARG_MISMATCH,
        Code.TOOL_ORDER,
        Code.TOOL_UNEXPECTED,
        Code.TOOL_UNKNOWN,
        Code.TOOL_ARGS_SCHEMA,
    }
)


@record
class Miss:
    """One miss of one side: its code, what was expected, what the reply had, and whether it
    is in the case's disagreement (one side misses it and the other does not)."""

    code: str
    expected: str | None
    got: str | None
    moved: bool = False


def value_text(value: Any, cap: int = VALUE_CAP) -> str:
    """A JSON value as people read it: `"Paris"`, `2`, `{"a": 1}`, cut at `cap` with "…"."""
    text = _json_text(value)
    return text if len(text) <= cap else text[: cap - 1] + "…"


# The texts of values many cases share (a tool's parameters, an expectation, a snapshot's
# keys), by their compact JSON: a report shows some 40 values a case.
_TEXTS: dict[bytes, str] = {}
_KEEP = 4096


def _json_text(value: Any) -> str:
    kind = type(value)
    if kind is str and value.isascii() and value.isprintable() and not _QUOTED.search(value):
        return f'"{value}"'  # what json.dumps writes for it, without the encoder
    if value is None or kind is bool:
        return {None: "null", True: "true", False: "false"}[value]
    if kind is int:
        return str(value)
    try:
        key = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        key = None
    if key is not None and b"null" not in key:  # orjson writes NaN as null: not the same value
        found = _TEXTS.get(key)
        if found is not None:
            return found
    try:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return repr(value)
    if key is not None and b"null" not in key:
        if len(_TEXTS) >= _KEEP:
            _TEXTS.clear()
        _TEXTS[key] = text
    return text


def described(value: Any) -> str:
    """An expected argument value as a miss shows it, a matcher in words: `= "Paris"`,
    `matching /^Par/`, `containing "Par"`, `= any value`, `= one of "Paris", "Lyon"`."""
    found = matcher(value)
    if found is None:
        return f"= {value_text(value)}"
    key, operand = found
    if key == REGEX:
        return f"matching /{operand}/"
    if key == CONTAINS:
        return f"containing {value_text(operand)}"
    if key == ANY:
        return "= any value"
    return "= one of " + ", ".join(value_text(item, 80) for item in operand)


def call_text(call: ToolCall, cap: int = VALUE_CAP) -> str:
    """One tool call as people read it: `get_weather({"city": "Oslo"})`."""
    return f"{call.name}({value_text(call.arguments, cap)})"


_ABSENT = object()


def explain(
    code: str,
    expect: Mapping[str, Any] | None,
    *,
    answer: Any = _ABSENT,
    calls: Sequence[ToolCall] = (),
    offered: Sequence[str] = (),
    moved: bool = False,
) -> Miss:
    """A miss code with its expected value and the reply's, where they can be told.

    `expect` None: the case is not known (its fixture file is gone), so only the code shows.
    `answer` is the reply's parsed JSON answer (absent when it had none).
    """
    name, _, rest = code.partition(":")
    kind = _BUILT_IN.get(name)
    expected: str | None = None
    got: str | None = None
    if expect is None:
        return Miss(code, None, None, moved)
    match kind:
        case Code.MISSING:
            expected = f"the reply includes {value_text(rest)} (any case)"
        case Code.FORBIDDEN:
            expected = f"the reply does not include {value_text(rest)}"
        case Code.OVER_BUDGET | Code.TOO_VERBOSE:
            was, _, limit = rest.partition(">")
            unit = "characters" if kind is Code.OVER_BUDGET else "sentences"
            expected, got = f"at most {limit} {unit}", f"{was} {unit}"
        case Code.REGEX_MISMATCH | Code.REGEX_FORBIDDEN:
            verb = "matches" if kind is Code.REGEX_MISMATCH else "does not match"
            expected = f"the reply {verb} /{rest}/"
        case Code.FIELD_MISSING | Code.FIELD_MISMATCH:
            fields = expect.get("json_fields")
            if isinstance(fields, Mapping) and rest in fields:
                expected = f"{rest} = {value_text(fields[rest])}"
            got = _field(answer, rest)
        case Code.SCHEMA_VIOLATION:
            expected = f"the answer fits the case's json_schema at {rest}"
        case Code.EMPTY_COMPLETION:
            expected = "a reply with text or a tool call"
            got = "an empty reply"
        case tool if tool in _TOOL_CODES:
            expected, got = _tool(tool, rest, expect, calls, offered)
    return Miss(code, expected, got, moved)


def _field(answer: Any, name: str) -> str | None:
    if answer is _ABSENT:
        return None
    if not isinstance(answer, Mapping):
        return f"no JSON object ({value_text(answer, 80)})"
    return value_text(answer[name]) if name in answer else "no such field"


def _tool(
    kind: Code,
    rest: str,
    expect: Mapping[str, Any],
    calls: Sequence[ToolCall],
    offered: Sequence[str],
) -> tuple[str | None, str | None]:
    made = ", ".join(call_text(c, 120) for c in calls) or "no tool call"
    wanted = [w for w in expect.get("tool_calls") or () if isinstance(w, Mapping)]
    if kind is Code.TOOL_MISSING:
        for want in wanted:
            if want.get("name") == rest:
                return f"a call {rest}({value_text(want.get('arguments', {}))})", made
        return f"a call to {rest}", made
    if kind in (Code.TOOL_ARG_MISSING, Code.TOOL_ARG_MISMATCH):
        # a tool's name may hold a dot: the longest name that fits is the one meant
        for want in sorted(wanted, key=lambda w: -len(str(w.get("name")))):
            name = str(want.get("name"))
            fields = want.get("arguments")
            if rest.startswith(f"{name}.") and isinstance(fields, Mapping):
                key = rest[len(name) + 1 :]
                if key in fields:
                    expected = f"{name} called with {key} {described(fields[key])}"
                    return expected, _arg(calls, name, key)
        return None, made
    if kind is Code.TOOL_ORDER:
        names = ", ".join(str(w.get("name")) for w in wanted)
        return f"calls in the order {names}", made
    if kind is Code.TOOL_UNEXPECTED:
        return "no tool call", made
    if kind is Code.TOOL_UNKNOWN:
        return f"calls only to offered tools ({', '.join(offered) or 'none offered'})", made
    if kind is Code.TOOL_ARGS_SCHEMA:
        name, _, where = rest.partition(":")
        return f"{name}'s arguments fit its parameters at {where}", made
    return None, None


def _arg(calls: Sequence[ToolCall], name: str, key: str) -> str:
    found = [c for c in calls if c.name == name]
    if not found:
        return f"no call to {name}"
    values = [value_text(c.arguments[key]) if key in c.arguments else "absent" for c in found]
    return f"{key} = {' / '.join(values)}"
