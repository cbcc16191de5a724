"""History: a row per run, ceiling candidates over nights, served-model changes, broken dirs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from reportkit import BASE_CASES, Project

from runner.cli import main
from runner.history import (
    ceiling_candidates,
    format_text,
    load_history,
    model_changes,
    streaks,
    suite_report,
)


def _side(passed: bool, model: str) -> dict[str, Any]:
    return {
        "admitted": True,
        "passed": passed,
        "misses": [] if passed else ["x"],
        "response_model": model,
    }


def _run(
    suite_dir: Path,
    name: str,
    *,
    cases: dict[str, tuple[bool, bool]],
    models: tuple[str, str] = ("ref-1", "cand-1"),
    mode: str = "run",
) -> Path:
    """A hand-made run dir: per case (reference passed, candidate passed)."""
    run_dir = suite_dir / name
    run_dir.mkdir(parents=True)
    summary = {
        "version": 1,
        "run_id": name,
        "suite": suite_dir.name,
        "mode": mode,
        "started_at": f"2026-01-{name[6:8]}T03:00:00+00:00",
        "exit_code": 0,
        "verdict": "clean",
        "gate_counts": {"unchanged": len(cases)},
        "strata": {"reference": {"easy": {"n": 2, "pass_rate": 1.0}}},
        "stratified": True,
        "stratum_alerts": {"reference": [], "candidate": []},
        "served_models": {"reference": [models[0]], "candidate": [models[1]]},
    }
    (run_dir / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    disagreement = {
        "version": 1,
        "cases": {
            cid: {
                "admitted": True,
                "disagreement": [] if ref == cand else ["x"],
                "reference": _side(ref, models[0]),
                "candidate": _side(cand, models[1]),
            }
            for cid, (ref, cand) in cases.items()
        },
    }
    (run_dir / "disagreement.json").write_text(json.dumps(disagreement), encoding="utf-8")
    return run_dir


def _name(day: int) -> str:
    return f"202601{day:02d}T030000Z-abc{day:03d}"


def test_candidates_need_retire_after_quiet_runs(tmp_path: Path) -> None:
    """A case quiet for 3 runs running is a candidate at retire_after 3, not at 4."""
    suite = tmp_path / "s"
    for day in (1, 2, 3):
        _run(suite, _name(day), cases={"quiet": (True, True), "noisy": (True, day != 2)})
    rows = load_history(suite).rows
    expected = (["quiet"], [], {"quiet": 3, "noisy": 1})
    actual = (ceiling_candidates(rows, 3), ceiling_candidates(rows, 4), streaks(rows))
    assert expected == actual


def test_a_failing_night_resets_the_streak(tmp_path: Path) -> None:
    """Both sides failing alike (empty delta) still breaks a streak: both must pass."""
    suite = tmp_path / "s"
    for day, ok in ((1, True), (2, False), (3, True), (4, True)):
        _run(suite, _name(day), cases={"c": (ok, ok)})
    expected = {"c": 2}
    actual = streaks(load_history(suite).rows)
    assert expected == actual


def test_replays_do_not_count_as_nights(tmp_path: Path) -> None:
    """A replay regrades old replies, so it does not lengthen a streak."""
    suite = tmp_path / "s"
    _run(suite, _name(1), cases={"c": (True, True)})
    _run(suite, _name(2), cases={"c": (True, True)}, mode="replay")
    expected: list[str] = []
    actual = ceiling_candidates(load_history(suite).rows, 2)
    assert expected == actual


def test_broken_run_dirs_are_skipped_with_a_note(tmp_path: Path) -> None:
    """Corrupt or missing files in old run dirs become notes, never an exception."""
    suite = tmp_path / "s"
    _run(suite, _name(1), cases={"c": (True, True)})
    (suite / _name(2)).mkdir()  # killed before summary.json
    bad = _run(suite, _name(3), cases={"c": (True, True)})
    (bad / "summary.json").write_text("{not json", encoding="utf-8")
    half = _run(suite, _name(4), cases={"c": (True, True)})
    (half / "disagreement.json").write_bytes(b"\xff\xfe")
    other = _run(suite, _name(5), cases={"c": (True, True)})
    (other / "summary.json").write_text("[1, 2]", encoding="utf-8")
    history = load_history(suite)
    expected = ([_name(1), _name(4)], 4)
    actual = ([r.run_id for r in history.rows], len(history.notes))
    assert expected == actual


@pytest.mark.parametrize("count", ["x", [1], -1, 1.5, True, None], ids=repr)
def test_a_summary_with_a_bad_gate_count_is_skipped_with_a_note(tmp_path: Path, count: Any) -> None:
    """One night's corrupt summary is a note naming the key, not an exception: every later
    run's report reads this history."""
    suite = tmp_path / "s"
    _run(suite, _name(1), cases={"c": (True, True)})
    bad = _run(suite, _name(2), cases={"c": (True, True)})
    summary = json.loads((bad / "summary.json").read_text(encoding="utf-8"))
    summary["gate_counts"]["unchanged"] = count
    (bad / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    history = load_history(suite)
    assert [r.run_id for r in history.rows] == [_name(1)]
    assert len(history.notes) == 1 and "gate_counts.unchanged" in history.notes[0]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("noise_floor", {"overall": {"n": 1}}),
        ("strata", {"reference": {"easy": {"n": 2, "pass_rate": 10**400}}}),
        ("strata", {"reference": {"easy": {"n": 2, "pass_rate": "high"}}}),
        ("served_models", {"candidate": 1}),
        ("stratum_alerts", {"reference": True}),
    ],
    ids=["floor-without-count", "rate-400-digits", "rate-text", "served-number", "alerts-true"],
)
def test_history_text_survives_a_summary_field_of_the_wrong_shape(
    tmp_path: Path, key: str, value: Any
) -> None:
    """A hand-edited summary field renders as unknown in the history table: every later report
    reads this history, so one bad night must not stop them."""
    suite = tmp_path / "s"
    _run(suite, _name(1), cases={"c": (True, True)})
    bad = _run(suite, _name(2), cases={"c": (True, True)})
    summary = json.loads((bad / "summary.json").read_text(encoding="utf-8"))
    summary[key] = value
    (bad / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    text = format_text(suite_report(suite, retire_after=2, last=None))
    assert "2026-01-02" in text and "2026-01-01" in text  # both nights are in the table


def test_history_json_stays_json_when_a_summary_holds_nan(tmp_path: Path) -> None:
    """A hand-edited NaN or 1e400 in the paired test printed `NaN` / `Infinity` (not JSON),
    and `exit_code: true` printed as an exit code: they are null."""
    suite = tmp_path / "s"
    bad = _run(suite, _name(1), cases={"c": (True, True)})
    text = (bad / "summary.json").read_text(encoding="utf-8")[:-1]
    extra = ', "paired": {"overall": {"p_value": NaN, "diff": 1e400}}, "exit_code": true}'
    (bad / "summary.json").write_text(text.replace(', "exit_code": 0', "") + extra, "utf-8")
    row = suite_report(suite, retire_after=2)["runs"][0]
    json.dumps(row, allow_nan=False)  # raises on NaN or Infinity
    assert (row["paired"], row["exit_code"]) == ({"p_value": None, "diff": None}, None)


@pytest.mark.parametrize(
    ("rate", "n"),
    [(10**400, 2), ("high", 2), (float("nan"), 2), (0.5, "two")],
    ids=["rate-400-digits", "rate-text", "rate-nan", "count-text"],
)
def test_history_json_shows_an_unreadable_rate_or_count_as_null(
    tmp_path: Path, rate: Any, n: Any
) -> None:
    """`history --json` reads a stratum's rate and count as the text table does: anything but
    a share from 0 to 1 (or a count) is null, so the output stays strict JSON a dashboard reads
    (NaN is not JSON) and agrees with the table."""
    suite = tmp_path / "s"
    bad = _run(suite, _name(1), cases={"c": (True, True)})
    summary = json.loads((bad / "summary.json").read_text(encoding="utf-8"))
    summary["strata"] = {"reference": {"easy": {"n": n, "pass_rate": rate}}}
    (bad / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    doc = suite_report(suite, retire_after=2)
    easy = doc["runs"][0]["strata"]["reference"]["easy"]
    strict = json.dumps(doc, allow_nan=False)  # raises on NaN
    expected = ({"pass_rate": None, "n": 2} if n == 2 else {"pass_rate": 0.5, "n": None}, True)
    assert expected == (easy, bool(strict))


def test_a_case_with_noise_is_no_ceiling_candidate(tmp_path: Path) -> None:
    """A case both sides pass by majority but one side flips on some samples still tells
    something: it is not quiet, so never a ceiling candidate."""
    suite = tmp_path / "s"
    for day in (1, 2):
        run_dir = _run(suite, _name(day), cases={"quiet": (True, True), "flips": (True, True)})
        doc = json.loads((run_dir / "disagreement.json").read_text(encoding="utf-8"))
        doc["cases"]["flips"]["candidate"]["noise"] = ["missing:yes"]
        (run_dir / "disagreement.json").write_text(json.dumps(doc), encoding="utf-8")
    assert ceiling_candidates(load_history(suite).rows, 2) == ["quiet"]


def test_model_changes_list_every_switch(tmp_path: Path) -> None:
    """Each change of a side's served model is listed once, with the run it appeared in."""
    suite = tmp_path / "s"
    _run(suite, _name(1), cases={"c": (True, True)}, models=("r1", "c1"))
    _run(suite, _name(2), cases={"c": (True, True)}, models=("r1", "c2"))
    _run(suite, _name(3), cases={"c": (True, True)}, models=("r2", "c2"))
    expected = [("candidate", ["c1"], ["c2"], _name(2)), ("reference", ["r1"], ["r2"], _name(3))]
    actual = [
        (c["side"], c["from"], c["to"], c["run_id"])
        for c in model_changes(load_history(suite).rows)
    ]
    assert expected == actual


def _history(project: Project, capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, Any], str]:
    """The suite's history as `parallax history --json` gives it, and as its text."""
    main(["history", "--config", str(project.config), "--json"])
    (suite,) = json.loads(capsys.readouterr().out)["suites"]
    main(["history", "--config", str(project.config)])
    return suite, capsys.readouterr().out


def test_a_replay_of_an_old_run_is_listed_but_changes_no_served_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nights served a, b, c; replaying night b afterwards is listed as a replay, but the
    served-model changes stay a -> b -> c (no phantom c -> b dated when the replay ran)."""
    project = Project(tmp_path)
    nights = []
    for model in ("cand-a", "cand-b", "cand-c"):
        project.cassettes({}, {c["id"]: {"completion": "ok", "model": model} for c in BASE_CASES})
        nights.append(project.run()[0])
    main(["replay", str(nights[1]), "--config", str(project.config)])
    capsys.readouterr()

    suite, text = _history(project, capsys)

    expected = (
        ["run", "run", "run", "replay"],
        [(["cand-a"], ["cand-b"]), (["cand-b"], ["cand-c"])],
        [n.name for n in nights[1:]],
        3,
    )
    actual = (
        [r["mode"] for r in suite["runs"]],
        [(c["from"], c["to"]) for c in suite["model_changes"] if c["side"] == "candidate"],
        [c["run_id"] for c in suite["model_changes"]],
        suite["nights"],
    )
    assert expected == actual
    assert "cand-c -> cand-b" not in text
    assert " replay " in text


def test_last_keeps_the_newest_rows(tmp_path: Path) -> None:
    """--last N keeps the N newest readable runs."""
    suite = tmp_path / "s"
    for day in (1, 2, 3, 4):
        _run(suite, _name(day), cases={"c": (True, True)})
    expected = [_name(3), _name(4)]
    actual = [r.run_id for r in load_history(suite, last=2).rows]
    assert expected == actual


def test_history_command_json_over_real_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`parallax history --json` lists real runs, candidates at retire_after 2, and a swap."""
    project = Project(tmp_path)
    project.run()
    project.run()
    project.cassettes({}, {"easy-a": {"completion": "ok", "model": "cand-2"}})
    project.run()
    capsys.readouterr()
    code = main(["history", "--config", str(project.config), "--json", "--last", "2"])
    doc = json.loads(capsys.readouterr().out)
    suite = doc["suites"][0]
    expected = (0, 2, ["easy-a", "easy-b", "med-a", "med-b", "str-a", "str-b"], 1)
    actual = (
        code,
        len(suite["runs"]),
        [c["case_id"] for c in suite["ceiling_candidates"]],
        len(suite["model_changes"]),
    )
    assert expected == actual


def test_history_command_text_mentions_candidates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The text form has a row per run and names the ceiling candidates."""
    project = Project(tmp_path)
    project.run()
    project.run()
    capsys.readouterr()
    main(["history", "--config", str(project.config)])
    out = capsys.readouterr().out
    expected = (True, True)
    actual = ("ceiling candidates (quiet for >= 2 runs" in out, "easy-a  (2 runs)" in out)
    assert expected == actual


def test_history_of_a_suite_without_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A suite that never ran says so instead of failing."""
    project = Project(tmp_path)
    code = main(["history", "--config", str(project.config), "--suite", "s"])
    expected = (0, True)
    actual = (code, "no finished runs" in capsys.readouterr().out)
    assert expected == actual


def test_history_with_negative_last_is_a_usage_error(tmp_path: Path) -> None:
    """--last -1 exits 64."""
    project = Project(tmp_path)
    expected = 64
    actual = main(["history", "--config", str(project.config), "--last", "-1"])
    assert expected == actual


def test_ceiling_streaks_come_from_the_summary_without_the_big_map(tmp_path: Path) -> None:
    """Real runs list their quiet cases in summary.json; history needs no disagreement.json."""
    from runner.config import load_config
    from runner.runs.run import run_suite

    (tmp_path / "cases.jsonl").write_text(
        '{"id": "a", "prompt": "p", "expect": {"must_include": ["yes"]}}\n'
        '{"id": "b", "prompt": "p", "expect": {"must_include": ["yes"]}}\n'
    )
    (tmp_path / "cassette.jsonl").write_text(
        '{"case_id": "a", "completion": "yes"}\n{"case_id": "b", "completion": "no"}\n'
    )
    (tmp_path / "parallax.toml").write_text(
        'runs_dir = "runs"\nsnapshots_dir = "snapshots"\n'
        '[endpoints.r]\nkind = "recorded"\ncassette = "cassette.jsonl"\n'
        '[suites.s]\nfixtures = "cases.jsonl"\nreference = "r"\ncandidate = "r"\n'
    )
    for _ in range(3):
        run_dir, _, summary = run_suite(load_config(tmp_path / "parallax.toml"), "s")
        assert summary["quiet_cases"] == ["a"]
    for path in (tmp_path / "runs" / "s").glob("*/disagreement.json"):
        path.unlink()

    history = load_history(tmp_path / "runs" / "s")

    assert [row.quiet for row in history.rows] == [frozenset({"a"})] * 3
    assert ceiling_candidates(history.rows, 3) == ["a"]
    assert json.loads((run_dir / "summary.json").read_text())["quiet_cases"] == ["a"]


def _cut_short_then_retried(project: Project) -> tuple[Path, Path, Path]:
    """Night 1 serves cand-a; night 2's candidate (now cand-b) times out on easy-a and med-a,
    then `parallax run --retry-unscored` of night 2 calls those two again once it answers."""
    from runner.history import run_dirs

    project.cassettes({}, {c["id"]: {"completion": "ok", "model": "cand-a"} for c in BASE_CASES})
    first = project.run()[0]
    cand_b = {c["id"]: {"completion": "ok", "model": "cand-b"} for c in BASE_CASES}
    project.cassettes({}, {**cand_b, "easy-a": {"fault": "timeout"}, "med-a": {"fault": "timeout"}})
    cut, code, _ = project.run()
    assert code & 2  # incomplete
    project.cassettes({}, cand_b)
    assert main(["run", "--retry-unscored", str(cut), "--config", str(project.config)]) in (0, 1)
    (retry,) = set(run_dirs(project.root / "runs" / "s")) - {first, cut}
    return first, cut, retry


def test_a_run_completed_by_a_retry_is_listed_but_the_retry_is_the_night(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A night cut short and completed by `--retry-unscored` is one night: the cut run is listed
    with the retry that stands for it, the served-model change is dated at the retry, and each
    case is quiet for two nights, not three (nor one for those the cut run timed out on)."""
    project = Project(tmp_path)
    first, cut, retry = _cut_short_then_retried(project)
    capsys.readouterr()

    suite, text = _history(project, capsys)

    expected = (
        [first.name, cut.name, retry.name],
        ["run", "run", "retry"],
        [None, retry.name, None],
        [None, None, cut.name],
        2,
        [("candidate", ["cand-a"], ["cand-b"], retry.name)],
        dict.fromkeys(["easy-a", "easy-b", "med-a", "med-b", "str-a", "str-b"], 2),
    )
    actual = (
        [r["run_id"] for r in suite["runs"]],
        [r["mode"] for r in suite["runs"]],
        [r["retried_by"] for r in suite["runs"]],
        [r["parent"] for r in suite["runs"]],
        suite["nights"],
        [(c["side"], c["from"], c["to"], c["run_id"]) for c in suite["model_changes"]],
        {c["case_id"]: c["quiet_runs"] for c in suite["ceiling_candidates"]},
    )
    assert expected == actual
    assert f"retried by {retry.name}: not a night, the retry stands for it" in text


def test_a_run_retried_twice_leaves_the_last_retry_as_its_night(tmp_path: Path) -> None:
    """Retrying a run again (not its retry) makes the newer retry stand for the night; the
    earlier retry and the run are listed, neither a night."""
    suite = tmp_path / "s"
    for day, mode in ((1, "run"), (2, "run"), (3, "retry"), (4, "retry")):
        run_dir = _run(suite, _name(day), cases={"c": (True, True)}, mode=mode)
        if mode == "retry":
            summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
            summary["parent"] = _name(2)
            (run_dir / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    rows = load_history(suite).rows
    expected = ([None, _name(4), _name(4), None], [True, False, False, True], {"c": 2})
    actual = ([r.retried_by for r in rows], [r.counts_as_night for r in rows], streaks(rows))
    assert expected == actual


def test_a_retry_chain_leaves_its_last_run_as_the_night(tmp_path: Path) -> None:
    """A retry of a retry completes the chain: only its last run is a night, and stands for
    each run before it."""
    suite = tmp_path / "s"
    for day, mode in ((1, "run"), (2, "retry"), (3, "retry")):
        run_dir = _run(suite, _name(day), cases={"c": (True, True)}, mode=mode)
        if mode == "retry":
            summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
            summary["parent"] = _name(day - 1)
            (run_dir / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    rows = load_history(suite).rows
    expected = ([_name(3), _name(3), None], [False, False, True])
    actual = ([r.retried_by for r in rows], [r.counts_as_night for r in rows])
    assert expected == actual


def test_a_report_reads_its_own_run_as_a_night_until_a_retry_exists(tmp_path: Path) -> None:
    """History read up to a cut run (its own report's window) counts it; read up to its retry,
    the retry stands for it."""
    project = Project(tmp_path)
    _, cut, retry = _cut_short_then_retried(project)
    suite = project.root / "runs" / "s"
    expected = ([True, True], [True, False, True])
    actual = (
        [r.counts_as_night for r in load_history(suite, until=cut.name).rows],
        [r.counts_as_night for r in load_history(suite, until=retry.name, last=3).rows],
    )
    assert expected == actual


def test_listing_a_suites_runs_reads_a_summary_only_where_two_runs_share_a_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A year of 20,000-case nights is 140 MB of summaries: a run's end is read only to order
    it among the runs that started in its second."""
    import runner.history as history

    ends = {
        "20261201T030000Z-aaaaaa": "2026-12-01T03:05:00.000+00:00",
        "20261202T030000Z-bbbbbb": "2026-12-02T03:04:00.900+00:00",
        "20261202T030000Z-aaaaaa": "2026-12-02T03:04:01.100+00:00",
    }
    for name, end in ends.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps({"finished_at": end}))
    read: list[str] = []
    real = history.read_json_object

    def counted(path: Path, **kwargs: Any) -> dict[str, Any]:
        read.append(path.parent.name)
        return real(path, **kwargs)

    monkeypatch.setattr(history, "read_json_object", counted)
    assert [d.name for d in history.run_dirs(tmp_path)] == list(ends)
    assert sorted(read) == sorted(list(ends)[1:])  # the two of one second, by their end
