"""Hostile replies from a real loopback server: each is stamped, capped or rejected, in time.

Deep nesting, a 50 MB body, megabytes of headers, invalid UTF-8, NUL bytes, lone surrogate
escapes, ten thousand choices, numbers where strings belong and replies that never end all go
through the whole pipeline (stamps, gate, ledgers, reports, JUnit) without crashing it or
outliving a deadline.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from faultserver import FaultServer, _gzip_bomb
from relkit import (
    PARALLAX,
    check_complete,
    endpoint_toml,
    jsonl,
    record,
    suite_toml,
    write_cases,
    write_config,
)
from structlog.testing import capture_logs

from runner.cli import main
from runner.config import load_config
from runner.runs.run import run_suite

# Only the drip must run into the deadline; the bounded replies (tens of MB streamed, a bomb
# inflated to the cap) must beat it and took up to 2 s on two busy cores, so it is generous.
DEADLINE = 10.0
CAP = 4_000_000

# mode, expects_json, (transport, schema), a piece the row's detail must contain
HOSTILE = [
    ("nested:100000", False, ("ok", "fail"), "not_json"),
    ("nestedanswer:100000", True, ("ok", "fail"), "answer_not_json"),
    ("nestedanswer:100", True, ("ok", "ok"), ""),
    ("nestedanswer:129", True, ("ok", "fail"), "answer_not_json"),  # past jsontext.MAX_DEPTH
    ("nested:129", False, ("ok", "fail"), "not_json"),
    ("huge:52428800", False, ("too_large", "skipped"), "max_response_bytes=4000000"),
    ("bighead:4194304", False, ("connection_lost", "skipped"), "connection_lost"),
    ("manyheads:4000", False, ("connection_lost", "skipped"), "connection_lost"),
    ("badutf8", False, ("ok", "fail"), "not_utf8"),
    ("nul", False, ("ok", "ok"), ""),
    ("rawnul", False, ("ok", "fail"), "not_json"),
    ("manychoices:10000", False, ("ok", "ok"), ""),
    ("surrogate", False, ("ok", "ok"), ""),
    ("wrongtypes", False, ("ok", "fail"), "missing_content"),
    ("drip", False, ("timeout", "skipped"), "deadline"),
    ("endless", False, ("too_large", "skipped"), "max_response_bytes"),
    ("bomb:64", False, ("too_large", "skipped"), "max_response_bytes"),
    ("farfuture", False, ("rate_limited", "skipped"), "HTTP 429"),  # a date past 9999
    ("status:429:Fri, 31 Dec 99999999999 23:59:59 GMT", False, ("rate_limited", "skipped"), ""),
    ("reset:502", False, ("http_error", "skipped"), "HTTP 502"),
]


def _suite(root: Path, server: FaultServer) -> dict[str, tuple[str, bool, tuple[str, str], str]]:
    rows = []
    by_id = {}
    for i, (mode, wants_json, stamps, detail) in enumerate(HOSTILE):
        case_id = f"h{i:02d}-{mode.split(':')[0]}"
        prompt = f"hostile {i} word{i}"
        expect = {"json_fields": {}} if wants_json else {"must_include": [f"word{i}"]}
        rows.append({"id": case_id, "prompt": prompt, "expect": expect})
        server.prompt_modes[prompt] = mode
        by_id[case_id] = (mode, wants_json, stamps, detail)
    (root / "cases.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return by_id


@pytest.mark.slow
def test_every_hostile_reply_is_stamped_capped_or_rejected_within_its_deadline(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """Each hostile reply gets a stamp and a clear detail, the endless ones the stamp of the
    bound that ended them (a run that outlived its deadlines would hang into the test's
    timeout, and how fast it ends is the machine's business); reports render."""
    cases = _suite(tmp_path, fault_server)
    endpoints = "".join(
        endpoint_toml(
            side,
            fault_server.url("ok", side),
            concurrency=8,
            deadline=DEADLINE,
            read=DEADLINE,
            attempts=1,
            max_bytes=CAP,
        )
        for side in ("ref", "cand")
    )
    config = write_config(tmp_path, endpoints, suite_toml("hostile"))

    with capture_logs() as events:
        run_dir, code, summary = run_suite(load_config(config), "hostile")

    rows = jsonl(run_dir / "outcomes.jsonl")
    got = {}
    for row in rows:
        mode, _, (transport, schema), detail = cases[row["case_id"]]
        got[(row["case_id"], row["side"])] = (row["transport"], row["schema"])
        assert (row["transport"], row["schema"]) == (transport, schema), (mode, row["detail"])
        assert detail in row["detail"], (mode, row["detail"])
        assert len(row["detail"]) <= 400, (mode, len(row["detail"]))
        if (transport, schema) != ("ok", "ok"):
            assert row["task_score"] is None
    assert len(got) == 2 * len(HOSTILE)
    figures = check_complete(run_dir, 2 * len(HOSTILE))
    raw = jsonl(run_dir / "raw.jsonl")
    assert max(len(e["response"]["body"]) for e in raw if e["response"]) <= CAP * 4 // 3 + 4
    assert code == 2
    assert summary["unadmitted"] == sum(1 for c in cases.values() if c[2] != ("ok", "ok"))
    assert not [e for e in events if e["event"] == "report.failed"]
    assert (run_dir / "report.html").stat().st_size > 0
    assert main(["report", str(run_dir), "--junit", str(tmp_path / "junit.xml")]) == 2
    assert b"\x00" not in (tmp_path / "junit.xml").read_bytes()
    # lone surrogates are scrubbed to U+FFFD in what was parsed; the raw body keeps the escapes
    assert "served-\ufffd" in summary["served_models"]["reference"]
    assert any("\\udc00" in (e["response"] or {}).get("body", "") for e in raw)
    record(
        "hostile",
        replies=len(rows),
        kinds=len(HOSTILE),
        rows_checked=figures["rows_checked"],
        lost_rows=figures["lost_rows"],
        crashes=0,
    )


_PEAK_OF_CHILD = (
    "import resource, subprocess, sys; "
    "code = subprocess.call(sys.argv[1:], stdout=subprocess.DEVNULL); "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(code)"
)


@pytest.mark.slow
def test_a_compressed_reply_never_inflates_past_the_cap(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """A few hundred bytes of `gzip, gzip` that inflate to 256 MB are stamped too_large, and the
    run's own peak memory stays far below what inflating them whole would take."""
    _gzip_bomb(256)  # built before the run, so the server answers within the deadline
    prompts = write_cases(tmp_path, 2)
    for prompt in prompts:
        fault_server.prompt_modes[prompt] = "bomb:256"
    endpoints = "".join(
        endpoint_toml(side, fault_server.url("ok", side), attempts=1) for side in ("ref", "cand")
    )
    config = write_config(tmp_path, endpoints, suite_toml("s"))
    # measured from a small go-between: a child forked from this test process would count
    # the test process's own pages (and its bomb) in its peak until it execs
    proc = subprocess.run(
        [sys.executable, "-c", _PEAK_OF_CHILD, *PARALLAX, "run", "--config", str(config)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    rows = jsonl(next((tmp_path / "runs" / "s").glob("2*")) / "outcomes.jsonl")
    assert {row["transport"] for row in rows} == {"too_large"} and len(rows) == 4
    peak_mb = int(proc.stdout.split()[-1]) / 1024  # ru_maxrss is in kilobytes on Linux
    assert peak_mb < 200, f"peak RSS {peak_mb:.0f} MB"
    record("hostile", bomb_peak_rss_mb=round(peak_mb))
