"""Batch mode end to end against llmock's batch APIs (OpenAI's files and batches, Anthropic's
message batches), a real third-party server: `parallax run`, `--resume`, `replay` and `serve`
as real processes.

Each project pairs a live reference with a candidate that runs as a batch (`batch = true`),
both at the same price, on one llmock whose replies echo the prompt (so both sides are graded
alike). llmock ends a batch about three seconds after it is created, on its own clock; nothing
here waits on that but the run itself. What is checked is what the runs decided: one batch a
run, its id in batches.jsonl, a SIGKILL while it is open followed by a `--resume` (or a
restarted `serve`) that polls it and creates none, every case scored exactly once, the batch
price, the report and summary lines, replies kept as llmock wrote them and a replay whose
outcomes are byte-identical.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from llmockkit import Flags, LlmockPool, LlmockServer, Protocol, ResponseStyle
from relkit import (
    PARALLAX,
    RUN_TIMEOUT,
    Lines,
    check_complete,
    jsonl,
    run_parallax,
    start_serve,
    wait_for,
)

from runner.history import run_dirs

ECHO = Flags(response_style=ResponseStyle.ECHO)
# The protocols whose batches llmock answers as the provider does. Its OpenAI batches answer a
# /v1/responses line `unsupported_endpoint` (openai-responses batches are tested on our fault
# server, tests/test_batch.py), and its Gemini batches are not Google's (no per-request key,
# JOB_STATE_ states), so parallax speaks no Gemini batch API.
BATCHED = [Protocol.OPENAI, Protocol.ANTHROPIC]
CASES = 3
PRICE = (2.0, 8.0)  # $/Mtok in and out, on both sides: the candidate pays half


def write_project(
    root: Path, llmock: LlmockServer, protocol: Protocol, *, top: str = "", cases: int = CASES
) -> Path:
    """A suite of `cases` echo cases: a live reference, a batch candidate."""
    (root / "cases.jsonl").write_text(
        "".join(
            json.dumps(
                {
                    "id": f"case-{i}",
                    "prompt": f"Say word{i}.",
                    "expect": {"must_include": [f"word{i}"]},
                }
            )
            + "\n"
            for i in range(cases)
        ),
        encoding="utf-8",
    )
    prefix = "oa" if protocol is Protocol.OPENAI else "an"
    path = root / "parallax.toml"
    path.write_text(
        f'runs_dir = "runs"\nsnapshots_dir = "snapshots"\n{top}\n'
        + llmock.endpoint_toml(f"{prefix}-ref", protocol, price=PRICE)
        + llmock.endpoint_toml(f"{prefix}-cand", protocol, price=PRICE, extra="batch = true\n")
        + f'[suites.nightly]\nfixtures = "cases.jsonl"\nreference = "{prefix}-ref"\n'
        f'candidate = "{prefix}-cand"\nschedule = "0 3 1 1 *"\n',
        encoding="utf-8",
    )
    return path


def creates(llmock: LlmockServer) -> list[dict[str, Any]]:
    """Every batch llmock was asked to create since its journal was reset."""
    return [
        r
        for r in llmock.requests()
        if r["method"] == "POST" and r["path"].rstrip("/").endswith("/batches")
    ]


def only_run_dir(root: Path) -> Path:
    (run_dir,) = run_dirs(root / "runs" / "nightly")
    return run_dir


def journal(run_dir: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rows = jsonl(run_dir / "batches.jsonl")
    return [r for r in rows if r["event"] == "submitted"], [
        r for r in rows if r["event"] == "ended"
    ]


def results_text(llmock: LlmockServer, protocol: Protocol, batch_id: str) -> str:
    """The results llmock wrote for a batch, as it serves them."""
    with httpx.Client(base_url=llmock.base_url(protocol), timeout=30) as client:
        if protocol is Protocol.ANTHROPIC:
            return client.get(f"/v1/messages/batches/{batch_id}/results").text
        doc = client.get(f"/batches/{batch_id}").json()
        return client.get(f"/files/{doc['output_file_id']}/content").text


def candidate_rows(run_dir: Path) -> list[dict[str, Any]]:
    return [o for o in jsonl(run_dir / "outcomes.jsonl") if o["side"] == "candidate"]


@pytest.mark.slow
@pytest.mark.timeout(RUN_TIMEOUT * 2)
@pytest.mark.parametrize("protocol", BATCHED, ids=lambda p: p.kind)
def test_a_batch_side_on_llmock_is_graded_as_live_at_half_price_and_replays_byte_identical(
    tmp_path: Path, llmock_pool: LlmockPool, protocol: Protocol
) -> None:
    """One batch for the candidate's calls, its id journaled and its end recorded; every case
    graded as the live side is, each reply kept as llmock's results file wrote it; the
    candidate's cost half the reference's for the same tokens; summary.json, the stderr
    summary, report.md and report.html say the side ran as a batch, how many batches and how
    long; `replay` writes the same outcomes and disagreement bytes with no server."""
    llmock = llmock_pool.get(ECHO)
    write_project(tmp_path, llmock, protocol)
    run = run_parallax("run", "--config", "parallax.toml", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    run_dir = only_run_dir(tmp_path)
    check_complete(run_dir, 2 * CASES)
    (submitted,), (ended,) = journal(run_dir)
    assert len(creates(llmock)) == 1
    assert ended["batch_id"] == submitted["batch_id"] and ended["state"] == "completed"
    assert sorted(r["case_id"] for r in submitted["requests"]) == [
        f"case-{i}" for i in range(CASES)
    ]
    rows = candidate_rows(run_dir)
    assert [(o["transport"], o["schema"], o["misses"]) for o in rows] == [("ok", "ok", [])] * 3
    assert all(o["elapsed_ms"] is None for o in rows)  # a batch has no latency of its own
    sent = results_text(llmock, protocol, submitted["batch_id"])
    for exchange in jsonl(run_dir / "raw.jsonl"):
        if exchange["side"] == "candidate":
            assert exchange["request"]["batch"]["id"] == submitted["batch_id"]
            assert exchange["response"]["body"] in sent  # byte for byte as llmock wrote it

    summary = json.loads((run_dir / "summary.json").read_text())
    sides = summary["usage"]["sides"]
    assert sides["candidate"]["total_tokens"] == sides["reference"]["total_tokens"]
    assert sides["candidate"]["cost_usd"] == pytest.approx(sides["reference"]["cost_usd"] / 2)
    block = summary["batch"]["candidate"]
    assert (block["batches"], block["requests"], block["ended"], block["open"]) == (
        1,
        CASES,
        {"completed": 1},
        0,
    )
    assert isinstance(block["seconds"], float | int) and block["seconds"] > 0
    assert set(summary["batch"]) == {"candidate"}
    said = f"candidate ran as a batch: 1 batch(es) of {CASES} request(s)"
    assert said in run.stderr
    assert said in (run_dir / "report.md").read_text()
    assert said in (run_dir / "report.html").read_text()
    events = [json.loads(line) for line in run.stdout.splitlines()]
    assert [e["event"] for e in events if e["event"].startswith("batch.")] == [
        "batch.submitted",
        "batch.ended",
    ]

    replay = run_parallax("replay", run_dir, "--config", "parallax.toml", cwd=tmp_path)
    assert replay.returncode == 0, replay.stderr
    (replayed,) = [d for d in run_dirs(tmp_path / "runs" / "nightly") if d != run_dir]
    for name in ("outcomes.jsonl", "disagreement.json"):
        assert (replayed / name).read_bytes() == (run_dir / name).read_bytes(), name
    assert said in replay.stderr
    assert len(creates(llmock)) == 1  # a replay asks no server


def submitted_in(path: Path) -> bool:
    """Whether a journal holds a `submitted` line yet (its intent line comes first)."""
    return b'"submitted"' in path.read_bytes()


def start_and_kill_while_the_batch_is_open(
    root: Path, signum: signal.Signals = signal.SIGKILL
) -> Path:
    """`parallax run` stopped by `signum` (SIGKILL by default) as soon as its batch id is in
    batches.jsonl (the wait before its first poll is a second at least); its run dir."""
    runs = root / "runs" / "nightly"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARALLAX_")}
    env["NO_PROXY"] = "127.0.0.1"
    proc = subprocess.Popen(
        [*PARALLAX, "run", "--config", "parallax.toml"],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: any(submitted_in(p) for p in runs.glob("*/batches.jsonl")), RUN_TIMEOUT)
        os.kill(proc.pid, signum)
        proc.wait(timeout=RUN_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert proc.returncode == (-signal.SIGKILL if signum is signal.SIGKILL else 143)
    run_dir = only_run_dir(root)
    submitted, _ = journal(run_dir)
    assert len(submitted) == 1
    assert json.loads((run_dir / "manifest.json").read_text())["finished_at"] is None
    return run_dir


@pytest.mark.slow
@pytest.mark.timeout(RUN_TIMEOUT * 2)
@pytest.mark.parametrize("protocol", BATCHED, ids=lambda p: p.kind)
def test_a_run_killed_while_its_batch_is_open_resumes_by_polling_it_and_creates_none(
    tmp_path: Path, llmock_pool: LlmockPool, protocol: Protocol
) -> None:
    """SIGKILL while the batch is open, then `--resume`: the journal's batch is polled and
    read, no batch is created, and every case is scored exactly once on each side. A resume
    whose config no longer runs the side as a batch is refused first: it would call live
    what the open batch already holds."""
    llmock = llmock_pool.get(ECHO)
    config = write_project(tmp_path, llmock, protocol)
    run_dir = start_and_kill_while_the_batch_is_open(tmp_path)
    (batch,), _ = journal(run_dir)
    assert len(creates(llmock)) == 1
    text = config.read_text()
    config.write_text(text.replace("batch = true\n", ""))
    live = run_parallax("run", "--config", "parallax.toml", "--resume", run_dir, cwd=tmp_path)
    assert live.returncode == 64, live.stderr
    assert f"endpoints.{batch['endpoint']}.batch changed since it started" in live.stderr
    config.write_text(text)
    resumed = run_parallax("run", "--config", "parallax.toml", "--resume", run_dir, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert len(creates(llmock)) == 1
    assert only_run_dir(tmp_path) == run_dir
    check_complete(run_dir, 2 * CASES)
    submitted, ended = journal(run_dir)
    assert [s["batch_id"] for s in submitted] == [batch["batch_id"]]
    assert [(e["batch_id"], e["state"]) for e in ended] == [(batch["batch_id"], "completed")]
    rows = candidate_rows(run_dir)
    assert sorted(o["case_id"] for o in rows) == [f"case-{i}" for i in range(CASES)]
    assert all(o["transport"] == "ok" and o["attempts"] == 1 for o in rows)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["batch"]["candidate"]["batches"] == 1


@pytest.mark.slow
@pytest.mark.timeout(RUN_TIMEOUT * 2)
def test_a_run_stopped_by_sigterm_while_its_batch_is_open_exits_143_and_resumes_it(
    tmp_path: Path, llmock_pool: LlmockPool
) -> None:
    """SIGTERM while the batch is open does not wait for it: the run stops (exit 143) with
    its batch left open in batches.jsonl, and `--resume` reads that batch, creating none."""
    llmock = llmock_pool.get(ECHO)
    write_project(tmp_path, llmock, Protocol.OPENAI)
    run_dir = start_and_kill_while_the_batch_is_open(tmp_path, signal.SIGTERM)
    assert len(creates(llmock)) == 1
    resumed = run_parallax("run", "--config", "parallax.toml", "--resume", run_dir, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert len(creates(llmock)) == 1
    check_complete(run_dir, 2 * CASES)


@pytest.mark.slow
@pytest.mark.timeout(RUN_TIMEOUT * 2)
def test_serve_started_again_takes_up_a_run_whose_batch_is_open(
    tmp_path: Path, llmock_pool: LlmockPool
) -> None:
    """A run killed while its batch was open is resumed by the next `serve` at start: the
    batch is polled, none is created, the run finishes in its own dir with every case once."""
    llmock = llmock_pool.get(ECHO)
    config = write_project(
        tmp_path,
        llmock,
        Protocol.OPENAI,
        top="serve_grace_seconds = 5\nserve_heartbeat_seconds = 0.5\n",
    )
    run_dir = start_and_kill_while_the_batch_is_open(tmp_path)
    proc = start_serve(config)
    try:
        lines = Lines(proc)
        started = lines.until_event("scheduler.job_started", timeout=RUN_TIMEOUT)
        finished = lines.until_event("scheduler.job_finished", timeout=RUN_TIMEOUT)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    assert started["mode"] == "resume" and Path(started["resume_dir"]) == run_dir.resolve()
    assert finished["exit_code"] == 0 and Path(finished["run_dir"]) == run_dir.resolve()
    assert len(creates(llmock)) == 1
    check_complete(run_dir, 2 * CASES)
    assert len(journal(run_dir)[0]) == 1


@pytest.mark.slow
def test_a_latency_gate_on_a_batch_side_is_a_config_error(
    tmp_path: Path, llmock_pool: LlmockPool
) -> None:
    """A batch side has no latency figures: `fail_on = ["latency_regression"]` with one is
    refused at load, exit 78, one line naming the key."""
    llmock = llmock_pool.get(ECHO)
    config = write_project(tmp_path, llmock, Protocol.OPENAI)
    text = config.read_text().replace(
        'schedule = "0 3 1 1 *"\n',
        'schedule = "0 3 1 1 *"\nfail_on = ["latency_regression"]\n'
        "[suites.nightly.thresholds]\nlatency_ratio_max = 1.5\n",
    )
    config.write_text(text)
    checked = run_parallax("validate", "--config", "parallax.toml", cwd=tmp_path)
    assert checked.returncode == 78, checked.stderr
    assert "Traceback" not in checked.stderr
    (line,) = [line for line in checked.stderr.splitlines() if "latency_regression" in line]
    assert "suites.nightly.fail_on" in line and "batch" in line
    assert creates(llmock) == []


@pytest.mark.slow
@pytest.mark.timeout(RUN_TIMEOUT * 2)
def test_a_batch_the_budget_cannot_hold_is_never_created(
    tmp_path: Path, llmock_pool: LlmockPool
) -> None:
    """The budget reserves a batch's estimate before the batch is sent: one that does not fit
    is never created at llmock, no id is journaled, and its calls are `cancelled` (budget),
    an incomplete run (exit 2) that `alert.budget` names."""
    llmock = llmock_pool.get(ECHO)
    write_project(tmp_path, llmock, Protocol.ANTHROPIC, top="budget_usd = 0.000001\n")
    run = run_parallax("run", "--config", "parallax.toml", cwd=tmp_path)
    assert run.returncode == 2, run.stderr
    run_dir = only_run_dir(tmp_path)
    assert creates(llmock) == []
    assert not (run_dir / "batches.jsonl").exists()
    rows = candidate_rows(run_dir)
    assert [(o["transport"], o["detail"]) for o in rows] == [("cancelled", "cancelled: budget")] * 3
    events = [json.loads(line)["event"] for line in run.stdout.splitlines()]
    assert "alert.budget" in events and "batch.submitted" not in events


@pytest.mark.slow
@pytest.mark.timeout(RUN_TIMEOUT * 2)
def test_a_batch_reference_with_samples_and_the_noise_check_sends_one_batch(
    tmp_path: Path, llmock_pool: LlmockPool
) -> None:
    """A batch reference with `samples = 2` and the noise check: its calls and the noise
    check's second reference calls go as one batch (each request's custom_id names its side
    and sample), every key scored once, and the summary counts that batch for both sides."""
    llmock = llmock_pool.get(ECHO)
    config = write_project(tmp_path, llmock, Protocol.OPENAI)
    text = config.read_text()
    text = text.replace('reference = "oa-ref"', 'reference = "oa-cand"', 1)
    text = text.replace(
        'candidate = "oa-cand"', 'candidate = "oa-ref"\nnoise_check = true\nsamples = 2'
    )
    config.write_text(text)
    run = run_parallax("run", "--config", "parallax.toml", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    run_dir = only_run_dir(tmp_path)
    check_complete(run_dir, 3 * 2 * CASES)
    assert len(creates(llmock)) == 1
    (submitted,), _ = journal(run_dir)
    ids = [r["custom_id"] for r in submitted["requests"]]
    assert len(ids) == len(set(ids)) == 2 * 2 * CASES
    assert {(r["side"], r["sample"]) for r in submitted["requests"]} == {
        (side, sample) for side in ("reference", "noise") for sample in (0, 1)
    }
    batch = json.loads((run_dir / "summary.json").read_text())["batch"]
    assert {side: entry["requests"] for side, entry in batch.items()} == {
        "reference": 2 * CASES,
        "noise": 2 * CASES,
    }


@pytest.mark.slow
@pytest.mark.timeout(RUN_TIMEOUT * 2)
@pytest.mark.parametrize("protocol", BATCHED, ids=lambda p: p.kind)
def test_a_run_killed_before_its_batch_id_was_journaled_adopts_it_from_llmocks_list(
    tmp_path: Path, llmock_pool: LlmockPool, protocol: Protocol
) -> None:
    """The journal a kill between the create and its `submitted` line leaves (the intent
    alone; llmock cannot be stopped inside that instant, so the line is taken off a run
    SIGKILLed just after it): `--resume` finds the batch in llmock's batch list (OpenAI's by
    the nonce in its metadata, Anthropic's by its time and request count), adopts it,
    creates none, and scores every case exactly once. The session's llmock keeps the other
    tests' batches of CASES requests: this suite's size is its own, so none of them fits."""
    n = CASES + 2
    llmock = llmock_pool.get(ECHO)
    write_project(tmp_path, llmock, protocol, cases=n)
    run_dir = start_and_kill_while_the_batch_is_open(tmp_path)
    (batch,), _ = journal(run_dir)
    path = run_dir / "batches.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text("".join(x for x in lines if json.loads(x)["event"] == "intent"))
    (intent,) = jsonl(path)
    assert intent["nonce"] == batch["nonce"]
    assert len(creates(llmock)) == 1
    resumed = run_parallax("run", "--config", "parallax.toml", "--resume", run_dir, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert len(creates(llmock)) == 1
    check_complete(run_dir, 2 * n)
    submitted, ended = journal(run_dir)
    assert [(s["batch_id"], s["nonce"]) for s in submitted] == [(batch["batch_id"], batch["nonce"])]
    assert [e["state"] for e in ended] == ["completed"]
    rows = candidate_rows(run_dir)
    assert sorted(o["case_id"] for o in rows) == [f"case-{i}" for i in range(n)]
    assert all(o["transport"] == "ok" and o["attempts"] == 1 for o in rows)
    events = [json.loads(line) for line in resumed.stdout.splitlines()]
    (adopted,) = [e for e in events if e["event"] == "batch.adopted"]
    assert adopted["batch_id"] == batch["batch_id"]


SHARDS = 2
SHARD_CASES = 8


def shard_dirs(root: Path) -> dict[int, Path]:
    """Each shard's run dir by its index, read from its manifest."""
    found = {}
    for run_dir in run_dirs(root / "runs" / "nightly"):
        shard = json.loads((run_dir / "manifest.json").read_text())["shard"]
        found[shard["index"]] = run_dir
    return found


@pytest.mark.slow
@pytest.mark.timeout(RUN_TIMEOUT * 4)
def test_each_shard_sends_its_own_cases_as_one_batch_resumes_it_and_merges(
    tmp_path: Path, llmock_pool: LlmockPool
) -> None:
    """Batch mode per shard: shard I of 2 sends one batch holding the cases its hash gives it
    and no other; a shard killed while its batch is open resumes by polling that batch and
    creates none; the two shard dirs merge into one run of every case, scored once."""
    from runner.runs.shard import shard_of

    llmock = llmock_pool.get(ECHO)
    write_project(tmp_path, llmock, Protocol.OPENAI)
    ids = [f"case-{i}" for i in range(SHARD_CASES)]
    (tmp_path / "cases.jsonl").write_text(
        "".join(
            json.dumps({"id": i, "prompt": f"Say {i}.", "expect": {"must_include": [i]}}) + "\n"
            for i in ids
        ),
        encoding="utf-8",
    )
    wanted = {n: sorted(i for i in ids if shard_of(i, SHARDS) == n) for n in range(SHARDS)}
    assert all(wanted.values())  # each shard has cases of its own

    env = {k: v for k, v in os.environ.items() if not k.startswith("PARALLAX_")}
    env["NO_PROXY"] = "127.0.0.1"
    killed = subprocess.Popen(
        [*PARALLAX, "run", "--config", "parallax.toml", "--shard", f"1/{SHARDS}"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        runs = tmp_path / "runs" / "nightly"
        wait_for(lambda: any(submitted_in(p) for p in runs.glob("*/batches.jsonl")), RUN_TIMEOUT)
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait(timeout=RUN_TIMEOUT)
    finally:
        if killed.poll() is None:
            killed.kill()
            killed.wait(timeout=30)
    first = run_parallax("run", "--config", "parallax.toml", "--shard", f"0/{SHARDS}", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert len(creates(llmock)) == SHARDS
    dirs = shard_dirs(tmp_path)
    resumed = run_parallax("run", "--config", "parallax.toml", "--resume", dirs[1], cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert len(creates(llmock)) == SHARDS  # the resume polled shard 1's batch, made none

    for index, run_dir in dirs.items():
        check_complete(run_dir, 2 * len(wanted[index]))
        (submitted,), (ended,) = journal(run_dir)
        assert sorted(r["case_id"] for r in submitted["requests"]) == wanted[index]
        assert ended["batch_id"] == submitted["batch_id"] and ended["state"] == "completed"
        assert sorted(o["case_id"] for o in candidate_rows(run_dir)) == wanted[index]

    merged = run_parallax("merge", dirs[0], dirs[1], cwd=tmp_path)
    assert merged.returncode == 0, merged.stderr
    (whole,) = [d for d in run_dirs(tmp_path / "runs" / "nightly") if d not in dirs.values()]
    check_complete(whole, 2 * SHARD_CASES)
    summary = json.loads((whole / "summary.json").read_text())
    assert (summary["cases"], summary["admitted"]) == (SHARD_CASES, SHARD_CASES)
    assert summary["batch"]["candidate"]["batches"] == SHARDS
