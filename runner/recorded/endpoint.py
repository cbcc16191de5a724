"""The `recorded` endpoint: replies from a cassette file, for offline runs and demos.

It returns the same `Exchange` a live call of its protocol would (`openai-chat` unless the
endpoint says `protocol = "openai-responses"`, `"anthropic-messages"` or `"gemini"`; streamed
when the endpoint says `stream = true` or the row does), with the body a server would have sent
(its protocol writes it, `recorded.wire` breaks it), so everything above the exchange (stamps,
grading, gate) cannot tell the difference. A streamed body goes through the same
classification a live stream gets when it arrives, so a recorded truncated stream is
`connection_lost` for the same reason a live one is. A cassette line can also record a
transport failure, a broken stream or a malformed body, which lets an offline run exercise
every stamp.

Cassette rows (JSONL), keyed by `case_id`, optionally narrowed by `suite`, `side` and
`sample` (the most specific match wins):

    {"case_id": "c1", "completion": "text or a JSON value", "model": "served-model-name"}
    {"case_id": "c2", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]}
    {"case_id": "c3", "completion": "Hi", "stream": true}           # an SSE body
    {"case_id": "c4", "fault": "stream_truncated"}                  # a stream with no finish
    {"case_id": "c5", "fault": "timeout"}        # any transport stamp except ok
    {"case_id": "c6", "status": 503, "body": "upstream busy"}
    {"case_id": "c7", "body": "<html>not json</html>"}   # a 200 with this raw body
    {"case_id": "c8", "completion": "Hi", "elapsed_ms": 850}        # the call took 850 ms
                                                    # (without it: no latency, never 0 ms)

With no matching row, a case's own recorded `completion` (seed 000 rows) and recorded tool
calls are the reply.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

from runner.cost.budget import Meter, refusal
from runner.errors import DataError
from runner.ledger import read_jsonl
from runner.model import NOISE, SIDES, Attempt, Case, Exchange, Response, Transport
from runner.protocols import Kind, first_token, stream_end
from runner.protocols.recording import RecordedCall, RecordedReply
from runner.recorded import wire
from runner.recorded.wire import DISCONNECT, StreamFault
from runner.text import holds_surrogate

_TRANSPORT_FAULTS = {t.value for t in Transport} - {Transport.OK.value, Transport.HTTP_ERROR.value}
_STREAM_FAULTS = {f.value for f in StreamFault}
_FAULTS = _TRANSPORT_FAULTS | _STREAM_FAULTS | {DISCONNECT}
_KEYS = {"case_id", "suite", "sample", "completion", "model", "id", "system_fingerprint"}
_KEYS |= {"fault", "status", "body", "usage", "side", "tool_calls", "finish_reason", "stream"}
_KEYS |= {"elapsed_ms"}
_CALL_KEYS = {"name", "arguments", "id"}
JSON_TYPE = "application/json"
SSE_TYPE = "text/event-stream"


CASSETTE_SIDES = (*SIDES, NOISE)
CassetteKey = tuple[str | None, str | None, str, int | None]


def _key(suite: Any, side: Any, case_id: str, sample: Any) -> CassetteKey:
    return (suite or None, side or None, case_id, sample)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _call_problem(calls: Any) -> str | None:
    """Why a row's `tool_calls` cannot be recorded, or None."""
    if not isinstance(calls, list):
        return "tool_calls must be a list of {name, arguments, id?} objects"
    for n, call in enumerate(calls):
        where = f"tool_calls[{n}]"
        if not isinstance(call, dict):
            return f"{where} must be an object with name and arguments"
        unknown = sorted(set(call) - _CALL_KEYS)
        if unknown:
            return f"{where}: unknown key {unknown[0]!r} (name, arguments, id)"
        if not isinstance(call.get("name"), str) or not call["name"]:
            return f"{where}.name must be a non-empty string"
        if "arguments" not in call or not isinstance(call["arguments"], dict | str):
            return f"{where}.arguments must be an object, or a string to record malformed ones"
        if "id" in call and (not isinstance(call["id"], str) or not call["id"]):
            return f"{where}.id must be a non-empty string"
    return None


def _reply_problem(row: Mapping[str, Any]) -> str | None:
    """Why the reply keys of a row do not go together, or None."""
    if "tool_calls" in row:
        problem = _call_problem(row["tool_calls"])
        if problem:
            return problem
    finish = row.get("finish_reason", "x")
    if not isinstance(finish, str) or not finish:
        return "finish_reason must be a non-empty string"
    if "stream" in row and not isinstance(row["stream"], bool):
        return "stream must be true or false"
    if "body" in row:
        for key in ("tool_calls", "finish_reason"):
            if key in row:
                return f"body is the raw reply as sent: {key} cannot go with it"
    fault = row.get("fault")
    if fault in _STREAM_FAULTS:
        if row.get("stream") is False:
            return f"fault {fault} breaks a stream: stream cannot be false"
        if "body" in row:
            return f"fault {fault} writes its own stream: body cannot go with it"
    if fault in (*_STREAM_FAULTS, DISCONNECT) and "status" in row:
        return f"fault {fault} breaks a 2xx reply: status cannot go with it"
    return None


def _row_problem(row: Mapping[str, Any]) -> str | None:
    """Why a cassette row cannot be replayed, or None; checked before its key is built."""
    if holds_surrogate(row):
        return "lone surrogate escape (\\ud800-\\udfff) is not text"
    unknown = sorted(set(row) - _KEYS)
    if unknown:
        return f"unknown cassette key {unknown[0]!r}"
    case_id = row.get("case_id")
    if not isinstance(case_id, str) or not case_id:
        return "cassette row needs a string case_id"
    fault = row.get("fault")
    if fault is not None and fault not in _FAULTS:
        return f"unknown fault {fault!r} (one of {', '.join(sorted(_FAULTS))})"
    if "status" in row and not _is_int(row["status"]):
        return "status must be an integer"
    if "body" in row and not isinstance(row["body"], str):
        return "body must be a string"
    if row.get("sample") is not None and not _is_int(row["sample"]):
        return "sample must be an integer"
    if "elapsed_ms" in row and not (_is_int(row["elapsed_ms"]) and row["elapsed_ms"] >= 0):
        return "elapsed_ms must be a whole number of milliseconds, 0 or more"
    suite = row.get("suite")
    if suite is not None and not isinstance(suite, str):
        return "suite must be a string (a suite name)"
    side = row.get("side")
    if side is not None and (not isinstance(side, str) or side not in CASSETTE_SIDES):
        return f"side must be one of {', '.join(CASSETTE_SIDES)}"
    return _reply_problem(row)


def load_cassette(path: Path) -> dict[CassetteKey, dict[str, Any]]:
    """Read a cassette, checking every row so a typo fails `validate`, not the night run."""
    entries: dict[CassetteKey, dict[str, Any]] = {}
    for line_no, row in read_jsonl(path, tolerate_torn_tail=False):
        if not isinstance(row, dict):
            raise DataError(path, "cassette row must be a JSON object", line_no)
        problem = _row_problem(row)
        if problem:
            raise DataError(path, problem, line_no)
        key = _key(row.get("suite"), row.get("side"), row["case_id"], row.get("sample"))
        if key in entries:
            raise DataError(path, f"duplicate cassette entry for {row['case_id']!r}", line_no)
        entries[key] = row
    return entries


def _fixture_reply(case: Case) -> dict[str, Any]:
    """A case's own recorded reply (its `completion` and recorded tool calls) as a row."""
    calls = [
        {"name": c.name, "arguments": c.arguments, **({"id": c.id} if c.id else {})}
        for c in case.completion_calls
    ]
    return {"completion": case.completion, **({"tool_calls": calls} if calls else {})}


class _Played:
    """What one cassette row plays back as: the final attempt's stamp and the response."""

    __slots__ = ("error", "message", "response", "transport")

    def __init__(
        self,
        transport: str,
        response: Response | None = None,
        *,
        error: str | None = None,
        message: str | None = None,
    ) -> None:
        self.transport = transport
        self.response = response
        self.error = error
        self.message = message


class RecordedEndpoint:
    """An Endpoint whose replies were recorded earlier (or written by hand)."""

    def __init__(
        self,
        name: str,
        *,
        suite: str,
        model: str | None,
        cassette: Mapping[CassetteKey, Mapping[str, Any]],
        protocol: str | None = None,
        stream: bool = False,
        request_sha: str | None = None,
        meter: Meter | None = None,
    ) -> None:
        self.name = name
        self._suite = suite
        self._model = model
        self._cassette = cassette
        self._protocol = protocol or Kind.OPENAI_CHAT.value  # what recorded ones always spoke
        self._stream = stream  # the endpoint's `stream`: a row's own `stream` wins
        self._request_sha = request_sha  # the request its cassette answers, as configured
        self._meter = meter  # the run's budget, when it has one: a cassette's usage is spent

    def _entry(self, case_id: str, side: str, sample: int) -> Mapping[str, Any] | None:
        """The most specific row wins: suite, then side, then sample narrow a match."""
        for suite in (self._suite, None):
            for side_ in (side, None):
                for sample_ in (sample, None):
                    found = self._cassette.get((suite, side_, case_id, sample_))
                    if found is not None:
                        return found
        return None

    async def call(self, case: Case, side: str, sample: int) -> Exchange:
        entry = self._entry(case.id, side, sample)
        if entry is None and (case.completion is not None or case.completion_calls):
            entry = _fixture_reply(case)
        streamed = self._streamed(entry)
        queued, allowed = 0, True  # only the run's budget makes a cassette's call wait
        meter = self._meter
        if meter is not None:
            # the budget holds the estimate of the body the live endpoint would send
            asked = anyio.current_time()
            key = (case.id, side, sample)
            allowed = not meter.refuses(key, 1) and await meter.reserve(
                key, meter.estimate_case(case), case, 1
            )
            queued = round((anyio.current_time() - asked) * 1000)
        if not allowed:
            played, attempt = _Played(str(Transport.CANCELLED)), refusal(1)
        else:
            played = self._replay(case, entry, streamed=streamed)
            attempt = Attempt(
                n=1,
                transport=played.transport,
                # what the recorded call took, as data; a row that says nothing measured none
                # (a cassette takes no time: 0 ms would read as a call that fast)
                elapsed_ms=entry.get("elapsed_ms") if entry is not None else None,
                status=played.response.status if played.response is not None else None,
                error=played.error,
                message=played.message,
            )
        response = played.response
        # a 2xx stream whose events carried a token has a time to its first (a cassette takes
        # no time), however it then ended, as a live stream does; one cut off before has none
        ttft_ms = None
        if (
            streamed
            and response is not None
            and 200 <= response.status < 300
            and first_token(self._protocol, response.body) is not None
        ):
            ttft_ms = 0
        return Exchange(
            case_id=case.id,
            side=side,
            sample=sample,
            fixture_sha=case.fixture_sha,
            endpoint=self.name,
            adapter=self._protocol,
            model_alias=self._model,
            request={"method": "RECORDED", "url": f"cassette:{self.name}", "body": None},
            attempts=(attempt,),
            transport=played.transport,
            response=response,
            started_at=datetime.now(UTC).isoformat(),
            elapsed_ms=attempt.elapsed_ms,
            request_sha=self._request_sha,
            stream=streamed,
            ttft_ms=ttft_ms,
            queued_ms=queued,
            backoff_ms=0,
        )

    def _reply(self, case: Case, entry: Mapping[str, Any]) -> RecordedReply:
        completion = entry.get("completion")
        content: str | None = (
            completion
            if isinstance(completion, str) or completion is None
            else json.dumps(completion, ensure_ascii=False)
        )
        calls = tuple(
            RecordedCall(
                id=call.get("id") or f"call_{n}", name=call["name"], arguments=call["arguments"]
            )
            for n, call in enumerate(entry.get("tool_calls") or (), start=1)
        )
        return RecordedReply(
            content=content,
            tool_calls=calls,
            finish_reason=entry.get("finish_reason"),
            model=entry.get("model") or self._model or "recorded",
            id=entry.get("id") or f"rec-{case.id}",
            system_fingerprint=entry.get("system_fingerprint") or None,
            usage=entry.get("usage") or None,
        )

    def _streamed(self, entry: Mapping[str, Any] | None) -> bool:
        """Whether the call is a stream: the row says, else a stream fault, else the endpoint."""
        if entry is None:
            return self._stream
        return bool(entry.get("stream", self._stream or entry.get("fault") in _STREAM_FAULTS))

    def _replay(self, case: Case, entry: Mapping[str, Any] | None, *, streamed: bool) -> _Played:
        if entry is None:
            response = Response(404, {"content-type": JSON_TYPE}, "")
            message = f"no recording for case {case.id!r}"
            return _Played(Transport.HTTP_ERROR, response, error="recorded", message=message)
        fault = entry.get("fault")
        if fault in _TRANSPORT_FAULTS:
            return _Played(str(fault), error="recorded", message=f"recorded {fault}")
        status = int(entry.get("status", 200))
        if "body" in entry:
            text = str(entry["body"])
        elif streamed:
            stream_fault = StreamFault(fault) if fault in _STREAM_FAULTS else None
            text = wire.stream(self._protocol, self._reply(case, entry), stream_fault)
        else:
            text = wire.body(self._protocol, self._reply(case, entry))
        headers = {"content-type": SSE_TYPE if streamed else JSON_TYPE}
        if fault == DISCONNECT:
            cut = wire.disconnected(text, streamed=streamed)
            response = Response(status, headers, cut, truncated=True)
            return _Played(
                Transport.CONNECTION_LOST, response, error="recorded", message="recorded disconnect"
            )
        response = Response(status, headers, text)
        if status == 429:
            return _Played(
                Transport.RATE_LIMITED, response, error="recorded", message="recorded 429"
            )
        if not 200 <= status < 300:
            return _Played(
                Transport.HTTP_ERROR, response, error="recorded", message=f"recorded HTTP {status}"
            )
        if streamed:
            # the stamp a live client gives a 2xx stream once its bytes are in: one that ended
            # with no finish event is a lost connection, an in-band error event an HTTP error
            ended = stream_end(self._protocol, text)
            if ended is not None:
                return _Played(ended.transport, response, error=ended.error, message=ended.message)
        return _Played(Transport.OK, response)

    async def aclose(self) -> None:
        return None
