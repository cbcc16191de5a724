"""Batch mode against our fault server's batch APIs, time driven by a fake clock: what llmock
cannot show (a batch that expires, fails whole, never ends, a results file cut short or a
download cut off, per-request errors and their retries), the poll backoff and the deadline,
the budget's reservation, and a resume that polls the journal's batch instead of sending one.

The server is real (tests/faultserver.py: sockets, multipart uploads, JSONL results); only
the clock is fake, so no test waits on the machine: the endpoint's sleeps return at once and
move the clock by what it asked for, and the batch's end comes after a number of polls."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from faultserver import FaultServer
from relkit import (
    PARALLAX,
    RUN_TIMEOUT,
    check_complete,
    endpoint_toml,
    jsonl,
    run_parallax,
    suite_toml,
    write_cases,
    write_config,
)
from structlog.testing import capture_logs

from runner.batch.endpoint import BatchEndpoint, custom_id
from runner.batch.journal import JOURNAL, Journal
from runner.batch.lookup import Clock
from runner.config import EndpointConfig, Price, RetryPolicy, Timeouts, load_config
from runner.cost.budget import Budget, meter_for
from runner.errors import ConfigError
from runner.grading.graders import GraderSet
from runner.history import run_dirs
from runner.model import Case, Exchange, Outcome
from runner.request.shape import PLAIN
from runner.stamps import stamp

KEY = "sk-test-BATCHKEY-0123456789"
RETRY = RetryPolicy(attempts=2, backoff_base=0.01, backoff_max=0.02, jitter=0.0)
# OpenAI's batch API carries chat completions and Responses API requests alike
KINDS = ["openai-chat", "openai-responses", "anthropic-messages"]
START = 1_800_000_000.0  # the fake clock's epoch seconds (2027)


class FakeClock:
    """Wall-clock seconds moved only by the endpoint's own sleeps, which return at once."""

    def __init__(self) -> None:
        self.time = START
        self.slept: list[float] = []

    def now(self) -> float:
        return self.time

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.time += seconds
        await anyio.lowlevel.checkpoint()

    @property
    def clock(self) -> Clock:
        return Clock(self.now, self.sleep)


def cases(n: int) -> list[Case]:
    return [
        Case(
            id=f"case-{i}",
            prompt=f"prompt {i}",
            expect={"must_include": [f"prompt {i}"]},
            fixture_sha="f" * 16,
            path="cases.jsonl",
            line=i + 1,
        )
        for i in range(n)
    ]


def config(
    server: FaultServer, mode: str, kind: str = "openai-chat", **over: Any
) -> EndpointConfig:
    suffix = "" if kind == "anthropic-messages" else "/v1"
    data: dict[str, Any] = {
        "kind": kind,
        "base_url": server.url(mode, suffix=suffix),
        "model": "batch-model",
        "batch": True,
        "batch_poll_max_seconds": 60,
        "timeout": Timeouts(connect=2, read=5, write=2, pool=2),
        "deadline": 10,
        "retry": RETRY,
        "max_tokens": 64,
    }
    data.update(over)
    return EndpointConfig(**data)


async def run(
    cfg: EndpointConfig,
    run_dir: Path,
    calls: Sequence[Case],
    *,
    fake: FakeClock | None = None,
    budget: Budget | None = None,
) -> dict[str, Exchange]:
    """Every case called once on the candidate side, all at once as the engine does."""
    fake = fake or FakeClock()
    meter = None if budget is None else meter_for(budget, cfg, PLAIN)
    endpoint = BatchEndpoint("cand", cfg, KEY, meter=meter, clock=fake.clock, rng=random.Random(7))
    endpoint.plan(run_dir, "candidate", len(calls))
    found: dict[str, Exchange] = {}

    async def one(case: Case) -> None:
        found[case.id] = await endpoint.call(case, "candidate", 0)

    try:
        with anyio.fail_after(30):  # a bound on a hung test, not a pace
            async with anyio.create_task_group() as group:
                for case in calls:
                    group.start_soon(one, case)
    finally:
        await endpoint.aclose()
    return found


def outcome(exchange: Exchange, case: Case) -> Outcome:
    return stamp(exchange, case, GraderSet.empty())


def by_id(calls: Sequence[Case]) -> dict[str, Case]:
    return {case.id: case for case in calls}


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_a_batch_answers_every_call_as_the_live_call_would_and_is_journaled_first(
    fault_server: FaultServer, tmp_path: Path, kind: str
) -> None:
    """Each call's reply is the body the live call would get, kept byte for byte as the
    results file wrote it (its spacing, key order and escapes, not parallax's encoding),
    graded the same way, with no latency of its own; the one batch is in batches.jsonl with
    every call's custom_id."""
    calls = cases(3)
    found = await run(config(fault_server, "batch:ok:2", kind), tmp_path, calls)
    assert len(fault_server.batch_creates()) == 1
    (batch,) = fault_server.batches.values()
    sent = batch["results"][0].decode()
    for case in calls:
        response = found[case.id].response
        assert response is not None and response.body.startswith('{"')
        assert response.body in sent and ", " in response.body  # as sent, not re-encoded
    journal = Journal.read(tmp_path / JOURNAL)
    (submitted,) = journal.submitted.values()
    for case in calls:
        row = outcome(found[case.id], case)
        assert (row.transport, row.schema, row.misses) == ("ok", "ok", ())
        assert row.elapsed_ms is None and row.ttft_ms is None
        assert found[case.id].request["batch"]["custom_id"] == custom_id(
            (case.id, "candidate", 0), 1, submitted.nonce
        )
    assert sorted(r.case_id for r in submitted.requests) == [c.id for c in calls]
    assert journal.ended[submitted.batch_id].state == "completed"
    assert KEY not in (tmp_path / JOURNAL).read_text()


class WatchedClock(FakeClock):
    """A fake clock that notes, at each sleep, what the journal and the server held."""

    def __init__(self, journal: Path, server: FaultServer) -> None:
        super().__init__()
        self.seen: list[tuple[set[str], int]] = []
        self._journal, self._server = journal, server

    async def sleep(self, seconds: float) -> None:
        polls = [r for r in self._server.received() if r.method == "GET"]
        self.seen.append((set(Journal.read(self._journal).submitted), len(polls)))
        await super().sleep(seconds)


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_a_batch_id_is_in_batches_jsonl_before_its_first_poll(
    fault_server: FaultServer, tmp_path: Path, kind: str
) -> None:
    """The wait before the first poll begins with the batch id already on disk: a process
    killed at any moment after the create leaves the id its resume polls."""
    fake = WatchedClock(tmp_path / JOURNAL, fault_server)
    await run(config(fault_server, "batch:ok:2", kind), tmp_path, cases(2), fake=fake)
    (batch_id,) = fault_server.batches
    assert fake.seen[0] == ({batch_id}, 0)


@pytest.mark.anyio
async def test_polls_back_off_from_one_second_to_batch_poll_max_seconds(
    fault_server: FaultServer, tmp_path: Path
) -> None:
    """A batch open for eight polls is polled after 1, 2, 4, 8, then every 10 s (the max)."""
    fake = FakeClock()
    cfg = config(fault_server, "batch:ok:8", batch_poll_max_seconds=10)
    await run(cfg, tmp_path, cases(1), fake=fake)
    assert fake.slept == [1, 2, 4, 8, 10, 10, 10, 10, 10]


@pytest.mark.anyio
async def test_a_batch_that_never_ends_is_cancelled_at_batch_deadline_and_stamped_timeout(
    fault_server: FaultServer, tmp_path: Path
) -> None:
    """Past batch_deadline parallax stops waiting: the batch is cancelled at the provider and
    each of its calls is `timeout` (batch_expired), unretried; the wait ends at the deadline."""
    fake = FakeClock()
    cfg = config(fault_server, "batch:never", batch_deadline=3600, batch_poll_max_seconds=300)
    calls = cases(2)
    found = await run(cfg, tmp_path, calls, fake=fake)
    assert fake.time - START == 3600
    assert [r.path.rsplit("/", 1)[1] for r in fault_server.received() if r.method == "POST"][
        -1
    ] == "cancel"
    for case in calls:
        row = outcome(found[case.id], case)
        assert row.transport == "timeout" and row.attempts == 1, row.detail
        assert "batch_expired" in row.detail
    assert len(fault_server.batch_creates()) == 1
    (ended,) = Journal.read(tmp_path / JOURNAL).ended.values()
    assert ended.state == "deadline"


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_a_batch_the_provider_expires_keeps_what_it_answered(
    fault_server: FaultServer, tmp_path: Path, kind: str
) -> None:
    """The provider's window passed: the one request it answered is graded, the others are
    `timeout` (batch_expired) and are not sent again."""
    calls = cases(3)
    found = await run(config(fault_server, "batch:expire", kind), tmp_path, calls)
    rows = {c.id: outcome(found[c.id], c) for c in calls}
    assert rows["case-0"].transport == "ok"
    for case_id in ("case-1", "case-2"):
        assert rows[case_id].transport == "timeout", rows[case_id].detail
        assert "batch_expired" in rows[case_id].detail
    assert len(fault_server.batch_creates()) == 1


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_a_batch_that_fails_as_a_whole_stamps_its_calls_http_error_batch_failed(
    fault_server: FaultServer, tmp_path: Path, kind: str
) -> None:
    """OpenAI's `failed` batch (its errors name the reason) and Anthropic's refused create
    stamp every call `http_error` with detail `batch_failed:<reason>`, unretried."""
    calls = cases(2)
    found = await run(config(fault_server, "batch:fail", kind), tmp_path, calls)
    reason = "fault" if kind == "anthropic-messages" else "invalid_request"
    for case in calls:
        row = outcome(found[case.id], case)
        assert row.transport == "http_error" and row.attempts == 1
        assert f"batch_failed:{reason}" in row.detail, row.detail
    assert len(fault_server.batch_creates()) == 1


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_a_results_file_cut_short_retries_the_request_it_lost_in_a_second_batch(
    fault_server: FaultServer, tmp_path: Path, kind: str
) -> None:
    """The results file ends in the middle of its last line: that request has no result, is
    `connection_lost` (batch_result_missing) and, as a live lost connection is, retried: in
    a second batch, as attempt 2, whose result is whole."""
    calls = cases(3)
    found = await run(config(fault_server, "batch:cut", kind), tmp_path, calls)
    rows = {c.id: outcome(found[c.id], c) for c in calls}
    retried = [case_id for case_id, row in rows.items() if row.attempts == 2]
    assert len(retried) == 1
    (lost,) = retried
    first = found[lost].attempts[0]
    assert (first.transport, first.error) == ("connection_lost", "batch_result_missing")
    assert all(row.transport == "ok" and row.schema == "ok" for row in rows.values())
    creates = fault_server.batch_creates()
    assert len(creates) == 2
    journal = Journal.read(tmp_path / JOURNAL)
    second = list(journal.submitted.values())[1]
    assert [(r.case_id, r.attempt) for r in second.requests] == [(lost, 2)]


@pytest.mark.anyio
async def test_a_results_download_cut_off_is_read_again_at_the_next_poll(
    fault_server: FaultServer, tmp_path: Path
) -> None:
    """A download that breaks off short of its Content-Length is a transport fault of the
    download, not of the requests: it is read again, and no request is sent twice."""
    calls = cases(2)
    found = await run(config(fault_server, "batch:short"), tmp_path, calls)
    assert all(outcome(found[c.id], c).transport == "ok" for c in calls)
    assert all(len(found[c.id].attempts) == 1 for c in calls)
    assert len(fault_server.batch_creates()) == 1
    downloads = [r for r in fault_server.received() if r.path.endswith("/content")]
    assert len(downloads) == 2


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_per_request_errors_are_stamped_as_live_and_retried_as_live(
    fault_server: FaultServer, tmp_path: Path, kind: str
) -> None:
    """A request answered 500 then ok is retried in the next batch (two attempts, ok); a 429
    twice is `rate_limited` after its two attempts; a 400 is `http_error` HTTP 400 at once;
    a dropped result line is retried; the reply bodies are the error bodies."""
    calls = cases(4)
    fault_server.prompt_modes.update(
        {
            "prompt 0": "seq:status:500+ok",
            "prompt 1": "status:429",
            "prompt 2": "status:400",
            "prompt 3": "seq:drop+ok",
        }
    )
    found = await run(config(fault_server, "batch:ok", kind), tmp_path, calls)
    rows = {c.id: outcome(found[c.id], c) for c in calls}
    assert (rows["case-0"].transport, rows["case-0"].attempts) == ("ok", 2)
    assert found["case-0"].attempts[0].status == 500
    assert (rows["case-1"].transport, rows["case-1"].attempts) == ("rate_limited", 2)
    assert rows["case-1"].http_status == 429
    assert (rows["case-2"].transport, rows["case-2"].attempts) == ("http_error", 1)
    assert rows["case-2"].detail.startswith("http_error: HTTP 400"), rows["case-2"].detail
    assert (rows["case-3"].transport, rows["case-3"].attempts) == ("ok", 2)
    response = found["case-2"].response
    assert response is not None and "error" in json.loads(response.body)
    assert len(fault_server.batch_creates()) == 2  # the retries went as one second batch


async def killed(
    cfg: EndpointConfig, run_dir: Path, calls: Sequence[Case], clock: Clock | None = None
) -> None:
    """A process that submits the calls' batch and is gone while it waits, as a SIGKILL
    leaves a run: its clock (by default) never wakes it, its tasks are cancelled once the
    journal has the batch."""
    stuck = Clock(START.__float__, lambda _seconds: anyio.sleep_forever())
    endpoint = BatchEndpoint("cand", cfg, KEY, clock=clock or stuck)
    endpoint.plan(run_dir, "candidate", len(calls))
    try:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                for case in calls:
                    group.start_soon(endpoint.call, case, "candidate", 0)
                while (
                    not (run_dir / JOURNAL).exists()
                    or not Journal.read(run_dir / JOURNAL).submitted
                ):
                    await anyio.sleep(0.01)
                group.cancel_scope.cancel()
    finally:
        await endpoint.aclose()


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_a_resume_polls_the_journals_batch_and_sends_no_request_again(
    fault_server: FaultServer, tmp_path: Path, kind: str
) -> None:
    """A run killed while its batch was open left its id in batches.jsonl: a new process
    for the same calls polls that batch and reads its results; nothing is created."""
    calls = cases(3)
    cfg = config(fault_server, "batch:ok:1000000", kind)
    await killed(cfg, tmp_path, calls)
    (batch_id,) = Journal.read(tmp_path / JOURNAL).submitted
    assert len(fault_server.batch_creates()) == 1
    fault_server.batches[batch_id]["polls_left"] = 0  # it ended while no process waited
    found = await run(cfg, tmp_path, calls)
    assert len(fault_server.batch_creates()) == 1
    assert all(outcome(found[c.id], c).transport == "ok" for c in calls)
    assert {found[c.id].request["batch"]["id"] for c in calls} == {batch_id}


@pytest.mark.anyio
async def test_a_resume_after_the_deadline_cancels_the_batch_and_stamps_timeout(
    fault_server: FaultServer, tmp_path: Path
) -> None:
    """The deadline counts from the batch's submission as the journal has it, whatever
    process waits: one resumed after it is past gives up at once, without a poll's wait."""
    calls = cases(1)
    cfg = config(fault_server, "batch:never", batch_deadline=60)
    await killed(cfg, tmp_path, calls)
    later = FakeClock()
    later.time = START + 61
    found = await run(cfg, tmp_path, calls, fake=later)
    row = outcome(found["case-0"], calls[0])
    assert row.transport == "timeout" and "batch_expired" in row.detail
    assert later.slept == []
    assert len(fault_server.batch_creates()) == 1
    assert fault_server.received()[-1].path.endswith("/cancel")


@pytest.mark.anyio
async def test_a_batch_the_budget_cannot_hold_is_not_sent(
    fault_server: FaultServer, tmp_path: Path
) -> None:
    """The budget reserves a batch's estimate before it is submitted: one that does not fit
    is never created, and its calls are `cancelled` (budget)."""
    price = Price(input_per_mtok=1000.0, output_per_mtok=1000.0)
    cfg = config(fault_server, "batch:ok", price=price)
    calls = cases(3)
    found = await run(cfg, tmp_path, calls, budget=Budget(0.01))
    for case in calls:
        row = outcome(found[case.id], case)
        assert (row.transport, row.detail) == ("cancelled", "cancelled: budget")
    assert fault_server.batch_creates() == []
    assert not (tmp_path / JOURNAL).exists()


@pytest.mark.anyio
async def test_a_batch_the_budget_holds_is_charged_at_the_batch_discount(
    fault_server: FaultServer, tmp_path: Path
) -> None:
    """A batch call's estimate and its spend are at `price.batch_discount`: a budget that
    holds the batch at half price but not at the full one lets it go."""
    price = Price(input_per_mtok=100.0, output_per_mtok=100.0, batch_discount=0.5)
    cfg = config(fault_server, "batch:ok", price=price)
    calls = cases(2)
    meter = meter_for(Budget(1.0), cfg, PLAIN)
    assert meter.price.input_per_mtok == 50.0
    half = sum(meter.estimate_case(c) for c in calls)  # picodollars, at the batch price
    budget = Budget(1.5 * half / 1e12)  # holds the batch at half price, not at the full one
    found = await run(cfg, tmp_path, calls, budget=budget)
    assert all(outcome(found[c.id], c).transport == "ok" for c in calls)
    assert budget.reserved == half  # held until the ledger rows settle them
    assert len(fault_server.batch_creates()) == 1


@pytest.mark.parametrize(
    ("endpoint", "key", "says"),
    [
        ('kind = "gemini"\nbatch = true\n', "endpoints.cand.batch", "a gemini endpoint has no"),
        (
            'kind = "http-json"\nbatch = true\nbody_template = { q = "{{prompt}}" }\n',
            "endpoints.cand.batch",
            "an http-json endpoint",
        ),
        ('kind = "openai-chat"\nbatch = true\nstream = true\n', "endpoints.cand.stream", "whole"),
    ],
    ids=["gemini", "http-json", "stream"],
)
def test_batch_mode_where_it_cannot_run_is_refused_at_load_naming_the_key(
    tmp_path: Path, endpoint: str, key: str, says: str
) -> None:
    """`batch = true` on a kind whose batch API parallax does not speak, or beside `stream`,
    is a config error naming the key, before anything is sent."""
    (tmp_path / "cases.jsonl").write_text('{"id": "a", "prompt": "p"}\n')
    live = 'base_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n'
    (tmp_path / "parallax.toml").write_text(
        f'[endpoints.ref]\nkind = "openai-chat"\n{live}'
        f"[endpoints.cand]\n{endpoint}{live}"
        '[suites.s]\nfixtures = "cases.jsonl"\nreference = "ref"\ncandidate = "cand"\n'
    )
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path / "parallax.toml")
    assert caught.value.key == key and says in caught.value.reason, caught.value


async def killed_at_create(
    server: FaultServer, cfg: EndpointConfig, run_dir: Path, calls: Sequence[Case]
) -> str:
    """A process gone in the one instant its journal cannot cover: the provider has made the
    batch and its id is on the way back. The server holds the reply while the process's tasks
    are cancelled, so the id never arrives; the intent line is all the journal holds. The
    made batch's id."""
    made: list[str] = []
    release = threading.Event()

    def hold(batch: dict[str, Any]) -> None:
        made.append(batch["id"])
        release.wait(30)

    server.on_create = hold
    stuck = Clock(START.__float__, lambda _seconds: anyio.sleep_forever())
    endpoint = BatchEndpoint("cand", cfg, KEY, clock=stuck)
    endpoint.plan(run_dir, "candidate", len(calls))
    try:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                for case in calls:
                    group.start_soon(endpoint.call, case, "candidate", 0)
                while not made:
                    await anyio.sleep(0.01)
                group.cancel_scope.cancel()
    finally:
        release.set()
        server.on_create = None
        await endpoint.aclose()
    journal = Journal.read(run_dir / JOURNAL)
    assert (len(journal.intents), journal.submitted) == (1, {})
    return made[0]


async def resumed_from(
    server: FaultServer, cfg: EndpointConfig, run_dir: Path, calls: Sequence[Case], batch_id: str
) -> list[dict[str, Any]]:
    """A resume that must create no batch and answer every call once, from `batch_id`: the
    events it logged."""
    creates = len(server.batch_creates())
    with capture_logs() as events:
        found = await run(cfg, run_dir, calls)
    assert len(server.batch_creates()) == creates
    for case in calls:
        row = outcome(found[case.id], case)
        assert (row.transport, row.attempts) == ("ok", 1), row.detail
        assert found[case.id].request["batch"]["id"] == batch_id
    return events


def foreign_batch(server: FaultServer, cfg: EndpointConfig, requests: int) -> None:
    """A batch someone else made at the same provider, at the same moment."""
    assert cfg.base_url is not None
    lines = [{"custom_id": f"other-{i}", "params": {"model": "m"}} for i in range(requests)]
    reply = httpx.post(f"{cfg.base_url}/v1/messages/batches", json={"requests": lines})
    assert reply.status_code == 200


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_a_kill_between_the_create_and_its_journal_line_adopts_the_batch_on_resume(
    fault_server: FaultServer, tmp_path: Path, kind: str
) -> None:
    """The batch was made but its id never reached the journal: the resume finds it at the
    provider (OpenAI's by the nonce in its metadata, Anthropic's, beside another party's
    batch of another size, by its time and request count), journals and polls it, creates
    none, and every call is answered once from it."""
    fault_server.now = lambda: START + 1
    calls = cases(3)
    cfg = config(fault_server, "batch:ok:1000000", kind)
    batch_id = await killed_at_create(fault_server, cfg, tmp_path, calls)
    (intent,) = Journal.read(tmp_path / JOURNAL).intents.values()
    if kind == "anthropic-messages":
        foreign_batch(fault_server, cfg, 2)
    else:
        assert fault_server.batches[batch_id]["metadata"]["parallax_nonce"] == intent.nonce
    fault_server.batches[batch_id]["polls_left"] = 0
    events = await resumed_from(fault_server, cfg, tmp_path, calls, batch_id)
    journal = Journal.read(tmp_path / JOURNAL)
    (submitted,) = journal.submitted.values()
    assert (submitted.batch_id, submitted.nonce) == (batch_id, intent.nonce)
    assert submitted.requests == intent.requests
    assert journal.ended[batch_id].state == "completed"
    adopted = [e for e in events if e["event"] == "batch.adopted"]
    assert [(e["batch_id"], e["nonce"]) for e in adopted] == [(batch_id, intent.nonce)]


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_an_intent_the_provider_shows_no_batch_for_is_sent_once_more(
    fault_server: FaultServer, tmp_path: Path, kind: str
) -> None:
    """The kill came before the provider made anything (here: it shows no such batch): the
    resume sends the requests again, once, as a new intent, and says so."""
    fault_server.now = lambda: START + 1
    calls = cases(2)
    cfg = config(fault_server, "batch:ok:1", kind)
    batch_id = await killed_at_create(fault_server, cfg, tmp_path, calls)
    del fault_server.batches[batch_id]
    with capture_logs() as events:
        found = await run(cfg, tmp_path, calls)
    assert len(fault_server.batch_creates()) == 2
    assert all(outcome(found[c.id], c).transport == "ok" for c in calls)
    journal = Journal.read(tmp_path / JOURNAL)
    first, second = journal.intents.values()
    (submitted,) = journal.submitted.values()
    assert submitted.nonce == second.nonce != first.nonce
    (unfound,) = [e for e in events if e["event"] == "batch.not_found"]
    assert (unfound["nonce"], unfound["reason"], unfound["requests"]) == (first.nonce, "none", 2)


@pytest.mark.anyio
async def test_an_anthropic_intent_two_batches_fit_is_told_apart_by_its_results(
    fault_server: FaultServer, tmp_path: Path
) -> None:
    """A message batch carries no metadata: when another batch of the same size was made in
    the same moment the list cannot tell the two apart, so the resume polls both until they
    end and adopts the one whose results' custom_ids carry the intent's nonce. Nothing is
    created and every call is answered from the run's own batch."""
    fault_server.now = lambda: START + 1
    calls = cases(2)
    cfg = config(fault_server, "batch:ok:1", "anthropic-messages")
    batch_id = await killed_at_create(fault_server, cfg, tmp_path, calls)
    foreign_batch(fault_server, cfg, 2)
    (other,) = set(fault_server.batches) - {batch_id}
    fault_server.batches[batch_id]["polls_left"] = 3  # the foreign one ends first
    events = await resumed_from(fault_server, cfg, tmp_path, calls, batch_id)
    assert [e["batch_id"] for e in events if e["event"] == "batch.adopted"] == [batch_id]
    assert not [e for e in events if e["event"] == "batch.not_found"]
    polled = {r.path.rsplit("/", 1)[-1] for r in fault_server.received() if r.method == "GET"}
    assert {batch_id, other} <= polled


@pytest.mark.anyio
async def test_an_anthropic_intent_whose_fitting_batches_are_none_of_its_own_sends_again(
    fault_server: FaultServer, tmp_path: Path
) -> None:
    """The kill came before the create left: two other batches of the same size fit the
    intent, both end, and neither's results carry its nonce, so the requests are sent again
    (`none`); the one still open when the other ended is not taken for the run's by
    elimination."""
    fault_server.now = lambda: START + 1
    calls = cases(2)
    cfg = config(fault_server, "batch:ok:1", "anthropic-messages")
    batch_id = await killed_at_create(fault_server, cfg, tmp_path, calls)
    del fault_server.batches[batch_id]
    foreign_batch(fault_server, cfg, 2)
    (first,) = set(fault_server.batches)
    foreign_batch(fault_server, cfg, 2)
    (later,) = set(fault_server.batches) - {first}
    fault_server.batches[later]["polls_left"] = 3  # left alone once the first ended
    others = {first, later}
    with capture_logs() as events:
        found = await run(cfg, tmp_path, calls)
    assert all(outcome(found[c.id], c).transport == "ok" for c in calls)
    assert {found[c.id].request["batch"]["id"] for c in calls}.isdisjoint(others)
    (unfound,) = [e for e in events if e["event"] == "batch.not_found"]
    assert (unfound["reason"], unfound["candidates"]) == ("none", [])
    assert not [e for e in events if e["event"] == "batch.adopted"]


@pytest.mark.anyio
async def test_an_anthropic_intent_two_batches_fit_past_its_deadline_adopts_neither(
    fault_server: FaultServer, tmp_path: Path
) -> None:
    """Two batches that fit and neither ends before the intent's `batch_deadline`: nothing
    tells them apart, so neither is adopted (nor cancelled), the requests are sent again and
    the warning names both candidates."""
    fault_server.now = lambda: START + 1
    calls = cases(2)
    cfg = config(fault_server, "batch:ok:1", "anthropic-messages", batch_deadline=600)
    batch_id = await killed_at_create(fault_server, cfg, tmp_path, calls)
    foreign_batch(fault_server, cfg, 2)
    (other,) = set(fault_server.batches) - {batch_id}
    for stuck in (batch_id, other):
        fault_server.batches[stuck]["end"] = "never"
    with capture_logs() as events:
        found = await run(cfg, tmp_path, calls)
    assert all(outcome(found[c.id], c).transport == "ok" for c in calls)
    assert {found[c.id].request["batch"]["id"] for c in calls}.isdisjoint({batch_id, other})
    (unfound,) = [e for e in events if e["event"] == "batch.not_found"]
    assert unfound["reason"] == "ambiguous"
    assert sorted(unfound["candidates"]) == sorted([batch_id, other])
    assert not any(fault_server.batches[b]["cancelled"] for b in (batch_id, other))


@pytest.mark.anyio
@pytest.mark.parametrize(("status", "tries"), [(503, 3), (404, 1)])
async def test_a_batch_list_that_cannot_be_read_sends_the_requests_again_and_says_so(
    fault_server: FaultServer, tmp_path: Path, status: int, tries: int
) -> None:
    """A list the provider fails for the moment (503) is asked three times, a second and then
    two apart; one it refuses (404: a gateway without the list) once. Then the requests go
    again, and the warning says the lookup failed, since the batch may now be paid twice."""
    fault_server.now = lambda: START + 1
    calls = cases(2)
    cfg = config(fault_server, "batch:ok:1")
    await killed_at_create(fault_server, cfg, tmp_path, calls)
    fault_server.list_status = status
    fake = FakeClock()
    with capture_logs() as events:
        found = await run(cfg, tmp_path, calls, fake=fake)
    lists = [r for r in fault_server.received() if r.method == "GET" and "/batches?" in r.path]
    assert len(lists) == tries
    assert fake.slept[: tries - 1] == [1, 2][: tries - 1]
    assert len(fault_server.batch_creates()) == 2
    assert all(outcome(found[c.id], c).transport == "ok" for c in calls)
    (unfound,) = [e for e in events if e["event"] == "batch.not_found"]
    assert (unfound["reason"], unfound["error"]) == ("lookup_failed", "fault")


@pytest.mark.anyio
async def test_an_openai_create_refused_after_the_upload_names_the_file_it_leaves(
    fault_server: FaultServer, tmp_path: Path
) -> None:
    """The input file is uploaded, then the create is refused: no batch will read the file,
    which costs nothing but is worth a line naming it; it was uploaded under the intent's
    nonce."""
    calls = cases(1)
    with capture_logs() as events:
        found = await run(config(fault_server, "batch:refuse"), tmp_path, calls)
    assert "batch_failed" in outcome(found["case-0"], calls[0]).detail
    (upload,) = [r for r in fault_server.received() if r.path.endswith("/files")]
    (intent,) = Journal.read(tmp_path / JOURNAL).intents.values()
    assert f'filename="parallax-batch-{intent.nonce}.jsonl"'.encode() in upload.body
    (orphaned,) = [e for e in events if e["event"] == "batch.file_orphaned"]
    assert orphaned["file_id"].startswith("file-fault-")


def batch_project(root: Path, server: FaultServer, kind: str, n: int) -> None:
    """A suite of n cases: a live reference and a batch candidate, both on the fault server."""
    write_cases(root, n)
    suffix = "" if kind == "anthropic-messages" else "/v1"
    cand = (
        f'[endpoints.cand]\nkind = "{kind}"\n'
        f'base_url = "{server.url("batch:ok:1", suffix=suffix)}"\n'
        'model = "cand-model"\nbatch = true\nbatch_poll_max_seconds = 2\nmax_tokens = 64\n'
        "deadline = 30\ntimeout = { connect = 5.0, read = 20.0, write = 5.0, pool = 5.0 }\n"
    )
    write_config(root, endpoint_toml("ref", server.url("ok", "ref")) + cand, suite_toml("live"))


@pytest.mark.slow
@pytest.mark.timeout(RUN_TIMEOUT * 2)
@pytest.mark.parametrize("kind", ["openai-chat", "anthropic-messages"])
def test_a_run_sigkilled_as_its_batch_is_created_resumes_it_and_creates_none(
    fault_server: FaultServer, tmp_path: Path, kind: str
) -> None:
    """`parallax run` is SIGKILLed by the server the moment it has made the batch, before the
    id is sent back, so no `submitted` line can exist: `--resume` finds that batch, creates
    none, and scores every case exactly once on each side."""
    n = 4
    batch_project(tmp_path, fault_server, kind, n)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARALLAX_")}
    env["NO_PROXY"] = "127.0.0.1"
    proc = subprocess.Popen(
        [*PARALLAX, "run", "--config", "parallax.toml"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    fault_server.on_create = lambda _batch: os.kill(proc.pid, signal.SIGKILL)
    try:
        assert proc.wait(timeout=RUN_TIMEOUT) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    fault_server.on_create = None
    (run_dir,) = run_dirs(tmp_path / "runs" / "live")
    (batch_id,) = fault_server.batches
    journal = Journal.read(run_dir / JOURNAL)
    assert (len(journal.intents), journal.submitted) == (1, {})
    resumed = run_parallax("run", "--config", "parallax.toml", "--resume", run_dir, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert len(fault_server.batch_creates()) == 1
    check_complete(run_dir, 2 * n)
    rows = [o for o in jsonl(run_dir / "outcomes.jsonl") if o["side"] == "candidate"]
    assert sorted(o["case_id"] for o in rows) == [f"case-{i:03d}" for i in range(n)]
    assert all(o["transport"] == "ok" and o["attempts"] == 1 for o in rows)
    (submitted,) = Journal.read(run_dir / JOURNAL).submitted.values()
    assert submitted.batch_id == batch_id
    events = [json.loads(line)["event"] for line in resumed.stdout.splitlines()]
    assert [e for e in events if e.startswith("batch.")] == [
        "batch.adopted",
        "batch.ended",
    ]
