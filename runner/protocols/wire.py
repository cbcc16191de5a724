"""The one interface every wire protocol implements, and the request pieces they share.

A protocol is a `Wire`: where a request goes (`url`), the headers it carries (`headers`, the
secret's too: the caller keeps them out of every record), the JSON body for a case (`body`),
and how a stored reply reads back (`fold_body` for a body sent whole, `fold_stream` for an SSE
stream, None where the protocol has no stream, with `carries_token` to date its first token),
what a reply's usage counts (`tokens`, in the one shape `Tokens` every cost is figured from),
and how a cassette's reply is written as a server of the protocol would send it (`recorded`,
a `runner.protocols.recording.Recorder`). `Kind` names
them, as an endpoint's `kind` does; `runner.protocols.wire_for` picks one. So no module outside
this package knows a protocol's wire shape: adding a protocol is a module with those functions,
one `Kind` member and one line in the package's registry (and the config's `kind` choices).

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
from runner.protocols.message import body_facts
from runner.request.shape import Shape

if TYPE_CHECKING:  # the config (pydantic) is only a type here
    from runner.config import EndpointConfig
    from runner.model import Facts
    from runner.protocols.message import Message, StreamFold
    from runner.protocols.recording import Recorder

SYSTEM = "system"
USER = "user"
ASSISTANT = "assistant"
TOOL = "tool"
# No call reads or writes a billion tokens (the largest context windows hold ten million): a
# count past it is no count. Summed over any run and priced at `config.MAX_PRICE_PER_MTOK`,
# every cost stays a finite float.
MAX_TOKENS = 1_000_000_000


class Kind(StrEnum):
    """The wire protocols parallax speaks: an endpoint's `kind`, an exchange's `adapter`."""

    OPENAI_CHAT = "openai-chat"
    OPENAI_RESPONSES = "openai-responses"
    ANTHROPIC_MESSAGES = "anthropic-messages"
    GEMINI = "gemini"
    HTTP_JSON = "http-json"


@dataclass(frozen=True, slots=True)
class Tokens:
    """One call's tokens in one shape whatever its protocol; `prompt` includes `cached`."""

    prompt: int
    completion: int
    cached: int


@dataclass(frozen=True, slots=True)
class Wire:
    """One protocol, as the client, the stamps and the report use it.

    `fold_body(text, answer_pointer)` reads a body sent whole into a Message, or the schema
    detail saying why it is none (the pointer is http-json's: where its answer sits).
    `fold_stream(text)` reads an SSE body, which only a protocol that streams has, and
    `carries_token(data)` says whether one of its events' data carries a token of the reply
    (content or tool-call arguments): the event a stream's `ttft_ms` is dated by. `facts(text)`
    is what a body that failed the schema still says about itself (its model, id and usage),
    where the protocol keeps them (OpenAI's and Anthropic's top-level keys unless it says).

    `tokens(usage)` reads the usage a reply of the protocol said (a Facts' `usage`, as an
    outcome row keeps it) as `Tokens`, or None when it says no prompt and completion counts
    or claims one past `MAX_TOKENS`. `recorded` writes a cassette's replies as the protocol
    sends them, whole or streamed, for a recorded endpoint speaking it; None for a protocol
    no recorded endpoint speaks (http-json).
    """

    kind: Kind
    url: Callable[[EndpointConfig], str]
    headers: Callable[[EndpointConfig, str | None], dict[str, str]]
    body: Callable[[EndpointConfig, Shape, Case], dict[str, Any]]
    fold_body: Callable[[str, str | None], Message | str]
    tokens: Callable[[Mapping[str, Any]], Tokens | None]
    fold_stream: Callable[[str], StreamFold] | None = None
    carries_token: Callable[[str], bool] | None = None
    facts: Callable[[str], Facts] = body_facts
    recorded: Recorder | None = None


def count(value: Any) -> int | None:
    """A token count: an int from 0 to MAX_TOKENS (a bool or a float is no count)."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_TOKENS:
        return value
    return None


def past(value: Any) -> bool:
    """Whether an optional count is a number past MAX_TOKENS: no usage to believe."""
    return isinstance(value, int | float) and not isinstance(value, bool) and value > MAX_TOKENS


def cached_in_prompt(prompt: int | None, completion: int | None, cached: Any) -> Tokens | None:
    """The tokens of a usage that counts its cached tokens inside the prompt (OpenAI's, the
    Responses API's): None without both counts or with a cache count past MAX_TOKENS; a cache
    count that is no count is none, and never more than the prompt."""
    if prompt is None or completion is None or past(cached):
        return None
    return Tokens(prompt, completion, min(count(cached) or 0, prompt))


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


def with_params(sent: dict[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """The body with the endpoint's `params` added to it. A params table that names a table
    the protocol builds (the Responses API's `text`, Gemini's `generationConfig`) adds its
    keys to that table, so `top_p` or `verbosity` can go where its API reads it; the config
    refuses any key the protocol sets itself, at the top or inside such a table
    (`config.PROTOCOL_KEYS`)."""
    for key, value in plain(params).items():
        built = sent.get(key)
        if isinstance(value, dict) and isinstance(built, dict):
            built.update(value)
        else:
            sent[key] = value
    return sent


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
