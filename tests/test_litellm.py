"""A real LiteLLM proxy on 127.0.0.1 in front of parallax: the served model is its backend.

LiteLLM answers with the alias asked for in the body's `model` and names the backend it routed
to in `x-litellm-model-name`; a backend swap under the same alias must read as an alias swap.
The proxy serves `mock_response` models (no upstream is called). It is installed once, pinned,
into its own venv under the user's cache dir (RECIPES.md: never 1.107.0); the test skips with
the reason when that cannot be done.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from llmockkit import LlmockServer, Match, StreamFault, stream_fault
from llmockkit import Protocol as LlmockProtocol
from structlog.testing import capture_logs

from runner.config import load_config
from runner.runs.run import run_suite
from runner.snapshot import promote

LITELLM = "1.106.12"  # pinned; 1.107.0 was a compromised release
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "parallax-tests"
MASTER_KEY = "sk-gateway-master"  # the proxy's own key, sent by parallax as the endpoint's key

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def litellm_bin() -> Path:
    """The `litellm` command of a venv that holds the pinned proxy, made once per machine."""
    venv = CACHE / f"litellm-{LITELLM}"
    command = venv / "bin" / "litellm"
    if (venv / ".installed").exists() and command.exists():
        return command
    steps = [
        [sys.executable, "-m", "venv", "--clear", str(venv)],
        [str(venv / "bin" / "pip"), "install", "-q", f"litellm[proxy]=={LITELLM}"],
    ]
    for step in steps:
        try:
            done = subprocess.run(step, capture_output=True, text=True, check=False, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as exc:
            pytest.skip(f"cannot install LiteLLM {LITELLM}: {exc}")
        if done.returncode != 0:
            pytest.skip(f"cannot install LiteLLM {LITELLM}: {done.stderr.strip()[-300:]}")
    (venv / ".installed").touch()
    return command


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@contextmanager
def proxy(
    command: Path, root: Path, backends: dict[str, str], *, upstream: str | None = None
) -> Iterator[str]:
    """A LiteLLM proxy whose aliases route to `backends`; yields its URL. With no `upstream`
    every backend is a `mock_response` ("ok"); with one, each is an OpenAI model served there."""
    reply = f"      api_base: {upstream}\n" if upstream else '      mock_response: "ok"\n'
    models = "".join(
        f"  - model_name: {alias}\n    litellm_params:\n      model: {backend}\n"
        f"      api_key: sk-none\n{reply}"
        for alias, backend in backends.items()
    )
    config = root / "litellm.yaml"
    config.write_text(f"model_list:\n{models}litellm_settings:\n  num_retries: 0\n")
    port = _free_port()
    env = {**os.environ, "LITELLM_MASTER_KEY": MASTER_KEY, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    log = (root / "litellm.log").open("wb")
    child = subprocess.Popen(
        [str(command), "--config", str(config), "--host", "127.0.0.1", "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120  # a cold start takes some 7 s on two cores
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health/liveliness", timeout=2):
                    break
            except OSError:
                if child.poll() is not None or time.monotonic() > deadline:
                    tail = (root / "litellm.log").read_text(errors="replace")[-500:]
                    pytest.fail(f"LiteLLM proxy did not start: {tail}")
                time.sleep(0.2)
        yield url
    finally:
        child.terminate()
        try:
            child.wait(timeout=20)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(timeout=20)
        log.close()


def _project(root: Path, url: str) -> Path:
    cases = [
        {"id": f"case-{i}", "prompt": f"Say ok {i}.", "expect": {"must_include": ["ok"]}}
        for i in range(3)
    ]
    (root / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    endpoints = "".join(
        f'[endpoints.{name}]\nkind = "openai-chat"\nbase_url = "{url}"\nmodel = "{name}-alias"\n'
        'api_key_env = "PARALLAX_LITELLM_KEY"\n'
        "retry = { attempts = 1 }\ntimeout = { connect = 5, read = 30, write = 5, pool = 5 }\n"
        for name in ("ref", "cand")
    )
    config = root / "parallax.toml"
    config.write_text(
        f'runs_dir = "runs"\nsnapshots_dir = "snapshots"\n{endpoints}'
        '[suites.gw]\nfixtures = "cases.jsonl"\nreference = "ref"\ncandidate = "cand"\n'
    )
    return config


def _drift(events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [
        (e["side"], e["accepted"], e["served"], e["count"])
        for e in events
        if e["event"] == "alert.alias_drift"
    ]


def test_a_backend_swap_behind_litellm_is_an_alias_swap(
    tmp_path: Path, litellm_bin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through a real LiteLLM proxy the served model is the backend from its header; moving
    the candidate's alias to another backend is an alias_swap with alert.alias_drift."""
    monkeypatch.setenv("PARALLAX_LITELLM_KEY", MASTER_KEY)
    before = {"ref-alias": "openai/ref-backend", "cand-alias": "openai/gpt-backend-a"}
    with proxy(litellm_bin, tmp_path, before) as url:
        config = _project(tmp_path, url)
        first, first_code, first_summary = run_suite(load_config(config), "gw")
    promote(first, tmp_path / "snapshots", suite="gw")
    after = {**before, "cand-alias": "openai/gpt-backend-b"}
    with proxy(litellm_bin, tmp_path, after) as url, capture_logs() as events:
        config = _project(tmp_path, url)
        second, code, summary = run_suite(load_config(config), "gw")

    raw = [json.loads(line) for line in (first / "raw.jsonl").read_text().splitlines()]
    said = {
        (
            e["side"],
            json.loads(e["response"]["body"])["model"],
            e["response"]["headers"].get("x-litellm-model-name"),
        )
        for e in raw
    }
    gates = {
        v["gate"] for v in json.loads((second / "disagreement.json").read_text())["cases"].values()
    }
    expected = (
        0,
        {
            ("reference", "ref-alias", "openai/ref-backend"),
            ("candidate", "cand-alias", "openai/gpt-backend-a"),
        },
        {"reference": ["openai/ref-backend"], "candidate": ["openai/gpt-backend-a"]},
        1,
        {"alias_swap"},
        [("candidate", "openai/gpt-backend-a", "openai/gpt-backend-b", 3)],
        {"reference": ["openai/ref-backend"], "candidate": ["openai/gpt-backend-b"]},
    )
    actual = (
        first_code,
        said,
        first_summary["served_models"],
        code,
        gates,
        _drift(events),
        summary["served_models"],
    )
    assert expected == actual


@pytest.mark.parametrize(
    ("fault", "direct", "through_gateway"),
    [
        # the upstream stream ends cleanly with no finish event: LiteLLM adds one, so the
        # reply is graded as a good answer
        (StreamFault.TRUNCATE, ("connection_lost", "skipped", "stream_truncated"), ("ok", "ok")),
        # one upstream chunk is not JSON: LiteLLM ends its own stream with an error event
        (StreamFault.MALFORMED, ("ok", "fail", "stream_malformed"), ("http_error", "skipped")),
    ],
)
def test_litellm_hides_an_upstream_stream_fault_that_a_direct_call_stamps(
    tmp_path: Path,
    litellm_bin: Path,
    llmock: LlmockServer,
    monkeypatch: pytest.MonkeyPatch,
    fault: StreamFault,
    direct: tuple[str, str, str],
    through_gateway: tuple[str, str],
) -> None:
    """The same upstream stream fault, called directly and through a real LiteLLM proxy: the
    direct side is stamped as the fault it is, while the gateway hands parallax a stream that
    finished (graded) or its own error event, `stream_error:500` (the README's "Gateways")."""
    monkeypatch.setenv("PARALLAX_LITELLM_KEY", MASTER_KEY)
    for model in ("direct", "via-gateway"):
        llmock.script(stream_fault(fault, after_chunks=2, match=Match(model=model, stream=True)))
    (tmp_path / "cases.jsonl").write_text(
        json.dumps({"id": "one", "prompt": "Say something.", "expect": {"max_chars": 4000}}) + "\n"
    )
    with proxy(
        litellm_bin, tmp_path, {"gw-alias": "openai/via-gateway"}, upstream=f"{llmock.origin}/v1"
    ) as url:
        config = tmp_path / "parallax.toml"
        config.write_text(
            llmock.endpoint_toml("direct", LlmockProtocol.OPENAI, extra="stream = true\n")
            + f'[endpoints.gateway]\nkind = "openai-chat"\nbase_url = "{url}"\n'
            'model = "gw-alias"\napi_key_env = "PARALLAX_LITELLM_KEY"\nstream = true\n'
            "retry = { attempts = 1 }\ndeadline = 60\n"
            '[suites.gw]\nfixtures = "cases.jsonl"\nreference = "direct"\ncandidate = "gateway"\n'
        )
        run_dir, _, _ = run_suite(load_config(config), "gw")

    rows = [json.loads(line) for line in (run_dir / "outcomes.jsonl").read_text().splitlines()]
    seen = {r["side"]: (r["transport"], r["schema"], r["detail"]) for r in rows}
    reference, candidate = seen["reference"], seen["candidate"]
    expected_codes = (direct[2], "stream_error:500" if fault is StreamFault.MALFORMED else "ok")
    assert (direct[:2], through_gateway) == (reference[:2], candidate[:2])
    assert all(
        code in detail
        for code, detail in zip(expected_codes, (reference[2], candidate[2]), strict=True)
    )
