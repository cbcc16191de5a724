"""http-json: any JSON API, its body a template and its answer at a JSON pointer.

The body is the endpoint's `body_template` with `{{prompt}}`, `{{system}}` and `{{model}}`
filled in every string, at any depth; the request shaping of the chat protocols (templates,
`params`, `stream`) does not apply (the config refuses it), and neither do a case's tools or
response format, which a template has no place for. A conversation cannot be sent at all.

The reply's answer is the value at `answer_pointer` (RFC 6901): text as it is, an object or
array as sorted-key JSON text, which a JSON case then reads back as its answer. There is no
stream format: an event-stream reply is read as a body, and is no JSON.

Its `usage`, an API of its own's, is read in whichever known provider's shape it is in:
OpenAI's counts when it names `prompt_tokens` or `completion_tokens`, Gemini's when it names
`promptTokenCount`, the Responses API's when it has `input_tokens_details`, else Anthropic's.
No recorded endpoint speaks it, so it writes no cassette replies.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from runner.errors import FixtureError
from runner.model import Case
from runner.protocols import anthropic_messages, gemini, openai_chat, openai_responses
from runner.protocols.message import Message, facts_of, load_json
from runner.protocols.wire import Kind, Tokens, Wire, bearer, json_headers
from runner.request.shape import Shape

if TYPE_CHECKING:
    from runner.config import EndpointConfig

NOT_JSON = "not_json"
NOT_OBJECT = "not_object"
MISSING_ANSWER = "missing_answer"
ANSWER_NOT_TEXT = "answer_not_text"


def url(cfg: EndpointConfig) -> str:
    return cfg.base_url or ""


def headers(cfg: EndpointConfig, api_key: str | None) -> dict[str, str]:
    return {**json_headers(cfg), **bearer(api_key)}


def body(cfg: EndpointConfig, shape: Shape, case: Case) -> dict[str, Any]:
    """The body template filled for one case."""
    if case.messages is not None:
        raise FixtureError(
            case.path,
            f"case {case.id!r}: a conversation (messages) cannot be sent to an http-json "
            "endpoint, whose body is its body_template",
            line=case.line,
        )
    values = {"prompt": case.prompt or "", "system": case.system or "", "model": cfg.model or ""}
    filled: dict[str, Any] = _fill(cfg.body_template or {}, values)
    return filled


def _fill(template: Any, values: Mapping[str, str]) -> Any:
    if isinstance(template, str):
        out = template
        for name, value in values.items():
            out = out.replace("{{" + name + "}}", value)
        return out
    if isinstance(template, Mapping):
        return {k: _fill(v, values) for k, v in template.items()}
    if isinstance(template, list):
        return [_fill(v, values) for v in template]
    return template


def _pointer(doc: Any, pointer: str) -> tuple[bool, Any]:
    """Resolve an RFC 6901 JSON pointer; (False, None) when any step is missing."""
    if pointer == "":
        return True, doc
    node = doc
    for raw in pointer.lstrip("/").split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return False, None
    return True, node


def fold_body(text: str, answer_pointer: str | None = None) -> Message | str:
    """The answer at the pointer (the whole body for "" or none) as the Message's content,
    or the schema-fail detail saying why there is none."""
    ok, doc = load_json(text)
    if not ok:
        return NOT_JSON
    if not isinstance(doc, dict):
        return NOT_OBJECT
    found, value = _pointer(doc, answer_pointer or "")
    if not found:
        return MISSING_ANSWER
    if isinstance(value, str):
        content = value
    elif isinstance(value, dict | list):
        content = json.dumps(value, sort_keys=True, ensure_ascii=False)
    else:
        return ANSWER_NOT_TEXT
    facts = facts_of(doc)
    return Message(
        content=content,
        response_model=facts.response_model,
        response_id=facts.response_id,
        system_fingerprint=facts.system_fingerprint,
        usage=facts.usage,
    )


def tokens(usage: Mapping[str, Any]) -> Tokens | None:
    """The usage read by the protocol whose shape it has (the module's docstring says how)."""
    if "prompt_tokens" in usage or "completion_tokens" in usage:
        return openai_chat.tokens(usage)
    if "promptTokenCount" in usage:
        return gemini.tokens(usage)
    if isinstance(usage.get("input_tokens_details"), Mapping):
        return openai_responses.tokens(usage)
    return anthropic_messages.tokens(usage)


WIRE = Wire(
    kind=Kind.HTTP_JSON,
    url=url,
    headers=headers,
    body=body,
    fold_body=fold_body,
    tokens=tokens,
)
