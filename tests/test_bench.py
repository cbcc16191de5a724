"""The benchmark keeps working (tiny N, no timing asserted) and the fast paths change no output."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner.jsontext import dumps
from runner.model import Attempt, Exchange, Outcome, Response

ROOT = Path(__file__).resolve().parent.parent

text = st.text(max_size=20)
maybe_text = st.none() | text
attempts = st.builds(
    Attempt,
    n=st.integers(1, 5),
    transport=text,
    elapsed_ms=st.integers(0, 10**6),
    status=st.none() | st.integers(100, 599),
    error=maybe_text,
    message=maybe_text,
    retry_after=st.none() | st.floats(0, 100),
)
responses = st.builds(
    Response,
    status=st.integers(100, 599),
    headers=st.dictionaries(text, text, max_size=3),
    body=text,
    encoding=st.sampled_from(["utf-8", "base64"]),
    truncated=st.booleans(),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)


@given(
    attempts=st.lists(attempts, min_size=1, max_size=3),
    response=st.none() | responses,
    body=st.dictionaries(text, json_values, max_size=4),
)
def test_exchange_row_is_what_asdict_wrote(
    attempts: list[Attempt], response: Response | None, body: dict[str, object]
) -> None:
    """The hand-built raw.jsonl row encodes byte for byte like the dataclasses.asdict one."""
    exchange = Exchange(
        case_id="c",
        side="reference",
        sample=0,
        fixture_sha="f" * 16,
        endpoint="ep",
        adapter="openai-chat",
        model_alias="m",
        request={"method": "POST", "url": "http://x/v1", "body": body},
        attempts=tuple(attempts),
        transport=attempts[-1].transport,
        response=response,
        started_at="2026-01-01T00:00:00.000+00:00",
        elapsed_ms=3,
    )
    expected = dataclasses.asdict(exchange)
    expected["version"] = 1
    assert dumps(expected) == dumps(exchange.to_json())
    assert Exchange.from_json(json.loads(dumps(exchange.to_json()))) == exchange


@given(
    misses=st.lists(text, max_size=3),
    usage=st.none() | st.dictionaries(text, st.integers(), max_size=2),
)
def test_outcome_row_is_what_asdict_wrote(misses: list[str], usage: dict[str, int] | None) -> None:
    """The hand-built outcomes.jsonl row encodes byte for byte like the asdict one."""
    outcome = Outcome(
        case_id="c",
        side="candidate",
        sample=1,
        fixture_sha="f" * 16,
        stratum="easy",
        model_alias="m",
        response_model="m-1",
        response_id="r",
        system_fingerprint=None,
        transport="ok",
        schema="ok",
        task_score=1.0,
        misses=tuple(misses),
        detail="ok",
        http_status=200,
        attempts=1,
        elapsed_ms=5,
        usage=usage,
    )
    expected = dataclasses.asdict(outcome)
    expected["misses"] = list(outcome.misses)
    expected["version"] = 1
    assert dumps(expected) == dumps(outcome.to_json())


@pytest.mark.slow
@pytest.mark.timeout(360)
def test_bench_smoke(tmp_path: Path) -> None:
    """bench/run.py runs end to end at N=50 in every request shape (plain, templates and
    tools, streamed) and reports every figure; no timing is asserted."""
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "run.py"),
            "--n",
            "50",
            "--runs",
            "1",
            "--concurrency",
            "8",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=350,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(out.read_text())
    # one row per request shape, each with the bare loop that sends its bodies
    assert [row["config"] for row in result["rows"]] == ["plain", "templates", "stream"]
    for row in result["rows"]:
        assert (row["n"], row["calls"]) == (50, 100)
        for label in ("parallax", "noreports", "bare"):
            figures = row[label]
            assert figures["rows"] == 100
            assert figures["not_ok"] == 0
            for key in ("wall", "phase", "rss_mb", "ideal"):
                assert figures[key] > 0, (label, key)
            # at N=50 start-up noise can outweigh the calls: these are only required to exist
            for key in ("cpu_ms_per_call", "server_cpu", "startup_cpu"):
                assert isinstance(figures[key], float), (label, key)
        assert set(row["ratios"]) == {
            "cpu_per_call",
            "cpu_per_call_no_reports",
            "phase",
            "rss",
            "wall",
        }
        assert isinstance(row["reports_ms_per_call"], float)
    assert result["replay"]["rows"] == 100
    assert result["replay"]["rows_per_s"] > 0
    stages = result["replay_stages"]
    assert (stages["cases"], stages["rows"]) == (50, 100)
    assert stages["validate"] > 0 and stages["regrade"] > 0
    assert result["help_s"] > 0
    assert "parallax / bare" in proc.stdout


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_shards_bench_smoke(tmp_path: Path) -> None:
    """bench/shards.py runs a tiny suite unsharded, as 4 shard processes at once and their
    merge, and reports every figure with every call `ok` in both runs; no timing asserted."""
    out = tmp_path / "shards.json"
    argv = [sys.executable, str(ROOT / "bench" / "shards.py"), "--n", "40", "--base-n", "8"]
    argv += ["--concurrency", "8", "--json", str(out)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=290, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert (result["whole"]["rows"], result["sharded"]["rows"]) == (80, 80)
    assert result["whole"]["not_ok"] == result["sharded"]["not_ok"] == 0
    assert len(result["sharded"]["shard_wall"]) == 4 and result["base"]["rows"] == 16
    for key in ("slowest_shard_wall", "merge_wall", "merge_cpu", "wall", "cpu"):
        assert result["sharded"][key] > 0, key
    for key in ("merge_us_per_case", "merge_cpu_us_per_case_startup_removed"):
        assert isinstance(result[key], float), key
    assert "slowest shard + merge" in proc.stdout and "load average" in proc.stdout


def test_history_page_bench_smoke() -> None:
    """bench/history_page.py runs at a tiny size and prints each figure; none is asserted."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "history_page.py"), "--runs", "3", "--cases", "5"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    expected = (0, 5)
    actual = (proc.returncode, len(proc.stdout.splitlines()))
    assert expected == actual, proc.stderr


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_report_scale_smoke(tmp_path: Path) -> None:
    """bench/report_scale.py builds a run with every gate class through the pipeline, writes
    its figures and, where chromium runs, every browser figure with the page reporting no
    problem; no timing is asserted."""
    out, results = tmp_path / "scale.json", tmp_path / "RESULTS.md"
    results.write_text("# Results\n\nkept\n")
    argv = [sys.executable, str(ROOT / "bench" / "report_scale.py"), "--n", "300"]
    argv += ["--loads", "1", "--renders", "1", "--json", str(out), "--results", str(results)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=170, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert (row["n"], row["rows"]) == (300, 298)  # 2 retired
    assert row["html_bytes"] > 0 and row["history_bytes"] > 0
    for key in (
        "render_s",
        "reports_s",
        "reports_cpu_s",
        "given_reports_s",
        "given_reports_cpu_s",
        "bare_read_s",
        "replay_rows_per_s",
    ):
        assert row[key] > 0, key
    if "skipped" not in row:
        assert row["problems"] == []
        assert row["shown"].endswith("of 298 cases")
        for key in ("dcl_ms", "load_ms", "script_ready_ms", "filter_ms", "sort_ms", "open_ms"):
            assert row[key] > 0, key
    text = results.read_text()
    assert text.startswith("# Results\n\nkept\n")
    assert text.count("## report.html at scale") == 1
