"""batches.jsonl: every batch a run submitted, written before it is polled.

A batch is money spent the moment it is created, so its id is on disk, flushed and synced,
before parallax waits for it: a run killed while a batch is open leaves the line behind, and
`--resume` (or `serve` after a restart) polls the same batch instead of sending its requests
again. Each `submitted` line names the endpoint, when it was sent and, per request, the
`custom_id` and the call it stands for (case, ledger side, sample, attempt), so a resume can
hand each result back to its call whatever the provider allows in a custom_id. An `ended`
line says how the batch ended and when, which is what the summary reports of it.

The `submitted` line can only be written once the provider has answered the create with the
batch's id, so an `intent` line goes first: the same requests under a fresh nonce, synced
before anything is sent, the nonce travelling with the batch as far as the provider lets it.
An intent no `submitted` line names is a create a kill may have cut off: a resume looks its
batch up at the provider before it sends those requests again (`BatchEndpoint`). A create the
provider surely refused (it answered with an error) gets a `refused` line under the intent's
nonce instead: that intent made nothing to look up, and its requests' attempt is the refusal,
as it was in the process that saw it, so a resume neither asks for it nor sends it again.

A torn last line (a kill mid-write) is dropped as the ledgers drop one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runner.errors import DataError
from runner.jsontext import dumps
from runner.ledger import disk_refusal, read_jsonl, repair_tail, stored
from runner.model import ROW_ERRORS, Attempt

JOURNAL = "batches.jsonl"
JOURNAL_VERSION = 1
SUBMITTED = "submitted"
ENDED = "ended"
INTENT = "intent"
REFUSED = "refused"

Key = tuple[str, str, int]


def iso(seconds: float) -> str:
    """An epoch time as UTC ISO-8601 to the millisecond, as the ledgers write times."""
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds")


def epoch(text: str) -> float:
    """An ISO-8601 time the journal wrote, back as epoch seconds (ValueError if it is none)."""
    when = datetime.fromisoformat(text)
    if when.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone")
    return when.timestamp()


@dataclass(frozen=True, slots=True)
class Request:
    """One request of a batch: its custom_id and the call and attempt it carries."""

    custom_id: str
    case_id: str
    side: str
    sample: int
    attempt: int

    @property
    def key(self) -> Key:
        return (self.case_id, self.side, self.sample)

    def to_json(self) -> dict[str, Any]:
        return {
            "custom_id": self.custom_id,
            "case_id": self.case_id,
            "side": self.side,
            "sample": self.sample,
            "attempt": self.attempt,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Request:
        found = cls(
            custom_id=data["custom_id"],
            case_id=data["case_id"],
            side=data["side"],
            sample=data["sample"],
            attempt=data["attempt"],
        )
        if not all(isinstance(v, str) for v in (found.custom_id, found.case_id, found.side)):
            raise TypeError("custom_id, case_id and side must be strings")
        if type(found.sample) is not int or type(found.attempt) is not int:
            raise TypeError("sample and attempt must be integers")
        return found


@dataclass(frozen=True, slots=True)
class Intent:
    """A batch about to be created: its requests under the nonce sent along with it."""

    nonce: str
    endpoint: str
    kind: str
    intent_at: str  # UTC ISO-8601
    requests: tuple[Request, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "version": JOURNAL_VERSION,
            "event": INTENT,
            "nonce": self.nonce,
            "endpoint": self.endpoint,
            "kind": self.kind,
            "intent_at": self.intent_at,
            "requests": [r.to_json() for r in self.requests],
        }


@dataclass(frozen=True, slots=True)
class Submitted:
    """A batch the provider accepted: what a resume polls again (`nonce` names its intent;
    None in a journal written before intents were)."""

    batch_id: str
    endpoint: str
    kind: str
    submitted_at: str  # UTC ISO-8601
    requests: tuple[Request, ...]
    nonce: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "version": JOURNAL_VERSION,
            "event": SUBMITTED,
            "batch_id": self.batch_id,
            "endpoint": self.endpoint,
            "kind": self.kind,
            "submitted_at": self.submitted_at,
            "requests": [r.to_json() for r in self.requests],
            "nonce": self.nonce,
        }


@dataclass(frozen=True, slots=True)
class Ended:
    """How a batch ended (the provider's word, or `deadline` when parallax stopped waiting)."""

    batch_id: str
    state: str
    reason: str | None
    ended_at: str  # UTC ISO-8601

    def to_json(self) -> dict[str, Any]:
        return {
            "version": JOURNAL_VERSION,
            "event": ENDED,
            "batch_id": self.batch_id,
            "state": self.state,
            "reason": self.reason,
            "ended_at": self.ended_at,
        }


@dataclass(frozen=True, slots=True)
class Refused:
    """A create the provider refused (or lost): the attempt its intent's requests made. Only a
    sure refusal is journaled: a lost create may have made the batch a resume looks up."""

    nonce: str
    endpoint: str
    stamp: str
    status: int | None
    error: str  # `batch_failed:<reason>`
    message: str
    refused_at: str  # UTC ISO-8601

    def attempt(self, n: int) -> Attempt:
        """Attempt `n` of a call this create carried."""
        return Attempt(
            n, self.stamp, None, status=self.status, error=self.error, message=self.message
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "version": JOURNAL_VERSION,
            "event": REFUSED,
            "nonce": self.nonce,
            "endpoint": self.endpoint,
            "stamp": self.stamp,
            "status": self.status,
            "error": self.error,
            "message": self.message,
            "refused_at": self.refused_at,
        }


class Journal:
    """A run dir's batches.jsonl, read once and appended to line by line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.intents: dict[str, Intent] = {}
        self.submitted: dict[str, Submitted] = {}
        self.ended: dict[str, Ended] = {}
        self.refused: dict[str, Refused] = {}  # by the intent's nonce

    @classmethod
    def read(cls, path: Path) -> Journal:
        """The journal at `path` (empty when there is none); a broken line is a DataError."""
        journal = cls(path)
        source = stored(path)
        if not source.exists():
            return journal
        for line_no, row in read_jsonl(source):
            try:
                journal._add(row)
            except ROW_ERRORS as exc:
                raise DataError(source, f"not a batch record: {exc!r}", line_no) from None
        return journal

    def _add(self, row: Mapping[str, Any]) -> None:
        if row.get("version") != JOURNAL_VERSION:
            raise ValueError(f"unknown version {row.get('version')!r}")
        event = row["event"]
        if event == INTENT:
            epoch(row["intent_at"])
            if not isinstance(nonce := row["nonce"], str):
                raise TypeError("nonce must be a string")
            self.intents[nonce] = Intent(
                nonce=nonce,
                endpoint=str(row["endpoint"]),
                kind=str(row["kind"]),
                intent_at=row["intent_at"],
                requests=tuple(Request.from_json(r) for r in row["requests"]),
            )
            return
        if event == REFUSED:
            epoch(row["refused_at"])
            status = row["status"]
            if status is not None and type(status) is not int:
                raise TypeError("status must be an integer")
            found_refused = Refused(
                nonce=str(row["nonce"]),
                endpoint=str(row["endpoint"]),
                stamp=str(row["stamp"]),
                status=status,
                error=str(row["error"]),
                message=str(row["message"]),
                refused_at=row["refused_at"],
            )
            self.refused[found_refused.nonce] = found_refused
            return
        batch_id = row["batch_id"]
        if not isinstance(batch_id, str):
            raise TypeError("batch_id must be a string")
        if event == SUBMITTED:
            nonce = row.get("nonce")
            if nonce is not None and not isinstance(nonce, str):
                raise TypeError("nonce must be a string")
            epoch(row["submitted_at"])
            found = Submitted(
                batch_id=batch_id,
                endpoint=str(row["endpoint"]),
                kind=str(row["kind"]),
                submitted_at=row["submitted_at"],
                requests=tuple(Request.from_json(r) for r in row["requests"]),
                nonce=nonce,
            )
            self.submitted[batch_id] = found
        elif event == ENDED:
            epoch(row["ended_at"])
            reason = row.get("reason")
            self.ended[batch_id] = Ended(batch_id, str(row["state"]), reason, row["ended_at"])
        else:
            raise ValueError(f"unknown event {event!r}")

    def of(self, endpoint: str) -> Iterator[Submitted]:
        """The batches an endpoint submitted, in the order it submitted them."""
        return (s for s in self.submitted.values() if s.endpoint == endpoint)

    def unsettled(self, endpoint: str) -> list[Intent]:
        """The endpoint's intents no `submitted` or `refused` line names, newest first:
        creates a kill may have cut off between the provider's answer and the journal."""
        named = {s.nonce for s in self.submitted.values()} | set(self.refused)
        found = [i for i in self.intents.values() if i.endpoint == endpoint]
        return [i for i in reversed(found) if i.nonce not in named]

    def record(self, entry: Intent | Submitted | Ended | Refused) -> None:
        """Append one line, flushed and synced before this returns: a batch's id must outlive
        a kill, and a power cut, the moment it exists."""
        with disk_refusal(self.path):
            repair_tail(self.path)
            with self.path.open("ab") as handle:
                handle.write(dumps(entry.to_json()) + b"\n")
                handle.flush()
                os.fsync(handle.fileno())
        if isinstance(entry, Intent):
            self.intents[entry.nonce] = entry
        elif isinstance(entry, Submitted):
            self.submitted[entry.batch_id] = entry
        elif isinstance(entry, Refused):
            self.refused[entry.nonce] = entry
        else:
            self.ended[entry.batch_id] = entry


def requests_of(journal: Journal, sides: Sequence[str]) -> Iterator[tuple[Submitted, Request]]:
    """Every request of the journal's batches on `sides`, with its batch."""
    for batch in journal.submitted.values():
        for request in batch.requests:
            if request.side in sides:
                yield batch, request
