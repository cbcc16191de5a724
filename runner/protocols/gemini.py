"""Google's Gemini API (`generateContent`): the request for a case, and its reply, whole or
streamed.

The request goes to `{base_url}/models/{model}:generateContent`, or for a stream
`:streamGenerateContent?alt=sse`, with the key in `x-goog-api-key` (never in the URL, which
logs and proxies keep). The case's OpenAI-style turns (`wire.turns`) become `contents`: user
turns role `user`, assistant turns role `model` (their `tool_calls` as `functionCall` parts
after their text), and `tool` turns `functionResponse` parts of one user turn (consecutive
results together), each named by the call it answers, its text the `output` of the response
object (or the object itself when the text is one). System turns are `systemInstruction`.
Tools are one `functionDeclarations` list; `tool_choice` is `toolConfig.functionCallingConfig`
(auto/none/required as AUTO/NONE/ANY, a named function ANY with that one name allowed). A
response format asks for `application/json` in `generationConfig.responseMimeType`, and a
json_schema's schema is its `responseSchema`; temperature and max_tokens are
`generationConfig` too. Gemini's `Schema` (for `responseSchema` and a declaration's
`parameters`) is an OpenAPI subset: a case's JSON Schema is sent with the keywords it reads,
a `["string", "null"]` type as `nullable`, `oneOf` as `anyOf`, and the rest
(`additionalProperties`, `$ref`, `const`, ...) left out, so a schema written for OpenAI's
strict mode is still accepted; the case's own schema checks still grade the answer in full.
Then the endpoint's `params` (a `generationConfig` table adds to the one built here).

A reply is `candidates[0].content.parts`: `text` parts joined into the content (thought
summaries, `thought: true`, read past) and `functionCall` parts the tool calls (`args` an
object; Gemini sends no call id unless it gives one); `finishReason` as the server says it. A
prompt the API blocked has no candidate but `promptFeedback.blockReason`, which is its finish
reason (a reply with no content). The served model is `modelVersion`, the id `responseId`,
and the usage `usageMetadata`.

Streamed, each event is one such response: text parts are concatenated in order, function
calls come whole, the last `usageMetadata` counts, and the stream has finished once the
candidate names its finish reason (or a blocked prompt its block reason). An event carrying
`error` is the server's error (`stream_error:<status>`).

Usage is `usageMetadata`: `promptTokenCount` with `toolUsePromptTokenCount` as the prompt,
`candidatesTokenCount` with the thinking it bills as output (`thoughtsTokenCount`) as the
completion, `cachedContentTokenCount` as cached; a count it leaves out is 0, as its JSON omits
zeros, but one without `promptTokenCount` says no usage. A recorded reply is written as one
response, or streamed as one response per content piece, then one with the calls, the finish
reason and the usage; its error event is a 503 `UNAVAILABLE` status.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from runner.model import NO_FACTS, Case, Facts
from runner.protocols import sse
from runner.protocols.message import (
    STREAM_MALFORMED,
    STREAM_TRUNCATED,
    TOOL_CALL_MALFORMED,
    Message,
    RawToolCall,
    StreamFold,
    StreamStatus,
    error_detail,
    load_json,
    str_or_none,
)
from runner.protocols.recording import ERROR_MESSAGE, PIECE, Event, RecordedReply, Recorder, dumps
from runner.protocols.wire import (
    ASSISTANT,
    SYSTEM,
    TOOL,
    Kind,
    Tokens,
    Wire,
    count,
    json_headers,
    plain,
    text_of,
    turns,
    with_params,
)
from runner.request.shape import Shape

if TYPE_CHECKING:
    from runner.config import EndpointConfig

NOT_JSON = "not_json"
NOT_OBJECT = "not_object"
MISSING_CANDIDATES = "missing_candidates"
USER = "user"
MODEL = "model"
JSON_MIME = "application/json"
# OpenAI's tool_choice strings as Gemini's function-calling modes
_MODES = {"auto": "AUTO", "none": "NONE", "required": "ANY"}
# the keywords of Gemini's Schema (an OpenAPI 3.0 subset); a schema's others are left out
_SCHEMA_KEYS = frozenset(
    {
        *("type", "format", "title", "description", "nullable", "enum", "default", "example"),
        *("properties", "required", "propertyOrdering", "minProperties", "maxProperties"),
        *("items", "minItems", "maxItems", "minLength", "maxLength", "pattern"),
        *("minimum", "maximum", "anyOf"),
    }
)


def url(cfg: EndpointConfig) -> str:
    """The model's method URL; the model is one path segment, escaped as one."""
    method = ":streamGenerateContent?alt=sse" if cfg.stream else ":generateContent"
    return (cfg.base_url or "").rstrip("/") + "/models/" + quote(cfg.model or "", safe="") + method


def headers(cfg: EndpointConfig, api_key: str | None) -> dict[str, str]:
    sent = json_headers(cfg)
    if api_key is not None:
        sent["x-goog-api-key"] = api_key
    return sent


def body(cfg: EndpointConfig, shape: Shape, case: Case) -> dict[str, Any]:
    """The JSON body for one call; temperature 0 by default so nights stay comparable."""
    systems: list[str] = []
    contents: list[dict[str, Any]] = []
    names: dict[Any, Any] = {}  # call id -> the function it called: a result names it
    results: list[Any] | None = None  # the functionResponse parts of the turn being built
    for turn in turns(shape, case):
        role = turn.get("role")
        if role == TOOL:
            name = names.get(turn.get("tool_call_id"))
            answer = {"name": name, "response": _response(text_of(turn.get("content")))}
            if results is None:
                results = []
                contents.append({"role": USER, "parts": results})
            results.append({"functionResponse": answer})
            continue
        results = None
        if role == SYSTEM:
            systems.append(text_of(turn.get("content")))
            continue
        parts = _parts(turn.get("content"))
        for call in (turn.get("tool_calls") or ()) if role == ASSISTANT else ():
            function = call.get("function") if isinstance(call, Mapping) else None
            function = function if isinstance(function, Mapping) else {}
            names[call.get("id")] = function.get("name")
            parts.append({"functionCall": {"name": function.get("name"), "args": _args(function)}})
        contents.append({"role": MODEL if role == ASSISTANT else USER, "parts": parts})
    sent: dict[str, Any] = {"contents": contents}
    if systems:
        sent["systemInstruction"] = {"parts": [{"text": "\n\n".join(systems)}]}
    if case.tools:
        sent["tools"] = [{"functionDeclarations": [_declaration(tool) for tool in case.tools]}]
    if case.tool_choice is not None:
        sent["toolConfig"] = {"functionCallingConfig": _calling(case.tool_choice)}
    config: dict[str, Any] = {"temperature": cfg.temperature, "maxOutputTokens": cfg.max_tokens}
    if case.response_format is not None:
        config["responseMimeType"] = JSON_MIME
        spec = case.response_format.get("json_schema")
        if isinstance(spec, Mapping) and spec.get("schema") is not None:
            config["responseSchema"] = _schema(spec["schema"])
    sent["generationConfig"] = config
    return with_params(sent, shape.params)


def _parts(content: Any) -> list[Any]:
    """A turn's content as parts: text as one text part, OpenAI's text parts as text parts,
    others as given; no content, no part."""
    if content is None:
        return []
    if not isinstance(content, list):
        return [{"text": content}]
    return [
        {"text": part["text"]}
        if isinstance(part, dict)
        and part.get("type") == "text"
        and isinstance(part.get("text"), str)
        else plain(part)
        for part in content
    ]


def _args(function: Mapping[str, Any]) -> Any:
    """A call's arguments as the object Gemini's `args` is (OpenAI writes them as JSON text,
    which the fixture loader made sure is an object)."""
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        ok, value = load_json(arguments)
        return value if ok else arguments
    return plain(arguments)


def _response(text: str) -> Any:
    """A tool's result as a functionResponse's `response`, which must be an object: the
    result itself when its text is a JSON object, else `{"output": text}`."""
    ok, value = load_json(text)
    return value if ok and isinstance(value, dict) else {"output": text}


def _declaration(tool: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI function tool as a function declaration, its parameters in Gemini's Schema."""
    function = tool.get("function")
    function = function if isinstance(function, Mapping) else {}
    out: dict[str, Any] = {"name": function.get("name")}
    if function.get("description") is not None:
        out["description"] = function["description"]
    if function.get("parameters") is not None:
        out["parameters"] = _schema(function["parameters"])
    return out


def _calling(choice: Any) -> dict[str, Any]:
    """OpenAI's tool_choice as a function-calling config (the fixture loader allows no other)."""
    if isinstance(choice, str):
        return {"mode": _MODES.get(choice, choice)}
    function = choice.get("function") if isinstance(choice, Mapping) else None
    name = function.get("name") if isinstance(function, Mapping) else None
    return {"mode": "ANY", "allowedFunctionNames": [name]}


def _schema(node: Any) -> Any:
    """A JSON Schema in Gemini's Schema: the keywords it reads, nested schemas likewise."""
    if not isinstance(node, Mapping):
        return plain(node)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "type" and isinstance(value, list):
            kinds = [kind for kind in value if kind != "null"]
            if len(kinds) < len(value):
                out["nullable"] = True
            if len(kinds) == 1:
                out["type"] = kinds[0]
            elif kinds:
                out["anyOf"] = [{"type": kind} for kind in kinds]
        elif key == "properties" and isinstance(value, Mapping):
            out[key] = {str(name): _schema(sub) for name, sub in value.items()}
        elif key == "items":
            out[key] = _schema(value)
        elif key in ("anyOf", "oneOf") and isinstance(value, list):
            out["anyOf"] = [_schema(sub) for sub in value]
        elif key in _SCHEMA_KEYS:
            out[key] = plain(value)
    return out


class _Reply:
    """What one response (or the responses of a stream so far) said."""

    def __init__(self) -> None:
        self.texts: list[str] | None = None  # None until a text part comes
        self.calls: list[RawToolCall] = []
        self.finish: str | None = None
        self.model: str | None = None
        self.id: str | None = None
        self.usage: Mapping[str, Any] | None = None

    def message(self) -> Message:
        return Message(
            content=None if self.texts is None else "".join(self.texts),
            tool_calls=tuple(self.calls),
            finish_reason=self.finish,
            response_model=self.model,
            response_id=self.id,
            usage=self.usage,
        )

    def response(self, doc: Mapping[str, Any]) -> str | None:
        """Fold one response in; the schema detail when it is not one's shape, else None."""
        self.model = self.model or str_or_none(doc.get("modelVersion"))
        self.id = self.id or str_or_none(doc.get("responseId"))
        usage = doc.get("usageMetadata")
        if isinstance(usage, dict):
            self.usage = usage
        candidates = doc.get("candidates")
        if candidates is None:
            return self.blocked(doc.get("promptFeedback"))
        if not isinstance(candidates, list) or not candidates:
            return self.blocked(doc.get("promptFeedback")) or MISSING_CANDIDATES
        candidate = candidates[0]
        if not isinstance(candidate, dict):
            return MISSING_CANDIDATES
        finish = candidate.get("finishReason")
        if isinstance(finish, str):
            self.finish = finish
        content = candidate.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        return self.parts(parts) if isinstance(parts, list) else None

    def blocked(self, feedback: Any) -> str | None:
        """A response without candidates: a blocked prompt's reason is its finish."""
        reason = feedback.get("blockReason") if isinstance(feedback, dict) else None
        if isinstance(reason, str):
            self.finish = reason
        return None

    def parts(self, parts: list[Any]) -> str | None:
        for part in parts:
            if not isinstance(part, dict):
                continue
            call = part.get("functionCall")
            if call is not None:
                if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                    return TOOL_CALL_MALFORMED
                arguments = call.get("args", {})
                if not isinstance(arguments, dict | str):  # judged as text: the name is kept
                    arguments = json.dumps(arguments, ensure_ascii=False)
                call_id = str_or_none(call.get("id"))
                self.calls.append(RawToolCall(id=call_id, name=call["name"], arguments=arguments))
            elif isinstance(part.get("text"), str) and part.get("thought") is not True:
                if self.texts is None:
                    self.texts = []
                self.texts.append(part["text"])
        return None


def facts(text: str) -> Facts:
    """What a body that failed the schema still says about itself: its model version, id
    and usage metadata."""
    ok, doc = load_json(text)
    if not ok or not isinstance(doc, dict):
        return NO_FACTS
    usage = doc.get("usageMetadata")
    return Facts(
        response_model=str_or_none(doc.get("modelVersion")),
        response_id=str_or_none(doc.get("responseId")),
        usage=usage if isinstance(usage, dict) else None,
    )


def fold_body(text: str, answer_pointer: str | None = None) -> Message | str:
    """A non-streamed reply body as a Message, or the schema-fail detail saying why not.

    The answer is the first candidate's text: `answer_pointer` is http-json's, unused here.
    """
    ok, doc = load_json(text)
    if not ok:
        return NOT_JSON
    if not isinstance(doc, dict):
        return NOT_OBJECT
    reply = _Reply()
    if doc.get("candidates") is None and not isinstance(doc.get("promptFeedback"), dict):
        return MISSING_CANDIDATES
    problem = reply.response(doc)
    return problem if problem is not None else reply.message()


def fold_stream(text: str) -> StreamFold:
    """A streamed reply body folded into a Message, and how the stream ended."""
    reply = _Reply()
    for event in sse.parse(text).events:
        ok, doc = load_json(event.data)
        if event.event == "error" or (isinstance(doc, dict) and doc.get("error") is not None):
            return StreamFold(reply.message(), StreamStatus.ERROR, _error_detail(doc))
        if not ok or not isinstance(doc, dict) or reply.response(doc) is not None:
            return StreamFold(reply.message(), StreamStatus.MALFORMED, STREAM_MALFORMED)
    if reply.finish is None:
        return StreamFold(reply.message(), StreamStatus.TRUNCATED, STREAM_TRUNCATED)
    return StreamFold(reply.message(), StreamStatus.FINISHED)


def _error_detail(doc: Any) -> str:
    """`stream_error:<status>`: Google's error status (`RESOURCE_EXHAUSTED`), else its code."""
    error = doc.get("error") if isinstance(doc, dict) else None
    if not isinstance(error, dict):
        return error_detail(None)
    status, code = error.get("status"), error.get("code")
    return error_detail(status if isinstance(status, str) else str(code) if code else None)


def carries_token(data: str) -> bool:
    """Whether one streamed response carries a token of the reply: text (not a thought) or a
    function call in its first candidate. A response with only usage or a finish carries
    none, so a stream's `ttft_ms` is dated by the first that does."""
    ok, doc = load_json(data)
    candidates = doc.get("candidates") if ok and isinstance(doc, dict) else None
    if not isinstance(candidates, list) or not candidates or not isinstance(candidates[0], dict):
        return False
    content = candidates[0].get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    return isinstance(parts, list) and any(
        isinstance(part, dict)
        and (
            part.get("functionCall") is not None
            or (part.get("thought") is not True and _nonempty(part.get("text")))
        )
        for part in parts
    )


def _nonempty(value: Any) -> bool:
    return isinstance(value, str) and value != ""


_COUNTS = (
    *("promptTokenCount", "toolUsePromptTokenCount", "candidatesTokenCount"),
    *("thoughtsTokenCount", "cachedContentTokenCount"),
)


def tokens(usage: Mapping[str, Any]) -> Tokens | None:
    """The prompt (tool-use prompts in it), the candidates and thoughts as the completion, the
    cached content as cached; None without a prompt count or when one it gives is no count."""
    if "promptTokenCount" not in usage:
        return None
    counts = [count(usage.get(name, 0)) for name in _COUNTS]
    if None in counts:
        return None
    prompt, tool, candidates, thoughts, cached = (n or 0 for n in counts)
    return Tokens(prompt + tool, candidates + thoughts, min(cached, prompt + tool))


def _recorded_calls(reply: RecordedReply) -> list[dict[str, Any]]:
    """The calls as functionCall parts (their args an object, or a string as recorded)."""
    return [
        {"functionCall": {"id": call.id, "name": call.name, "args": call.argument_value}}
        for call in reply.tool_calls
    ]


def _recorded_response(
    reply: RecordedReply, parts: list[dict[str, Any]], *, finished: bool
) -> dict[str, Any]:
    """One response of the reply: the last one has the finish reason and the usage."""
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    doc: dict[str, Any] = {"candidates": [candidate], "modelVersion": reply.model}
    doc["responseId"] = reply.id
    if finished:
        candidate["finishReason"] = reply.finish("STOP")
        if reply.usage:
            doc["usageMetadata"] = dict(reply.usage)
    return doc


def recorded_body(reply: RecordedReply) -> dict[str, Any]:
    text = [] if reply.content is None else [{"text": reply.content}]
    return _recorded_response(reply, text + _recorded_calls(reply), finished=True)


def recorded_events(reply: RecordedReply) -> tuple[list[Event], int]:
    """One response per content piece, then one with the calls, the finish and the usage
    (where truncation cuts)."""
    pieces = PIECE.findall(reply.content) if reply.content else []
    events = [
        Event(dumps(_recorded_response(reply, [{"text": p}], finished=False))) for p in pieces
    ]
    if reply.content == "":  # said nothing, as a text: one empty part
        events.append(Event(dumps(_recorded_response(reply, [{"text": ""}], finished=False))))
    finish_at = len(events)
    last = _recorded_response(reply, _recorded_calls(reply), finished=True)
    events.append(Event(dumps(last)))
    return events, finish_at


WIRE = Wire(
    kind=Kind.GEMINI,
    url=url,
    headers=headers,
    body=body,
    fold_body=fold_body,
    tokens=tokens,
    fold_stream=fold_stream,
    carries_token=carries_token,
    facts=facts,
    recorded=Recorder(
        recorded_body,
        recorded_events,
        Event(dumps({"error": {"code": 503, "message": ERROR_MESSAGE, "status": "UNAVAILABLE"}})),
    ),
)
