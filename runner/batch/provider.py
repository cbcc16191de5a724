"""The one interface every provider's batch API is spoken through, and what it hands back.

A `Batcher` knows one provider's batch API: how a request is written into a batch (`line`),
how a batch is created from those lines (`submit`), how a batch a kill cut off from the
journal is found again (`find`), what a poll says (`poll`: still open, or
ended and how), where the ended batch's results are and how each reads back (`results`),
and how a batch is cancelled. It never decides a stamp's consequences: `BatchEndpoint` does,
the same way for every provider, so a result reads as the reply the live call would have
got (`Result`: the status and body it was answered with) or as why it has none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from runner.batch.http import BatchHttp, Failed
from runner.batch.journal import Intent
from runner.jsontext import loads
from runner.model import Transport

BATCH_EXPIRED = "batch_expired"  # the batch ended (or was given up on) before this request ran
BATCH_CANCELLED = "batch_cancelled"  # someone cancelled the batch before this request ran
RESULT_MISSING = "batch_result_missing"  # the batch ended, its results name no such request
COMPLETION_WINDOW = "24h"  # the only window OpenAI's batches take (Anthropic's is fixed at 24 h)
# a lookup lists the provider's batches newest first, this many a page, back to the intent
LIST_PAGE = 100
LIST_PAGES = 20  # the most pages one lookup reads: a bound on a provider that pages forever
SKEW_SECONDS = 30.0  # how far the provider's clock may be from ours when a lookup reads times


def unfinished_list() -> Failed:
    """A batch list that never reached its end (it paged in place, or ran past LIST_PAGES):
    the lookup cannot say the intent's batch is not there, so it says it could not look."""
    return Failed(
        Transport.HTTP_ERROR,
        None,
        "list_unfinished",
        f"the provider's batch list did not end within {LIST_PAGES} pages",
    )


class State(StrEnum):
    """How a batch ended, in one word for every provider (the journal and summary keep it)."""

    COMPLETED = "completed"
    FAILED = "failed"  # the provider refused the batch as a whole
    EXPIRED = "expired"  # the provider's own window passed
    CANCELLED = "cancelled"
    DEADLINE = "deadline"  # `batch_deadline` passed: parallax stopped waiting and cancelled it


@dataclass(frozen=True, slots=True)
class Polled:
    """What one poll said: still open, or ended (how, why, and where its results are)."""

    state: State | None  # None while the batch is open
    reason: str | None = None  # a failed batch's error code
    files: tuple[str, ...] = ()  # where its results are (OpenAI's output and error files)

    @property
    def ended(self) -> bool:
        return self.state is not None


@dataclass(frozen=True, slots=True)
class Result:
    """One request's result: the status and body it was answered with, as a live call would
    have been, or (status None) the stamp and error of a request that was never answered."""

    custom_id: str
    status: int | None
    body: str | None  # the reply's JSON text
    transport: Transport = Transport.OK
    error: str | None = None
    message: str | None = None


class Batcher(Protocol):
    """One provider's batch API (one module each: `openai_batches`, `anthropic_batches`)."""

    max_requests: int  # the most requests the provider takes in one batch
    max_bytes: int  # the most bytes of request lines it takes in one batch

    def line(self, custom_id: str, body: Mapping[str, Any]) -> bytes:
        """One request as the batch carries it, encoded."""
        ...

    async def submit(self, http: BatchHttp, lines: Sequence[bytes], label: str, nonce: str) -> str:
        """Create a batch of `lines`, sending `nonce` along as far as the API lets; its id.
        Raises `Failed`."""
        ...

    async def find(self, http: BatchHttp, intent: Intent, within: float) -> list[str]:
        """The ids of the provider's batches that may be the one `intent` was about to create
        (created no more than `within` seconds after it): none, one, or several when the API
        cannot tell them apart. Raises `Failed`."""
        ...

    async def poll(self, http: BatchHttp, batch_id: str) -> Polled:
        """The batch's state now. Raises `Failed`."""
        ...

    async def results(
        self, http: BatchHttp, batch_id: str, polled: Polled, cap: int
    ) -> list[Result]:
        """Every result an ended batch has, each file read within `cap` bytes; a line that
        does not read (a file cut short) is passed over. Raises `Failed`."""
        ...

    async def cancel(self, http: BatchHttp, batch_id: str) -> None:
        """Ask the provider to stop the batch. Raises `Failed`."""
        ...


def listed(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The batches a list reply holds (`data`, newest first, each with its string `id`); a
    reply with no such list is a Failed, not an empty page."""
    data = doc.get("data")
    if not isinstance(data, list):
        raise Failed(Transport.HTTP_ERROR, None, "not_a_list", "the reply holds no `data` list")
    return [item for item in data if isinstance(item, dict) and isinstance(item.get("id"), str)]


def read_results(
    data: bytes, result: Callable[[Mapping[str, Any], str], Result | None]
) -> Iterator[Result]:
    """Each line of a results file read by the provider's `result` (given the parsed line and
    its text, kept as the raw reply); a line that does not read (a file cut short) is passed
    over, as every provider's results file may end mid-line."""
    for raw in data.splitlines():
        try:
            line = raw.decode("utf-8")
            doc = loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and (found := result(doc, line)) is not None:
            yield found
