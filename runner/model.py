"""The values that flow between stages. Immutable records inside; JSON at file boundaries.

A `Case` comes out of `fixtures`, an `Exchange` out of an endpoint (live or recorded), an
`Outcome` out of `stamps` + `grading`. Everything above the Exchange is a pure function of it,
which is what makes `replay` byte-identical.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any, Protocol, TypeVar, dataclass_transform

STRATA: tuple[str, ...] = ("easy", "medium", "stretch")
SIDES: tuple[str, ...] = ("reference", "candidate")
NOISE = "noise"  # ledger side of `noise_check`: the reference called a second, independent time
LEDGER_VERSION = 1
# what `from_json` raises on a corrupt row: a missing key, a wrong type, 1e400 as an integer
ROW_ERRORS = (KeyError, TypeError, ValueError, AttributeError, OverflowError)


_T = TypeVar("_T")


@dataclass_transform(frozen_default=True)
def record(cls: type[_T]) -> type[_T]:
    """A value that flows between stages: immutable to the type checker, a plain slotted
    dataclass at run time. A frozen dataclass sets each field through `object.__setattr__`,
    and a replay builds seven of these per ledger row: that was a fifth of its regrade. mypy
    still refuses an assignment to a field, and a record hashes by its fields as a frozen one
    does (which the type checker takes it to be)."""
    return dataclass(slots=True, unsafe_hash=True)(cls)


def _opt_str(data: Mapping[str, Any], key: str) -> str | None:
    """A ledger field that is text or null; anything else is a corrupt row (TypeError), found
    where the row is read, not where the gate first hashes or sorts the value."""
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{key} must be a string or null, got {value!r:.40}")
    return value


def _opt_int(data: Mapping[str, Any], key: str) -> int | None:
    """A ledger field that is a whole number or null (a bool is no number here)."""
    value = data.get(key)
    if value is not None and (type(value) is not int):
        raise TypeError(f"{key} must be an integer or null, got {value!r:.40}")
    return value


def _opt_bool(data: Mapping[str, Any], key: str) -> bool:
    """A ledger flag, false when absent (rows written before it existed)."""
    value = data.get(key, False)
    if not isinstance(value, bool):
        raise TypeError(f"{key} must be true or false, got {value!r:.40}")
    return value


def _attempt(data: Mapping[str, Any]) -> Attempt:
    """A raw row's attempt, its text fields checked: a replay joins them into the detail."""
    attempt = Attempt(**data)
    if not isinstance(attempt.transport, str):
        raise TypeError("attempt transport must be a string")
    for key in ("error", "message"):
        _opt_str(data, key)
    return attempt


def _response(data: Mapping[str, Any]) -> Response:
    """A raw row's response, its types checked: a replay decodes and parses `body`."""
    response = Response(**data)
    if not isinstance(response.body, str) or response.encoding not in ("utf-8", "base64"):
        raise TypeError("response body must be text in utf-8 or base64")
    if type(response.status) is not int or not isinstance(response.headers, dict):
        raise TypeError("response status must be an integer and headers an object")
    return response


def _fields(value: Any) -> dict[str, Any]:
    """A dataclass's fields as a dict, one level deep (the hot path of every ledger row)."""
    return {name: getattr(value, name) for name in value.__dataclass_fields__}


class Transport(StrEnum):
    """Transport stamp of one call, decided from exception class or status, never the body."""

    OK = "ok"
    TIMEOUT = "timeout"
    CONNECT_ERROR = "connect_error"
    CONNECTION_LOST = "connection_lost"
    RATE_LIMITED = "rate_limited"
    HTTP_ERROR = "http_error"
    TOO_LARGE = "too_large"
    CANCELLED = "cancelled"


# The error of an attempt the run's budget kept from being sent (`runner.cost.budget`): its call is
# stamped `cancelled` with this detail, and the outcome row's detail reads `NOT_SENT_DETAIL`.
BUDGET = "budget"
NOT_SENT_DETAIL = f"{Transport.CANCELLED}: {BUDGET}"


class Schema(StrEnum):
    """Schema stamp: only given when transport is ok; `skipped` otherwise."""

    OK = "ok"
    FAIL = "fail"
    SKIPPED = "skipped"


class Miss(Enum):
    """The built-in miss codes, a closed set. A miss reads `<code>` or `<code>:<argument>`;
    graders build every one with `Miss.of`, so no code is spelled in two places, and the docs'
    reference lists them from here. A custom grader's own codes are its own.

    Each member holds its code, the form of its argument, the expectation keys whose check
    gives it (`(always)` for checks every case has) and what it means.
    """

    EMPTY_COMPLETION = (
        "empty_completion",
        "",
        ("(always)",),
        "the reply has no text and calls no tool",
    )
    MISSING = (
        "missing",
        "<needle>",
        ("must_include",),
        "the reply does not include the needle (compared case-insensitively)",
    )
    FORBIDDEN = (
        "forbidden",
        "<needle>",
        ("must_not_include",),
        "the reply includes the needle (compared case-insensitively)",
    )
    OVER_BUDGET = (
        "over_budget",
        "<len>><max>",
        ("max_chars",),
        "the reply is longer than `max_chars` characters (1200 unless the case says)",
    )
    TOO_VERBOSE = (
        "too_verbose",
        "<n>><max>",
        ("max_sentences",),
        "the reply has more sentences than `max_sentences`",
    )
    REGEX_MISMATCH = (
        "regex_mismatch",
        "<pattern>",
        ("regex",),
        "the pattern (RE2) is not found in the reply",
    )
    REGEX_FORBIDDEN = (
        "regex_forbidden",
        "<pattern>",
        ("not_regex",),
        "the pattern (RE2) is found in the reply",
    )
    FIELD_MISSING = (
        "field_missing",
        "<key>",
        ("json_fields",),
        "the JSON answer has no such field (or is no object)",
    )
    FIELD_MISMATCH = (
        "field_mismatch",
        "<key>",
        ("json_fields",),
        "the field's value is not JSON-equal to the expected one",
    )
    SCHEMA_VIOLATION = (
        "schema_violation",
        "<json path>",
        ("json_schema",),
        "the JSON answer breaks the schema at that location",
    )
    SCHEMA_TOO_COMPLEX = (
        "schema_too_complex",
        "",
        ("json_schema", "tool_args_schema"),
        "the reply's schema checks took more than 100,000 keyword checks: bounded by work, "
        "never by the clock",
    )
    SCHEMA_TOO_DEEP = (
        "schema_too_deep",
        "",
        ("json_schema", "tool_args_schema"),
        "the reply's schema checks nested past 512 levels (a `$ref` that loops for this answer)",
    )
    SCHEMA_ERROR = (
        "schema_error",
        "<Class>",
        ("json_schema", "tool_args_schema"),
        "a reference in the schema could not be followed for this answer",
    )
    TOOL_MISSING = (
        "tool_missing",
        "<name>",
        ("tool_calls",),
        "no call of that name is left to match the expected call (all its checks fail)",
    )
    TOOL_ARG_MISSING = (
        "tool_arg_missing",
        "<name>.<key>",
        ("tool_calls",),
        "the matched call's arguments lack that field",
    )
    TOOL_ARG_MISMATCH = (
        "tool_arg_mismatch",
        "<name>.<key>",
        ("tool_calls",),
        "the matched call's argument is not JSON-equal to the expected one",
    )
    TOOL_UNEXPECTED = (
        "tool_unexpected",
        "<name>",
        ("no_tool_calls",),
        "the reply called a tool (once per name called)",
    )
    TOOL_UNKNOWN = (
        "tool_unknown",
        "<name>",
        ("(always, when the case offers tools)",),
        "the reply called a tool the case does not offer",
    )
    TOOL_ARGS_SCHEMA = (
        "tool_args_schema",
        "<name>:<json path>",
        ("tool_args_schema",),
        "a call's arguments break its tool's `parameters` at that location",
    )
    GRADER_ERROR = (
        "grader_error",
        "<Class>",
        ("(a custom grader)",),
        "the custom grader raised (or returned no list of strings); `grader_error:timeout`: "
        "it ran past `grader_timeout_seconds`, and the reply is unscored",
    )

    def __init__(self, code: str, argument: str, keys: tuple[str, ...], meaning: str) -> None:
        self.code = code
        self.argument = argument
        self.keys = keys
        self.meaning = meaning

    def of(self, argument: object = None) -> str:
        """The miss as graders write it: the code, and `:argument` when the code takes one."""
        return self.code if argument is None else f"{self.code}:{argument}"

    @property
    def form(self) -> str:
        """How the miss reads, its argument's form included: `missing:<needle>`."""
        return f"{self.code}:{self.argument}" if self.argument else self.code


@record
class ToolCall:
    """A tool call as graders see it: arguments parsed into an object."""

    id: str | None
    name: str
    arguments: dict[str, Any]


@record
class Case:
    """One golden case, normalised from any of the accepted fixture shapes.

    Exactly one of `prompt` and `messages` is set: a single user turn, or a conversation as
    written (OpenAI-style turns, checked by `runner.request.casekeys`). `tools` are already read
    from the file a row names, so nothing downstream touches the filesystem for them.
    """

    id: str
    prompt: str | None
    expect: Mapping[str, Any]
    fixture_sha: str
    path: str  # fixture file and 1-based line of the row, for error messages
    line: int
    stratum: str | None = None  # None when the row names none
    system: str | None = None
    grader: str | None = None
    completion: str | None = None  # a recorded offline reply (seed 000 rows)
    owner: str | None = None
    tags: tuple[str, ...] = ()
    messages: tuple[Mapping[str, Any], ...] | None = None
    vars: Mapping[str, str] = field(default_factory=dict)
    tools: tuple[Mapping[str, Any], ...] = ()
    tool_choice: Any = None
    response_format: Mapping[str, Any] | None = None
    completion_calls: tuple[ToolCall, ...] = ()  # the recorded reply's tool calls (grade)

    @property
    def expects_json(self) -> bool:
        """A case needs a JSON answer to pass the schema stamp when it has JSON expectations
        or its request asks for JSON (`response_format`, either type): a reply that ignored
        the format broke the request, as a prose answer to a `json_fields` case does."""
        return (
            "json_fields" in self.expect
            or "json_schema" in self.expect
            or self.response_format is not None
        )


@record
class Attempt:
    """One try of a call: every attempt is recorded, retried or not."""

    n: int
    transport: str
    elapsed_ms: int | None  # None: no time was measured (a cassette's call that records none)
    status: int | None = None
    error: str | None = None  # exception class name
    message: str | None = None
    retry_after: float | None = None  # seconds the server asked us to wait


@record
class Response:
    """The final response as received: body kept as UTF-8 text, or base64 when not UTF-8."""

    status: int
    headers: Mapping[str, str]
    body: str
    encoding: str = "utf-8"  # "utf-8" or "base64"
    truncated: bool = False


@record
class Exchange:
    """Raw request and response of one (case, side, sample) call: a line of raw.jsonl."""

    case_id: str
    side: str
    sample: int
    fixture_sha: str
    endpoint: str  # endpoint name from the config
    adapter: str  # wire format of the body: openai-chat, anthropic-messages, http-json
    model_alias: str | None
    request: Mapping[str, Any]  # {"method", "url", "body"}; never headers with secrets
    attempts: tuple[Attempt, ...]
    transport: str  # stamp of the final attempt
    response: Response | None
    started_at: str  # UTC ISO-8601
    # the final attempt's milliseconds from handing its request to the transport to its last
    # byte: the model's time for the reply that is graded, never parallax's own waiting; None:
    # no time measured (a recorded call whose cassette gives none)
    elapsed_ms: int | None
    answer_pointer: str | None = None  # http-json: where the answer sits in the body
    # the response header naming the served model, as the endpoint configured it: None when it
    # named none (known gateways' headers are read), "" for the body's `model` only
    served_model_header: str | None = None
    stream: bool = False  # the request asked for an SSE stream
    # milliseconds from sending the request to the first event of a 2xx stream that carried a
    # token (content or tool-call arguments; the final attempt's), kept when the stream then
    # failed; None for a reply sent whole or a stream that carried none
    ttft_ms: int | None = None
    request_sha: str | None = None  # the endpoint's request shaping (templates.request_sha)
    # milliseconds the call waited before its attempts went out (rpm pacing, a concurrency
    # slot, the run's budget), and slept between them (retry backoff); None in rows written
    # before they were recorded
    queued_ms: int | None = None
    backoff_ms: int | None = None

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.case_id, self.side, self.sample)

    def to_json(self) -> dict[str, Any]:
        """The raw.jsonl row; what `dataclasses.asdict` gives, built without its deep copy."""
        data = _fields(self)
        data["attempts"] = [_fields(a) for a in self.attempts]
        if self.response is not None:
            data["response"] = _fields(self.response)
        data["version"] = LEDGER_VERSION
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Exchange:
        """Rebuild from a raw.jsonl row; raises KeyError/TypeError/ValueError on bad rows."""
        response = data.get("response")
        request = data["request"]
        if not isinstance(request, dict):  # kept as read: nothing downstream changes it
            raise TypeError(f"request is not an object: {request!r}")
        return cls(
            case_id=str(data["case_id"]),
            side=str(data["side"]),
            sample=int(data["sample"]),
            fixture_sha=str(data["fixture_sha"]),
            endpoint=str(data["endpoint"]),
            adapter=str(data["adapter"]),
            model_alias=_opt_str(data, "model_alias"),
            request=request,
            attempts=tuple(_attempt(a) for a in data["attempts"]),
            transport=str(data["transport"]),
            response=_response(response) if response is not None else None,
            started_at=str(data["started_at"]),
            elapsed_ms=None if data["elapsed_ms"] is None else int(data["elapsed_ms"]),
            answer_pointer=_opt_str(data, "answer_pointer"),
            served_model_header=_opt_str(data, "served_model_header"),
            stream=_opt_bool(data, "stream"),
            ttft_ms=_opt_int(data, "ttft_ms"),
            request_sha=_opt_str(data, "request_sha"),
            queued_ms=_opt_int(data, "queued_ms"),
            backoff_ms=_opt_int(data, "backoff_ms"),
        )


@record
class Outcome:
    """One row of outcomes.jsonl: the three stamps of one call and its grade."""

    case_id: str
    side: str
    sample: int
    fixture_sha: str
    stratum: str | None
    model_alias: str | None
    response_model: str | None
    response_id: str | None
    system_fingerprint: str | None
    transport: str
    schema: str
    task_score: float | None
    misses: tuple[str, ...]
    detail: str
    http_status: int | None
    attempts: int
    elapsed_ms: int | None  # copied from the exchange: None when no time was measured
    usage: Mapping[str, Any] | None = None
    request_sha: str | None = None  # copied from the exchange
    tool_calls: tuple[str, ...] = ()  # the names of the tools the reply called, in order
    finish_reason: str | None = None  # why the reply ended, as the server said
    ttft_ms: int | None = None  # a stream's time to its first token, copied from the exchange
    queued_ms: int | None = None  # the call's own waiting, copied from the exchange
    backoff_ms: int | None = None

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.case_id, self.side, self.sample)

    @property
    def admitted(self) -> bool:
        """The admission rule: only these rows enter any score comparison."""
        return (
            self.transport == Transport.OK
            and self.schema == Schema.OK
            and self.task_score is not None
        )

    @property
    def passed(self) -> bool:
        return self.admitted and not self.misses

    def to_json(self) -> dict[str, Any]:
        data = _fields(self)
        data["misses"] = list(self.misses)
        data["tool_calls"] = list(self.tool_calls)
        data["version"] = LEDGER_VERSION
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Outcome:
        """Rebuild from an outcomes.jsonl row; raises KeyError/TypeError/ValueError."""
        score = data.get("task_score")
        return cls(
            case_id=str(data["case_id"]),
            side=str(data["side"]),
            sample=int(data.get("sample", 0)),
            fixture_sha=str(data["fixture_sha"]),
            stratum=_opt_str(data, "stratum"),
            model_alias=_opt_str(data, "model_alias"),
            response_model=_opt_str(data, "response_model"),
            response_id=_opt_str(data, "response_id"),
            system_fingerprint=_opt_str(data, "system_fingerprint"),
            transport=str(data["transport"]),
            schema=str(data["schema"]),
            task_score=float(score) if score is not None else None,
            misses=tuple(str(m) for m in data.get("misses") or ()),
            detail=str(data.get("detail", "")),
            http_status=data.get("http_status"),
            attempts=int(data.get("attempts", 1)),
            elapsed_ms=None if (ms := data.get("elapsed_ms", 0)) is None else int(ms),
            usage=data.get("usage"),
            request_sha=_opt_str(data, "request_sha"),
            tool_calls=tuple(str(name) for name in data.get("tool_calls") or ()),
            finish_reason=_opt_str(data, "finish_reason"),
            ttft_ms=_opt_int(data, "ttft_ms"),
            queued_ms=_opt_int(data, "queued_ms"),
            backoff_ms=_opt_int(data, "backoff_ms"),
        )


@record
class Grade:
    """What the graders say of one admitted reply; `unscored` when they could not say (a
    custom grader ran past its time limit): no task_score, so the row is not admitted."""

    misses: tuple[str, ...]
    checks: int
    passed_checks: int
    unscored: bool = False

    @property
    def task_score(self) -> float | None:
        if self.unscored:
            return None
        return self.passed_checks / self.checks if self.checks else 1.0


@record
class Facts:
    """What a reply says about itself: read from every served body that parsed as a JSON
    object, whatever the schema stamp, so a reply that breaks the schema still names the
    model that sent it (a model swap that breaks JSON is still drift) and what it cost."""

    response_model: str | None = None
    response_id: str | None = None
    system_fingerprint: str | None = None
    usage: Mapping[str, Any] | None = None


NO_FACTS = Facts()


@record
class Reply:
    """What a protocol read out of a well-formed reply (the schema stamp passed).

    `text` is "" for a reply that only called tools, so the case's text keys still apply.
    """

    text: str
    answer: Any = None  # parsed JSON answer when the case expects JSON
    facts: Facts = field(default=NO_FACTS)
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None


class Endpoint(Protocol):
    """Anything that turns a case into an Exchange: a live HTTP client or a recorded cassette.

    `call` never raises for transport trouble; it stamps it. Only cancellation propagates
    (after the attempt is recorded by the caller's scope), and `runner.shutdown.NotStarted`
    for a call a stopping run kept from going out.
    """

    name: str

    async def call(self, case: Case, side: str, sample: int) -> Exchange: ...

    async def aclose(self) -> None: ...
