"""The whole pipeline against a real HTTP server on 127.0.0.1, with real socket faults.

Each test writes a config whose endpoints point at the loopback fault server, runs parallax
through `run_suite` (or the real console script where a process boundary matters) and reads
the run directory back: stamps, gate classes, exit codes, the snapshot, and the ledgers.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from faultserver import FaultServer
from relkit import key_rows
from structlog.testing import capture_logs

from runner.config import load_config
from runner.runs.mode import RunMode
from runner.runs.run import run_suite
from runner.snapshot import IncompleteError, load_snapshot, promote

FAST_RETRY = (
    "{ attempts = 2, backoff_base = 0.01, backoff_max = 0.02, jitter = 0.5, "
    "retry_after_cap = 0.05 }"
)
TIMEOUTS = "{ connect = 1.0, read = 0.6, write = 1.0, pool = 2.0 }"
# for a run held at `gate:<name>` calls until the test lets it go on: no timeout may end the wait
PATIENT = "{ connect = 30.0, read = 30.0, write = 30.0, pool = 30.0 }"


def write_suite(root: Path, n: int) -> list[str]:
    """n unstratified cases (no ceiling detector) whose expected word the server echoes."""
    rows = []
    for i in range(n):
        rows.append(
            {
                "id": f"case-{i:03d}",
                "prompt": f"prompt {i:03d} word{i}",
                "expect": {"must_include": [f"word{i}"]},
            }
        )
    (root / "cases.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return [str(r["prompt"]) for r in rows]


def write_config(
    root: Path,
    ref_url: str,
    cand_url: str,
    *,
    concurrency: int = 4,
    extra: str = "",
    key_env: str | None = None,
    timeout: str = TIMEOUTS,
    deadline: float = 1.2,
) -> Path:
    key_line = f'api_key_env = "{key_env}"' if key_env else ""
    text = f"""
runs_dir = "runs"
snapshots_dir = "snapshots"

[endpoints.ref]
kind = "openai-chat"
base_url = "{ref_url}"
model = "ref-model"
concurrency = {concurrency}
deadline = {deadline}
max_response_bytes = 2048
timeout = {timeout}
retry = {FAST_RETRY}
{key_line}

[endpoints.cand]
kind = "openai-chat"
base_url = "{cand_url}"
model = "cand-model"
concurrency = {concurrency}
deadline = {deadline}
max_response_bytes = 2048
timeout = {timeout}
retry = {FAST_RETRY}
{key_line}
{extra}

[suites.live]
fixtures = "cases.jsonl"
reference = "ref"
candidate = "cand"
"""
    path = root / "parallax.toml"
    path.write_text(text)
    return path


def outcomes(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "outcomes.jsonl").read_text().splitlines()]


def verdicts(run_dir: Path) -> dict[str, Any]:
    cases: dict[str, Any] = json.loads((run_dir / "disagreement.json").read_text())["cases"]
    return cases


def accept_clean_run(config: Path) -> None:
    """Run once with healthy endpoints and promote it, so later runs gate against it."""
    run_dir, code, _ = run_suite(load_config(config), "live")
    assert code == 0
    promote(run_dir, config.parent / "snapshots", suite="live")


FAULTS = [
    # mode, transport, schema, attempts
    ("hang", "timeout", "skipped", 2),
    ("drip", "timeout", "skipped", 2),
    ("reset", "connection_lost", "skipped", 2),
    ("short", "connection_lost", "skipped", 2),
    ("close", "connection_lost", "skipped", 2),
    ("status:429", "rate_limited", "skipped", 2),
    ("retrydate:1", "rate_limited", "skipped", 2),
    ("status:500", "http_error", "skipped", 2),
    ("status:502", "http_error", "skipped", 2),
    ("status:503", "http_error", "skipped", 2),
    ("status:400", "http_error", "skipped", 1),
    ("status:401", "http_error", "skipped", 1),
    ("status:404", "http_error", "skipped", 1),
    ("big:5000", "too_large", "skipped", 1),
    ("garbage", "ok", "fail", 1),
    ("nochoices", "ok", "fail", 1),
    ("nullcontent", "ok", "fail", 1),
    ("badutf8", "ok", "fail", 1),
]


@pytest.mark.parametrize(("mode", "transport", "schema", "attempts"), FAULTS)
def test_each_fault_is_stamped_retried_and_gated(
    tmp_path: Path, fault_server: FaultServer, mode: str, transport: str, schema: str, attempts: int
) -> None:
    """A faulty candidate gives the fault's stamps, DESIGN's retries, a null score and exit 2."""
    write_suite(tmp_path, 3)
    config = write_config(tmp_path, fault_server.url("ok", "ref"), fault_server.url("ok", "cand"))
    accept_clean_run(config)
    config = write_config(tmp_path, fault_server.url("ok", "ref"), fault_server.url(mode, "cand"))

    run_dir, code, summary = run_suite(load_config(config), "live")

    cand = [o for o in outcomes(run_dir) if o["side"] == "candidate"]
    assert {(o["transport"], o["schema"]) for o in cand} == {(transport, schema)}
    assert {o["attempts"] for o in cand} == {attempts}
    assert all(o["task_score"] is None and o["misses"] == [] for o in cand)
    expected_gate = "transport_miss" if transport != "ok" else "schema_miss"
    assert {v["gate"] for v in verdicts(run_dir).values()} == {expected_gate}
    assert all(v["disagreement"] is None for v in verdicts(run_dir).values())
    assert code == 2
    assert summary["unadmitted"] == 3


def test_refused_connection_is_connect_error(
    tmp_path: Path, fault_server: FaultServer, closed_port: int
) -> None:
    """Nothing listening on the candidate's port gives connect_error on every try, exit 2."""
    write_suite(tmp_path, 2)
    config = write_config(tmp_path, fault_server.url("ok"), f"http://127.0.0.1:{closed_port}/v1")
    run_dir, code, _ = run_suite(load_config(config), "live")
    cand = [o for o in outcomes(run_dir) if o["side"] == "candidate"]
    assert {o["transport"] for o in cand} == {"connect_error"}
    assert {o["attempts"] for o in cand} == {2}
    assert code == 2


def test_connect_timeout_is_timeout(
    tmp_path: Path, fault_server: FaultServer, full_backlog: Any
) -> None:
    """A listener that drops SYNs gives the timeout stamp, not connect_error."""
    write_suite(tmp_path, 1)
    config = write_config(
        tmp_path, fault_server.url("ok"), f"http://127.0.0.1:{full_backlog.port}/v1"
    )
    run_dir, code, _ = run_suite(load_config(config), "live")
    cand = [o for o in outcomes(run_dir) if o["side"] == "candidate"]
    assert {o["transport"] for o in cand} == {"timeout"}
    assert code == 2


def test_random_fault_mix_never_reaches_a_score(tmp_path: Path, fault_server: FaultServer) -> None:
    """With faults mixed on both sides, no unadmitted row is scored, diffed or promoted."""
    prompts = write_suite(tmp_path, 30)
    config = write_config(
        tmp_path, fault_server.url("ok", "ref"), fault_server.url("ok", "cand"), concurrency=8
    )
    accept_clean_run(config)
    before = load_snapshot(tmp_path / "snapshots" / "live.json")
    modes = [
        "ok",
        "ok",
        "reset",
        "short",
        "status:503",
        "status:400",
        "garbage",
        "nullcontent",
        "big:5000",
        "badutf8",
        "status:429",
    ]
    rng = random.Random(7)
    for prompt in prompts:
        fault_server.prompt_modes[prompt] = rng.choice(modes)
    fault_server.replies.update({p: f"{p} changed" for p in prompts[::4]})

    run_dir, code, _ = run_suite(load_config(config), "live")

    rows = outcomes(run_dir)
    assert len(rows) == 60
    unadmitted = [o for o in rows if not (o["transport"] == "ok" and o["schema"] == "ok")]
    assert unadmitted, "the mix must produce unadmitted rows"
    assert all(o["task_score"] is None and o["misses"] == [] for o in unadmitted)
    cases = verdicts(run_dir)
    bad_cases = {o["case_id"] for o in unadmitted}
    assert all(cases[c]["disagreement"] is None and not cases[c]["admitted"] for c in bad_cases)
    assert code & 2
    with pytest.raises(IncompleteError):
        promote(run_dir, tmp_path / "snapshots", suite="live")
    promote(run_dir, tmp_path / "snapshots", suite="live", allow_partial=True)
    after = load_snapshot(tmp_path / "snapshots" / "live.json")
    assert {c: after[c] for c in bad_cases} == {c: before[c] for c in bad_cases}


def test_alias_drift_is_its_own_class(tmp_path: Path, fault_server: FaultServer) -> None:
    """A candidate that starts serving another model gives alias_swap and alert.alias_drift."""
    write_suite(tmp_path, 3)
    config = write_config(tmp_path, fault_server.url("ok", "ref"), fault_server.url("ok", "cand"))
    accept_clean_run(config)
    fault_server.model_map["cand-model"] = "cand-model-2026-12"

    with capture_logs() as events:
        run_dir, code, _ = run_suite(load_config(config), "live")

    assert {v["gate"] for v in verdicts(run_dir).values()} == {"alias_swap"}
    drift = [e for e in events if e["event"] == "alert.alias_drift"]
    assert {(e["side"], e["accepted"], e["served"]) for e in drift} == {
        ("candidate", "cand-model", "cand-model-2026-12")
    }
    assert code == 1


def alias_drift(events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """The alert.alias_drift lines of a run: side, accepted, served, count, case ids."""
    return sorted(
        (e["side"], e["accepted"], e["served"], e["count"], sorted(e["case_ids"]))
        for e in events
        if e["event"] == "alert.alias_drift"
    )


def test_a_swap_that_breaks_the_json_is_still_drift(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """A candidate swapped to a model whose replies break the JSON reads schema_miss, yet each
    row keeps the served model, id and usage, and alert.alias_drift names every case."""
    rows = [
        {"id": f"case-{i}", "prompt": f"city {i}", "expect": {"json_fields": {"city": "Paris"}}}
        for i in range(3)
    ]
    (tmp_path / "cases.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for row in rows:
        fault_server.replies[str(row["prompt"])] = '{"city": "Paris"}'
    ref_url = fault_server.url("ok", "ref")
    accept_clean_run(write_config(tmp_path, ref_url, fault_server.url("ok", "cand")))
    fault_server.model_map["cand-model"] = "cand-model-2026-12"
    config = write_config(tmp_path, ref_url, fault_server.url("big:12", "cand"))  # prose

    with capture_logs() as events:
        run_dir, code, summary = run_suite(load_config(config), "live")

    candidate = [o for o in outcomes(run_dir) if o["side"] == "candidate"]
    expected_rows = {("fail", "answer_not_json", "cand-model-2026-12", True, True)}
    assert expected_rows == {
        (
            o["schema"],
            o["detail"],
            o["response_model"],
            str(o["response_id"]).startswith("chatcmpl-fault-"),
            o["usage"]["total_tokens"] > 0,
        )
        for o in candidate
    }
    expected = (
        2,
        {"schema_miss"},
        [("candidate", "cand-model", "cand-model-2026-12", 3, ["case-0", "case-1", "case-2"])],
        {"reference": ["ref-model"], "candidate": ["cand-model-2026-12"]},
    )
    actual = (
        code,
        {v["gate"] for v in verdicts(run_dir).values()},
        alias_drift(events),
        summary["served_models"],
    )
    assert expected == actual


def test_a_fallback_for_some_calls_is_drift_whatever_the_gate_class(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """Two of five candidate calls served by a fallback model raise one alert.alias_drift that
    names both cases, the one whose fixture moved too, and summary.json lists both models."""
    prompts = write_suite(tmp_path, 5)
    config = write_config(tmp_path, fault_server.url("ok", "ref"), fault_server.url("ok", "cand"))
    accept_clean_run(config)
    for i in (1, 3):
        fault_server.prompt_models[("cand-model", prompts[i])] = "cand-fallback"
    cases = (tmp_path / "cases.jsonl").read_text().splitlines()
    edited = json.loads(cases[3])
    edited["expect"]["max_chars"] = 500  # a test edit: case-003 is a fixture_move now
    cases[3] = json.dumps(edited)
    (tmp_path / "cases.jsonl").write_text("\n".join(cases) + "\n")

    with capture_logs() as events:
        run_dir, code, summary = run_suite(load_config(config), "live")

    gates = {k: v["gate"] for k, v in verdicts(run_dir).items()}
    expected = (
        1,
        ("alias_swap", "fixture_move", "unchanged"),
        [("candidate", "cand-model", "cand-fallback", 2, ["case-001", "case-003"])],
        ["cand-fallback", "cand-model"],
    )
    actual = (
        code,
        (gates["case-001"], gates["case-003"], gates["case-000"]),
        alias_drift(events),
        summary["served_models"]["candidate"],
    )
    assert expected == actual


def test_a_backend_swap_behind_a_gateway_is_an_alias_swap(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """Behind a LiteLLM-like gateway (the alias in the body, the backend in
    x-litellm-model-name) the header is the served model, kept in raw.jsonl: a backend swap
    under the same alias is an alias_swap, and a replay of it reads the same."""
    fault_server.gateway_header = "x-litellm-model-name"
    fault_server.model_map["cand-model"] = "openai/gpt-a"
    write_suite(tmp_path, 3)
    config = write_config(tmp_path, fault_server.url("ok", "ref"), fault_server.url("ok", "cand"))
    first, first_code, _ = run_suite(load_config(config), "live")
    promote(first, tmp_path / "snapshots", suite="live")
    fault_server.model_map["cand-model"] = "openai/gpt-b"

    with capture_logs() as events:
        second, code, summary = run_suite(load_config(config), "live")
    replayed, _, _ = run_suite(load_config(config), "live", parent_dir=second, mode=RunMode.REPLAY)

    raw = [json.loads(line) for line in (first / "raw.jsonl").read_text().splitlines()]
    cand = [e["response"] for e in raw if e["side"] == "candidate"]
    expected_raw = {("openai/gpt-a", "cand-model")}
    assert expected_raw == {
        (r["headers"]["x-litellm-model-name"], json.loads(r["body"])["model"]) for r in cand
    }
    expected = (
        0,
        {"alias_swap"},
        [("candidate", "openai/gpt-a", "openai/gpt-b", 3, ["case-000", "case-001", "case-002"])],
        {"reference": ["ref-model"], "candidate": ["openai/gpt-b"]},
        1,
    )
    actual = (
        first_code,
        {v["gate"] for v in verdicts(second).values()},
        alias_drift(events),
        summary["served_models"],
        code,
    )
    assert expected == actual
    assert (replayed / "outcomes.jsonl").read_bytes() == (second / "outcomes.jsonl").read_bytes()


def test_an_endpoint_names_the_header_that_carries_its_served_model(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """`served_model_header` names the header the served model comes from; only that side
    keeps it in raw.jsonl, and the other side reads its body's `model`."""
    fault_server.gateway_header = "x-backend-model"
    fault_server.model_map["cand-model"] = "vllm/llama-3"
    write_suite(tmp_path, 2)
    config = write_config(
        tmp_path,
        fault_server.url("ok", "ref"),
        fault_server.url("ok", "cand"),
        extra='served_model_header = "X-Backend-Model"',
    )

    run_dir, _, _ = run_suite(load_config(config), "live")

    raw = [json.loads(line) for line in (run_dir / "raw.jsonl").read_text().splitlines()]
    kept = {e["side"]: e["response"]["headers"].get("x-backend-model") for e in raw}
    served = {o["side"]: o["response_model"] for o in outcomes(run_dir)}
    expected = (
        {"reference": None, "candidate": "vllm/llama-3"},
        {"reference": "ref-model", "candidate": "vllm/llama-3"},
    )
    assert expected == (kept, served)


def test_both_sides_of_a_case_are_in_flight_together(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """With one slot per endpoint, the reference and candidate calls still overlap."""
    write_suite(tmp_path, 3)
    config = write_config(
        tmp_path,
        fault_server.url("together:2", "ref"),
        fault_server.url("together:2", "cand"),
        concurrency=1,
    )
    _, code, _ = run_suite(load_config(config), "live")
    assert code == 0
    assert fault_server.max_inflight == 2


def test_replay_of_a_live_run_is_byte_identical(tmp_path: Path, fault_server: FaultServer) -> None:
    """Replaying a live run offline rewrites outcomes and disagreement byte for byte."""
    prompts = write_suite(tmp_path, 12)
    for prompt, mode in zip(prompts, ["ok", "garbage", "status:503", "ok"] * 3, strict=True):
        fault_server.prompt_modes[prompt] = mode
    config = write_config(tmp_path, fault_server.url("ok", "ref"), fault_server.url("ok", "cand"))
    source, code, _ = run_suite(load_config(config), "live")
    calls = len(fault_server.received())
    fault_server.stop()  # replay must not need the network

    replayed, replay_code, _ = run_suite(
        load_config(config), "live", parent_dir=source, mode=RunMode.REPLAY
    )

    assert replayed != source
    for name in ("outcomes.jsonl", "disagreement.json"):
        assert (replayed / name).read_bytes() == (source / name).read_bytes()
    assert replay_code == code
    assert calls > 0


def test_retry_unscored_recalls_only_the_misses(tmp_path: Path, fault_server: FaultServer) -> None:
    """--retry-unscored re-calls just the unscored rows, into a new run that names its parent."""
    prompts = write_suite(tmp_path, 6)
    config = write_config(tmp_path, fault_server.url("ok", "ref"), fault_server.url("ok", "cand"))
    for prompt in prompts[:2]:
        fault_server.prompt_modes[prompt] = "status:503"
    first, code, _ = run_suite(load_config(config), "live")
    assert code == 2
    fault_server.prompt_modes.clear()
    fault_server.clear()

    second, code, _ = run_suite(load_config(config), "live", parent_dir=first, mode=RunMode.RETRY)

    manifest = json.loads((second / "manifest.json").read_text())
    assert manifest["parent"] == first.name
    assert sorted(r.prompt for r in fault_server.received()) == sorted(prompts[:2] * 2)
    assert code == 0
    assert len(outcomes(second)) == 12


def _run_cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runner", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=60,
        check=False,
    )


def _start_run(config: Path, cwd: Path) -> subprocess.Popen[str]:
    """`parallax run` as a child process; its stderr is kept for the test to read."""
    return subprocess.Popen(
        [sys.executable, "-m", "runner", "run", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
    )


def _wait_for_rows(root: Path, rows: int) -> Path:
    """The run directory, once its raw.jsonl exists and holds at least `rows` lines."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        raw = list((root / "runs").rglob("raw.jsonl"))
        if raw and raw[0].read_bytes().count(b"\n") >= rows:
            return raw[0].parent
        time.sleep(0.02)
    raise AssertionError("the run never started writing")


def test_api_key_never_reaches_disk_or_logs(tmp_path: Path, fault_server: FaultServer) -> None:
    """The key arrives at the server as a bearer token but appears in no file and no log line."""
    secret = "sk-live-DO-NOT-LEAK-8c1f0e2d"
    prompts = write_suite(tmp_path, 6)
    fault_server.prompt_modes[prompts[0]] = "status:401"
    fault_server.prompt_modes[prompts[1]] = "reset"
    config = write_config(
        tmp_path, fault_server.url("ok", "ref"), fault_server.url("ok", "cand"), key_env="TEST_KEY"
    )
    env = {**os.environ, "TEST_KEY": secret}

    result = _run_cli(["run", "--config", str(config)], env, tmp_path)

    assert result.returncode == 2, result.stderr
    seen = {r.headers.get("authorization") for r in fault_server.received()}
    assert seen == {f"Bearer {secret}"}
    assert secret not in result.stdout and secret not in result.stderr
    files = [p for p in (tmp_path / "runs").rglob("*") if p.is_file()]
    assert files
    assert all(secret.encode() not in p.read_bytes() for p in files)


def test_sigkill_then_resume_loses_and_duplicates_nothing(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """A run killed mid-flight and resumed ends with the rows of an uninterrupted run."""
    prompts = write_suite(tmp_path, 40)
    for i, prompt in enumerate(prompts):
        if i % 5 == 0:
            fault_server.prompt_modes[prompt] = "garbage"
        elif i > 20:  # the run waits here until killed, however fast it got this far
            fault_server.prompt_modes[prompt] = "gate:rest"
    config = write_config(
        tmp_path,
        fault_server.url("slow:0.05", "ref"),
        fault_server.url("slow:0.05", "cand"),
        concurrency=2,
        timeout=PATIENT,
        deadline=60,
    )
    env = dict(os.environ)
    proc = _start_run(config, tmp_path)
    run_dir = _wait_for_rows(tmp_path, 20)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=10)
    assert not (run_dir / "summary.json").exists()
    fault_server.gate("rest").set()

    resumed = _run_cli(["run", "--resume", str(run_dir)], env, tmp_path)
    fresh, _, _ = run_suite(load_config(config), "live")

    assert resumed.returncode == 2, resumed.stderr
    assert key_rows(run_dir) == key_rows(fresh)
    assert len({(r[0], r[1], r[2]) for r in key_rows(run_dir)}) == 80
    raw_keys = [
        (e["case_id"], e["side"], e["sample"])
        for e in map(json.loads, (run_dir / "raw.jsonl").read_text().splitlines())
    ]
    assert len(raw_keys) == len(set(raw_keys)) == 80


def test_a_fixture_rewritten_during_a_run_stops_it_with_one_line(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """Cases are read back from the fixture file as they are called: a row changed in place
    under a running run is exit 65 naming file and line, and the run resumes once it is back."""
    write_suite(tmp_path, 40)
    config = write_config(  # every call waits for the edit: the last case is read after it
        tmp_path,
        fault_server.url("gate:edited", "ref"),
        fault_server.url("gate:edited", "cand"),
        concurrency=2,
        timeout=PATIENT,
        deadline=60,
    )
    fixtures = tmp_path / "cases.jsonl"
    original = fixtures.read_text()
    proc = _start_run(config, tmp_path)
    run_dir = _wait_for_rows(tmp_path, 0)
    with fixtures.open("r+") as handle:  # in place: same file, the last row's prompt edited
        handle.write(original.replace("prompt 039", "PROMPT 039"))
    fault_server.gate("edited").set()
    _, stderr = proc.communicate(timeout=30)
    assert stderr is not None
    assert proc.returncode == 65, stderr
    assert "Traceback" not in stderr
    assert stderr.strip() == (
        f"parallax: {fixtures}:40: changed during the run: case 'case-039' no longer reads as "
        "validated"
    )
    fixtures.write_text(original)
    resumed = _run_cli(["run", "--resume", str(run_dir)], dict(os.environ), tmp_path)
    assert resumed.returncode == 0, resumed.stderr  # every case new and scored
    assert len(outcomes(run_dir)) == 80
