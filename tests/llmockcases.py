"""The golden llmock exchanges in tests/data/llmock/: what each case sends, and how to record it.

Each case is one raw POST to llmock (tests/llmockkit.py) for one protocol (chat completions,
Anthropic messages, the Responses API, Gemini): plain text, tools
(generated, scripted, broken), structured output, every stream fault and a few errors. Its reply
body is kept byte for byte in `<name>.json` or `<name>.sse`; `index.json` holds per case the
request, the scenario, the status, the headers that matter and how the read ended (`complete`,
or the httpx error). They are golden inputs for the protocol parsers' unit tests, and
tests/test_llmock.py checks that the pinned llmock still sends them (ids and timestamps aside).

Re-record after an llmock upgrade, then review the diff: `.venv/bin/python tests/llmockcases.py`.
"""

from __future__ import annotations

import json
import re
import tempfile
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

from llmockkit import (
    Behavior,
    Exchange,
    Flags,
    LlmockServer,
    Protocol,
    StreamFault,
    ToolFault,
    ToolMode,
    break_tool_call,
    fail,
    stream_fault,
    tool_call,
)

DATA = Path(__file__).parent / "data" / "llmock"
STALL_SECONDS = 0.5  # llmock allows any duration >= 0; this is short yet plainly a pause
MODELS = {
    Protocol.OPENAI: "gpt-ref",
    Protocol.ANTHROPIC: "claude-ref",
    Protocol.RESPONSES: "gpt-ref",
    Protocol.GEMINI: "gemini-ref",
}
# the recorded files' prefix per protocol
PREFIX = {
    Protocol.OPENAI: "openai",
    Protocol.ANTHROPIC: "anthropic",
    Protocol.RESPONSES: "responses",
    Protocol.GEMINI: "gemini",
}
SYSTEM = "You are a weather assistant."
PROMPT = "What is the weather in Paris?"
# the headers a parser may care about (date and server vary or say nothing)
KEPT_HEADERS = (
    "content-type",
    "content-length",
    "transfer-encoding",
    "cache-control",
    "x-accel-buffering",
    "retry-after",
    "retry-after-ms",
)

WEATHER = {
    "name": "get_weather",
    "description": "Get the current weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 7},
        },
        "required": ["city"],
        "additionalProperties": False,
    },
}
SEARCH = {
    "name": "search_docs",
    "description": "Search the product documentation.",
    "parameters": {
        "type": "object",
        "properties": {"query": {"type": "string"}},
        "required": ["query"],
    },
}
TOOLS = (WEATHER, SEARCH)
ANSWER_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "temperature_c": {"type": "number"},
        "conditions": {"type": "string", "enum": ["sunny", "cloudy", "rain"]},
        "alerts": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["city", "temperature_c", "conditions", "alerts"],
    "additionalProperties": False,
}
SCRIPTED_ARGS = {"city": "Paris", "unit": "celsius"}


def gemini_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A schema as Gemini's Schema reads it: without additionalProperties, at every depth."""
    out = {k: v for k, v in schema.items() if k != "additionalProperties"}
    if "properties" in out:
        out["properties"] = {k: gemini_schema(v) for k, v in out["properties"].items()}
    return out


TOOL_RESULT = "21 C and sunny"


@dataclass(frozen=True)
class Case:
    """One recorded exchange: the request is built from these fields."""

    name: str
    protocol: Protocol
    stream: bool = False
    tools: bool = False
    tool_choice: str | None = None  # "none" only: parallax's other choices are not recorded
    structured: str | None = None  # "json_schema" or "json_object"
    include_usage: bool = False  # OpenAI stream_options.include_usage
    answered: bool = False  # the conversation goes on: the model's call, then the tool's result
    scenario: tuple[Behavior, ...] = ()
    flags: Flags = field(default_factory=Flags)

    @property
    def file(self) -> str:
        failed = any(
            b["type"] == "fail" for b in self.scenario
        )  # an error is JSON, streamed or not
        kind = "sse" if self.stream and not failed else "json"
        return f"{PREFIX[self.protocol]}-{self.name}.{kind}"

    @property
    def path(self) -> str:
        """Where the request goes (Gemini's path names the model and the streaming method)."""
        return self.protocol.path(MODELS[self.protocol], stream=self.stream)

    def request(self) -> dict[str, Any]:
        """The body, shaped as each provider's API documents it."""
        build = {
            Protocol.OPENAI: self._openai,
            Protocol.ANTHROPIC: self._anthropic,
            Protocol.RESPONSES: self._responses,
            Protocol.GEMINI: self._gemini,
        }
        return build[self.protocol]()

    def _openai(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": MODELS[self.protocol],
            "messages": [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": PROMPT},
            ],
            "temperature": 0,
            "max_tokens": 64,
        }
        if self.answered:
            call = {"id": "call_1", "type": "function", "function": {"name": "get_weather"}}
            call["function"]["arguments"] = json.dumps({"city": "Paris"})
            body["messages"] += [
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_1", "content": TOOL_RESULT},
            ]
        if self.tools:
            body["tools"] = [{"type": "function", "function": t} for t in TOOLS]
        if self.tool_choice:
            body["tool_choice"] = self.tool_choice
        if self.structured == "json_schema":
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "weather", "strict": True, "schema": ANSWER_SCHEMA},
            }
        elif self.structured == "json_object":
            body["response_format"] = {"type": "json_object"}
        if self.stream:
            body["stream"] = True
            if self.include_usage:
                body["stream_options"] = {"include_usage": True}
        return body

    def _anthropic(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": MODELS[self.protocol],
            "max_tokens": 64,
            "system": SYSTEM,
            "messages": [{"role": "user", "content": PROMPT}],
            "temperature": 0,
        }
        if self.answered:
            use = {"type": "tool_use", "id": "toolu_1", "name": "get_weather"}
            result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": TOOL_RESULT}
            body["messages"] += [
                {"role": "assistant", "content": [{**use, "input": {"city": "Paris"}}]},
                {"role": "user", "content": [result]},
            ]
        if self.tools:
            body["tools"] = [
                {
                    "name": t["name"],
                    "description": t["description"],
                    "input_schema": t["parameters"],
                }
                for t in TOOLS
            ]
        if self.tool_choice:
            body["tool_choice"] = {"type": self.tool_choice}
        if self.structured == "json_schema":  # Anthropic's structured outputs
            body["output_format"] = {"type": "json_schema", "schema": ANSWER_SCHEMA}
        if self.stream:
            body["stream"] = True
        return body

    def _responses(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": MODELS[self.protocol],
            "instructions": SYSTEM,
            "input": [{"role": "user", "content": PROMPT}],
            "temperature": 0,
            "max_output_tokens": 64,
        }
        if self.answered:
            call = {"type": "function_call", "call_id": "call_1", "name": "get_weather"}
            body["input"] += [
                {**call, "arguments": json.dumps({"city": "Paris"})},
                {"type": "function_call_output", "call_id": "call_1", "output": TOOL_RESULT},
            ]
        if self.tools:
            body["tools"] = [{"type": "function", **t, "strict": False} for t in TOOLS]
        if self.tool_choice:
            body["tool_choice"] = self.tool_choice
        if self.structured == "json_schema":
            spec = {"name": "weather", "strict": True, "schema": ANSWER_SCHEMA}
            body["text"] = {"format": {"type": "json_schema", **spec}}
        elif self.structured == "json_object":
            body["text"] = {"format": {"type": "json_object"}}
        if self.stream:
            body["stream"] = True
        return body

    def _gemini(self) -> dict[str, Any]:
        """Gemini's body; the model and whether it streams are in the path."""
        body: dict[str, Any] = {
            "contents": [{"role": "user", "parts": [{"text": PROMPT}]}],
            "systemInstruction": {"parts": [{"text": SYSTEM}]},
            "generationConfig": {"temperature": 0, "maxOutputTokens": 64},
        }
        if self.answered:
            call = {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}
            result = {"name": "get_weather", "response": {"output": TOOL_RESULT}}
            body["contents"] += [
                {"role": "model", "parts": [call]},
                {"role": "user", "parts": [{"functionResponse": result}]},
            ]
        if self.tools:
            declarations = [{**t, "parameters": gemini_schema(t["parameters"])} for t in TOOLS]
            body["tools"] = [{"functionDeclarations": declarations}]
        if self.tool_choice:
            body["toolConfig"] = {"functionCallingConfig": {"mode": self.tool_choice.upper()}}
        if self.structured is not None:
            body["generationConfig"]["responseMimeType"] = "application/json"
        if self.structured == "json_schema":
            body["generationConfig"]["responseSchema"] = gemini_schema(ANSWER_SCHEMA)
        return body


def _both(name: str, **kw: Any) -> list[Case]:
    """The case for every protocol."""
    return [Case(name, p, **kw) for p in Protocol]


def _cases() -> tuple[Case, ...]:
    cases: list[Case] = []
    for stream in (False, True):
        cases += _both("text", stream=stream)
        cases += _both("tools-auto", stream=stream, tools=True)
        scripted = (tool_call("get_weather", SCRIPTED_ARGS),)
        cases += _both("tool-scripted", stream=stream, tools=True, scenario=scripted)
        for fault in ToolFault:
            name = "tool-" + fault.value.replace("_", "-")
            cases += _both(name, stream=stream, tools=True, scenario=(break_tool_call(fault),))
        cases += _both("json-schema", stream=stream, structured="json_schema")
        # llmock has no json_object mode for Anthropic (only output_format json_schema)
        cases += [
            Case("json-object", p, stream=stream, structured="json_object")
            for p in Protocol
            if p is not Protocol.ANTHROPIC
        ]
    cases.append(Case("text-usage", Protocol.OPENAI, stream=True, include_usage=True))
    cases += _both("tools-off", tools=True, flags=Flags(tool_mode=ToolMode.OFF))
    cases += _both("tools-choice-none", tools=True, tool_choice="none")
    cases += _both("tools-answered", tools=True, answered=True)
    for kind in StreamFault:
        stall = STALL_SECONDS if kind is StreamFault.STALL else None
        fault = stream_fault(kind, after_chunks=2, stall_seconds=stall)
        cases += _both(f"stream-{kind.value}", stream=True, scenario=(fault,))
    # a fault inside a streamed tool call: the call and one argument fragment, then the end
    # (the Responses API sends two events first; Gemini sends a call whole, with its finish)
    for protocol, at in ((Protocol.OPENAI, 3), (Protocol.ANTHROPIC, 3), (Protocol.RESPONSES, 4)):
        truncate = (stream_fault(StreamFault.TRUNCATE, after_chunks=at),)
        cases.append(
            Case("tools-auto-stream-truncate", protocol, stream=True, tools=True, scenario=truncate)
        )
    # Anthropic's event 2 is a ping; this corrupts its first text delta instead
    malformed = stream_fault(StreamFault.MALFORMED, after_chunks=3)
    cases.append(
        Case("stream-malformed-delta", Protocol.ANTHROPIC, stream=True, scenario=(malformed,))
    )
    for status, retry_after in ((429, 1.5), (500, None), (400, None)):
        error = (fail(status, retry_after=retry_after),)
        cases += _both(f"error-{status}", scenario=error)
    cases += _both("error-429-stream", stream=True, scenario=(fail(429, retry_after=1.5),))
    return tuple(cases)


CASES = _cases()


def run(server: LlmockServer, case: Case) -> Exchange:
    """Send the case on a server with its flags, with only its scenario queued."""
    assert server.flags == case.flags, (server.flags, case.flags)
    server.reset()
    if case.scenario:
        server.script(*case.scenario)
    return server.post(case.path, case.request(), headers=case.protocol.headers)


def summary(case: Case, exchange: Exchange) -> dict[str, Any]:
    """The case's entry in index.json: everything but the body, all of it deterministic."""
    return {
        "path": case.path,
        "flags": {
            "tool_mode": case.flags.tool_mode.value,
            "response_style": case.flags.response_style.value,
        },
        "scenario": list(case.scenario),
        "request_headers": {"content-type": "application/json", **case.protocol.headers},
        "request": case.request(),  # sent as json.dumps(request): default separators
        "status": exchange.status,
        "headers": {k: exchange.headers[k] for k in KEPT_HEADERS if k in exchange.headers},
        "transport": exchange.error or "complete",
    }


# ids and timestamps llmock makes afresh per reply; all else it sends is deterministic
_VARYING = (
    (re.compile(rb"chatcmpl-[0-9a-f]{24}"), b"chatcmpl-ID"),
    (re.compile(rb"call_[0-9a-f]{24}"), b"call_ID"),
    (re.compile(rb"msg_[0-9a-f]{24}"), b"msg_ID"),
    (re.compile(rb"toolu_[0-9a-f]{24}"), b"toolu_ID"),
    (re.compile(rb"resp_[0-9a-f]{24}"), b"resp_ID"),
    (re.compile(rb"fc_[0-9a-f]{24}"), b"fc_ID"),
    (re.compile(rb'"created":\d+'), b'"created":0'),
    (re.compile(rb'"created_at":\d+'), b'"created_at":0'),
)


def normalized(body: bytes) -> bytes:
    """The body with its ids and `created` timestamps replaced by fixed placeholders."""
    for pattern, fixed in _VARYING:
        body = pattern.sub(fixed, body)
    return body


def load_index() -> dict[str, Any]:
    index: dict[str, Any] = json.loads((DATA / "index.json").read_text())
    return index


def capture() -> None:
    """Record every case into tests/data/llmock/ (run by hand, not by the test suite)."""
    DATA.mkdir(parents=True, exist_ok=True)
    entries: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        servers: dict[Flags, LlmockServer] = {}
        try:
            for case in CASES:
                if case.flags not in servers:
                    servers[case.flags] = LlmockServer(case.flags, Path(tmp) / "llmock.log").start()
                exchange = run(servers[case.flags], case)
                path = DATA / case.file
                # a file that differs only by ids and timestamps is kept: diffs show real changes
                if not path.exists() or normalized(path.read_bytes()) != normalized(exchange.body):
                    path.write_bytes(exchange.body)
                entries[case.file] = summary(case, exchange)
                print(
                    f"{case.file}: {exchange.status} {len(exchange.body)} bytes, "
                    f"{exchange.error or 'complete'}"
                )
        finally:
            for server in servers.values():
                server.stop()
    index = {"llmock": version("llmock"), "cases": entries}
    (DATA / "index.json").write_text(json.dumps(index, indent=1) + "\n")


if __name__ == "__main__":
    capture()
