"""The `recorded` endpoint: replies from a cassette file, for offline runs and demos.

It returns the same `Exchange` a live `openai-chat` call would, with the body a server would
have sent, so everything above the exchange (stamps, grading, gate) cannot tell the difference.
A cassette line can also record a transport failure or a malformed body, which lets an offline
run exercise every stamp.

Cassette rows (JSONL), keyed by `case_id`, optionally narrowed by `suite` and `sample`:

    {"case_id": "c1", "completion": "text or a JSON value", "model": "served-model-name"}
    {"case_id": "c2", "fault": "timeout"}        # any transport stamp except ok
    {"case_id": "c3", "status": 503, "body": "upstream busy"}
    {"case_id": "c4", "body": "<html>not json</html>"}   # a 200 with this raw body

Rows may be narrowed by `suite`, `side` and `sample`; the most specific match wins. With no
matching row, a case's own recorded `completion` (seed 000 rows) is the reply.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runner.adapters import OPENAI_CHAT
from runner.errors import DataError
from runner.ledger import read_jsonl
from runner.model import NOISE, SIDES, Attempt, Case, Exchange, Response, Transport
from runner.text import holds_surrogate

_FAULTS = {t.value for t in Transport} - {Transport.OK.value, Transport.HTTP_ERROR.value}
_KEYS = {"case_id", "suite", "sample", "completion", "model", "id", "system_fingerprint"}
_KEYS |= {"fault", "status", "body", "usage", "side"}


CASSETTE_SIDES = (*SIDES, NOISE)
CassetteKey = tuple[str | None, str | None, str, int | None]


def _key(suite: Any, side: Any, case_id: str, sample: Any) -> CassetteKey:
    return (suite or None, side or None, case_id, sample)


def load_cassette(path: Path) -> dict[CassetteKey, dict[str, Any]]:
    """Read a cassette, checking every row so a typo fails `validate`, not the night run."""
    entries: dict[CassetteKey, dict[str, Any]] = {}
    for line_no, row in read_jsonl(path, tolerate_torn_tail=False):
        if not isinstance(row, dict):
            raise DataError(path, "cassette row must be a JSON object", line_no)
        if holds_surrogate(row):
            raise DataError(path, "lone surrogate escape (\\ud800-\\udfff) is not text", line_no)
        unknown = sorted(set(row) - _KEYS)
        if unknown:
            raise DataError(path, f"unknown cassette key {unknown[0]!r}", line_no)
        case_id = row.get("case_id")
        if not isinstance(case_id, str) or not case_id:
            raise DataError(path, "cassette row needs a string case_id", line_no)
        fault = row.get("fault")
        if fault is not None and fault not in _FAULTS:
            raise DataError(
                path, f"unknown fault {fault!r} (one of {', '.join(sorted(_FAULTS))})", line_no
            )
        status = row.get("status")
        if status is not None and (isinstance(status, bool) or not isinstance(status, int)):
            raise DataError(path, "status must be an integer", line_no)
        if "body" in row and not isinstance(row["body"], str):
            raise DataError(path, "body must be a string", line_no)
        sample = row.get("sample")
        if sample is not None and (isinstance(sample, bool) or not isinstance(sample, int)):
            raise DataError(path, "sample must be an integer", line_no)
        suite = row.get("suite")
        if suite is not None and not isinstance(suite, str):
            raise DataError(path, "suite must be a string (a suite name)", line_no)
        side = row.get("side")
        if side is not None and (not isinstance(side, str) or side not in CASSETTE_SIDES):
            raise DataError(path, f"side must be one of {', '.join(CASSETTE_SIDES)}", line_no)
        key = _key(suite, side, case_id, sample)
        if key in entries:
            raise DataError(path, f"duplicate cassette entry for {case_id!r}", line_no)
        entries[key] = row
    return entries


class RecordedEndpoint:
    """An Endpoint whose replies were recorded earlier (or written by hand)."""

    def __init__(
        self,
        name: str,
        *,
        suite: str,
        model: str | None,
        cassette: Mapping[CassetteKey, Mapping[str, Any]],
    ) -> None:
        self.name = name
        self._suite = suite
        self._model = model
        self._cassette = cassette

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
        if entry is None and case.completion is not None:
            entry = {"completion": case.completion}
        transport, status, body, message = self._replay(case, entry)
        attempt = Attempt(
            n=1,
            transport=transport,
            elapsed_ms=0,
            status=status,
            error=None if transport == Transport.OK else "recorded",
            message=message,
        )
        response = (
            Response(status=status, headers={"content-type": "application/json"}, body=body)
            if status is not None
            else None
        )
        return Exchange(
            case_id=case.id,
            side=side,
            sample=sample,
            fixture_sha=case.fixture_sha,
            endpoint=self.name,
            adapter=OPENAI_CHAT,
            model_alias=self._model,
            request={"method": "RECORDED", "url": f"cassette:{self.name}", "body": None},
            attempts=(attempt,),
            transport=transport,
            response=response,
            started_at=datetime.now(UTC).isoformat(),
            elapsed_ms=0,
        )

    def _replay(
        self, case: Case, entry: Mapping[str, Any] | None
    ) -> tuple[str, int | None, str, str | None]:
        if entry is None:
            return Transport.HTTP_ERROR, 404, "", f"no recording for case {case.id!r}"
        if entry.get("fault"):
            return str(entry["fault"]), None, "", f"recorded {entry['fault']}"
        status = int(entry.get("status", 200))
        if "body" in entry:
            body = str(entry["body"])
        else:
            completion = entry.get("completion")
            content: str | None = (
                completion
                if isinstance(completion, str) or completion is None
                else json.dumps(completion, ensure_ascii=False)
            )
            doc: dict[str, Any] = {
                "id": entry.get("id") or f"rec-{case.id}",
                "object": "chat.completion",
                "model": entry.get("model") or self._model or "recorded",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": "stop",
                    }
                ],
            }
            if entry.get("system_fingerprint"):
                doc["system_fingerprint"] = entry["system_fingerprint"]
            if entry.get("usage"):
                doc["usage"] = entry["usage"]
            body = json.dumps(doc, ensure_ascii=False)
        if status == 429:
            return Transport.RATE_LIMITED, status, body, "recorded 429"
        if not 200 <= status < 300:
            return Transport.HTTP_ERROR, status, body, f"recorded HTTP {status}"
        return Transport.OK, status, body, None

    async def aclose(self) -> None:
        return None
