"""Batch mode's edges against our fault server (tests/faultserver.py, a real server on
127.0.0.1), time driven by test_batch's fake clock: the crash-safe lookup reading the
provider's batch list page after page (and not forever), and a create the provider refuses
for the moment, for good, or whose answer never comes."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from faultserver import FaultServer
from structlog.testing import capture_logs
from test_batch import (
    START,
    FakeClock,
    cases,
    config,
    killed,
    killed_at_create,
    outcome,
    resumed_from,
    run,
)

from runner.batch.endpoint import custom_id
from runner.batch.journal import JOURNAL, Journal
from runner.batch.lookup import LOOKUP_TRIES, Clock
from runner.batch.provider import LIST_PAGES
from runner.config import EndpointConfig, Timeouts
from runner.model import Case

KINDS = ["openai-chat", "anthropic-messages"]  # the two list APIs (Responses shares OpenAI's)


def other_batch(server: FaultServer, cfg: EndpointConfig, at: float, requests: int = 3) -> str:
    """A batch someone else made at the same provider, created at `at` (server time): on
    OpenAI with another nonce in its metadata, on Anthropic of `requests` requests."""
    assert cfg.base_url is not None
    server.now = lambda: at
    if cfg.kind == "anthropic-messages":
        lines = [{"custom_id": f"other-{i}", "params": {"model": "m"}} for i in range(requests)]
        reply = httpx.post(f"{cfg.base_url}/v1/messages/batches", json={"requests": lines})
    else:
        body = b"".join(
            b'{"custom_id": "other-%d", "method": "POST", "url": "/v1/chat/completions", '
            b'"body": {"model": "m"}}\n' % i
            for i in range(requests)
        )
        uploaded = httpx.post(
            f"{cfg.base_url}/files",
            files={"file": ("other.jsonl", body, "application/jsonl")},
            data={"purpose": "batch"},
        )
        metadata = {"parallax_nonce": f"{int(at):016x}"}
        reply = httpx.post(
            f"{cfg.base_url}/batches",
            json={
                "input_file_id": uploaded.json()["id"],
                "endpoint": "/v1/chat/completions",
                "completion_window": "24h",
                "metadata": metadata,
            },
        )
    assert reply.status_code == 200, reply.text
    batch_id: str = reply.json()["id"]
    return batch_id


def list_reads(server: FaultServer) -> list[str]:
    return [r.path for r in server.received() if r.method == "GET" and "batches?" in r.path]


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_a_lookup_pages_back_to_the_intents_batch_and_adopts_it(
    fault_server: FaultServer, tmp_path: Path, kind: str
) -> None:
    """Three newer batches of the same size (out of the intent's window) fill the first page
    and a half of a list two to a page: the lookup follows the list's cursor to the second
    page and adopts the intent's batch there, creating none. OpenAI's stops at the match;
    Anthropic's (which cannot stop at a match: another may fit) reads on to the page that
    reaches back past the intent, and no further, though the list has more."""
    fault_server.now = lambda: START + 1
    calls = cases(3)
    cfg = config(fault_server, "batch:ok:1000000", kind)
    batch_id = await killed_at_create(fault_server, cfg, tmp_path, calls)
    newer = [other_batch(fault_server, cfg, START + 100 + i) for i in range(3)]
    older = [other_batch(fault_server, cfg, START - 1000 - i) for i in range(4)]
    fault_server.batches[batch_id]["polls_left"] = 0
    fault_server.list_cap = 2
    events = await resumed_from(fault_server, cfg, tmp_path, calls, batch_id)
    adopted = [e["batch_id"] for e in events if e["event"] == "batch.adopted"]
    assert adopted == [batch_id]
    cursor = "after" if kind == "openai-chat" else "after_id"
    pages = list_reads(fault_server)
    # page 1: newer[2], newer[1]; page 2: newer[0], the intent's; page 3: two older
    expected = ["", newer[1]] if kind == "openai-chat" else ["", newer[1], batch_id]
    assert [p.partition(f"&{cursor}=")[2] for p in pages] == expected
    assert older[0] not in str(pages)


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_a_list_that_pages_in_place_is_read_twice_not_forever(
    fault_server: FaultServer, tmp_path: Path, kind: str
) -> None:
    """A list that gives its first page whatever the cursor, `has_more` forever: each lookup
    sees the same last id come back and stops at the second read (not at the page bound),
    and since the list never ended it says it could not look (`lookup_failed`, asked again
    as a failed read is), not that the batch is not there; the requests are sent once more,
    as a new batch."""
    fault_server.now = lambda: START + 1
    calls = cases(2)
    cfg = config(fault_server, "batch:ok:1", kind)
    await killed_at_create(fault_server, cfg, tmp_path, calls)
    for i in range(3):
        other_batch(fault_server, cfg, START + 100 + i, requests=2)
    fault_server.list_cap, fault_server.list_stuck = 2, True
    with capture_logs() as events:
        found = await run(cfg, tmp_path, calls)
    assert len(list_reads(fault_server)) == 2 * LOOKUP_TRIES < LIST_PAGES
    assert all(outcome(found[c.id], c).transport == "ok" for c in calls)
    (unfound,) = [e for e in events if e["event"] == "batch.not_found"]
    assert (unfound["reason"], unfound["error"]) == ("lookup_failed", "list_unfinished")
    assert len(fault_server.batches) == 5  # the intent's, the three others', the new one


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_a_list_longer_than_the_page_bound_is_a_lookup_that_failed(
    fault_server: FaultServer, tmp_path: Path, kind: str
) -> None:
    """More batches newer than the intent than LIST_PAGES pages hold: the lookup stops at the
    bound and says it could not look, not that the intent's batch is not there."""
    fault_server.now = lambda: START + 1
    calls = cases(2)
    cfg = config(fault_server, "batch:ok:1", kind)
    await killed_at_create(fault_server, cfg, tmp_path, calls)
    for i in range(LIST_PAGES + 1):
        other_batch(fault_server, cfg, START + 100 + i, requests=3)
    fault_server.list_cap = 1
    with capture_logs() as events:
        found = await run(cfg, tmp_path, calls)
    assert len(list_reads(fault_server)) == LIST_PAGES * LOOKUP_TRIES
    assert all(outcome(found[c.id], c).transport == "ok" for c in calls)
    (unfound,) = [e for e in events if e["event"] == "batch.not_found"]
    assert (unfound["reason"], unfound["error"]) == ("lookup_failed", "list_unfinished")


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("status", "stamp"), [(429, "rate_limited"), (503, "http_error")])
async def test_a_create_refused_for_the_moment_is_sent_again_later_and_answered_once(
    fault_server: FaultServer, tmp_path: Path, kind: str, status: int, stamp: str
) -> None:
    """A create the provider answers 429 (after the Retry-After it names: 7 s, far past the
    policy's backoff) or 503 made nothing: its calls' first attempt says so and their second
    goes as the one batch made, each call answered once from it."""
    fault_server.create_faults = [f"status:{status}"]
    calls = cases(2)
    fake = FakeClock()
    found = await run(config(fault_server, "batch:ok:1", kind), tmp_path, calls, fake=fake)
    (batch,) = fault_server.batches.values()
    assert len(fault_server.batch_creates()) == 2
    (submitted,) = Journal.read(tmp_path / JOURNAL).submitted.values()
    assert sorted(line[0] for line in batch["lines"]) == sorted(
        custom_id((c.id, "candidate", 0), 2, submitted.nonce) for c in calls
    )
    for case in calls:
        row = outcome(found[case.id], case)
        assert (row.transport, row.attempts) == ("ok", 2), row.detail
        first = found[case.id].attempts[0]
        assert (first.transport, first.status, first.error) == (stamp, status, "batch_failed:fault")
    waited = fake.slept[0]
    assert waited >= 7 if status == 429 else waited < 1
    journal = Journal.read(tmp_path / JOURNAL)
    (submitted,) = journal.submitted.values()
    assert {r.attempt for r in submitted.requests} == {2}


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_a_create_refused_for_good_stamps_every_call_and_is_not_sent_again(
    fault_server: FaultServer, tmp_path: Path, kind: str
) -> None:
    """A 400 to the create: every call of the batch is `http_error` HTTP 400 with detail
    `batch_failed:<reason>`, one attempt, and nothing is sent again."""
    fault_server.create_faults = ["status:400"]
    calls = cases(3)
    found = await run(config(fault_server, "batch:ok:1", kind), tmp_path, calls)
    assert len(fault_server.batch_creates()) == 1 and fault_server.batches == {}
    for case in calls:
        row = outcome(found[case.id], case)
        assert (row.transport, row.attempts) == ("http_error", 1)
        assert "batch_failed:fault" in row.detail, row.detail
        assert found[case.id].attempts[0].status == 400
    journal = Journal.read(tmp_path / JOURNAL)
    assert list(journal.refused) == list(journal.intents)
    assert journal.unsettled("cand") == []


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fault", ["connection_lost", "timeout"])
async def test_a_create_whose_answer_never_came_is_looked_up_at_once_and_read(
    fault_server: FaultServer, tmp_path: Path, kind: str, fault: str
) -> None:
    """The provider made the batch and its answer never came (the connection closed, or the
    server held it past the read timeout): the create is not sent again as if nothing had
    been made, and the batch is not left paid for and unread: it is looked up at once, as a
    resume would, adopted, and every call is answered from it once."""
    fault_server.now = lambda: START + 1  # the provider's clock, as the fake one reads
    release = threading.Event()
    if fault == "connection_lost":
        fault_server.create_faults = ["cut"]
    else:  # held until the test is done: the client's read timeout (2 s) always comes first,
        # and the lookup, polls and download after it have the same 2 s each, loaded or not

        def hold(_batch: dict[str, Any]) -> None:
            release.wait(30)

        fault_server.on_create = hold
    cfg = config(
        fault_server, "batch:ok:1", kind, timeout=Timeouts(connect=2, read=2, write=2, pool=2)
    )
    calls = cases(2)
    try:
        with capture_logs() as events:
            found = await run(cfg, tmp_path, calls)
    finally:
        release.set()
    assert len(fault_server.batch_creates()) == 1
    (batch_id,) = fault_server.batches
    for case in calls:
        row = outcome(found[case.id], case)
        assert (row.transport, row.attempts) == ("ok", 1), row.detail
        assert found[case.id].request["batch"]["id"] == batch_id
    assert [e["batch_id"] for e in events if e["event"] == "batch.adopted"] == [batch_id]
    journal = Journal.read(tmp_path / JOURNAL)
    assert journal.refused == {} and journal.unsettled("cand") == []


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_a_create_whose_answer_never_came_and_made_nothing_is_not_sent_blind(
    fault_server: FaultServer, tmp_path: Path, kind: str
) -> None:
    """The connection closed after the create was sent and the provider shows no batch for
    it: the lookup cannot prove nothing was made (a list may lag), so the create is not
    sent again; the calls are stamped with the fault (batch_failed) once each, and the
    intent stays open to a resume's lookup."""
    fault_server.now = lambda: START + 1
    fault_server.create_faults = ["cut"]
    fault_server.on_create = lambda batch: fault_server.batches.pop(batch["id"])
    calls = cases(2)
    with capture_logs() as events:
        found = await run(config(fault_server, "batch:ok:1", kind), tmp_path, calls)
    assert len(fault_server.batch_creates()) == 1 and fault_server.batches == {}
    for case in calls:
        row = outcome(found[case.id], case)
        assert (row.transport, row.attempts) == ("connection_lost", 1), row.detail
        assert "batch_failed:connection_lost" in row.detail, row.detail
    (unfound,) = [e for e in events if e["event"] == "batch.not_found"]
    assert unfound["reason"] == "none"
    journal = Journal.read(tmp_path / JOURNAL)
    assert journal.refused == {} and len(journal.unsettled("cand")) == 1


async def killed_waiting(cfg: EndpointConfig, run_dir: Path, calls: Sequence[Case]) -> None:
    """A process whose waits return at once until a batch is in the journal, then is gone
    while it waits for that batch (as a SIGKILL leaves a run)."""
    fake = FakeClock()

    async def sleep(seconds: float) -> None:
        if Journal.read(run_dir / JOURNAL).submitted:
            await anyio.sleep_forever()
        await fake.sleep(seconds)

    await killed(cfg, run_dir, calls, Clock(fake.now, sleep))


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_a_resume_after_a_refused_create_and_its_retry_sends_nothing_again(
    fault_server: FaultServer, tmp_path: Path, kind: str
) -> None:
    """A 503 refused the first create and the second made the batch; the run was killed while
    it waited. The resume knows the refused intent made nothing (it neither looks it up nor
    sends its attempt again) and polls the retry's batch: one batch in all, each call
    answered once, its first attempt the refusal."""
    fault_server.now = lambda: START + 1
    fault_server.create_faults = ["status:503"]
    calls = cases(2)
    cfg = config(fault_server, "batch:ok:1000000", kind)
    await killed_waiting(cfg, tmp_path, calls)
    (batch_id,) = fault_server.batches
    journal = Journal.read(tmp_path / JOURNAL)
    first, _ = journal.intents
    assert (list(journal.refused), journal.refused[first].status) == ([first], 503)
    fault_server.batches[batch_id]["polls_left"] = 0
    with capture_logs() as events:
        found = await run(cfg, tmp_path, calls)
    assert len(fault_server.batch_creates()) == 2 and len(fault_server.batches) == 1
    assert list_reads(fault_server) == []
    assert [e for e in events if e["event"] == "batch.not_found"] == []
    for case in calls:
        row = outcome(found[case.id], case)
        assert (row.transport, row.attempts) == ("ok", 2), row.detail
        assert found[case.id].attempts[0].error == "batch_failed:fault"
        assert found[case.id].request["batch"]["id"] == batch_id
