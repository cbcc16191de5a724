"""The request keys of a case row: a conversation, template variables, tools and formats.

`messages`, `vars`, `tools`, `tool_choice` and `response_format` are checked here, as the
OpenAI chat API would check them and a little further, so a row that no provider would accept
fails `validate` with its line instead of turning into an HTTP 400 every night. Each check is
a pure function of the row (and of the tools it offers) returning why the value cannot be
sent, or None; the fixture loader adds `file:line`. `ToolFiles` reads the tools files rows
name (a path relative to the fixture file), each once, refused as a fixture file is when it
is no regular file or no JSON, naming its own line.

The rules beyond the OpenAI API's, each because a provider or parallax needs it:
- a turn's `content` is a string (or null for an assistant turn that only calls tools), never
  a list of content parts: parts would need mapping per protocol and say nothing a string
  cannot in a text suite;
- a system turn is the first turn or none (Anthropic has one top-level system prompt), and a
  conversation does not also carry the row's `system`;
- an assistant turn's tool calls are answered by the tool turns right after it, each call
  once, before any other turn (both APIs refuse anything else);
- a tool or function name is 1-64 of `A-Z a-z 0-9 _ -` (what both APIs accept), so it reads
  as itself inside a miss code such as `tool_missing:<name>`;
- a tool's `parameters` is a valid JSON Schema of `"type": "object"` (arguments are always an
  object), refused as an expectation's `json_schema` is when it cannot check an answer.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from runner.errors import reason_of
from runner.files import Outside, Unreadable, outside_reason, read_regular
from runner.jsontext import (
    MAX_DEPTH,
    DuplicateKeyError,
    loads,
    long_integer_line,
    strict_loads,
    too_deep,
)
from runner.model import ToolCall
from runner.text import holds_surrogate, may_hold_surrogates

__all__ = [
    "RECORDED_CALLS",
    "REQUEST_KEYS",
    "BadTools",
    "ToolFiles",
    "check_schema",
    "choice_problem",
    "json_kind",
    "recorded_calls",
    "recorded_problem",
    "request_problem",
    "tools_problem",
]

# The keys of a row that shape its request, and what each holds (the docs' fixture reference
# reads them): all part of the row, so all under `fixture_sha`.
REQUEST_KEYS: dict[str, str] = {
    "messages": 'a conversation instead of `prompt`: OpenAI-style turns `{"role", "content", '
    '"tool_calls"?, "tool_call_id"?}`, ending with a user or tool turn',
    "vars": "an object of strings the endpoint's templates can use",
    "tools": "OpenAI-style function tools, or the path (relative to the fixture file) of a "
    "JSON file holding them",
    "tool_choice": '`"auto"`, `"none"`, `"required"` or `{"type": "function", "function": '
    '{"name": N}}`, as in the OpenAI API; only with `tools`',
    "response_format": '`{"type": "json_object"}` or `{"type": "json_schema", "json_schema": '
    '{"name", "schema", "strict"?}}`: the case then expects a JSON answer',
}
RECORDED_CALLS = "tool_calls"  # at the top of a row: the recorded reply's calls (`grade`)
ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")
CHOICES: tuple[str, ...] = ("auto", "none", "required")
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_TURN_KEYS = ("role", "content", "tool_calls", "tool_call_id")
_FUNCTION_KEYS = ("name", "description", "parameters", "strict")
_FORMAT_KEYS = ("name", "schema", "strict", "description")
_RECORDED_KEYS = ("id", "name", "arguments")


class _Refused(Exception):
    """Why a value cannot be sent; caught at the public functions and returned as text."""


class BadTools(Exception):
    """Why a row's `tools` cannot be offered: the text of its `file:line` error."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ToolFiles:
    """The tools files a fixture file's rows name, each read and checked once.

    A suite's rows often offer the same tools file: it is read, parsed and checked the first
    time a row names it, and every case that names it shares its tools. A name is a path
    relative to the fixture file's folder, which must lead into `root` (the config's input
    root; without a config, the fixture file's folder): a row is a stranger's, and a tools
    file is sent to the endpoint, so `../../.env` or a symlink out is refused, never read.
    """

    LIMIT = 1 << 20  # bytes: far more than any tool list a provider accepts

    def __init__(self, fixture: Path, *, root: Path | None = None) -> None:
        self._base = fixture.parent
        self._root = root if root is not None else fixture.parent
        self._read: dict[str, tuple[Mapping[str, Any], ...]] = {}

    def offered(self, data: Mapping[str, Any]) -> tuple[Mapping[str, Any], ...]:
        """The tools a row offers, checked; raises BadTools saying why they cannot be."""
        if "tools" not in data:
            return ()
        value = data["tools"]
        if isinstance(value, str) and value.strip():
            tools = self._read.get(value)
            if tools is None:
                tools = self._read[value] = self._load(value)
            return tools
        if not isinstance(value, list) or not value:
            raise BadTools(
                "'tools' must be a non-empty list of tools or the path of a JSON file of them, "
                f"got {'an empty list' if value == [] else json_kind(value)}"
            )
        problem = tools_problem(value)
        if problem is not None:
            raise BadTools(f"'tools'{problem}")
        return tuple(value)

    def _path(self, name: str) -> Path:
        """A tools file's path as named (`..` read as written, not through a symlink)."""
        return Path(os.path.normpath(self._base / name))

    def _load(self, name: str) -> tuple[Mapping[str, Any], ...]:
        where = f"'tools' file {name}"
        try:
            data = read_regular(self._path(name), limit=self.LIMIT, root=self._root)
        except Outside as exc:
            raise BadTools(f"'tools' file {outside_reason(name, exc)}") from None
        except Unreadable as exc:
            raise BadTools(f"{where}: {exc.reason}") from None
        data = data.removeprefix(b"\xef\xbb\xbf")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data.count(b"\n", 0, exc.start) + 1
            raise BadTools(
                f"{where}:{line}: not UTF-8: byte 0x{data[exc.start]:02x} cannot be decoded"
            ) from None
        at = too_deep(text)
        if at is not None:
            line = text.count("\n", 0, at) + 1
            raise BadTools(f"{where}:{line}: nested deeper than {MAX_DEPTH} levels")
        try:
            value = strict_loads(text)
        except DuplicateKeyError as exc:
            raise BadTools(f"{where}: duplicate key {exc.key!r} in one object") from None
        except json.JSONDecodeError as exc:
            reason = f"invalid JSON: {exc.msg} (column {exc.colno})"
            raise BadTools(f"{where}:{exc.lineno}: {reason}") from None
        except ValueError as exc:
            found = long_integer_line(text)
            place = f"{where}:{found}" if found is not None else where
            raise BadTools(f"{place}: invalid JSON: {reason_of(exc)}") from None
        if may_hold_surrogates(text) and holds_surrogate(value):
            raise BadTools(f"{where}: lone surrogate escape (\\ud800-\\udfff) is not text")
        problem = tools_problem(value)
        if problem is not None:
            raise BadTools(f"{where}: {problem}")
        return tuple(value)


def request_problem(data: Mapping[str, Any], tools: Sequence[Mapping[str, Any]]) -> str | None:
    """Why the row's `messages`, `vars`, `tool_choice` or `response_format` cannot be sent.

    `tools` are the ones the row offers, already passed by `tools_problem` (read from their
    file when the row names one). `prompt` and `messages` are the loader's: exactly one.
    """
    if "messages" in data and data.get("system") is not None:
        return (
            "'system' beside 'messages': a conversation's system prompt is its first turn, "
            '{"role": "system", ...}'
        )
    try:
        if "messages" in data:
            _check_messages(data["messages"])
        if "vars" in data:
            _check_vars(data["vars"])
        if "tool_choice" in data:
            _check_choice(data["tool_choice"], tools)
        if "response_format" in data:
            _check_format(data["response_format"])
    except _Refused as exc:
        return str(exc)
    return None


def tools_problem(value: Any) -> str | None:
    """Why a list of tools cannot be offered, or None; the text starts where the caller names
    the list (`'tools'`, or the file it was read from)."""
    try:
        _check_tools(value)
    except _Refused as exc:
        return str(exc)
    return None


def choice_problem(expect: Mapping[str, Any], choice: Any) -> str | None:
    """Why a tool expectation contradicts the case's own `tool_choice`, or None: no reply that
    obeys the request could meet it, as `tool_expect_problem` refuses its own contradictions."""
    if choice == "none" and "tool_calls" in expect:
        return "expect.'tool_calls' with 'tool_choice' \"none\": the request forbids every call"
    if choice not in (None, "auto", "none") and expect.get("no_tool_calls") is True:
        return "expect.'no_tool_calls' with a 'tool_choice' that makes the model call a tool"
    return None


def recorded_problem(value: Any) -> str | None:
    """Why a row's recorded `tool_calls` ([{"name", "arguments"?, "id"?}]) cannot be graded."""
    if not isinstance(value, list):
        return f"'tool_calls' must be a list of recorded calls, got {json_kind(value)}"
    for at, call in enumerate(value):
        where = f"'tool_calls'[{at}]"
        if not isinstance(call, dict):
            return f"{where} must be a {{name, arguments}} object, got {json_kind(call)}"
        unknown = [key for key in call if key not in _RECORDED_KEYS]
        if unknown:
            return f"{where} has an unknown key {unknown[0]!r} (known: {', '.join(_RECORDED_KEYS)})"
        if not isinstance(call.get("name"), str) or not call["name"]:
            return f"{where}.name must be a non-empty string"
        if not isinstance(call.get("arguments", {}), dict):
            return f"{where}.arguments must be an object, got {json_kind(call['arguments'])}"
        if not isinstance(call.get("id", ""), str):
            return f"{where}.id must be a string, got {json_kind(call['id'])}"
    return None


def recorded_calls(value: Sequence[Mapping[str, Any]]) -> tuple[ToolCall, ...]:
    """The recorded calls of a row that passed `recorded_problem`, as graders see calls."""
    return tuple(
        ToolCall(id=call.get("id"), name=call["name"], arguments=call.get("arguments", {}))
        for call in value
    )


def _check_messages(turns: Any) -> None:
    if not isinstance(turns, list) or not turns:
        raise _Refused("'messages' must be a non-empty list of turns")
    seen: set[str] = set()  # every call id so far: ids are unique in a conversation
    waiting: dict[str, int] = {}  # calls of the last assistant turn not yet answered
    for at, turn in enumerate(turns):
        where = f"'messages'[{at}]"
        if not isinstance(turn, dict):
            raise _Refused(f"{where} must be an object, got {json_kind(turn)}")
        unknown = [key for key in turn if key not in _TURN_KEYS]
        if unknown:
            raise _Refused(
                f"{where} has an unknown key {unknown[0]!r} (known: {', '.join(_TURN_KEYS)})"
            )
        role = turn.get("role")
        if role not in ROLES:
            raise _Refused(f"{where}.role must be one of {', '.join(ROLES)}, got {_shown(role)}")
        if waiting and role != "tool":
            raise _Unanswered(waiting)
        if "tool_calls" in turn and role != "assistant":
            raise _Refused(f"{where} is a {role} turn: only an assistant turn has 'tool_calls'")
        if "tool_call_id" in turn and role != "tool":
            raise _Refused(f"{where} is a {role} turn: only a tool turn has 'tool_call_id'")
        if role == "system" and at > 0:
            raise _Refused(
                f"{where} is a system turn after the first: a conversation has one system "
                "prompt, its first turn"
            )
        if role == "assistant":
            waiting = _assistant(at, turn, seen)
            continue
        _text(where, turn)
        if role == "tool":
            answered = turn.get("tool_call_id")
            if not isinstance(answered, str) or not answered:
                raise _Refused(f"{where}.tool_call_id must name the call this turn answers")
            if answered not in waiting:
                raise _Refused(
                    f"{where}.tool_call_id {answered!r} names no unanswered call of the "
                    "assistant turn before it"
                )
            del waiting[answered]
    if waiting:
        raise _Unanswered(waiting)
    last = turns[-1]["role"]
    if last not in ("user", "tool"):
        raise _Refused(
            f"'messages' must end with a user or tool turn (the one the model answers), not {last}"
        )


class _Unanswered(_Refused):
    """An assistant turn's call that no tool turn right after it answers."""

    def __init__(self, waiting: Mapping[str, int]) -> None:
        call, at = next(iter(waiting.items()))
        super().__init__(
            f"'messages'[{at}] calls {call!r}, which no tool turn right after it answers "
            "(every call is answered before the next user or assistant turn)"
        )


def _text(where: str, turn: Mapping[str, Any]) -> None:
    if "content" not in turn:
        raise _Refused(f"{where} has no 'content'")
    content = turn["content"]
    if isinstance(content, list):
        raise _Refused(
            f"{where}.content must be a string, got array (lists of content parts are not "
            "accepted: write the text as one string)"
        )
    if not isinstance(content, str):
        raise _Refused(f"{where}.content must be a string, got {json_kind(content)}")


def _assistant(at: int, turn: Mapping[str, Any], seen: set[str]) -> dict[str, int]:
    """Check the assistant turn at `at`; the ids of the calls it makes, each with `at`."""
    where = f"'messages'[{at}]"
    calls = turn.get("tool_calls")
    if calls is None:
        _text(where, turn)
        return {}
    if turn.get("content") is not None:
        _text(where, turn)
    if not isinstance(calls, list) or not calls:
        raise _Refused(f"{where}.tool_calls must be a non-empty list of calls")
    waiting: dict[str, int] = {}
    for index, call in enumerate(calls):
        place = f"{where}.tool_calls[{index}]"
        if not isinstance(call, dict) or set(call) != {"id", "type", "function"}:
            raise _Refused(f'{place} must be {{"id", "type": "function", "function"}}')
        call_id = call["id"]
        if not isinstance(call_id, str) or not call_id:
            raise _Refused(f"{place}.id must be a non-empty string")
        if call_id in seen:
            raise _Refused(f"{place}.id {call_id!r} is the id of an earlier call")
        seen.add(call_id)
        if call["type"] != "function":
            raise _Refused(f'{place}.type must be "function", got {_shown(call["type"])}')
        function = call["function"]
        if not isinstance(function, dict) or set(function) != {"name", "arguments"}:
            raise _Refused(f'{place}.function must be {{"name", "arguments"}}')
        _name(f"{place}.function.name", function["name"])
        if not _is_object_text(function["arguments"]):
            raise _Refused(
                f"{place}.function.arguments must be a JSON object as a string (as the OpenAI "
                'API sends it: "{\\"city\\": \\"Paris\\"}")'
            )
        waiting[call_id] = at
    return waiting


def _is_object_text(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        return isinstance(loads(value), dict)
    except ValueError:
        return False


def _check_vars(value: Any) -> None:
    if not isinstance(value, dict):
        raise _Refused(f"'vars' must be an object of strings, got {json_kind(value)}")
    for name, text in value.items():
        if not isinstance(text, str):
            raise _Refused(f"'vars'[{name!r}] must be a string, got {json_kind(text)}")


def _check_tools(value: Any) -> None:
    if not isinstance(value, list) or not value:
        raise _Refused(f"must be a non-empty list of tools, got {_kind_or_empty(value)}")
    names: set[str] = set()
    for at, tool in enumerate(value):
        where = f"[{at}]"
        if not isinstance(tool, dict) or set(tool) != {"type", "function"}:
            raise _Refused(f'{where} must be {{"type": "function", "function": {{...}}}}')
        if tool["type"] != "function":
            raise _Refused(f'{where}.type must be "function", got {_shown(tool["type"])}')
        function = tool["function"]
        if not isinstance(function, dict):
            raise _Refused(f"{where}.function must be an object, got {json_kind(function)}")
        unknown = [key for key in function if key not in _FUNCTION_KEYS]
        if unknown:
            raise _Refused(
                f"{where}.function has an unknown key {unknown[0]!r} "
                f"(known: {', '.join(_FUNCTION_KEYS)})"
            )
        name = _name(f"{where}.function.name", function.get("name"))
        if name in names:
            raise _Refused(f"{where}.function.name {name!r} is offered twice")
        names.add(name)
        if not isinstance(function.get("description", ""), str):
            raise _Refused(f"{where}.function.description must be a string")
        if not isinstance(function.get("strict", False), bool):
            raise _Refused(f"{where}.function.strict must be true or false")
        if "parameters" in function:
            parameters = function["parameters"]
            problem = check_schema(parameters)
            if problem is None and parameters.get("type") != "object":
                problem = 'must have "type": "object" (a call\'s arguments are an object)'
            if problem is not None:
                raise _Refused(f"{where}.function.parameters {problem}")


def _check_choice(choice: Any, tools: Sequence[Mapping[str, Any]]) -> None:
    if not tools:
        raise _Refused("'tool_choice' needs 'tools' to choose from")
    if isinstance(choice, str):
        if choice not in CHOICES:
            raise _Refused(f"'tool_choice' must be one of {', '.join(CHOICES)} or a function")
        return
    shape = '{"type": "function", "function": {"name": ...}}'
    if not isinstance(choice, dict) or set(choice) != {"type", "function"}:
        raise _Refused(f"'tool_choice' must be one of {', '.join(CHOICES)} or {shape}")
    function = choice["function"]
    if choice["type"] != "function" or not isinstance(function, dict) or set(function) != {"name"}:
        raise _Refused(f"'tool_choice' must be {shape}")
    offered = [tool["function"]["name"] for tool in tools]
    if function["name"] not in offered:
        raise _Refused(
            f"'tool_choice' names {_shown(function['name'])}, a tool the case does not offer"
        )


def _check_format(value: Any) -> None:
    if not isinstance(value, dict):
        raise _Refused(f"'response_format' must be an object, got {json_kind(value)}")
    kind = value.get("type")
    if kind == "json_object":
        if set(value) != {"type"}:
            raise _Refused("'response_format' of type json_object has no other key")
        return
    if kind != "json_schema":
        raise _Refused(
            f"'response_format'.type must be json_object or json_schema, got {_shown(kind)} "
            "(a text answer needs no response_format)"
        )
    if set(value) != {"type", "json_schema"} or not isinstance(value["json_schema"], dict):
        raise _Refused(
            "'response_format' of type json_schema must be "
            '{"type": "json_schema", "json_schema": {"name", "schema", "strict"?}}'
        )
    spec = value["json_schema"]
    unknown = [key for key in spec if key not in _FORMAT_KEYS]
    if unknown:
        raise _Refused(
            f"'response_format'.json_schema has an unknown key {unknown[0]!r} "
            f"(known: {', '.join(_FORMAT_KEYS)})"
        )
    _name("'response_format'.json_schema.name", spec.get("name"))
    if "schema" not in spec:
        raise _Refused("'response_format'.json_schema needs a 'schema'")
    problem = check_schema(spec["schema"])
    if problem is not None:
        raise _Refused(f"'response_format'.json_schema.schema {problem}")
    if not isinstance(spec.get("strict", False), bool):
        raise _Refused("'response_format'.json_schema.strict must be true or false")
    if not isinstance(spec.get("description", ""), str):
        raise _Refused("'response_format'.json_schema.description must be a string")


def _name(where: str, name: Any) -> str:
    """`name` when it is a name both APIs accept for a tool or a format."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise _Refused(f"{where} must be 1-64 of A-Z a-z 0-9 _ -, got {_shown(name)}")
    return name


def _shown(value: Any) -> str:
    """A value in an error line: text quoted, anything else by its JSON kind."""
    return repr(value) if isinstance(value, str) else json_kind(value)


def _kind_or_empty(value: Any) -> str:
    return "an empty list" if value == [] else json_kind(value)


def check_schema(value: Any) -> str | None:
    """Why `value` cannot check answers as a JSON Schema, or None; the text follows the key.

    For an expectation's `json_schema`, a tool's `parameters` and a `response_format`'s schema
    alike: one rule for every schema a case carries.
    """
    if not isinstance(value, dict):
        return f"must be a JSON Schema object, got {json_kind(value)}"
    from jsonschema import SchemaError  # only suites with schemas pay for the import
    from jsonschema.validators import validator_for

    try:
        validator_for(value).check_schema(value)
    except SchemaError as exc:
        return f"is not a valid JSON Schema: {exc.message}"
    ref = _unresolvable_ref(value)
    if ref is not None:
        return f"has a $ref that names nothing in the schema: {ref!r}"
    keywords = _keys_within(value)
    if {"unevaluatedProperties", "patternProperties"} <= keywords:
        return (
            "pairs unevaluatedProperties with patternProperties, whose patterns jsonschema "
            "would then search with no time bound: use additionalProperties"
        )
    from runner.grading.checks import schema_problem

    return schema_problem(value)


def _keys_within(value: Any) -> set[str]:
    """Every object key anywhere in a JSON value."""
    found: set[str] = set()
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            found.update(node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


_REF_KEYS = ("$ref", "$dynamicRef", "$recursiveRef")


def _unresolvable_ref(schema: dict[str, Any]) -> str | None:
    """The first `$ref` (or `$dynamicRef`, `$recursiveRef`) that resolves to nothing inside
    the schema itself, or None.

    Grading never fetches a schema from elsewhere, so a ref to a URL or a file cannot resolve
    either; refused here, it is a fixture error instead of a failure in the middle of a run.
    """
    from referencing import Registry, Resource
    from referencing.exceptions import Unresolvable
    from referencing.jsonschema import DRAFT202012

    def first_bad(resource: Resource[Any], resolver: Any) -> str | None:
        resolver = resolver.in_subresource(resource)  # a nested $id moves the base URI
        contents = resource.contents
        refs = [contents.get(k) for k in _REF_KEYS] if isinstance(contents, dict) else []
        for ref in refs:
            if not isinstance(ref, str):
                continue
            try:
                resolver.lookup(ref)
            except Unresolvable:
                return ref
        for sub in resource.subresources():
            if (found := first_bad(sub, resolver)) is not None:
                return found
        return None

    root = Resource.from_contents(schema, default_specification=DRAFT202012)
    return first_bad(root, Registry().resolver_with_root(root))


def json_kind(value: Any) -> str:
    """A JSON value's kind as an error line names it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"
