"""Specification of what the Responses API (`openai-responses`) and Gemini (`gemini`)
protocols send: URL, headers and the JSON body for a case, seen on the wire through
`HttpEndpoint.call` with an httpx.MockTransport (tests/test_protocols_requests.py's helpers)."""

from __future__ import annotations

from typing import Any

import pytest
from test_protocols_requests import (
    CONVERSATION,
    JSON_SCHEMA,
    KEY,
    SCHEMA,
    WEATHER_TOOL,
    case,
    endpoint,
    send,
    shaped,
    template,
)

RESPONSES = "openai-responses"
GEMINI = "gemini"
NEW = pytest.mark.parametrize("kind", [RESPONSES, GEMINI])

pytestmark = pytest.mark.anyio


# --- where and with which headers ----------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "stream", "expected"),
    [
        (RESPONSES, False, "https://api.example.com/v1/responses"),
        (RESPONSES, True, "https://api.example.com/v1/responses"),
        (GEMINI, False, "https://api.example.com/v1/models/model-x:generateContent"),
        (GEMINI, True, "https://api.example.com/v1/models/model-x:streamGenerateContent?alt=sse"),
    ],
)
async def test_each_new_protocol_posts_to_its_own_path(
    kind: str, stream: bool, expected: str
) -> None:
    """/responses; Gemini's model method, its streaming one asking for SSE."""
    sent = await send(endpoint(kind, stream=stream), case(), shaped(stream=stream))
    assert (sent.request.method, str(sent.request.url)) == ("POST", expected)
    assert sent.exchange.request["url"] == expected


async def test_a_gemini_model_name_is_one_escaped_path_segment() -> None:
    sent = await send(endpoint(GEMINI, model="tuned/x y"), case())
    assert sent.request.url.raw_path == b"/v1/models/tuned%2Fx%20y:generateContent"


async def test_gemini_sends_its_key_in_x_goog_api_key_never_in_the_url() -> None:
    sent = await send(endpoint(GEMINI, headers={"X-Team": "evals"}), case())
    headers = sent.request.headers
    assert (headers["x-goog-api-key"], headers["x-team"]) == (KEY, "evals")
    assert "authorization" not in headers
    assert KEY not in str(sent.request.url)
    assert "x-goog-api-key" not in (await send(endpoint(GEMINI), case(), key=None)).request.headers


async def test_responses_sends_a_bearer_token() -> None:
    sent = await send(endpoint(RESPONSES), case())
    assert sent.request.headers["authorization"] == f"Bearer {KEY}"


# --- prompt cases and templates -------------------------------------------------------------


async def test_responses_sends_the_system_prompt_as_instructions() -> None:
    """A system prompt is `instructions`, the prompt the one input item; temperature 0 and
    max_tokens as max_output_tokens."""
    sent = await send(endpoint(RESPONSES), case(system="Be brief."))
    assert sent.body == {
        "model": "model-x",
        "instructions": "Be brief.",
        "input": [{"role": "user", "content": "Name the SKU."}],
        "temperature": 0.0,
        "max_output_tokens": 512,
    }
    assert "instructions" not in (await send(endpoint(RESPONSES), case())).body


async def test_gemini_sends_the_system_prompt_as_system_instruction() -> None:
    """systemInstruction beside the contents; temperature and max_tokens in generationConfig;
    the model is in the URL, not the body."""
    sent = await send(endpoint(GEMINI, temperature=0.7, max_tokens=64), case(system="Brief."))
    assert sent.body == {
        "contents": [{"role": "user", "parts": [{"text": "Name the SKU."}]}],
        "systemInstruction": {"parts": [{"text": "Brief."}]},
        "generationConfig": {"temperature": 0.7, "maxOutputTokens": 64},
    }
    assert "systemInstruction" not in (await send(endpoint(GEMINI), case())).body


@NEW
async def test_endpoint_templates_shape_the_system_prompt_and_the_user_turn(kind: str) -> None:
    shape = shaped(
        system=template("{{ system }} Answer as {{ vars.persona }}."),
        user_template=template("Question: {{ prompt }}", "endpoints.cand.user_template"),
        request_sha="b" * 16,
    )
    sent = await send(endpoint(kind), case(system="Be brief.", vars={"persona": "a clerk"}), shape)
    said, asked = "Be brief. Answer as a clerk.", "Question: Name the SKU."
    if kind == RESPONSES:
        assert (sent.body["instructions"], sent.body["input"]) == (
            said,
            [{"role": "user", "content": asked}],
        )
    else:
        assert sent.body["systemInstruction"] == {"parts": [{"text": said}]}
        assert sent.body["contents"] == [{"role": "user", "parts": [{"text": asked}]}]
    assert sent.exchange.request_sha == "b" * 16


# --- conversations --------------------------------------------------------------------------


async def test_responses_maps_a_conversation_to_input_items() -> None:
    """The system turn is instructions; an assistant's calls function_call items with their
    call ids, each tool result a function_call_output for its call."""
    sent = await send(endpoint(RESPONSES), case(messages=CONVERSATION))
    assert sent.body["instructions"] == "You are a weather assistant."
    assert sent.body["input"] == [
        {"role": "user", "content": "Weather in Paris and Oslo?"},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"city": "Paris"}',
        },
        {
            "type": "function_call",
            "call_id": "call_2",
            "name": "get_weather",
            "arguments": '{"city": "Oslo"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "18 C, sunny"},
        {"type": "function_call_output", "call_id": "call_2", "output": "9 C"},
        {"role": "user", "content": "Which is warmer?"},
    ]


async def test_responses_keeps_an_assistant_turns_text_before_its_calls() -> None:
    turn = {
        "role": "assistant",
        "content": "Let me check.",
        "tool_calls": [{"id": "t", "function": {"name": "f", "arguments": "{}"}}],
    }
    sent = await send(endpoint(RESPONSES), case(messages=({"role": "user", "content": "?"}, turn)))
    assert sent.body["input"][1:] == [
        {"role": "assistant", "content": "Let me check."},
        {"type": "function_call", "call_id": "t", "name": "f", "arguments": "{}"},
    ]


async def test_gemini_maps_a_conversation_to_contents_with_function_parts() -> None:
    """Assistant turns are role model with functionCall parts (args objects); consecutive
    tool results one user turn of functionResponse parts, each named by the call it answers,
    a text result as `output`."""
    sent = await send(endpoint(GEMINI), case(messages=CONVERSATION))
    assert sent.body["systemInstruction"] == {"parts": [{"text": "You are a weather assistant."}]}
    assert sent.body["contents"] == [
        {"role": "user", "parts": [{"text": "Weather in Paris and Oslo?"}]},
        {
            "role": "model",
            "parts": [
                {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}},
                {"functionCall": {"name": "get_weather", "args": {"city": "Oslo"}}},
            ],
        },
        {
            "role": "user",
            "parts": [
                {
                    "functionResponse": {
                        "name": "get_weather",
                        "response": {"output": "18 C, sunny"},
                    }
                },
                {"functionResponse": {"name": "get_weather", "response": {"output": "9 C"}}},
            ],
        },
        {"role": "user", "parts": [{"text": "Which is warmer?"}]},
    ]


async def test_gemini_sends_a_json_object_result_as_the_response_itself() -> None:
    turns = list(CONVERSATION[:3])
    turns[2] = {**turns[2], "tool_calls": turns[2]["tool_calls"][:1]}
    turns.append({"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 18}'})
    sent = await send(endpoint(GEMINI), case(messages=tuple(turns)))
    assert sent.body["contents"][-1]["parts"] == [
        {"functionResponse": {"name": "get_weather", "response": {"temp_c": 18}}}
    ]


# --- tools, tool_choice, response_format, params, stream -------------------------------------


async def test_responses_sends_flat_tools_a_flat_choice_and_text_format() -> None:
    """Function tools flat, not strict unless the case says so (chat's default); a named
    tool_choice flat; a json_schema response format as text.format."""
    strict = {"type": "function", "function": {"name": "ping", "strict": True}}
    choice = {"type": "function", "function": {"name": "get_weather"}}
    sent = await send(
        endpoint(RESPONSES),
        case(tools=(WEATHER_TOOL, strict), tool_choice=choice, response_format=JSON_SCHEMA),
    )
    assert sent.body["tools"] == [
        {
            "type": "function",
            "name": "get_weather",
            "description": "Current weather in a city.",
            "parameters": WEATHER_TOOL["function"]["parameters"],
            "strict": False,
        },
        {"type": "function", "name": "ping", "parameters": {"type": "object"}, "strict": True},
    ]
    assert sent.body["tool_choice"] == {"type": "function", "name": "get_weather"}
    assert sent.body["text"] == {
        "format": {"type": "json_schema", "name": "w", "strict": True, "schema": SCHEMA}
    }
    loose = await send(endpoint(RESPONSES), case(response_format={"type": "json_object"}))
    assert loose.body["text"] == {"format": {"type": "json_object"}}
    assert "response_format" not in loose.body


@pytest.mark.parametrize("choice", ["auto", "none", "required"])
async def test_responses_sends_a_tool_choice_word_as_it_is(choice: str) -> None:
    sent = await send(endpoint(RESPONSES), case(tools=(WEATHER_TOOL,), tool_choice=choice))
    assert sent.body["tool_choice"] == choice


async def test_gemini_sends_tools_as_function_declarations() -> None:
    bare = {"type": "function", "function": {"name": "ping"}}
    sent = await send(endpoint(GEMINI), case(tools=(WEATHER_TOOL, bare)))
    assert sent.body["tools"] == [
        {
            "functionDeclarations": [
                {
                    "name": "get_weather",
                    "description": "Current weather in a city.",
                    "parameters": WEATHER_TOOL["function"]["parameters"],
                },
                {"name": "ping"},
            ]
        }
    ]
    assert "toolConfig" not in sent.body


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", {"mode": "AUTO"}),
        ("none", {"mode": "NONE"}),
        ("required", {"mode": "ANY"}),
        (
            {"type": "function", "function": {"name": "get_weather"}},
            {"mode": "ANY", "allowedFunctionNames": ["get_weather"]},
        ),
    ],
)
async def test_gemini_maps_each_tool_choice(choice: Any, expected: Any) -> None:
    sent = await send(endpoint(GEMINI), case(tools=(WEATHER_TOOL,), tool_choice=choice))
    assert sent.body["toolConfig"] == {"functionCallingConfig": expected}


async def test_gemini_asks_for_json_and_sends_a_schema_in_its_own_dialect() -> None:
    """json_object asks for application/json; json_schema adds the schema, in Gemini's
    Schema: nullable for a type with null, anyOf for oneOf, and the keywords it does not read
    (additionalProperties, $schema, const) left out at every depth."""
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "city": {"type": ["string", "null"], "description": "where"},
            "alerts": {"type": "array", "items": {"type": "string", "const": "x"}},
            "temp": {"oneOf": [{"type": "number"}, {"type": "string"}]},
            "any": {"type": ["integer", "string"]},
        },
        "required": ["city"],
        "additionalProperties": False,
    }
    rf = {"type": "json_schema", "json_schema": {"name": "w", "strict": True, "schema": schema}}
    sent = await send(endpoint(GEMINI), case(response_format=rf))
    assert sent.body["generationConfig"] == {
        "temperature": 0.0,
        "maxOutputTokens": 512,
        "responseMimeType": "application/json",
        "responseSchema": {
            "type": "object",
            "properties": {
                "city": {"nullable": True, "type": "string", "description": "where"},
                "alerts": {"type": "array", "items": {"type": "string"}},
                "temp": {"anyOf": [{"type": "number"}, {"type": "string"}]},
                "any": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
            },
            "required": ["city"],
        },
    }
    loose = await send(endpoint(GEMINI), case(response_format={"type": "json_object"}))
    assert loose.body["generationConfig"]["responseMimeType"] == "application/json"
    assert "responseSchema" not in loose.body["generationConfig"]


@NEW
async def test_params_are_merged_into_the_body_and_into_the_tables_it_builds(kind: str) -> None:
    """Extra keys are sent as given; a params table named as one the protocol builds
    (`text`, `generationConfig`) adds its keys to that table."""
    if kind == RESPONSES:
        params = {"top_p": 0.5, "store": False, "text": {"verbosity": "low"}}
        sent = await send(endpoint(kind), case(response_format=JSON_SCHEMA), shaped(params=params))
        assert (sent.body["top_p"], sent.body["store"]) == (0.5, False)
        assert sent.body["text"]["verbosity"] == "low"
        assert sent.body["text"]["format"]["type"] == "json_schema"
    else:
        params = {"safetySettings": [], "generationConfig": {"topP": 0.5, "seed": 7}}
        sent = await send(endpoint(kind), case(), shaped(params=params))
        assert sent.body["safetySettings"] == []
        assert sent.body["generationConfig"] == {
            "temperature": 0.0,
            "maxOutputTokens": 512,
            "topP": 0.5,
            "seed": 7,
        }


async def test_a_streaming_responses_endpoint_asks_for_a_stream() -> None:
    sent = await send(endpoint(RESPONSES), case(), shaped(stream=True))
    assert sent.body["stream"] is True
    assert sent.exchange.stream is True
    assert "stream" not in (await send(endpoint(RESPONSES), case())).body


async def test_a_streaming_gemini_endpoint_asks_by_its_method_not_its_body() -> None:
    sent = await send(endpoint(GEMINI, stream=True), case(), shaped(stream=True))
    assert "stream" not in sent.body
    assert sent.exchange.stream is True
