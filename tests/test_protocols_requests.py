"""Specification of what each protocol sends: URL, headers and the JSON body for a case, seen
on the wire through `HttpEndpoint.call` with an httpx.MockTransport."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import pytest

from runner.client.endpoint import HttpEndpoint
from runner.config import EndpointConfig
from runner.errors import FixtureError
from runner.model import Case, Exchange
from runner.protocols import wire_for
from runner.request.shape import PLAIN, Shape
from runner.request.templates import PromptTemplate

OPENAI = "openai-chat"
ANTHROPIC = "anthropic-messages"
KEY = "sk-test-REQUESTS-0123456789"
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
JSON_SCHEMA = {
    "type": "json_schema",
    "json_schema": {"name": "w", "strict": True, "schema": SCHEMA},
}
CONVERSATION = (
    {"role": "system", "content": "You are a weather assistant."},
    {"role": "user", "content": "Weather in Paris and Oslo?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            },
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"},
    {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "9 C"}]},
    {"role": "user", "content": "Which is warmer?"},
)


def case(**over: Any) -> Case:
    fields: dict[str, Any] = {
        "id": "c1",
        "prompt": "Name the SKU.",
        "expect": {},
        "fixture_sha": "0" * 16,
        "path": "suite.jsonl",
        "line": 3,
    }
    fields.update(over)
    if "messages" in over:
        fields["prompt"] = None
    return Case(**fields)


def endpoint(kind: str, **extra: Any) -> EndpointConfig:
    base: dict[str, Any] = {"kind": kind, "base_url": "https://api.example.com/v1/"}
    if kind == "http-json":
        base["body_template"] = {"q": "{{prompt}}"}
    else:
        base["model"] = "model-x"
    return EndpointConfig(**{**base, **extra})


def shaped(
    system: PromptTemplate | None = None,
    user_template: PromptTemplate | None = None,
    params: Mapping[str, Any] | None = None,
    stream: bool = False,
    request_sha: str = "a" * 16,
) -> Shape:
    """An endpoint's request shaping as the config builds it when it loads."""
    return Shape(system, user_template, params or {}, stream, request_sha)


def template(source: str, key: str = "endpoints.cand.system") -> PromptTemplate:
    return PromptTemplate.compile(source, config_path="parallax.toml", key=key)


@dataclass
class Sent:
    """One request as the server received it, and the exchange the endpoint recorded."""

    request: httpx.Request
    exchange: Exchange

    @property
    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = json.loads(self.request.content)
        return body


def reply_for(request: httpx.Request) -> httpx.Response:
    if request.url.path.endswith("/v1/messages"):
        doc: dict[str, Any] = {"content": [{"type": "text", "text": "ok"}], "model": "m"}
    else:
        doc = {"choices": [{"message": {"role": "assistant", "content": "ok"}}], "model": "m"}
    return httpx.Response(200, json=doc)


async def send(
    cfg: EndpointConfig, the_case: Case, shape: Shape = PLAIN, key: str | None = KEY
) -> Sent:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return reply_for(request)

    ep = HttpEndpoint("cand", cfg, key, shape=shape, transport=httpx.MockTransport(handler))
    try:
        with anyio.fail_after(10):
            exchange = await ep.call(the_case, "candidate", 0)
    finally:
        await ep.aclose()
    (request,) = seen
    assert exchange.request["body"] == json.loads(request.content)  # recorded as sent
    return Sent(request, exchange)


pytestmark = pytest.mark.anyio


# --- where and with which headers ----------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        (OPENAI, "https://api.example.com/v1/chat/completions"),
        (ANTHROPIC, "https://api.example.com/v1/v1/messages"),
        ("http-json", "https://api.example.com/v1/"),
    ],
)
async def test_each_protocol_posts_to_its_own_path(kind: str, expected: str) -> None:
    """openai-chat and anthropic-messages append their paths; http-json posts to base_url."""
    sent = await send(endpoint(kind), case())
    assert (sent.request.method, str(sent.request.url)) == ("POST", expected)
    assert sent.exchange.request["url"] == expected


async def test_anthropic_sends_its_key_and_version_and_the_endpoints_headers() -> None:
    """Anthropic takes x-api-key and anthropic-version; configured headers are sent too."""
    sent = await send(endpoint(ANTHROPIC, headers={"X-Team": "evals"}), case())
    headers = sent.request.headers
    assert (headers["x-api-key"], headers["anthropic-version"]) == (KEY, "2023-06-01")
    assert (headers["x-team"], headers["content-type"]) == ("evals", "application/json")
    assert "authorization" not in headers


@pytest.mark.parametrize("kind", [OPENAI, "http-json"])
async def test_the_others_send_a_bearer_token_and_nothing_without_a_key(kind: str) -> None:
    """openai-chat and http-json send `Authorization: Bearer`; no key sends no auth header."""
    with_key = await send(endpoint(kind), case())
    assert with_key.request.headers["authorization"] == f"Bearer {KEY}"
    without = await send(endpoint(kind), case(), key=None)
    assert "authorization" not in without.request.headers
    assert "x-api-key" not in without.request.headers


def test_a_recorded_endpoint_has_no_wire() -> None:
    """Only live kinds are protocols; `recorded` replays bodies in openai-chat's format."""
    assert wire_for("recorded") is None
    assert wire_for(OPENAI) is not None


# --- prompt cases and templates -------------------------------------------------------------


async def test_openai_sends_the_system_prompt_first_at_temperature_zero() -> None:
    """A system prompt becomes the first message; temperature defaults to 0."""
    sent = await send(endpoint(OPENAI), case(system="Be brief."))
    assert sent.body == {
        "model": "model-x",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Name the SKU."},
        ],
        "temperature": 0.0,
        "max_tokens": 512,
    }
    assert (sent.exchange.stream, sent.exchange.request_sha, sent.exchange.ttft_ms) == (
        False,
        None,
        None,
    )


async def test_anthropic_sends_the_system_prompt_at_top_level_and_none_when_absent() -> None:
    """Anthropic takes `system` beside `messages`, never as a message, and leaves it out when
    the case has none."""
    sent = await send(endpoint(ANTHROPIC, temperature=0.7, max_tokens=64), case(system="Brief."))
    assert sent.body == {
        "model": "model-x",
        "max_tokens": 64,
        "temperature": 0.7,
        "messages": [{"role": "user", "content": "Name the SKU."}],
        "system": "Brief.",
    }
    assert "system" not in (await send(endpoint(ANTHROPIC), case())).body


@pytest.mark.parametrize("kind", [OPENAI, ANTHROPIC])
async def test_endpoint_templates_shape_the_system_prompt_and_the_user_turn(kind: str) -> None:
    """The system template renders over the case's system and vars, the user template over
    its prompt; both replace what the case would have sent."""
    shape = shaped(
        system=template("{{ system }} Answer as {{ vars.persona }}."),
        user_template=template("Question: {{ prompt }}", "endpoints.cand.user_template"),
        request_sha="b" * 16,
    )
    sent = await send(endpoint(kind), case(system="Be brief.", vars={"persona": "a clerk"}), shape)
    said = "Be brief. Answer as a clerk."
    user = {"role": "user", "content": "Question: Name the SKU."}
    if kind == OPENAI:
        assert sent.body["messages"] == [{"role": "system", "content": said}, user]
    else:
        assert (sent.body["system"], sent.body["messages"]) == (said, [user])
    assert sent.exchange.request_sha == "b" * 16


async def test_an_undefined_template_name_is_a_fixture_error_naming_the_case() -> None:
    """A template that needs a var the case lacks stops the call with exit 65's error."""
    shape = shaped(system=template("As {{ vars.persona }}."))
    with pytest.raises(FixtureError, match=r"suite.jsonl:3: case 'c1': .*vars.persona"):
        await send(endpoint(OPENAI), case(), shape)


async def test_http_json_fills_its_template_and_refuses_a_conversation() -> None:
    """{{prompt}}, {{system}} and {{model}} fill nested strings; a conversation has no place
    in a body template."""
    body_template = {"input": {"text": "{{prompt}}", "sys": "{{system}}"}, "tags": ["{{model}}", 3]}
    cfg = endpoint("http-json", body_template=body_template, model="m-1")
    sent = await send(cfg, case(system="Be brief."))
    assert sent.body == {"input": {"text": "Name the SKU.", "sys": "Be brief."}, "tags": ["m-1", 3]}
    with pytest.raises(FixtureError, match="cannot be sent to an http-json endpoint"):
        await send(cfg, case(messages=CONVERSATION))


# --- conversations --------------------------------------------------------------------------


async def test_openai_sends_a_conversation_as_written() -> None:
    """Every turn as the case wrote it, tool calls and tool results included."""
    sent = await send(endpoint(OPENAI), case(messages=CONVERSATION))
    assert sent.body["messages"] == json.loads(json.dumps(CONVERSATION))


async def test_anthropic_maps_a_conversation_to_its_content_blocks() -> None:
    """System turns go top level, assistant tool calls become tool_use blocks with object
    input, and consecutive tool results one user turn of tool_result blocks."""
    sent = await send(endpoint(ANTHROPIC), case(messages=CONVERSATION))
    assert sent.body["system"] == "You are a weather assistant."
    assert sent.body["messages"] == [
        {"role": "user", "content": "Weather in Paris and Oslo?"},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "call_1",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
                {
                    "type": "tool_use",
                    "id": "call_2",
                    "name": "get_weather",
                    "input": {"city": "Oslo"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "18 C, sunny"},
                {
                    "type": "tool_result",
                    "tool_use_id": "call_2",
                    "content": [{"type": "text", "text": "9 C"}],
                },
            ],
        },
        {"role": "user", "content": "Which is warmer?"},
    ]


async def test_anthropic_keeps_an_assistant_turns_text_before_its_calls() -> None:
    """An assistant turn that said something and called a tool keeps both, text first."""
    turn = {
        "role": "assistant",
        "content": "Let me check.",
        "tool_calls": [{"id": "t", "function": {"name": "f", "arguments": "{}"}}],
    }
    sent = await send(endpoint(ANTHROPIC), case(messages=({"role": "user", "content": "?"}, turn)))
    assert sent.body["messages"][1]["content"] == [
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "t", "name": "f", "input": {}},
    ]


async def test_anthropic_refuses_tool_call_arguments_that_are_no_object() -> None:
    """A recorded call whose arguments are not a JSON object cannot be a tool_use input."""
    turn = {
        "role": "assistant",
        "tool_calls": [{"id": "t", "function": {"name": "f", "arguments": "[1"}}],
    }
    with pytest.raises(FixtureError, match=r"messages\[1\]\.tool_calls\[0\]\.function\.arguments"):
        await send(endpoint(ANTHROPIC), case(messages=({"role": "user", "content": "?"}, turn)))


@pytest.mark.parametrize("kind", [OPENAI, ANTHROPIC])
async def test_a_system_template_replaces_or_adds_a_conversations_system_turn(kind: str) -> None:
    """The endpoint's system template (seeing the conversation's own system text) replaces its
    leading system turn, or comes first when it has none; the user template never applies."""
    shape = shaped(
        system=template("{{ system or 'You help.' }} v2"),
        user_template=template("Q: {{ prompt }}", "endpoints.cand.user_template"),
    )
    with_system = await send(endpoint(kind), case(messages=CONVERSATION[:2]), shape)
    without = await send(endpoint(kind), case(messages=CONVERSATION[1:2]), shape)
    user = {"role": "user", "content": "Weather in Paris and Oslo?"}
    for sent, said in ((with_system, "You are a weather assistant. v2"), (without, "You help. v2")):
        if kind == OPENAI:
            assert sent.body["messages"] == [{"role": "system", "content": said}, user]
        else:
            assert (sent.body["system"], sent.body["messages"]) == (said, [user])


# --- tools, tool_choice, response_format, params, stream -------------------------------------


async def test_openai_sends_tools_tool_choice_and_response_format_as_given() -> None:
    """OpenAI's own formats go out untouched."""
    choice = {"type": "function", "function": {"name": "get_weather"}}
    sent = await send(
        endpoint(OPENAI),
        case(tools=(WEATHER_TOOL,), tool_choice=choice, response_format=JSON_SCHEMA),
    )
    assert (sent.body["tools"], sent.body["tool_choice"]) == ([WEATHER_TOOL], choice)
    assert sent.body["response_format"] == JSON_SCHEMA


async def test_anthropic_sends_tools_as_name_description_and_input_schema() -> None:
    """A function tool's parameters are its input_schema; one without any takes any object."""
    bare = {"type": "function", "function": {"name": "ping"}}
    sent = await send(endpoint(ANTHROPIC), case(tools=(WEATHER_TOOL, bare)))
    assert sent.body["tools"] == [
        {
            "name": "get_weather",
            "description": "Current weather in a city.",
            "input_schema": WEATHER_TOOL["function"]["parameters"],
        },
        {"name": "ping", "input_schema": {"type": "object"}},
    ]
    assert "tool_choice" not in sent.body


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", {"type": "auto"}),
        ("none", {"type": "none"}),
        ("required", {"type": "any"}),
        (
            {"type": "function", "function": {"name": "get_weather"}},
            {"type": "tool", "name": "get_weather"},
        ),
    ],
)
async def test_anthropic_maps_each_tool_choice(choice: Any, expected: Any) -> None:
    """auto, none, required and a named function in Anthropic's words."""
    sent = await send(endpoint(ANTHROPIC), case(tools=(WEATHER_TOOL,), tool_choice=choice))
    assert sent.body["tool_choice"] == expected


async def test_anthropic_sends_a_json_schema_as_output_format_and_no_json_object() -> None:
    """json_schema is Anthropic's output_format; json_object has no Anthropic form."""
    schema = await send(endpoint(ANTHROPIC), case(response_format=JSON_SCHEMA))
    assert schema.body["output_format"] == {"type": "json_schema", "schema": SCHEMA}
    loose = await send(endpoint(ANTHROPIC), case(response_format={"type": "json_object"}))
    assert "output_format" not in loose.body
    assert "response_format" not in loose.body


@pytest.mark.parametrize("kind", [OPENAI, ANTHROPIC])
async def test_params_are_merged_into_the_body(kind: str) -> None:
    """Extra body keys are sent as given, beside the protocol's own."""
    params = {"top_p": 0.5, "seed": 7, "stop": ["\n\n"], "metadata": {"team": "evals"}}
    sent = await send(endpoint(kind), case(), shaped(params=params))
    assert {k: sent.body[k] for k in params} == params
    assert sent.body["model"] == "model-x"


@pytest.mark.parametrize(
    ("kind", "flags"),
    [
        (OPENAI, {"stream": True, "stream_options": {"include_usage": True}}),
        (ANTHROPIC, {"stream": True}),
    ],
)
async def test_a_streaming_endpoint_asks_for_a_stream(kind: str, flags: dict[str, Any]) -> None:
    """OpenAI also asks for usage in the stream; the exchange records that a stream was asked
    for; a reply sent whole anyway is read as a body."""
    sent = await send(endpoint(kind), case(), shaped(stream=True))
    assert {k: sent.body.get(k) for k in ("stream", "stream_options")} == {
        "stream": True,
        "stream_options": flags.get("stream_options"),
    }
    assert sent.exchange.stream is True
    assert sent.exchange.ttft_ms is None  # the mock replied with JSON: no stream, no ttft
    plain = await send(endpoint(kind), case())
    assert "stream" not in plain.body
    assert "stream_options" not in plain.body
