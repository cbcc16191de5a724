"""Wire formats: how a case becomes a request body, and how a body becomes a Reply.

`parse` is the schema stamp's only judge. It runs on a stored body, so the same code grades a
live call, a recorded cassette and a replay. It never raises: a hostile body is a detail string.
`facts` reads what a served body says about itself (model, id, fingerprint, usage) whatever
the schema stamp, and `served_model` settles which model served it: a gateway's header when
the endpoint names one (or a known gateway sent its own), else the body's `model`.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from typing import Any

from runner.config import EndpointConfig
from runner.jsontext import loads, too_deep
from runner.model import NO_FACTS, Case, Facts, Reply, Response
from runner.text import may_hold_surrogates, scrub

OPENAI_CHAT = "openai-chat"
ANTHROPIC = "anthropic-messages"
HTTP_JSON = "http-json"
# Gateways that name the backend they routed to in a response header while the body's
# `model` is the alias asked for (LiteLLM); read when an endpoint names no header itself.
GATEWAY_MODEL_HEADERS: tuple[str, ...] = ("x-litellm-model-name",)
ANSWER_NOT_JSON = "answer_not_json"  # the schema detail of a JSON case answered otherwise


def request_url(cfg: EndpointConfig) -> str:
    base = (cfg.base_url or "").rstrip("/")
    if cfg.kind == OPENAI_CHAT:
        return base + "/chat/completions"
    if cfg.kind == ANTHROPIC:
        return base + "/v1/messages"
    return cfg.base_url or ""


def request_body(cfg: EndpointConfig, case: Case) -> dict[str, Any]:
    """The JSON body for one call; temperature 0 by default so nights stay comparable."""
    if cfg.kind == OPENAI_CHAT:
        messages: list[Mapping[str, Any]] = []
        if case.messages is not None:  # a conversation is sent as written
            messages.extend(case.messages)
        if case.system:
            messages.append({"role": "system", "content": case.system})
        if case.prompt is not None:
            messages.append({"role": "user", "content": case.prompt})
        return {
            "model": cfg.model,
            "messages": messages,
            "temperature": cfg.temperature,
            "max_tokens": cfg.max_tokens,
        }
    if cfg.kind == ANTHROPIC:
        body: dict[str, Any] = {
            "model": cfg.model,
            "max_tokens": cfg.max_tokens,
            "temperature": cfg.temperature,
            "messages": (
                list(case.messages)
                if case.messages is not None
                else [{"role": "user", "content": case.prompt}]
            ),
        }
        if case.system:
            body["system"] = case.system
        return body
    values = {"prompt": case.prompt or "", "system": case.system or "", "model": cfg.model or ""}
    filled: dict[str, Any] = _fill(cfg.body_template or {}, values)
    return filled


def auth_headers(cfg: EndpointConfig, api_key: str | None) -> dict[str, str]:
    """Headers that carry the secret; the caller must never record them."""
    if api_key is None:
        return {}
    if cfg.kind == ANTHROPIC:
        return {"x-api-key": api_key}
    return {"Authorization": f"Bearer {api_key}"}


def protocol_headers(cfg: EndpointConfig) -> dict[str, str]:
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if cfg.kind == ANTHROPIC:
        headers["anthropic-version"] = cfg.anthropic_version
    headers.update(cfg.headers)
    return headers


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


_LANGUAGE_TAG = re.compile(r"[ \t]*[A-Za-z0-9_.+-]*[ \t]*")  # the `json` of ```json


def _strip_fence(text: str) -> str:
    """Models often wrap JSON in a ``` fence: the body of one fence that is the whole content
    (an optional language tag on its first line) is the answer; anything else stays as is."""
    stripped = text.strip()
    if stripped.startswith("```") and stripped.endswith("```") and len(stripped) >= 6:
        inner = stripped[3:-3]
        newline = inner.find("\n")
        if newline < 0:
            return inner
        if _LANGUAGE_TAG.fullmatch(inner, 0, newline):
            return inner[newline + 1 :]
    return stripped


def _loads(text: str) -> tuple[bool, Any]:
    if too_deep(text) is not None:
        return False, None
    try:
        doc = loads(text)
    except ValueError:
        return False, None
    return True, scrub(doc) if may_hold_surrogates(text) else doc


def read_answer(text: str, *, expects_json: bool) -> tuple[Any, str | None]:
    """What a reply's text answers a case, as `(answer, None)`, or `(None, "answer_not_json")`.

    The one rule, for a run's adapters and for `parallax grade` alike: a case that expects
    JSON gets a JSON answer when the whole content, surrounding whitespace aside, is a JSON
    object or array, as it is or as the body of one ``` fence (optionally tagged, ```json).
    Prose before or after, even around a valid fenced block, is no JSON answer: the product
    that parses the reply would fail on it too. A text case has no answer to read.
    """
    if not expects_json:
        return None, None
    ok, answer = _loads(_strip_fence(text))
    if ok and isinstance(answer, dict | list):
        return answer, None
    return None, ANSWER_NOT_JSON


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _document(response: Response) -> dict[str, Any] | str:
    """The body as a JSON object, or the schema-failure detail saying why it is none."""
    body = response.body
    if response.encoding != "utf-8":
        try:
            body = base64.b64decode(body, validate=True).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return "not_utf8"
    ok, doc = _loads(body)
    if not ok:
        return "not_json"
    if not isinstance(doc, dict):
        return "not_object"
    return doc


def _facts_of(doc: Mapping[str, Any]) -> Facts:
    usage = doc.get("usage")
    return Facts(
        response_model=_str_or_none(doc.get("model")),
        response_id=_str_or_none(doc.get("id")),
        system_fingerprint=_str_or_none(doc.get("system_fingerprint")),
        usage=usage if isinstance(usage, dict) else None,
    )


def facts(response: Response) -> Facts:
    """What a body that failed the schema still says about itself; nothing when the body is
    no JSON object. (A reply that passed carries its facts: `Reply.facts`.)"""
    doc = _document(response)
    return NO_FACTS if isinstance(doc, str) else _facts_of(doc)


def served_model(body_model: str | None, response: Response, header: str | None) -> str | None:
    """The model that served a call: the header the endpoint names (`served_model_header`),
    or with none named the first known gateway header present, when it holds a name; else
    the body's `model`. `header` "" means the body's `model` only."""
    names = GATEWAY_MODEL_HEADERS if header is None else (header,) if header else ()
    for name in names:
        value = response.headers.get(name)
        if value is not None and value.strip():
            return value.strip()
    return body_model


def parse(
    adapter: str, response: Response, *, expects_json: bool, answer_pointer: str | None = None
) -> Reply | str:
    """Return a Reply, or the schema-failure detail (`not_json`, `missing_choices`, ...)."""
    doc = _document(response)
    if isinstance(doc, str):
        return doc
    answer: Any = None
    if adapter == OPENAI_CHAT:
        choices = doc.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return "missing_choices"
        message = choices[0].get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, str):
            return "missing_content"
        text = content
    elif adapter == ANTHROPIC:
        blocks = doc.get("content")
        if not isinstance(blocks, list):
            return "missing_content"
        parts = [
            b["text"]
            for b in blocks
            if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        ]
        if not parts and blocks:
            return "missing_content"
        text = "".join(parts)
    elif adapter == HTTP_JSON:
        found, value = _pointer(doc, answer_pointer or "")
        if not found:
            return "missing_answer"
        if isinstance(value, str):
            text = value
        elif isinstance(value, dict | list):
            text = json.dumps(value, sort_keys=True, ensure_ascii=False)
            answer = value
        else:
            return "answer_not_text"
    else:
        return f"unknown_adapter:{adapter}"
    if answer is None:
        answer, problem = read_answer(text, expects_json=expects_json)
        if problem is not None:
            return problem
    return Reply(text=text, answer=answer, facts=_facts_of(doc))
