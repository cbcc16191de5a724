"""The three stamps, in order: transport, then schema, then task.

A closed socket is never graded: the schema stamp is only given when transport is ok, and the
task stamp only when both are. Otherwise task_score stays null, never 0.
"""

from __future__ import annotations

from runner import adapters
from runner.grading import GraderSet, grade
from runner.model import Case, Exchange, Outcome, Reply, Schema, Transport


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
    reply: Reply | None = None
    misses: tuple[str, ...] = ()
    if exchange.transport != Transport.OK or response is None:
        schema, detail, score, misses = Schema.SKIPPED.value, _transport_detail(exchange), None, ()
    else:
        parsed = adapters.parse(
            exchange.adapter,
            response,
            expects_json=case.expects_json,
            answer_pointer=exchange.answer_pointer,
        )
        if isinstance(parsed, str):
            schema, detail, score, misses = Schema.FAIL.value, parsed, None, ()
        else:
            reply = parsed
            result = grade(case, parsed, graders)
            schema, score, misses = Schema.OK.value, result.task_score, result.misses
            detail = ",".join(misses) if misses else "ok"
    return Outcome(
        case_id=exchange.case_id,
        side=exchange.side,
        sample=exchange.sample,
        fixture_sha=exchange.fixture_sha,
        stratum=case.stratum,
        model_alias=exchange.model_alias,
        response_model=reply.response_model if reply else None,
        response_id=reply.response_id if reply else None,
        system_fingerprint=reply.system_fingerprint if reply else None,
        transport=exchange.transport,
        schema=schema,
        task_score=score,
        misses=tuple(misses),
        detail=detail,
        http_status=response.status if response is not None else None,
        attempts=len(exchange.attempts),
        elapsed_ms=exchange.elapsed_ms,
        usage=reply.usage if reply else None,
    )
