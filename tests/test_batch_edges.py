"""Batch mode's edges against our fault server (tests/faultserver.py, a real server on
127.0.0.1), time driven by test_batch's fake clock: the crash-safe lookup reading the
provider's batch list page after page (and not forever), and a create the provider refuses
for the moment, for good, or whose answer never comes."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from faultserver import FaultServer
from structlog.testing import capture_logs
from test_batch import START, cases, config, killed_at_create, outcome, run

from runner.batch.provider import LIST_PAGES
from runner.config import EndpointConfig

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
    creates = len(fault_server.batch_creates())
    with capture_logs() as events:
        found = await run(cfg, tmp_path, calls)
    assert len(fault_server.batch_creates()) == creates
    for case in calls:
        row = outcome(found[case.id], case)
        assert (row.transport, row.attempts) == ("ok", 1), row.detail
        assert found[case.id].request["batch"]["id"] == batch_id
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
    """A list that gives its first page whatever the cursor, `has_more` forever: the lookup
    sees the same last id come back and stops at the second read (not at the page bound),
    having found nothing; the requests are sent once more, as a new batch."""
    fault_server.now = lambda: START + 1
    calls = cases(2)
    cfg = config(fault_server, "batch:ok:1", kind)
    await killed_at_create(fault_server, cfg, tmp_path, calls)
    for i in range(3):
        other_batch(fault_server, cfg, START + 100 + i, requests=2)
    fault_server.list_cap, fault_server.list_stuck = 2, True
    with capture_logs() as events:
        found = await run(cfg, tmp_path, calls)
    assert len(list_reads(fault_server)) == 2 < LIST_PAGES
    assert all(outcome(found[c.id], c).transport == "ok" for c in calls)
    (unfound,) = [e for e in events if e["event"] == "batch.not_found"]
    assert unfound["reason"] == "none"
    assert len(fault_server.batches) == 5  # the intent's, the three others', the new one
