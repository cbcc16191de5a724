"""The neutral reply both protocols fold into, streamed or not, and what graders get from it.

A protocol module reads its wire format into a `Message` and does nothing else: tool calls
keep their arguments in the wire form (OpenAI sends JSON text, Anthropic an object, or JSON
text in pieces when streamed). `graded` is then the one judge of what a schema stamp asks of
any message, whichever protocol and framing it came in: arguments must be a JSON object, a
reply needs content or a tool call, a JSON-expecting case needs a JSON answer (`read_answer`,
the rule `parallax grade` reads recorded completions by too). One judge is what keeps a
streamed reply and the same reply sent whole graded alike.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from runner.jsontext import loads, too_deep
from runner.model import NO_FACTS, Facts, Reply, ToolCall, record
from runner.text import may_hold_surrogates, scrub

__all__ = [  # ToolCall is re-exported: a tool call as the protocols read it
    "ANSWER_NOT_JSON",
    "MISSING_CONTENT",
    "STREAM_ERROR",
    "STREAM_MALFORMED",
    "STREAM_TRUNCATED",
    "TOOL_ARGS_NOT_JSON",
    "TOOL_CALL_MALFORMED",
    "Message",
    "RawToolCall",
    "StreamFold",
    "StreamStatus",
    "ToolCall",
    "body_facts",
    "error_detail",
    "facts_of",
    "graded",
    "load_json",
    "read_answer",
    "str_or_none",
]

# schema-fail details
ANSWER_NOT_JSON = "answer_not_json"  # a JSON case answered otherwise
MISSING_CONTENT = "missing_content"
TOOL_ARGS_NOT_JSON = "tool_args_not_json"
TOOL_CALL_MALFORMED = "tool_call_malformed"  # a call without a name, or not an object
# stream details: truncated is stamped connection_lost, malformed a schema fail
STREAM_TRUNCATED = "stream_truncated"
STREAM_MALFORMED = "stream_malformed"
STREAM_ERROR = "stream_error"  # + ":<type>": the server reported an error inside the stream

_ERROR_TYPE_CHARS = re.compile(r"[^A-Za-z0-9_.-]")
_ERROR_TYPE_MAX = 64


def load_json(text: str) -> tuple[bool, Any]:
    """Decode JSON a server sent: (True, value), or (False, None) when it is none.

    Refused past the fixed nesting bound (so a live run and its replay, called from different
    stack depths, judge a hostile body alike) and with lone surrogates scrubbed, so the value
    can always be written to a ledger.
    """
    if too_deep(text) is not None:
        return False, None
    try:
        value = loads(text)
    except ValueError:
        return False, None
    return True, scrub(value) if may_hold_surrogates(text) else value


def str_or_none(value: Any) -> str | None:
    """A field that should be text: anything else on the wire reads as absent."""
    return value if isinstance(value, str) else None


def body_facts(text: str) -> Facts:
    """What a reply body that failed the schema still says about itself at its top level
    (model, id, fingerprint, usage); nothing when it is no JSON object."""
    ok, doc = load_json(text)
    return facts_of(doc) if ok and isinstance(doc, dict) else NO_FACTS


def facts_of(doc: Mapping[str, Any]) -> Facts:
    """The facts a JSON object body names at its top level, each of the type it must be."""
    usage = doc.get("usage")
    return Facts(
        response_model=str_or_none(doc.get("model")),
        response_id=str_or_none(doc.get("id")),
        system_fingerprint=str_or_none(doc.get("system_fingerprint")),
        usage=usage if isinstance(usage, dict) else None,
    )


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


def read_answer(text: str, *, expects_json: bool) -> tuple[Any, str | None]:
    """What a reply's text answers a case, as `(answer, None)`, or `(None, "answer_not_json")`.

    The one rule, for a run's protocols and for `parallax grade` alike: a case that expects
    JSON gets a JSON answer when the whole content, surrounding whitespace aside, is a JSON
    object or array, as it is or as the body of one ``` fence (optionally tagged, ```json).
    Prose before or after, even around a valid fenced block, is no JSON answer: the product
    that parses the reply would fail on it too. A text case has no answer to read.
    """
    if not expects_json:
        return None, None
    ok, answer = load_json(_strip_fence(text))
    if ok and isinstance(answer, dict | list):
        return answer, None
    return None, ANSWER_NOT_JSON


@record
class RawToolCall:
    """One tool call as the wire had it; `arguments` is JSON text or an object, unjudged."""

    id: str | None
    name: str
    arguments: str | dict[str, Any]


@record
class Message:
    """What one reply said, whichever protocol and framing carried it.

    `content` is None when the reply had no text at all (not the same as ""): with no tool
    call either, that is `missing_content`, while "" is a reply that said nothing
    (`empty_completion`, a task miss). The last four fields are what the reply says about
    itself; they are kept whether or not the reply passes the schema stamp.
    """

    content: str | None
    tool_calls: tuple[RawToolCall, ...] = ()
    finish_reason: str | None = None
    response_model: str | None = None
    response_id: str | None = None
    system_fingerprint: str | None = None
    usage: Mapping[str, Any] | None = None

    @property
    def facts(self) -> Facts:
        return Facts(
            response_model=self.response_model,
            response_id=self.response_id,
            system_fingerprint=self.system_fingerprint,
            usage=self.usage,
        )


def graded(message: Message, *, expects_json: bool) -> Reply | str:
    """What the graders get from `message`, or the schema-fail detail saying why nothing.

    Checked in order: every tool call has a name and arguments that are a JSON object
    (`tool_call_malformed`, `tool_args_not_json`); there is content or a tool call
    (`missing_content`); a JSON-expecting case has a JSON answer in its content
    (`answer_not_json`, whether or not the reply also called a tool). Whether a called tool
    was offered is a grader's question (`tool_unknown`), not the schema's. The reply's text
    is "" when it only called tools.
    """
    calls: list[ToolCall] = []
    for raw in message.tool_calls:
        if not raw.name:
            return TOOL_CALL_MALFORMED
        arguments = raw.arguments
        if isinstance(arguments, str):
            ok, arguments = load_json(arguments)
            if not ok or not isinstance(arguments, dict):
                return TOOL_ARGS_NOT_JSON
        calls.append(ToolCall(id=raw.id, name=raw.name, arguments=arguments))
    if message.content is None and not calls:
        return MISSING_CONTENT
    text = message.content or ""
    answer, problem = read_answer(text, expects_json=expects_json)  # the rule run and grade use
    if problem is not None:
        return problem
    return Reply(
        text=text,
        answer=answer,
        facts=message.facts,
        tool_calls=tuple(calls),
        finish_reason=message.finish_reason,
    )


class StreamStatus(StrEnum):
    """How a streamed body ended, which decides the stamp the caller gives it."""

    FINISHED = "finished"  # its finish event came: grade the message
    TRUNCATED = "truncated"  # ended without one: transport connection_lost, stream_truncated
    MALFORMED = "malformed"  # an event was not JSON or not the protocol's shape: schema fail
    ERROR = "error"  # the server sent an error event: a transport failure, stream_error:<type>


@record
class StreamFold:
    """A streamed body folded: the message as far as it got, how it ended, and the detail.

    The message is kept whatever the status, so the model, id and usage a broken stream
    announced are still recorded. `detail` is "" when finished.
    """

    message: Message
    status: StreamStatus
    detail: str = ""


def error_detail(kind: Any) -> str:
    """`stream_error:<type>` for the error type a server named (`unknown` for none).

    The type is the server's text and goes into outcome rows and reports, so it is cut to a
    short name of safe characters; a colon could not be told from the detail's own.
    """
    name = kind if isinstance(kind, str) else ""
    name = _ERROR_TYPE_CHARS.sub("_", name[:_ERROR_TYPE_MAX])
    return f"{STREAM_ERROR}:{name or 'unknown'}"
