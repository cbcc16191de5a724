"""The three stamps, in order: transport, then schema, then task.

A closed socket is never graded: the schema stamp is only given when transport is ok, and the
task stamp only when both are. Otherwise task_score stays null, never 0. What a served body
says about itself (model, id, fingerprint, usage) is kept whatever its schema stamp: a model
swap that breaks the JSON is still a swap, and its tokens were still paid for.

A served reply is read through its protocol (`protocols.read`), sent whole or streamed: the
schema stamp is that reader's verdict (`stream_malformed`, `tool_args_not_json`, ...), and the
row keeps the tools the reply called and its finish reason whatever the verdict. A stream that
broke off was stamped by the client when it arrived; the row copies that stamp, as it copies
the exchange's `ttft_ms`, `queued_ms`, `backoff_ms` and `request_sha`.
"""

from __future__ import annotations

from runner import protocols
from runner.grading.graders import GraderSet, grade
from runner.model import Case, Exchange, Outcome, Schema, Transport

_UNREAD = protocols.Read(None)  # a call that was not served has no reply to read


def _transport_detail(exchange: Exchange) -> str:
    last = exchange.attempts[-1] if exchange.attempts else None
    if last is None:
        return exchange.transport
    parts = [exchange.transport]
    if last.status is not None:
        parts.append(f"HTTP {last.status}")
    if last.error and last.error != "recorded":
        parts.append(last.error)
    if last.message:
        parts.append(last.message)
    return ": ".join(parts)


def stamp(exchange: Exchange, case: Case, graders: GraderSet) -> Outcome:
    """Turn one exchange into its outcome row; a pure function of its arguments."""
    response = exchange.response
    read = _UNREAD
    served: str | None = None
    misses: tuple[str, ...] = ()
    if exchange.transport != Transport.OK or response is None:
        schema, detail, score, misses = Schema.SKIPPED.value, _transport_detail(exchange), None, ()
    else:
        read = protocols.read(
            exchange.adapter,
            response,
            expects_json=case.expects_json,
            answer_pointer=exchange.answer_pointer,
        )
        if read.reply is None:
            schema, detail, score, misses = Schema.FAIL.value, read.detail, None, ()
        else:
            result = grade(case, read.reply, graders)
            schema, score, misses = Schema.OK.value, result.task_score, result.misses
            detail = ",".join(misses) if misses else "ok"
        served = protocols.served_model(
            read.facts.response_model, response, exchange.served_model_header
        )
    facts = read.facts
    return Outcome(
        case_id=exchange.case_id,
        side=exchange.side,
        sample=exchange.sample,
        fixture_sha=exchange.fixture_sha,
        stratum=case.stratum,
        model_alias=exchange.model_alias,
        response_model=served,
        response_id=facts.response_id,
        system_fingerprint=facts.system_fingerprint,
        transport=exchange.transport,
        schema=schema,
        task_score=score,
        misses=tuple(misses),
        detail=detail,
        http_status=response.status if response is not None else None,
        attempts=len(exchange.attempts),
        elapsed_ms=exchange.elapsed_ms,
        usage=facts.usage,
        request_sha=exchange.request_sha,
        tool_calls=read.tool_names,
        finish_reason=read.finish_reason,
        ttft_ms=exchange.ttft_ms,
        queued_ms=exchange.queued_ms,
        backoff_ms=exchange.backoff_ms,
    )
