"""The request one side was sent, read back from its body for people: system prompt, turns,
tools offered and every other key (model, temperature, params), whatever the protocol.

The body is the one raw.jsonl recorded, so what a reviewer reads is what the endpoint got,
templates rendered. OpenAI's chat body keeps its system prompt as a leading turn, Anthropic's
as `system` and its tool calls and results as content blocks: both read into the same turns.
An http-json body is its endpoint's own template filled in, so it is shown key by key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from runner.model import record
from runner.protocols.wire import Kind
from runner.reports.expected import value_text


class Source(StrEnum):
    """Where a shown request comes from."""

    SENT = "sent"  # the body raw.jsonl recorded: exactly what went out
    STANDS_IN = "stands_in"  # a recorded endpoint sent nothing: the body it stands in for
    CASE = "case"  # neither is known: the case's own system, prompt or turns, and tools


@record
class Turn:
    """One turn of the conversation sent: its text, the tool calls it carries (an assistant's),
    or the call it answers (a tool result's)."""

    role: str
    text: str
    calls: tuple[str, ...] = ()
    answers: str | None = None


@record
class ToolOffer:
    name: str
    description: str
    parameters: str  # JSON text, capped


@record
class RequestView:
    source: Source
    method: str | None
    url: str | None
    system: str | None
    turns: tuple[Turn, ...]
    tools: tuple[ToolOffer, ...]
    params: tuple[tuple[str, str], ...]  # the body's other keys, each value as JSON text
    cut: bool  # some text was cut at the caps


_WHOLE = 1 << 62  # no cap: a value's whole JSON text, which the cutter then cuts


@dataclass
class _Cutter:
    cap: int
    cut: bool = False

    def __call__(self, text: str) -> str:
        if len(text) <= self.cap:
            return text
        self.cut = True
        return text[: self.cap] + "…"

    def json(self, value: Any) -> str:
        return self(value_text(value, _WHOLE))


def _text(content: Any) -> str:
    """A content value's text: a string, or its text parts/blocks joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, Mapping) and part.get("type") == "text"
        )
    return "" if content is None else value_text(content)


def _openai_call(call: Any) -> str:
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping):
        return value_text(call)
    return f"{function.get('name')}({function.get('arguments')})"


def _openai_turns(messages: Any, cut: _Cutter) -> tuple[str | None, list[Turn]]:
    systems: list[str] = []
    turns: list[Turn] = []
    for message in messages if isinstance(messages, list) else ():
        if not isinstance(message, Mapping):
            continue
        role = str(message.get("role"))
        text = cut(_text(message.get("content")))
        if role == "system" and not turns:
            systems.append(text)
            continue
        calls = tuple(cut(_openai_call(c)) for c in message.get("tool_calls") or ())
        answers = message.get("tool_call_id")
        turns.append(Turn(role, text, calls, str(answers) if answers is not None else None))
    return ("\n\n".join(systems) if systems else None), turns


# Both sides of a case are most often sent the same turns (one prompt, two models): the last
# turns read are kept by their JSON and the cap, and the other side's equal ones reuse them.
_LAST: list[tuple[bytes, int, str | None, tuple[Turn, ...], bool]] = []


def _openai_read(messages: Any, cut: _Cutter) -> tuple[str | None, tuple[Turn, ...]]:
    """`_openai_turns`, read once for equal turns in a row."""
    try:
        key = orjson.dumps(messages)
    except TypeError:  # a key or a number orjson refuses: read it as it is
        key = b""
    if b"null" in key:  # orjson writes NaN as null: not the same value
        key = b""
    if key and _LAST and _LAST[0][0] == key and _LAST[0][1] == cut.cap:
        _, _, system, turns, was_cut = _LAST[0]
        cut.cut = cut.cut or was_cut
        return system, turns
    fresh = _Cutter(cut.cap)
    system, read = _openai_turns(messages, fresh)
    turns = tuple(read)
    cut.cut = cut.cut or fresh.cut
    if key:
        _LAST[:] = [(key, cut.cap, system, turns, fresh.cut)]
    return system, turns


def _anthropic_turns(messages: Any, cut: _Cutter) -> list[Turn]:
    turns: list[Turn] = []
    for message in messages if isinstance(messages, list) else ():
        if not isinstance(message, Mapping):
            continue
        role, content = str(message.get("role")), message.get("content")
        if not isinstance(content, list):
            turns.append(Turn(role, cut(_text(content))))
            continue
        texts: list[str] = []
        calls: list[str] = []
        for block in content:
            kind = block.get("type") if isinstance(block, Mapping) else None
            if kind == "tool_use":
                calls.append(cut(f"{block.get('name')}({cut.json(block.get('input'))})"))
            elif kind == "tool_result":
                answers = str(block.get("tool_use_id"))
                turns.append(Turn("tool", cut(_text(block.get("content"))), (), answers))
            elif kind == "text":
                texts.append(str(block.get("text", "")))
            else:
                texts.append(value_text(block))
        if texts or calls or not content:
            turns.append(Turn(role, cut("".join(texts)), tuple(calls)))
    return turns


def _tools(tools: Any, cut: _Cutter) -> tuple[ToolOffer, ...]:
    offers = []
    for tool in tools if isinstance(tools, list) else ():
        if not isinstance(tool, Mapping):
            continue
        function = tool.get("function")
        spec: Mapping[str, Any] = function if isinstance(function, Mapping) else tool
        parameters = spec.get("parameters", spec.get("input_schema"))
        offers.append(
            ToolOffer(
                name=str(spec.get("name")),
                description=cut(str(spec.get("description") or "")),
                parameters=cut.json(parameters),
            )
        )
    return tuple(offers)


@record
class _Rest:
    """What a body holds beside its turns: the same for most of a suite's requests."""

    system: str | None
    tools: tuple[ToolOffer, ...]
    params: tuple[tuple[str, str], ...]
    cut: bool


# Each endpoint sends every case the same tools, params and (Anthropic) system prompt: read
# once per distinct one, by its JSON, a report of 20,000 requests reads a few.
_RESTS: dict[tuple[str, int, bytes], _Rest] = {}
_KEEP = 256


def _rest(adapter: str, body: Mapping[str, Any], cap: int) -> _Rest:
    """The system prompt (Anthropic's), tools and other keys of a body, each value cut."""
    rest = {k: v for k, v in body.items() if k != "messages"}
    try:
        key = (adapter, cap, orjson.dumps(rest, option=orjson.OPT_SORT_KEYS))
    except TypeError:  # a key or a number orjson refuses: read it as it is
        return _read_rest(adapter, rest, cap)
    found = _RESTS.get(key)
    if found is None:
        if len(_RESTS) >= _KEEP:
            _RESTS.clear()
        found = _RESTS[key] = _read_rest(adapter, rest, cap)
    return found


def _read_rest(adapter: str, rest: Mapping[str, Any], cap: int) -> _Rest:
    cut = _Cutter(cap)
    system: str | None = None
    tools: tuple[ToolOffer, ...] = ()
    read = {"system", "tools"}
    if adapter == Kind.OPENAI_CHAT:  # its system prompt is the first turn
        tools = _tools(rest.get("tools"), cut)
    elif adapter == Kind.ANTHROPIC_MESSAGES:
        raw_system = rest.get("system")
        system = cut(_text(raw_system)) if raw_system is not None else None
        tools = _tools(rest.get("tools"), cut)
    else:  # http-json (or a protocol this version does not know): the body key by key
        read = set()
    params = tuple((str(k), cut.json(v)) for k, v in sorted(rest.items()) if k not in read)
    return _Rest(system, tools, params, cut.cut)


def request_view(
    adapter: str, request: Mapping[str, Any], *, cap: int, source: Source = Source.SENT
) -> RequestView:
    """A recorded request (`{"method", "url", "body"}`) read by its protocol; text past `cap`
    characters per value is cut."""
    cut = _Cutter(cap)
    body = request.get("body")
    body = body if isinstance(body, Mapping) else {}
    rest = _rest(adapter, body, cap)
    system = rest.system
    turns: Sequence[Turn] = []
    if adapter == Kind.OPENAI_CHAT:
        system, turns = _openai_read(body.get("messages"), cut)
    elif adapter == Kind.ANTHROPIC_MESSAGES:
        turns = _anthropic_turns(body.get("messages"), cut)
    elif "messages" in body:  # http-json: the body key by key, its own `messages` too
        rest = _read_rest(adapter, body, cap)
    method, url = request.get("method"), request.get("url")
    return RequestView(
        source=source,
        method=str(method) if method is not None else None,
        url=str(url) if url is not None else None,
        system=system,
        turns=tuple(turns),
        tools=rest.tools,
        params=rest.params,
        cut=cut.cut or rest.cut,
    )
