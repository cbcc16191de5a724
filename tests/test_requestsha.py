"""Specification of request_sha across runs: recorded, promoted, and gated on for the reference.

Real run directories of recorded endpoints whose system templates live in files: a prompt
edit on the reference is the frozen path moving (alert.reference_moved, reason
request_changed, exit 1), one on the candidate is the change under test (reported, exit 0).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from markupsafe import escape
from reportkit import parse_page

from runner.config import load_config
from runner.reports.markdown import md_text

CONFIG = """\
runs_dir = "runs"
snapshots_dir = "snapshots"
[endpoints.ref]
kind = "recorded"
model = "same-model"
cassette = "cassette.jsonl"
system_file = "prompts/v1.j2"
[endpoints.cand]
kind = "recorded"
model = "same-model"
cassette = "cassette.jsonl"
system_file = "prompts/v2.j2"
[suites.s]
fixtures = "cases.jsonl"
reference = "ref"
candidate = "cand"
"""


def setup(root: Path) -> Path:
    """Three cases both sides pass, each side's system prompt in its own template file."""
    (root / "prompts").mkdir()
    (root / "prompts" / "v1.j2").write_text("Answer yes or no.\n")
    (root / "prompts" / "v2.j2").write_text("Answer yes or no, briefly.\n")
    rows = [
        {"id": f"c{i}", "prompt": f"q{i}", "expect": {"must_include": ["yes"]}} for i in range(3)
    ]
    (root / "cases.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    replies = [{"case_id": f"c{i}", "completion": "yes"} for i in range(3)]
    (root / "cassette.jsonl").write_text("".join(json.dumps(r) + "\n" for r in replies))
    (root / "parallax.toml").write_text(CONFIG)
    return root


def parallax(root: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARALLAX_")}
    return subprocess.run(
        [sys.executable, "-m", "runner", *map(str, args)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def run(root: Path, *args: str | Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    """`parallax run`, and the run directory it made (two runs may start in one second, so
    not the last by name)."""
    before = set((root / "runs" / "s").glob("2*"))
    proc = parallax(root, "run", "--config", root / "parallax.toml", *args)
    assert "Traceback" not in proc.stderr, proc.stderr
    [made] = set((root / "runs" / "s").glob("2*")) - before
    return proc, made


def read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def events(proc: subprocess.CompletedProcess[str], name: str) -> list[dict[str, Any]]:
    lines = (json.loads(line) for line in proc.stdout.splitlines())
    return [line for line in lines if line.get("event") == name]


def shas(root: Path) -> dict[str, str]:
    loaded = load_config(root / "parallax.toml")
    return {
        side: loaded.shape(name).request_sha
        for side, name in (("reference", "ref"), ("candidate", "cand"))
    }


def promoted(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A first run, promoted: the snapshot accepts each side's request."""
    root = setup(tmp_path)
    proc, first = run(root)
    assert proc.returncode == 0, proc.stderr
    assert parallax(root, "promote", first).returncode == 0
    return root, shas(root)


def test_every_record_of_a_run_carries_each_sides_request_sha(tmp_path: Path) -> None:
    """The manifest per side, every exchange and outcome row, and the promoted snapshot's
    entries (`requests`, beside `models`) hold the request_sha the config gives each side."""
    root, sha = promoted(tmp_path)
    assert sha["reference"] != sha["candidate"]  # the same model, two prompts
    [first] = sorted((root / "runs" / "s").glob("2*"))
    manifest = read(first / "manifest.json")
    assert {side: manifest["endpoints"][side]["request_sha"] for side in sha} == sha
    for ledger in ("raw.jsonl", "outcomes.jsonl"):
        assert {(row["side"], row["request_sha"]) for row in jsonl(first / ledger)} == set(
            sha.items()
        )
    cases = read(root / "snapshots" / "s.json")["cases"]
    assert {cid: entry["requests"] for cid, entry in cases.items()} == dict.fromkeys(cases, sha)
    assert read(first / "summary.json")["request_changed"] == {"reference": [], "candidate": []}


def test_request_sha_is_stable_across_runs(tmp_path: Path) -> None:
    """An unedited config gives the same request_sha on the next run: nothing is reported."""
    root, sha = promoted(tmp_path)
    proc, second = run(root)
    assert (
        proc.returncode,
        read(second / "manifest.json")["endpoints"]["reference"]["request_sha"],
    ) == (
        0,
        sha["reference"],
    )
    assert "request changed" not in proc.stderr


def test_a_reference_prompt_edit_is_the_frozen_path_moving(tmp_path: Path) -> None:
    """Editing the reference's system template moves its request_sha: alert.reference_moved
    with reason request_changed names every accepted case, and the run needs review (exit 1)
    though every case's gate class is unchanged; summary, stderr and both reports say so."""
    root, sha = promoted(tmp_path)
    (root / "prompts" / "v1.j2").write_text("Answer yes or no!\n")
    proc, second = run(root)
    now = shas(root)["reference"]
    assert now != sha["reference"]
    assert proc.returncode == 1, proc.stderr
    summary = read(second / "summary.json")
    assert summary["gate_counts"]["unchanged"] == 3
    assert summary["request_changed"] == {
        "reference": [
            {"from": sha["reference"], "to": now, "count": 3, "case_ids": ["c0", "c1", "c2"]}
        ],
        "candidate": [],
    }
    [alert] = events(proc, "alert.reference_moved")
    assert (alert["reason"], alert["accepted"], alert["request_sha"], alert["count"]) == (
        "request_changed",
        sha["reference"],
        now,
        3,
    )
    line = f"request changed (reference): request_sha {sha['reference']} -> {now} on 3 case(s)"
    assert line in proc.stderr
    assert md_text(line, 200) in (second / "report.md").read_text()
    page = parse_page((second / "report.html").read_text())
    [reason] = page.find("li", data_reason="request_changed")
    assert reason.get("data-weight") == "review"
    assert reason.text() == (
        f"3 the reference's request changed on 3 cases — request_sha {sha['reference']} -> "
        f"{now}: the frozen path moved"
    )
    # once reviewed and promoted, the new request is the accepted one
    assert parallax(root, "promote", second).returncode == 0
    proc, _ = run(root)
    assert (proc.returncode, events(proc, "alert.reference_moved")) == (0, [])


def test_a_candidate_prompt_edit_is_reported_not_gated(tmp_path: Path) -> None:
    """Editing the candidate's system template is the change under test: summary.json's
    request_changed, the stderr summary and the reports name it, no alert fires, and with
    nothing else changed the run is clean (exit 0)."""
    root, sha = promoted(tmp_path)
    (root / "prompts" / "v2.j2").write_text("Answer yes or no, in one word.\n")
    proc, second = run(root)
    now = shas(root)["candidate"]
    assert proc.returncode == 0, proc.stderr
    summary = read(second / "summary.json")
    assert (summary["verdict"], summary["gate_counts"]["unchanged"]) == ("clean", 3)
    assert summary["request_changed"]["reference"] == []
    [group] = summary["request_changed"]["candidate"]
    assert (group["from"], group["to"], group["count"]) == (sha["candidate"], now, 3)
    assert events(proc, "alert.reference_moved") == []
    line = f"request changed (candidate): request_sha {sha['candidate']} -> {now} on 3 case(s)"
    assert line in proc.stderr
    assert md_text(line, 200) in (second / "report.md").read_text()
    assert escape(line) in (second / "report.html").read_text()


def test_a_snapshot_without_recorded_requests_is_no_change(tmp_path: Path) -> None:
    """A snapshot promoted before requests were recorded (its entries have no `requests`)
    accepts whatever request comes: a prompt edit on either side reports nothing."""
    root, _ = promoted(tmp_path)
    path = root / "snapshots" / "s.json"
    doc = read(path)
    for entry in doc["cases"].values():
        del entry["requests"]
    path.write_text(json.dumps(doc))
    (root / "prompts" / "v1.j2").write_text("Answer yes or no!\n")
    proc, second = run(root)
    assert proc.returncode == 0, proc.stderr
    assert read(second / "summary.json")["request_changed"] == {"reference": [], "candidate": []}


def test_rows_without_a_request_sha_are_no_change(tmp_path: Path) -> None:
    """A replay of a run whose rows recorded no request_sha (an older parallax) reads no
    change against a snapshot that has one: unknown is not moved."""
    root, _ = promoted(tmp_path)
    [first] = sorted((root / "runs" / "s").glob("2*"))
    rows = jsonl(first / "raw.jsonl")
    for row in rows:
        del row["request_sha"]
    (first / "raw.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = parallax(root, "replay", first)
    assert proc.returncode == 0, proc.stderr
    assert "request changed" not in proc.stderr


@pytest.mark.parametrize("flag", ["--resume", "--retry-unscored"])
def test_a_run_is_not_finished_under_another_request(tmp_path: Path, flag: str) -> None:
    """Resume and retry keep the rows a run made: after a prompt edit they are refused
    (exit 64) naming the side and both digests, or one verdict would stand on two prompts."""
    root = setup(tmp_path)
    rows = [{"case_id": "c0", "side": "candidate", "fault": "timeout"}]
    rows += [{"case_id": f"c{i}", "completion": "yes"} for i in range(3)]
    (root / "cassette.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc, first = run(root)
    assert proc.returncode == 2, proc.stderr  # c0's candidate call timed out
    if flag == "--resume":  # as if killed before it finished
        manifest = read(first / "manifest.json")
        manifest["finished_at"] = None
        (first / "manifest.json").write_text(json.dumps(manifest))
    was = shas(root)["candidate"]
    (root / "prompts" / "v2.j2").write_text("Answer in one word.\n")
    proc = parallax(root, "run", flag, first)
    assert proc.returncode == 64, proc.stderr
    expected = f"the candidate's request changed since it started (request_sha {was} -> "
    assert expected in proc.stderr
    assert f"{shas(root)['candidate']})" in proc.stderr
