"""Anthropic's Message Batches API: requests inline at `/v1/messages/batches`, results as JSONL.

A batch is `{"requests": [{"custom_id", "params": <the request the live call sends>}]}`.
It is open while `processing_status` is `in_progress` or `canceling` and ended at `ended`;
its results (read from `/v1/messages/batches/<id>/results` under the endpoint's own base_url:
the `results_url` a reply names is not followed, so the key only ever goes to the host the
config names) are one line per request, `{"custom_id", "result": {"type": ...}}`, where
`succeeded` carries the `message` the live call would have got, `errored` the error body
(`{"type": "error", "error": {"type", "message"}}`, stamped by the status its type has on the
live API), and `canceled` and `expired` a request that never ran.

A message batch takes no metadata, and neither its list (`GET /v1/messages/batches`, newest
first) nor its retrieve shows its requests or their custom_ids (only the results do, once it
has ended), so the nonce travels only in the custom_ids. A lookup matches what the list does
show: a batch created between the intent and the create's `deadline` after it (give or take
the clocks' skew) with as many requests as the intent; one such batch is the one, and several
are told apart by their results once they end (`lookup.told_apart`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from runner.batch.http import BatchHttp, Failed
from runner.batch.journal import Intent, epoch
from runner.batch.provider import (
    BATCH_CANCELLED,
    BATCH_EXPIRED,
    LIST_PAGE,
    LIST_PAGES,
    SKEW_SECONDS,
    Polled,
    Result,
    State,
    listed,
    read_results,
    unfinished_list,
)
from runner.batch.rawjson import member
from runner.jsontext import dumps, loads
from runner.model import Transport

if TYPE_CHECKING:
    from runner.config import EndpointConfig

OPEN = frozenset({"in_progress", "canceling"})
# the status each error type has on the live Messages API (Anthropic's "Errors" page)
STATUS_OF = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
UNKNOWN_ERROR_STATUS = 500  # an error type this table does not know: the server's own error


class AnthropicBatches:
    """The batch API under an anthropic-messages endpoint's base_url."""

    max_requests = 100_000
    max_bytes = 256 * 1024 * 1024

    def __init__(self, cfg: EndpointConfig) -> None:
        self._batches = (cfg.base_url or "").rstrip("/") + "/v1/messages/batches"

    def line(self, custom_id: str, body: Mapping[str, Any]) -> bytes:
        return dumps({"custom_id": custom_id, "params": body})

    async def submit(self, http: BatchHttp, lines: Sequence[bytes], label: str, nonce: str) -> str:
        # the lines are already JSON: the body is built around them, not decoded and re-encoded
        content = b'{"requests":[' + b",".join(lines) + b"]}"
        created = await http.send("POST", self._batches, content=content)
        batch_id = _object(created).get("id")
        if not isinstance(batch_id, str) or not batch_id:
            raise Failed(Transport.HTTP_ERROR, None, "no_batch_id", "the batch named no id")
        return batch_id

    async def find(self, http: BatchHttp, intent: Intent, within: float) -> list[str]:
        at = epoch(intent.intent_at)
        since, until = at - SKEW_SECONDS, at + within + SKEW_SECONDS
        found: list[str] = []
        after = ""
        for _ in range(LIST_PAGES):
            url = f"{self._batches}?limit={LIST_PAGE}" + (f"&after_id={after}" if after else "")
            doc = _object(await http.send("GET", url))
            items = listed(doc)
            older = False
            for item in items:
                created = _time(item.get("created_at"))
                if created is None or created > until:
                    continue
                if created < since:
                    older = True
                    continue
                if _total(item.get("request_counts")) == len(intent.requests):
                    found.append(item["id"])
            if older or not doc.get("has_more") or not items:
                return found
            if items[-1]["id"] == after:  # a list that pages in place: no page will differ
                raise unfinished_list()
            after = items[-1]["id"]
        raise unfinished_list()

    async def poll(self, http: BatchHttp, batch_id: str) -> Polled:
        doc = _object(await http.send("GET", f"{self._batches}/{batch_id}"))
        status = doc.get("processing_status")
        if status in OPEN:
            return Polled(None)
        if status != "ended":
            raise Failed(
                Transport.HTTP_ERROR, None, "unknown_status", f"processing_status {status!r}"
            )
        counts = doc.get("request_counts")
        expired = counts.get("expired") if isinstance(counts, dict) else None
        if doc.get("cancel_initiated_at"):
            state = State.CANCELLED
        elif isinstance(expired, int) and expired > 0:
            state = State.EXPIRED
        else:
            state = State.COMPLETED
        return Polled(state)

    async def results(
        self, http: BatchHttp, batch_id: str, polled: Polled, cap: int
    ) -> list[Result]:
        data = await http.send("GET", f"{self._batches}/{batch_id}/results", cap=cap)
        return list(read_results(data, _result))

    async def cancel(self, http: BatchHttp, batch_id: str) -> None:
        await http.send("POST", f"{self._batches}/{batch_id}/cancel", json={})


def _object(data: bytes) -> dict[str, Any]:
    try:
        doc = loads(data)
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise Failed(Transport.HTTP_ERROR, None, "not_json", "the reply is not a JSON object")
    return doc


def _time(value: Any) -> float | None:
    """A batch's `created_at` (RFC 3339) as epoch seconds; None when it is not one."""
    try:
        return epoch(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _total(counts: Any) -> int | None:
    """How many requests a batch holds: the sum of its `request_counts`, whatever their state."""
    if not isinstance(counts, dict):
        return None
    values = [v for v in counts.values() if type(v) is int]
    return sum(values) if values else None


def _result(doc: Mapping[str, Any], line: str) -> Result | None:
    custom_id, result = doc.get("custom_id"), doc.get("result")
    if not isinstance(custom_id, str) or not isinstance(result, dict):
        return None
    kind = result.get("type")
    if kind == "succeeded":
        return Result(custom_id, 200, _sent(line, "message", result.get("message")))
    if kind == "errored":
        body = result.get("error")
        inner = body.get("error") if isinstance(body, dict) else None
        named = inner.get("type") if isinstance(inner, dict) else None
        status = STATUS_OF.get(named, UNKNOWN_ERROR_STATUS) if isinstance(named, str) else 500
        return Result(custom_id, status, _sent(line, "error", body))
    if kind == "canceled":
        return Result(custom_id, None, None, Transport.CANCELLED, BATCH_CANCELLED)
    if kind == "expired":
        return Result(custom_id, None, None, Transport.TIMEOUT, BATCH_EXPIRED)
    return None


def _sent(line: str, key: str, value: Any) -> str:
    """The reply (`result.<key>`) as the provider wrote it in the line."""
    sent = member(line, "result", key)
    return sent if sent is not None else dumps(value).decode()
