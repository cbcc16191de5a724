"""OpenAI's Batch API: a JSONL file to `/files`, a batch from it at `/batches`, results from
its output and error files.

Each line of the input file is `{"custom_id", "method": "POST", "url": <the endpoint's path>,
"body": <the request the live call sends>}`. A batch is open while `validating`,
`in_progress`, `finalizing` or `cancelling`; `completed`, `failed`, `expired` and `cancelled`
end it. The output file holds one line per answered request, `{"custom_id", "response":
{"status_code", "body"}, "error": null}` (an error status too: that is the live reply), and
the error file the requests that got no answer, `{"custom_id", "response": null, "error":
{"code", "message"}}`, where `batch_expired` and `batch_cancelled` name the two reasons a
request was never run. A `failed` batch was refused whole (its input did not validate): its
`errors.data[0].code` is the reason.

A batch carries its intent's nonce in its `metadata` (`parallax_nonce`), which the batch list
(`GET /batches`, newest first) shows: a lookup matches it exactly. The input file is named
after the nonce too (`parallax-batch-<nonce>.jsonl`), so a file whose batch was never created
can be found and deleted by hand; it costs nothing where it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from runner import logs
from runner.batch.http import BatchHttp, Failed
from runner.batch.journal import Intent, epoch
from runner.batch.provider import (
    BATCH_CANCELLED,
    BATCH_EXPIRED,
    COMPLETION_WINDOW,
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

OPEN = frozenset({"validating", "in_progress", "finalizing", "cancelling"})
ENDED = {
    "completed": State.COMPLETED,
    "failed": State.FAILED,
    "expired": State.EXPIRED,
    "cancelled": State.CANCELLED,
}
# what each kind's requests are answered by: the path a batch line names
PATHS = {"openai-chat": "/v1/chat/completions", "openai-responses": "/v1/responses"}
NONCE_KEY = "parallax_nonce"  # the metadata key a batch's intent nonce travels under


def input_file(nonce: str) -> str:
    """The name a batch's input file is uploaded under."""
    return f"parallax-batch-{nonce}.jsonl"


class OpenAIBatches:
    """The batch API under an openai-chat or openai-responses endpoint's base_url (its lines
    name the chat completions or the Responses path)."""

    max_requests = 50_000
    max_bytes = 200 * 1024 * 1024

    def __init__(self, cfg: EndpointConfig) -> None:
        self._base = (cfg.base_url or "").rstrip("/")
        self._path = PATHS[cfg.kind]

    def line(self, custom_id: str, body: Mapping[str, Any]) -> bytes:
        return dumps({"custom_id": custom_id, "method": "POST", "url": self._path, "body": body})

    async def submit(self, http: BatchHttp, lines: Sequence[bytes], label: str, nonce: str) -> str:
        content = b"".join(line + b"\n" for line in lines)
        try:
            uploaded = await http.send(
                "POST",
                f"{self._base}/files",
                files={"file": (input_file(nonce), content, "application/jsonl")},
                data={"purpose": "batch"},
            )
        except Failed as exc:  # an uploaded file costs nothing: a failure here is sure
            raise exc.unbilled() from None
        file_id = _field(uploaded, "id")
        if file_id is None:
            raise Failed(Transport.HTTP_ERROR, None, "no_file_id", "the upload named no file id")
        try:
            created = await http.send(
                "POST",
                f"{self._base}/batches",
                json={
                    "input_file_id": file_id,
                    "endpoint": self._path,
                    "completion_window": COMPLETION_WINDOW,
                    "metadata": {"parallax": label, NONCE_KEY: nonce},
                },
            )
        except Failed as exc:
            if exc.certain:  # no batch will ever read the file: worth a line, not a cost
                logs.get_logger().info(logs.BATCH_FILE_ORPHANED, file_id=file_id, reason=exc.reason)
            raise
        batch_id = _field(created, "id")
        if batch_id is None:  # created, perhaps, but unknowable: never sent again
            raise Failed(Transport.HTTP_ERROR, None, "no_batch_id", "the batch named no id")
        return batch_id

    async def find(self, http: BatchHttp, intent: Intent, within: float) -> list[str]:
        since = epoch(intent.intent_at) - SKEW_SECONDS
        after = ""
        for _ in range(LIST_PAGES):
            url = f"{self._base}/batches?limit={LIST_PAGE}" + (f"&after={after}" if after else "")
            doc = _object(await http.send("GET", url))
            items = listed(doc)
            for item in items:
                metadata = item.get("metadata")
                if isinstance(metadata, dict) and metadata.get(NONCE_KEY) == intent.nonce:
                    return [item["id"]]
            if not doc.get("has_more") or not items:
                return []
            if items[-1]["id"] == after:  # a list that pages in place: no page will differ
                raise unfinished_list()
            oldest = items[-1].get("created_at")
            if isinstance(oldest, int | float) and oldest < since:
                return []
            after = items[-1]["id"]
        raise unfinished_list()

    async def poll(self, http: BatchHttp, batch_id: str) -> Polled:
        doc = _object(await http.send("GET", f"{self._base}/batches/{batch_id}"))
        status = doc.get("status")
        if status in OPEN:
            return Polled(None)
        state = ENDED.get(status) if isinstance(status, str) else None
        if state is None:
            raise Failed(Transport.HTTP_ERROR, None, "unknown_status", f"batch status {status!r}")
        files = tuple(
            f for key in ("output_file_id", "error_file_id") if isinstance(f := doc.get(key), str)
        )
        return Polled(state, _reason(doc) if state is State.FAILED else None, files)

    async def results(
        self, http: BatchHttp, batch_id: str, polled: Polled, cap: int
    ) -> list[Result]:
        found: list[Result] = []
        for file_id in polled.files:
            data = await http.send("GET", f"{self._base}/files/{file_id}/content", cap=cap)
            found.extend(read_results(data, _result))
        return found

    async def cancel(self, http: BatchHttp, batch_id: str) -> None:
        await http.send("POST", f"{self._base}/batches/{batch_id}/cancel", json={})


def _object(data: bytes) -> dict[str, Any]:
    try:
        doc = loads(data)
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise Failed(Transport.HTTP_ERROR, None, "not_json", "the reply is not a JSON object")
    return doc


def _field(data: bytes, key: str) -> str | None:
    value = _object(data).get(key)
    return value if isinstance(value, str) and value else None


def _reason(doc: Mapping[str, Any]) -> str:
    """A failed batch's first error code (`errors.data[0].code`), else `failed`."""
    errors = doc.get("errors")
    items = errors.get("data") if isinstance(errors, dict) else None
    first = items[0] if isinstance(items, list) and items else None
    code = first.get("code") if isinstance(first, dict) else None
    return code[:80] if isinstance(code, str) and code else "failed"


def _result(doc: Mapping[str, Any], line: str) -> Result | None:
    custom_id = doc.get("custom_id")
    if not isinstance(custom_id, str):
        return None
    response = doc.get("response")
    if isinstance(response, dict) and type(status := response.get("status_code")) is int:
        body = response.get("body")
        if isinstance(body, str):  # a body sent as a string is that string
            return Result(custom_id, status, body)
        sent = member(line, "response", "body")  # the reply as the provider wrote it
        return Result(custom_id, status, sent if sent is not None else dumps(body).decode())
    error = doc.get("error")
    if not isinstance(error, dict):
        return None
    code, message = error.get("code"), error.get("message")
    shown = message if isinstance(message, str) else None
    if code == BATCH_EXPIRED:
        return Result(custom_id, None, None, Transport.TIMEOUT, BATCH_EXPIRED, shown)
    if code == BATCH_CANCELLED:
        return Result(custom_id, None, None, Transport.CANCELLED, BATCH_CANCELLED, shown)
    named = code[:80] if isinstance(code, str) and code else "error"
    return Result(custom_id, None, None, Transport.HTTP_ERROR, f"batch_error:{named}", shown)
