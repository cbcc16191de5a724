"""The one interface every wire protocol implements, and the request pieces they share.

A protocol is a `Wire`: where a request goes (`url`), the headers it carries (`headers`, the
secret's too: the caller keeps them out of every record), the JSON body for a case (`body`),
and how a stored reply reads back (`fold_body` for a body sent whole, `fold_stream` for an SSE
stream, None where the protocol has no stream, with `carries_token` to date its first token).
`Kind` names them, as an endpoint's `kind` does; `runner.protocols.wire_for` picks one. Adding
a protocol is a module with those functions, one `Kind` member and one line in the package's
registry.

Every body is built from the case and the endpoint's `Shape` (`runner.request.shape`: its
prompt templates, extra `params` and `stream` flag; the config builds it when it loads).
`turns` is the one rule for what a case says, in OpenAI's form; a protocol only maps those
turns to its own wire shape.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from runner.model import Case
from runner.request.shape import Shape

if TYPE_CHECKING:  # the config (pydantic) is only a type here
    from runner.config import EndpointConfig
    from runner.protocols.message import Message, StreamFold

SYSTEM = "system"
USER = "user"
ASSISTANT = "assistant"
TOOL = "tool"


class Kind(StrEnum):
    """The wire protocols parallax speaks: an endpoint's `kind`, an exchange's `adapter`."""

    OPENAI_CHAT = "openai-chat"
    ANTHROPIC_MESSAGES = "anthropic-messages"
    HTTP_JSON = "http-json"


@dataclass(frozen=True, slots=True)
class Wire:
    """One protocol, as the client, the stamps and the report use it.

    `fold_body(text, answer_pointer)` reads a body sent whole into a Message, or the schema
    detail saying why it is none (the pointer is http-json's: where its answer sits).
    `fold_stream(text)` reads an SSE body, which only a protocol that streams has, and
    `carries_token(data)` says whether one of its events' data carries a token of the reply
    (content or tool-call arguments): the event a stream's `ttft_ms` is dated by.
    """

    kind: Kind
    url: Callable[[EndpointConfig], str]
    headers: Callable[[EndpointConfig, str | None], dict[str, str]]
    body: Callable[[EndpointConfig, Shape, Case], dict[str, Any]]
    fold_body: Callable[[str, str | None], Message | str]
    fold_stream: Callable[[str], StreamFold] | None = None
    carries_token: Callable[[str], bool] | None = None


def json_headers(cfg: EndpointConfig, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A JSON request's headers: content type, the protocol's own, then the endpoint's."""
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if extra:
        headers.update(extra)
    headers.update(cfg.headers)
    return headers


def bearer(api_key: str | None) -> dict[str, str]:
    """The Authorization header most APIs take the secret in; none without a key."""
    return {} if api_key is None else {"Authorization": f"Bearer {api_key}"}


def plain(value: Any) -> Any:
    """A JSON copy of a case's or config's value: objects as dicts, arrays as lists, so a body
    is a fresh value the encoder takes whatever mapping type the case was read into."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def text_of(content: Any) -> str:
    """The text of a turn's content: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list | tuple):
        return "".join(
            part["text"]
            for part in content
            if isinstance(part, Mapping)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
        )
    return ""


def turns(shape: Shape, case: Case) -> list[dict[str, Any]]:
    """What one case says, as OpenAI-style turns: the system turn first when there is one.

    A prompt case is a system turn (the endpoint's system template rendered, else the case's
    own `system`; none when both are absent) and a user turn (the endpoint's user template
    rendered, else the prompt). A conversation is sent as written, except that a system
    prompt the endpoint's template renders replaces the text of its leading system turn, or
    is added before its first turn when it has none; the template sees the case's `system`,
    else that leading turn's text, as `system`. `user_template` never applies to one.
    Template errors are FixtureErrors naming the case (raised by the template).
    """
    if case.messages is None:
        system = shape.system_prompt(
            case_id=case.id,
            prompt=case.prompt,
            system=case.system,
            vars=case.vars,
            path=case.path,
            line=case.line,
        )
        user = shape.user_prompt(
            case_id=case.id,
            prompt=case.prompt,
            system=case.system,
            vars=case.vars,
            path=case.path,
            line=case.line,
        )
        said: list[dict[str, Any]] = []
        if system is not None:
            said.append({"role": SYSTEM, "content": system})
        said.append({"role": USER, "content": user})
        return said
    said = [plain(turn) for turn in case.messages]
    lead = said[0] if said and said[0].get("role") == SYSTEM else None
    own = case.system
    if own is None and lead is not None:
        own = text_of(lead.get("content"))
    system = shape.system_prompt(
        case_id=case.id,
        prompt=None,
        system=own,
        vars=case.vars,
        path=case.path,
        line=case.line,
    )
    if system is None or (system == own and lead is not None):
        return said  # as written
    if lead is not None:
        lead["content"] = system
    else:
        said.insert(0, {"role": SYSTEM, "content": system})
    return said
