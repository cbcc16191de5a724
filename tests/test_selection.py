"""Specification of partial runs: `parallax run --case GLOB --stratum S`, and what follows.

A partial run calls only the cases it selects; its gate covers them alone (the others are not
retired), manifest and summary record the selection, the reports and the stderr summary say
"partial: N of M cases", history lists it but counts it as no night, promote refuses it
without --allow-partial (then keeps every other case's entry), and a resume, a retry or a
replay of it keeps its selection. Offline, on a private copy of the demo.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from markupsafe import escape

from runner import history
from runner.arguments import RUN_STRATA
from runner.config import load_config
from runner.errors import DataError
from runner.model import STRATA
from runner.runs.selection import Selection, partial_line
from runner.scheduler.catchup import find_interrupted, runs_since

REPO = Path(__file__).resolve().parent.parent
CONFIG = "config/demo.toml"
CEILING = (  # the demo's ceiling suite, in file order
    *("easy-empty-guard", "easy-no-apology-loop", "medium-budget", "medium-sku-contract"),
    *("stretch-missing-field", "stretch-policy-cite"),
)


def make_demo(root: Path) -> Path:
    """A private copy of the offline demo: config, fixtures and snapshots side by side."""
    for name in ("config", "fixtures", "snapshots"):
        shutil.copytree(REPO / name, root / name)
    return root


def parallax(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it, with no PARALLAX_ variable of the caller's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARALLAX_")}
    return subprocess.run(
        [sys.executable, "-m", "runner", *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def run_dirs(root: Path, suite: str) -> list[Path]:
    return history.run_dirs(root / "runs" / suite)


def load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def log_lines(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines()]


def partial_run(root: Path, *selection: str, suite: str = "ceiling") -> Path:
    proc = parallax("run", "--config", CONFIG, "--suite", suite, *selection, cwd=root)
    assert proc.returncode in (0, 1, 2, 3), proc.stderr
    return run_dirs(root, suite)[-1]


def called(run_dir: Path) -> list[str]:
    """The case ids a run's outcome ledger holds, sorted."""
    return sorted({row["case_id"] for row in jsonl(run_dir / "outcomes.jsonl")})


# --- the selection ----------------------------------------------------------------------------


def test_the_command_line_offers_the_strata_the_model_knows() -> None:
    """`--stratum`'s choices are the model's strata."""
    assert RUN_STRATA == STRATA


@pytest.mark.parametrize(
    ("cases", "strata", "picked"),
    [
        (["easy-*"], [], ["easy-empty-guard", "easy-no-apology-loop"]),
        (["*-budget", "stretch-p*"], [], ["medium-budget", "stretch-policy-cite"]),
        ([], ["medium", "stretch"], list(CEILING[2:])),
        (["*-s*"], ["medium"], ["medium-sku-contract"]),  # both: the cases matching each
        (["EASY-*"], [], []),  # case-sensitive, whatever the platform
        (["easy-empty-guar?", "[m]edium-b*"], [], ["easy-empty-guard", "medium-budget"]),
    ],
)
def test_a_case_is_picked_by_any_pattern_and_any_stratum_given(
    cases: list[str], strata: list[str], picked: list[str]
) -> None:
    """fnmatch patterns on ids, any of them; strata, any of them; given both, both."""
    selection = Selection.given(cases, strata)
    assert selection is not None
    stratum = {case_id: case_id.split("-")[0] for case_id in CEILING}
    assert [c for c in CEILING if selection.picks(c, stratum[c])] == picked


def test_no_flag_is_the_whole_suite_and_flags_read_back_as_typed() -> None:
    """Neither flag: no selection. The words are the command line that asks for it."""
    assert Selection.given(None, None) is None
    assert Selection.given([], []) is None
    selection = Selection.given(["refund *", "a*", "a*"], ["easy"])
    assert selection is not None
    assert selection.words() == "--case 'refund *' --case 'a*' --stratum easy"


@pytest.mark.parametrize(
    "partial",
    [{"cases": "a*", "strata": []}, {"cases": [], "strata": ["hard"]}, {"cases": [], "strata": []}],
)
def test_a_hand_edited_selection_is_refused_not_read_as_the_whole_suite(
    tmp_path: Path, partial: dict[str, Any]
) -> None:
    """A manifest whose `partial` is not a selection is a data error naming the file: a resume
    that read it as the whole suite would call what the run never selected."""
    where = tmp_path / "manifest.json"
    with pytest.raises(DataError) as info:
        Selection.of({"partial": partial}, where)
    assert str(info.value).startswith(f"{where}: 'partial'")


def test_the_partial_line_reads_a_summary_tolerantly() -> None:
    """`partial: N of M cases (flags)` from what a summary records; none for a whole run."""
    summary = {"partial": {"cases": ["a*"], "strata": [], "selected": 3, "of": 9}}
    assert partial_line(summary) == "partial: 3 of 9 cases (--case 'a*')"
    assert partial_line({"partial": {"selected": 3}}) == "partial: 3 of ? cases"
    assert partial_line({"partial": None}) is None


# --- a partial run ------------------------------------------------------------------------------


def test_a_partial_run_calls_and_gates_only_the_cases_it_selects(tmp_path: Path) -> None:
    """Two of the suite's six cases: only they are called, gated and counted; the other four,
    all in the snapshot, are not retired; manifest and summary record the selection, and the
    stderr summary, run.started and both reports say it is partial."""
    root = make_demo(tmp_path)
    proc = parallax("run", "--config", CONFIG, "--suite", "ceiling", "--case", "easy-*", cwd=root)
    (run_dir,) = run_dirs(root, "ceiling")
    assert called(run_dir) == ["easy-empty-guard", "easy-no-apology-loop"]
    summary = load(run_dir / "summary.json")
    expected = {"cases": ["easy-*"], "strata": [], "selected": 2, "of": 6}
    assert (summary["partial"], load(run_dir / "manifest.json")["partial"]) == (expected, expected)
    assert (summary["cases"], sum(summary["gate_counts"].values())) == (2, 2)
    assert (summary["retired"], summary["gate_counts"]["retired_case"]) == ([], 0)
    assert load(run_dir / "disagreement.json")["retired"] == []
    assert sorted(load(run_dir / "disagreement.json")["cases"]) == list(CEILING[:2])
    line = "partial: 2 of 6 cases (--case 'easy-*')"
    assert f"  {line}: not a night in history" in proc.stderr
    assert "**partial: 2 of 6 cases (--case 'easy-\\*')**" in (run_dir / "report.md").read_text()
    assert f'id="partial">{escape(line)}<' in (run_dir / "report.html").read_text()
    (started,) = [e for e in log_lines(proc.stdout) if e["event"] == "run.started"]
    assert (started["cases"], started["partial"]) == (2, expected)


def test_a_whole_run_records_no_selection(tmp_path: Path) -> None:
    """Without --case or --stratum the run is whole: `partial` is null in both files."""
    root = make_demo(tmp_path)
    run_dir = partial_run(root)
    assert load(run_dir / "summary.json")["partial"] is None
    assert load(run_dir / "manifest.json")["partial"] is None
    assert called(run_dir) == list(CEILING)


def test_a_partial_run_asks_the_floors_not_the_suite_s_shape(tmp_path: Path) -> None:
    """Only the easy cases: no missing_stratum or thin_stratum for the strata not selected
    (the suite's shape is a whole run's to judge), while the easy floor still gates."""
    root = make_demo(tmp_path)
    run_dir = partial_run(root, "--stratum", "easy")
    summary = load(run_dir / "summary.json")
    alerts = {alert for side in summary["stratum_alerts"].values() for alert in side}
    assert not alerts & {"missing_stratum", "thin_stratum", "ceiling", "stretch_too_easy"}
    assert alerts <= {"easy_regression", "medium_regression"}
    assert "partial run" in summary["strata_note"]


@pytest.mark.parametrize(
    ("selection", "words"),
    [
        (("--case", "nothing-*"), "--case 'nothing-*'"),
        (("--case", "easy-*", "--stratum", "stretch"), "--case 'easy-*' --stratum stretch"),
    ],
)
def test_a_selection_that_matches_no_case_is_exit_64_naming_it(
    tmp_path: Path, selection: tuple[str, ...], words: str
) -> None:
    """Nothing selected: exit 64 before any call, one line naming the suite and the flags."""
    root = make_demo(tmp_path)
    proc = parallax("run", "--config", CONFIG, "--suite", "ceiling", *selection, cwd=root)
    assert proc.returncode == 64, proc.stderr
    assert proc.stderr.splitlines() == [
        f"parallax: suite ceiling: no case matches {words} (of 6 cases)"
    ]
    assert run_dirs(root, "ceiling") == []


def test_a_stratum_of_an_unstratified_suite_says_it_has_none(tmp_path: Path) -> None:
    """The cities suite names no strata: --stratum selects nothing there, and says why."""
    root = make_demo(tmp_path)
    proc = parallax("run", "--config", CONFIG, "--suite", "cities", "--stratum", "easy", cwd=root)
    assert proc.returncode == 64, proc.stderr
    assert "no case of the suite names a stratum" in proc.stderr


def test_over_several_suites_a_suite_it_selects_nothing_in_stops_the_run(tmp_path: Path) -> None:
    """Every suite a run covers must have a case selected, checked before the first call."""
    root = make_demo(tmp_path)
    proc = parallax("run", "--config", CONFIG, "--case", "easy-*", cwd=root)
    assert proc.returncode == 64, proc.stderr
    assert "no case matches --case 'easy-*'" in proc.stderr
    assert not [p for p in (root / "runs").glob("*/*") if p.is_dir()]


# --- promote ----------------------------------------------------------------------------------


def test_promote_refuses_a_partial_run_without_allow_partial(tmp_path: Path) -> None:
    """Exit 2 and the snapshot untouched; the line names the selection and the command."""
    root = make_demo(tmp_path)
    run_dir = partial_run(root, "--case", "easy-*")
    before = (root / "snapshots" / "ceiling.json").read_bytes()
    proc = parallax("promote", run_dir, cwd=root)
    assert proc.returncode == 2, proc.stderr
    assert "a partial run (2 of 6 cases (--case 'easy-*'))" in proc.stderr
    assert "promote --allow-partial" in proc.stderr
    assert (root / "snapshots" / "ceiling.json").read_bytes() == before


def test_promote_allow_partial_keeps_the_unselected_cases_entries(tmp_path: Path) -> None:
    """With --allow-partial the selected cases' entries are accepted, and every other case's
    entry stays byte for byte as it was (none is removed as retired)."""
    root = make_demo(tmp_path)
    run_dir = partial_run(root, "--case", "easy-*")
    before = load(root / "snapshots" / "ceiling.json")["cases"]
    proc = parallax("promote", "--allow-partial", run_dir, cwd=root)
    assert proc.returncode == 0, proc.stderr
    changes = json.loads(proc.stdout)
    assert (changes["removed"], changes["kept_unselected"]) == ([], list(CEILING[2:]))
    after = load(root / "snapshots" / "ceiling.json")["cases"]
    assert sorted(after) == sorted(before)
    assert {c: after[c] for c in CEILING[2:]} == {c: before[c] for c in CEILING[2:]}
    verdicts = load(run_dir / "disagreement.json")["cases"]
    for case_id in CEILING[:2]:
        assert after[case_id]["disagreement"] == verdicts[case_id]["disagreement"]


# --- history and the daemon ---------------------------------------------------------------------


def test_history_lists_a_partial_run_but_counts_no_night(tmp_path: Path) -> None:
    """A whole run and a partial one: both listed (the partial one marked), one night."""
    root = make_demo(tmp_path)
    partial_run(root)
    partial_run(root, "--case", "easy-*")
    proc = parallax("history", "--config", CONFIG, "--suite", "ceiling", "--json", cwd=root)
    (report,) = json.loads(proc.stdout)["suites"]
    assert [run["partial"] is None for run in report["runs"]] == [True, False]
    assert report["nights"] == 1
    text = parallax("history", "--config", CONFIG, "--suite", "ceiling", cwd=root).stdout
    assert "partial: 2 of 6 cases (--case 'easy-*'): not a night" in text
    page = (root / "runs" / "ceiling" / "index.html").read_text(encoding="utf-8")
    assert "1 night(s)" in page
    assert "1 partial run(s), listed but not nights" in page
    assert '<span class="tag">partial, not a night</span>' in page
    assert "replay(s)" not in page  # a partial run is no replay


def test_a_report_s_trend_leaves_out_other_partial_runs(tmp_path: Path) -> None:
    """A whole run after two partial ones trends over itself alone; a partial run's own
    report keeps its own column."""
    root = make_demo(tmp_path)
    partial_run(root, "--case", "easy-*")
    second = partial_run(root, "--stratum", "easy")
    whole = partial_run(root)
    assert "gate classes, last 1 run(s)" in (whole / "report.html").read_text(encoding="utf-8")
    assert "gate classes, last 1 run(s)" in (second / "report.html").read_text(encoding="utf-8")


def test_the_daemon_neither_resumes_nor_counts_a_partial_run(tmp_path: Path) -> None:
    """A person's interrupted partial run is not the scheduled night: `serve` does not resume
    it, nor count it as a fire made up."""
    root = make_demo(tmp_path)
    run_dir = partial_run(root, "--case", "easy-*")
    manifest = load(run_dir / "manifest.json")
    (run_dir / "manifest.json").write_text(json.dumps({**manifest, "finished_at": None}))
    loaded = load_config(root / CONFIG)
    assert find_interrupted(loaded, "ceiling") == (None, None)
    since = datetime.fromisoformat(manifest["started_at"])
    assert list(runs_since(loaded, "ceiling", since=since)) == []


# --- resume, retry, replay ------------------------------------------------------------------------


def test_a_resume_of_a_partial_run_keeps_its_selection(tmp_path: Path) -> None:
    """A partial run killed before any call was written resumes with the cases it selected,
    never the whole suite."""
    root = make_demo(tmp_path)
    run_dir = partial_run(root, "--stratum", "stretch")
    manifest = load(run_dir / "manifest.json")
    (run_dir / "manifest.json").write_text(json.dumps({**manifest, "finished_at": None}))
    for name in ("raw.jsonl", "outcomes.jsonl"):
        (run_dir / name).write_text("")
    proc = parallax("run", "--resume", run_dir, cwd=root)
    assert proc.returncode in (0, 1), proc.stderr
    assert called(run_dir) == list(CEILING[4:])
    assert load(run_dir / "summary.json")["partial"] == {
        "cases": [],
        "strata": ["stretch"],
        "selected": 2,
        "of": 6,
    }


def test_a_retry_and_a_replay_of_a_partial_run_stay_partial(tmp_path: Path) -> None:
    """The medium cases (one times out): the retry re-calls it and stays partial, and a replay
    of the partial run regrades its two cases and is partial too."""
    root = make_demo(tmp_path)
    run_dir = partial_run(root, "--stratum", "medium")
    assert load(run_dir / "summary.json")["unadmitted"] == 1
    parallax("run", "--retry-unscored", run_dir, cwd=root)
    parallax("replay", run_dir, cwd=root)
    retry, replay = run_dirs(root, "ceiling")[1:]
    for child in (retry, replay):
        summary = load(child / "summary.json")
        assert summary["partial"] == load(run_dir / "summary.json")["partial"], child
        assert (summary["cases"], called(child)) == (2, ["medium-budget", "medium-sku-contract"])


@pytest.mark.parametrize("again", ["--resume", "--retry-unscored"])
def test_a_run_again_takes_no_new_selection(tmp_path: Path, again: str) -> None:
    """--case with --resume or --retry-unscored is exit 64: they run the run dir's cases."""
    root = make_demo(tmp_path)
    run_dir = partial_run(root, "--stratum", "medium")
    proc = parallax("run", again, run_dir, "--case", "easy-*", cwd=root)
    assert proc.returncode == 64, proc.stderr
    assert "--case and --stratum are for a new run" in proc.stderr
