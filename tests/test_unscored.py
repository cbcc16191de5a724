"""Why a run could not score its cases, and the next step its summary suggests."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from faultserver import refused_port
from relkit import PARALLAX, endpoint_toml, write_cases, write_config

from runner.history import run_dirs
from runner.runs.summary import print_summary
from runner.unscored import next_steps, why_lines


def _dead_candidate_run(root: Path, *, cases: int = 20) -> tuple[Any, int]:
    """`parallax run` of a suite whose reference is recorded and whose candidate is a
    loopback port nothing listens on (bound, noted, closed)."""
    import subprocess

    write_cases(root, cases)
    cassette = [{"case_id": f"case-{i:03d}", "completion": f"word{i}"} for i in range(cases)]
    (root / "ref.jsonl").write_text("".join(json.dumps(r) + "\n" for r in cassette))
    port = refused_port()
    endpoints = (
        '[endpoints.ref]\nkind = "recorded"\nmodel = "ref-model"\ncassette = "ref.jsonl"\n'
        + endpoint_toml("cand", f"http://127.0.0.1:{port}/v1", attempts=1)
    )
    suites = '[suites.s]\nfixtures = "cases.jsonl"\nreference = "ref"\ncandidate = "cand"\n'
    config = write_config(root, endpoints, suites)
    proc = subprocess.run(
        [*PARALLAX, "run", "--config", str(config)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    return proc, port


def test_a_run_against_a_dead_port_says_why_and_suggests_no_promote(tmp_path: Path) -> None:
    """Every candidate call refused: the summary counts the reason per side, in the OS's
    words and without aiohttp's `ssl:default`; it suggests a retry of the unscored cases, and
    no promote, since none of the new cases was scored."""
    proc, port = _dead_candidate_run(tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    reason = f"ConnectError: cannot connect to 127.0.0.1:{port}: Connection refused"
    assert f"  candidate: 20 connect_error ({reason}) — infrastructure" in lines, proc.stderr
    # the reference was scored everywhere: no reason line for it (its usage line is no reason)
    assert not [line for line in lines if re.match(r"  reference: \d+ [a-z_]+ \(", line)]
    assert "ssl:default" not in proc.stderr
    (run_dir,) = run_dirs(tmp_path / "runs" / "s")
    shown = run_dir.relative_to(tmp_path)
    retry = f" -m runner run --retry-unscored {shown}` calls only those again"
    assert any(line.startswith("  20 case(s) could not be scored") for line in lines)
    assert any(line.endswith(retry) for line in lines), proc.stderr
    assert "none was scored: there is nothing to promote" in proc.stderr
    assert not re.findall(r"`[^`]*\bpromote\b[^`]*`", proc.stderr)  # no promote command
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["unscored"] == {
        "reference": {"cases": 0, "reasons": []},
        "candidate": {
            "cases": 20,
            "reasons": [{"stamp": "connect_error", "detail": reason, "cases": 20}],
        },
        "new_cases": 20,
    }


def _summary(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "suite": "s",
        "verdict": "incomplete",
        "exit_code": 2,
        "cases": 10,
        "admitted": 4,
        "unadmitted": 6,
        "gate_counts": {"new_case": 10},
    }
    return base | fields


def test_a_partly_scored_first_run_points_at_allow_partial() -> None:
    """Some new cases scored, some not: promote without --allow-partial would refuse, so the
    summary says so and how many each flag would accept and leave out."""
    lines = next_steps(_summary(unscored={"new_cases": 6}), Path("runs/s/r1"))
    assert lines == [
        "  6 case(s) could not be scored: once the cause above is fixed, "
        "`parallax run --retry-unscored runs/s/r1` calls only those again",
        "  10 new case(s) are not gated until accepted: promote refuses this run; "
        "`parallax promote --allow-partial runs/s/r1` accepts the 4 scored one(s) and leaves "
        "the 6 unscored out",
    ]


def test_a_complete_first_run_suggests_promote() -> None:
    """Every case scored: promote is the next step, as before."""
    summary = _summary(verdict="clean", exit_code=0, admitted=10, unadmitted=0)
    assert next_steps(summary, Path("runs/s/r1")) == [
        "  10 new case(s) are not gated until accepted: review the report, then "
        "`parallax promote runs/s/r1`"
    ]


def test_an_incomplete_run_of_a_gated_suite_suggests_only_the_retry() -> None:
    """No new case: nothing to accept, only the unscored cases to call again."""
    summary = _summary(gate_counts={"transport_miss": 6, "unchanged": 4})
    assert next_steps(summary, Path("d")) == [
        "  6 case(s) could not be scored: once the cause above is fixed, "
        "`parallax run --retry-unscored d` calls only those again"
    ]


def test_a_summary_from_before_the_count_still_never_suggests_a_bare_promote() -> None:
    """A summary recorded before it counted unscored new cases (a resumed finished run):
    still no promote without --allow-partial."""
    lines = next_steps(_summary(), Path("d"))
    assert "`parallax promote --allow-partial d` accepts the scored ones" in lines[-1]
    assert "refuses this run" in lines[-1]


def test_the_top_reasons_per_side_are_printed_and_the_rest_counted() -> None:
    """Three reasons a side, the most common first, each saying whose trouble it is (a
    transport miss infrastructure, a schema miss the side's own format failure); the cases
    behind the others are counted."""
    reasons = [
        {"stamp": "timeout", "detail": "ReadTimeout: x", "cases": 9},
        {"stamp": "http_error", "detail": "HTTP 503", "cases": 5},
        {"stamp": "schema", "detail": "not_json", "cases": 2},
        {"stamp": "rate_limited", "detail": "HTTP 429", "cases": 1},
    ]
    summary = _summary(
        unscored={
            "reference": {
                "cases": 1,
                "reasons": [{"stamp": "cancelled", "detail": "", "cases": 1}],
            },
            "candidate": {"cases": 20, "reasons": reasons},
        }
    )
    assert why_lines(summary) == [
        "  reference: 1 cancelled — infrastructure",
        "  candidate: 9 timeout (ReadTimeout: x) — infrastructure",
        "  candidate: 5 http_error (HTTP 503) — infrastructure",
        "  candidate: 2 schema (not_json) — the candidate's own format failure",
        "  candidate: 4 more, for other reasons (see report.html)",
    ]


def test_a_fourth_reason_that_is_the_last_is_printed_not_counted() -> None:
    """ "1 more, for other reasons" took a line as long as the reason it hid: when what is
    left after three reasons is one known reason, it is printed instead."""
    reasons = [
        {"stamp": "timeout", "detail": "ReadTimeout: x", "cases": 9},
        {"stamp": "http_error", "detail": "HTTP 503", "cases": 5},
        {"stamp": "schema", "detail": "not_json", "cases": 2},
        {"stamp": "rate_limited", "detail": "HTTP 429", "cases": 1},
    ]
    summary = _summary(unscored={"candidate": {"cases": 17, "reasons": reasons}})
    assert why_lines(summary)[3:] == ["  candidate: 1 rate_limited (HTTP 429) — infrastructure"]


@pytest.mark.parametrize("unscored", [None, "junk", {"candidate": {"reasons": "junk"}}])
def test_a_hand_edited_unscored_field_prints_no_reasons(
    unscored: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A summary whose `unscored` is missing or of the wrong shape still prints, without
    reasons: the summary is read through the tolerant readers."""
    print_summary(_summary(unscored=unscored), Path("d"))
    err = capsys.readouterr().err
    assert "  candidate:" not in err and "run dir: d" in err
