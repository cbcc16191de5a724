"""`BatchEndpoint`: a side's calls made through its provider's batch API, behind
`model.Endpoint`, so the engine, the stamps and the ledgers never know a batch happened.

`plan` is told, per ledger side, how many calls this process will make and where the run's
journal is; `calls.call_all` gives a batch side that many workers, so every call is waiting
in `call` at once. The call that completes the count drives the batch for all of them: it
submits one batch per provider limit (after the run's budget reserved its estimate), writes
each batch id to batches.jsonl before it polls, polls with a backoff doubling from one second
to `batch_poll_max_seconds`, and hands each call its Exchange as the batch's results come in.
Each request's body is the protocol module's own (`Wire.body`) and each result is kept as
the body the live call would have got, so the stamps and graders read it through the same
`Wire` fold and a replay gives the same outcomes byte for byte.

A result is an attempt like a live one: a per-request error keeps its status and is retried
as a live one would be (a 5xx or a 429 goes into the next batch as the next attempt, up to
`retry.attempts`), a request the results leave out is `connection_lost`
(`batch_result_missing`), one the provider expired or cancelled is `timeout`
(`batch_expired`) or `cancelled` (`batch_cancelled`), a batch refused whole stamps its calls
`http_error` (`batch_failed:<reason>`), and once `batch_deadline` has passed since a batch was
submitted it is cancelled and its calls are `timeout` (`batch_expired`). None is retried
but a per-request error and a missing result. A batch has no latency of its own: every
attempt's `elapsed_ms` is null.

A resume (or `serve` after a restart) polls the batches the journal holds for its calls and
never submits a request that is in one: a result comes back to the call and attempt its
`custom_id` was written for. Each create is preceded by an `intent` line (its requests under
a fresh nonce the batch carries as far as the provider lets it), so a kill between the
provider's answer and the `submitted` line is not a batch paid twice: the resume looks the
intent's batch up at the provider (`Batcher.find`) and adopts the one it finds, journaling
it as submitted at the intent's time (of several that fit, the one whose results carry the
nonce in their custom_ids); only when the provider shows none (or several that do not end
in time to be told apart, or cannot be asked) are the requests sent again. A create the provider
answered with an error made nothing: the refusal is that attempt (retried as a live call's
status would be, after the Retry-After it names) and is journaled (`refused`), so a resume
takes it as it was and neither looks its intent up nor sends that attempt again. A create
whose answer never came (a timeout, a connection lost once it was sent) may have made a batch
nobody knows the id of: its intent is looked up at once, as a resume would, and the batch
found is polled and read; none found, it is never sent again (a list may lag behind the
create), its calls stamped with that fault (detail `batch_failed:<stamp>`). All times, the
deadline's and the backoff's, come from `clock`, the seam a test drives.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import re
import secrets
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx

from runner import logs
from runner.batch.anthropic_batches import AnthropicBatches
from runner.batch.http import BatchHttp, Failed
from runner.batch.journal import (
    JOURNAL,
    Ended,
    Intent,
    Journal,
    Refused,
    Request,
    Submitted,
    epoch,
    iso,
)
from runner.batch.lookup import SYSTEM_CLOCK, Clock, Unfound, look_up, told_apart
from runner.batch.openai_batches import OpenAIBatches
from runner.batch.provider import (
    BATCH_CANCELLED,
    BATCH_EXPIRED,
    RESULT_MISSING,
    Batcher,
    Polled,
    Result,
    State,
)
from runner.client.record import body_text
from runner.client.retry import decide_retry
from runner.client.stamp import classify
from runner.config import EndpointConfig
from runner.cost.budget import Meter, refusal
from runner.jsontext import dumps
from runner.model import NOISE, Attempt, Case, Exchange, Response, Transport
from runner.protocols import wire_for
from runner.request.shape import PLAIN, Shape
from runner.shutdown import NotStarted, may_start

Key = tuple[str, str, int]
FIRST_POLL_SECONDS = 1.0  # the first wait for a batch; each next one doubles, to the max
BATCH_FAILED = "batch_failed"  # + ":<reason>": the batch was refused or lost as a whole
SIDE_MARKS = {"reference": "r", "candidate": "c", NOISE: "n"}
CUSTOM_ID_CHARS = 64  # Anthropic's bound on a custom_id (letters, digits, `_` and `-`)
_PLAIN_ID = re.compile(r"[A-Za-z0-9-]+")
# what a result stamped so is never sent again: the batch or its window ended
_FINAL = frozenset({BATCH_EXPIRED, BATCH_CANCELLED})
NONCE_BYTES = 8  # an intent's nonce: 16 hex digits, fresh for every create


BATCHERS: dict[str, Callable[[EndpointConfig], Batcher]] = {
    "openai-chat": OpenAIBatches,
    "openai-responses": OpenAIBatches,
    "anthropic-messages": AnthropicBatches,
}


def custom_id(key: Key, attempt: int, nonce: str) -> str:
    """A request's custom_id: its side, sample and attempt and its batch's nonce (what tells
    two batches of a list apart once they end, `told_apart`), then its case id when that is
    plain enough for every provider, else (after `_` instead of `-`) the id's digest. The
    journal maps it back to the call either way."""
    case_id, side, sample = key
    head = f"{SIDE_MARKS.get(side, 'x')}{sample}a{attempt}-{nonce}"
    if _PLAIN_ID.fullmatch(case_id) and len(head) + 1 + len(case_id) <= CUSTOM_ID_CHARS:
        return f"{head}-{case_id}"
    return f"{head}_{hashlib.sha256(case_id.encode()).hexdigest()[:32]}"


@dataclass(slots=True)
class _Call:
    """One call waiting in `call`: what it sends, and its attempts as the batches answer."""

    case: Case
    key: Key
    body: dict[str, Any]
    content: bytes
    estimate: int
    done: anyio.Event = field(default_factory=anyio.Event)
    n: int = 1  # the attempt under way (or to be sent)
    placed: dict[int, Request] = field(default_factory=dict)  # attempt -> its place in a batch
    batch_of: dict[int, str] = field(default_factory=dict)  # attempt -> its batch id
    results: dict[int, tuple[Attempt, Response | None]] = field(default_factory=dict)
    started_at: str | None = None
    exchange: Exchange | None = None  # once done; None when done means the run stopped


@dataclass(slots=True)
class _Open:
    """A batch being waited for."""

    submitted: Submitted
    deadline: float
    next_poll: float
    interval: float = FIRST_POLL_SECONDS


class BatchEndpoint:
    """An openai-chat, openai-responses or anthropic-messages endpoint with `batch = true`."""

    def __init__(
        self,
        name: str,
        cfg: EndpointConfig,
        api_key: str | None,
        *,
        shape: Shape = PLAIN,
        meter: Meter | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Clock = SYSTEM_CLOCK,
        rng: random.Random | None = None,
    ) -> None:
        wire = wire_for(cfg.kind)
        if wire is None or cfg.kind not in BATCHERS:
            raise ValueError(f"a {cfg.kind} endpoint has no batch API")
        self.name = name
        self._cfg = cfg
        self._shape = shape
        self._wire = wire
        self._batcher = BATCHERS[cfg.kind](cfg)
        self._meter = meter
        self._clock = clock
        self._rng = rng if rng is not None else random.Random()  # noqa: S311 - not crypto
        logs.register_secret(api_key)
        self._http = BatchHttp(name, cfg, wire.headers(cfg, api_key), transport)
        self._shown_url = logs.scrub_text(wire.url(cfg))
        self._expected: dict[str, int] = {}
        self._calls: dict[Key, _Call] = {}
        self._journal: Journal | None = None
        self._label = name
        self._driving = False
        self._open: list[_Open] = []
        self._resubmit_at = 0.0  # after a refused create that is worth another try
        self._log = logs.get_logger()

    def plan(self, run_dir: Path, side: str, calls: int) -> int:
        """This process makes `calls` calls on ledger side `side`, journaled in `run_dir`;
        returns how many workers the side needs: one per call, so all wait at once."""
        if self._journal is None or self._journal.path.parent != run_dir:
            self._journal = Journal.read(run_dir / JOURNAL)
        self._label = f"{run_dir.name}/{self.name}"
        self._expected[side] = calls
        return max(1, calls)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def call(self, case: Case, side: str, sample: int) -> Exchange:
        """Wait for this call's result; the call that completes the plan drives them all."""
        if not may_start():
            raise NotStarted
        body = self._wire.body(self._cfg, self._shape, case)
        content = dumps(body)
        estimate = (
            0 if self._meter is None else self._meter.estimate(content, tools="tools" in body)
        )
        key = (case.id, side, sample)
        call = self._calls[key] = _Call(case, key, body, content, estimate)
        if not self._driving and len(self._calls) >= sum(self._expected.values()):
            self._driving = True
            await self._drive()
        await call.done.wait()
        if call.exchange is None:
            raise NotStarted
        return call.exchange

    # the batches' lifecycle ------------------------------------------------------------

    async def _drive(self) -> None:
        """Submit, poll and read back until every call has its Exchange (or a stop came)."""
        await self._adopt()
        self._reopen()
        while any(c.exchange is None for c in self._calls.values()):
            if not may_start():
                self._abandon()
                return
            unsent = [c for c in self._calls.values() if c.exchange is None and c.n not in c.placed]
            if unsent:
                wait = self._resubmit_at - self._clock.now()
                if wait > 0 and not self._open:
                    await self._clock.sleep(wait)
                    continue
                if wait <= 0:
                    await self._submit(unsent)
                    continue
            assert self._open, "a call waits on no batch"
            await self._wait()

    async def _adopt(self) -> None:
        """Find at the provider each batch a kill may have cut off from the journal (an
        intent no `submitted` line names) whose requests these calls still await, newest
        first: the one found is journaled as submitted at the intent's time (so `_reopen`
        polls it), else its requests are left to be sent again."""
        journal = self._journal
        assert journal is not None, "plan() first"
        for intent in journal.unsettled(self.name):
            placed = {(r.key, r.attempt) for s in journal.of(self.name) for r in s.requests}
            waiting = [
                r
                for r in intent.requests
                if r.key in self._calls and (r.key, r.attempt) not in placed
            ]
            if not waiting:
                continue
            found = await self._find(intent, len(waiting))
            if found is not None:
                journal.record(
                    Submitted(
                        found,
                        self.name,
                        intent.kind,
                        intent.intent_at,
                        intent.requests,
                        intent.nonce,
                    )
                )

    async def _find(self, intent: Intent, waiting: int) -> str | None:
        """The provider's batch that is `intent`'s, looked up as a resume does (of several
        that fit, the one whose results carry its nonce), logged as adopted or not found."""
        journal = self._journal
        assert journal is not None, "plan() first"
        ids, error = await look_up(
            self._batcher, self._http, intent, self._cfg.deadline, self._clock
        )
        ids = [batch_id for batch_id in ids if batch_id not in journal.submitted]
        if len(ids) > 1:  # several fit: their results tell which carries the nonce
            ids = await told_apart(
                self._batcher,
                self._http,
                intent,
                ids,
                self._clock,
                until=epoch(intent.intent_at) + self._cfg.batch_deadline,
                poll_max=self._cfg.batch_poll_max_seconds,
                cap=self._cfg.max_response_bytes * len(intent.requests) + (1 << 20),
                going=may_start,
            )
        if len(ids) == 1:
            self._log.info(
                logs.BATCH_ADOPTED,
                endpoint=self.name,
                batch_id=ids[0],
                nonce=intent.nonce,
                requests=len(intent.requests),
            )
            return ids[0]
        why = Unfound.LOOKUP_FAILED if error else Unfound.AMBIGUOUS if ids else Unfound.NONE
        self._log.warning(
            logs.BATCH_NOT_FOUND,
            endpoint=self.name,
            nonce=intent.nonce,
            requests=waiting,
            reason=why,
            error=error,
            candidates=ids,
        )
        return None

    def _reopen(self) -> None:
        """Take up the batches the journal holds for these calls (a resume's): their
        requests are not sent again, and their estimates are held whatever the budget says
        (they were sent). A batch given up on at its deadline is not polled again."""
        journal = self._journal
        assert journal is not None, "plan() first"
        taken: list[Submitted] = []
        for submitted in journal.of(self.name):
            mine = [r for r in submitted.requests if r.key in self._calls]
            for request in mine:
                call = self._calls[request.key]
                call.placed[request.attempt] = request
                call.batch_of[request.attempt] = submitted.batch_id
                when = submitted.submitted_at
                call.started_at = min(call.started_at or when, when)
            if mine:
                taken.append(submitted)
        for refused in journal.refused.values():  # attempts that were refusals, as they were
            intent = journal.intents.get(refused.nonce)
            for request in intent.requests if intent and refused.endpoint == self.name else ():
                waiting = self._calls.get(request.key)
                if waiting is not None and request.attempt not in waiting.placed:
                    waiting.results.setdefault(
                        request.attempt, (refused.attempt(request.attempt), None)
                    )
        for call in self._calls.values():
            self._advance(call)
        if self._meter is not None:
            for call in self._calls.values():
                if call.n in call.placed:
                    self._meter.budget.hold(call.key, self._meter, call.estimate)
        for submitted in taken:
            ended = journal.ended.get(submitted.batch_id)
            if ended is not None and ended.state == State.DEADLINE:
                self._settle_batch(submitted, Polled(State.DEADLINE), [])
                continue
            deadline = epoch(submitted.submitted_at) + self._cfg.batch_deadline
            self._open.append(_Open(submitted, deadline, next_poll=self._clock.now()))

    def _abandon(self) -> None:
        """A stop came: every call still waiting ends without an Exchange (NotStarted), its
        batch left in the journal for the resume to poll."""
        for call in self._calls.values():
            if call.exchange is None:
                call.done.set()

    def _chunks(
        self, calls: Sequence[_Call]
    ) -> Iterator[tuple[str, list[tuple[_Call, bytes, Request]]]]:
        """The calls as the batches the provider takes (by its count and size limits), each
        with the fresh nonce its custom_ids carry."""
        chunk: list[tuple[_Call, bytes, Request]] = []
        size = 0
        nonce = secrets.token_hex(NONCE_BYTES)
        for call in calls:
            request = Request(custom_id(call.key, call.n, nonce), *call.key, call.n)
            line = self._batcher.line(request.custom_id, call.body)
            if chunk and (
                len(chunk) >= self._batcher.max_requests
                or size + len(line) + 1 > self._batcher.max_bytes
            ):
                yield nonce, chunk
                chunk, size, nonce = [], 0, secrets.token_hex(NONCE_BYTES)
                request = Request(custom_id(call.key, call.n, nonce), *call.key, call.n)
                line = self._batcher.line(request.custom_id, call.body)
            chunk.append((call, line, request))
            size += len(line) + 1
        if chunk:
            yield nonce, chunk

    async def _submit(self, calls: Sequence[_Call]) -> None:
        """Send the calls' next attempts as batches, each reserved against the budget first
        and journaled before it is polled."""
        for nonce, chunk in list(self._chunks(calls)):
            sent = self._reserve(chunk)
            if not sent:
                continue
            now = self._clock.now()
            requests = tuple(r for _, _, r in sent)
            assert self._journal is not None
            # on disk before the create: a kill before its id is journaled leaves the nonce
            intent = Intent(nonce, self.name, self._cfg.kind, iso(now), requests)
            self._journal.record(intent)
            try:
                batch_id = await self._batcher.submit(
                    self._http, [line for _, line, _ in sent], self._label, nonce
                )
            except Failed as exc:
                # an answer that never came may hide a batch made: looked up now, as a resume
                # would, so its results are read rather than paid for and left
                found = None if exc.certain else await self._find(intent, len(requests))
                if found is None:
                    self._refused(sent, exc, nonce)
                    continue
                batch_id = found
            submitted = Submitted(batch_id, self.name, self._cfg.kind, iso(now), requests, nonce)
            self._journal.record(submitted)  # on disk before the first poll
            self._log.info(
                logs.BATCH_SUBMITTED,
                endpoint=self.name,
                batch_id=batch_id,
                requests=len(sent),
                sides=sorted({r.side for _, _, r in sent}),
            )
            for call, _, request in sent:
                call.placed[call.n] = request
                call.batch_of[call.n] = batch_id
                call.started_at = call.started_at or submitted.submitted_at
            deadline = now + self._cfg.batch_deadline
            self._open.append(_Open(submitted, deadline, next_poll=now + FIRST_POLL_SECONDS))

    def _reserve(
        self, chunk: list[tuple[_Call, bytes, Request]]
    ) -> list[tuple[_Call, bytes, Request]]:
        """What of a batch the run's budget lets go; the rest end `cancelled` (budget)."""
        if self._meter is None:
            return chunk
        admitted = self._meter.budget.reserve_batch(
            self._meter, [(call.key, call.estimate, call.case, call.n) for call, _, _ in chunk]
        )
        sent = []
        for item in chunk:
            call = item[0]
            if call.key in admitted:
                sent.append(item)
            else:
                call.results[call.n] = (refusal(call.n), None)
                self._finish(call)
        return sent

    def _refused(self, sent: list[tuple[_Call, bytes, Request]], exc: Failed, nonce: str) -> None:
        """The provider refused (or lost) the create: each call's attempt says so, and is
        tried again only when the create surely made nothing and its stamp is worth it. A
        sure refusal is journaled, so a resume takes it as the attempt it was."""
        message = exc.message or f"the batch could not be created: {exc.reason}"
        refused = Refused(
            nonce,
            self.name,
            str(exc.stamp),
            exc.status,
            f"{BATCH_FAILED}:{exc.reason}",
            message,
            iso(self._clock.now()),
        )
        if exc.certain:
            assert self._journal is not None
            self._journal.record(refused)
        for call, _, _ in sent:
            attempt = refused.attempt(call.n)
            call.results[call.n] = (attempt, None)
            decision = decide_retry(
                call.n, exc.stamp, exc.status, exc.retry_after, self._cfg.retry, self._rng
            )
            if exc.certain and decision.retry:
                self._retry(call, attempt)
                self._resubmit_at = max(self._resubmit_at, self._clock.now() + decision.wait)
            else:
                self._finish(call)

    async def _wait(self) -> None:
        """Sleep until the next batch is due a poll (or its deadline), then poll it."""
        batch = min(self._open, key=lambda b: min(b.next_poll, b.deadline))
        due = min(batch.next_poll, batch.deadline)
        if (ahead := due - self._clock.now()) > 0:
            await self._clock.sleep(ahead)
        if not may_start():
            return
        if self._clock.now() >= batch.deadline:
            await self._give_up(batch)
            return
        submitted = batch.submitted
        try:
            polled = await self._batcher.poll(self._http, submitted.batch_id)
            if polled.ended:
                cap = self._cfg.max_response_bytes * len(submitted.requests) + (1 << 20)
                found = await self._batcher.results(self._http, submitted.batch_id, polled, cap)
                self._open.remove(batch)
                self._settle_batch(submitted, polled, found)
                return
        except Failed as exc:
            if not exc.passing:  # the batch cannot be read: a 4xx, say, or no such batch
                self._open.remove(batch)
                self._settle_batch(submitted, Polled(State.FAILED, exc.reason), [])
                return
        batch.interval = min(batch.interval * 2, self._cfg.batch_poll_max_seconds)
        batch.next_poll = self._clock.now() + batch.interval

    async def _give_up(self, batch: _Open) -> None:
        """`batch_deadline` passed: the batch is cancelled (as far as the provider lets) and
        every call in it still waiting is `timeout` (`batch_expired`)."""
        self._open.remove(batch)
        with contextlib.suppress(Failed):  # it may have ended meanwhile: nothing more is read
            await self._batcher.cancel(self._http, batch.submitted.batch_id)
        self._settle_batch(batch.submitted, Polled(State.DEADLINE), [])

    def _settle_batch(self, submitted: Submitted, polled: Polled, found: list[Result]) -> None:
        """An ended batch's results to their calls' attempts, its end to the journal."""
        assert polled.state is not None and self._journal is not None
        if submitted.batch_id not in self._journal.ended:
            now = iso(self._clock.now())
            self._journal.record(Ended(submitted.batch_id, polled.state, polled.reason, now))
            self._log.info(
                logs.BATCH_ENDED,
                endpoint=self.name,
                batch_id=submitted.batch_id,
                state=polled.state,
                reason=polled.reason,
                requests=len(submitted.requests),
                results=len(found),
            )
        by_id = {result.custom_id: result for result in found}
        touched = []
        for request in submitted.requests:
            call = self._calls.get(request.key)
            if call is None or request.attempt in call.results:
                continue
            call.results[request.attempt] = self._attempt(
                request.attempt, by_id.get(request.custom_id), polled
            )
            touched.append(call)
        for call in touched:
            self._advance(call)

    def _attempt(
        self, n: int, result: Result | None, polled: Polled
    ) -> tuple[Attempt, Response | None]:
        """One request's attempt as its batch answered it (`Result`), or as the batch's end
        says when no result names it."""
        if result is None:
            transport, why, message = _unanswered(polled)
            return Attempt(n, str(transport), None, error=why, message=message), None
        if result.status is None or result.body is None:
            attempt = Attempt(
                n, str(result.transport), None, error=result.error, message=result.message
            )
            return attempt, None
        data = logs.scrub_bytes(result.body.encode("utf-8", "surrogatepass"))
        cap = self._cfg.max_response_bytes
        stamp = classify(None, result.status)
        error: str | None = None
        if len(data) > cap and stamp is Transport.OK:
            stamp, error = Transport.TOO_LARGE, "BodyTooLarge"
        text, encoding = body_text(data[:cap])
        response = Response(result.status, {}, text, encoding, len(data) > cap)
        return Attempt(n, str(stamp), None, status=result.status, error=error), response

    def _advance(self, call: _Call) -> None:
        """Move a call past its attempts that have results: to its next attempt (already in a
        batch, or to be sent), or to its Exchange."""
        while call.exchange is None and call.n in call.results:
            attempt, _ = call.results[call.n]
            if call.n + 1 in call.placed:  # sent already (a resume's): it is awaited
                self._retry(call, attempt)
                if self._meter is not None:
                    self._meter.budget.hold(call.key, self._meter, call.estimate)
                continue
            decision = decide_retry(
                call.n, attempt.transport, attempt.status, None, self._cfg.retry, self._rng
            )
            if decision.retry and attempt.error not in _FINAL:
                self._retry(call, attempt)
            else:
                self._finish(call)

    def _retry(self, call: _Call, attempt: Attempt) -> None:
        """The call goes on to its next attempt; the budget counts what this one spent."""
        if self._meter is not None:
            self._meter.retried(call.key, attempt)
        call.n += 1

    def _finish(self, call: _Call) -> None:
        """The call's Exchange, from its attempts so far; its worker is woken."""
        attempts = tuple(call.results[n][0] for n in sorted(call.results))
        response = call.results[call.n][1]
        placed = call.placed.get(call.n)
        request: dict[str, Any] = {
            "method": "POST",
            "url": self._shown_url,
            "body": logs.scrub_body(call.body, call.content),
        }
        if placed is not None:  # where the graded attempt went: a report can name it
            request["batch"] = {"id": call.batch_of[call.n], "custom_id": placed.custom_id}
        case = call.case
        call.exchange = Exchange(
            case_id=case.id,
            side=call.key[1],
            sample=call.key[2],
            fixture_sha=case.fixture_sha,
            endpoint=self.name,
            adapter=self._cfg.kind,
            model_alias=self._cfg.model,
            request=request,
            attempts=attempts,
            transport=attempts[-1].transport,
            response=response,
            started_at=call.started_at or iso(self._clock.now()),
            elapsed_ms=None,  # a batch's turnaround is the provider's queue, not the model
            served_model_header=self._cfg.served_model_header,
            request_sha=self._shape.request_sha,
        )
        call.done.set()


def _unanswered(polled: Polled) -> tuple[Transport, str, str]:
    """The stamp, error and message of a request an ended batch has no result for."""
    state = polled.state
    if state is State.FAILED:
        why = f"the batch failed as a whole ({polled.reason})"
        return Transport.HTTP_ERROR, f"{BATCH_FAILED}:{polled.reason}", why
    if state in (State.EXPIRED, State.DEADLINE):
        why = (
            "batch_deadline passed before the batch ended"
            if state is State.DEADLINE
            else "the provider expired the batch before this request ran"
        )
        return Transport.TIMEOUT, BATCH_EXPIRED, why
    if state is State.CANCELLED:
        return Transport.CANCELLED, BATCH_CANCELLED, "the batch was cancelled"
    return Transport.CONNECTION_LOST, RESULT_MISSING, "the batch's results hold no line for it"
