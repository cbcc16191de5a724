"""Specification of snapshots: strict loading, and promote's atomic, admission-aware write."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import runner.ledger
from runner.errors import DataError
from runner.snapshot import (
    SNAPSHOT_VERSION,
    IncompleteError,
    RollbackRefused,
    entry_for,
    load_snapshot,
    promote,
    snapshot_path,
)

SHA = "a" * 16


def side(misses: list[str], model: str | None = "m", admitted: bool = True) -> dict[str, Any]:
    return {
        "transport": "ok" if admitted else "timeout",
        "schema": "ok" if admitted else "skipped",
        "admitted": admitted,
        "misses": misses,
        "passed": not misses if admitted else None,
        "task_score": 1.0 if admitted else None,
        "response_model": model,
        "system_fingerprint": "fp",
        "samples": 1,
        "detail": "ok",
    }


def verdict(
    ref: list[str] | None = None,
    cand: list[str] | None = None,
    *,
    admitted: bool = True,
    sha: str = SHA,
) -> dict[str, Any]:
    ref, cand = ref or [], cand or []
    return {
        "stratum": "medium",
        "fixture_sha": sha,
        "gate": "unchanged" if admitted else "transport_miss",
        "detail": "",
        "admitted": admitted,
        "disagreement": sorted(set(ref) ^ set(cand)) if admitted else None,
        "reference": side(ref, "ref-model"),
        "candidate": side(cand, "cand-model", admitted=admitted),
    }


def run_dir(tmp_path: Path, cases: dict[str, Any], name: str = "run1") -> Path:
    path = tmp_path / "runs" / name
    path.mkdir(parents=True)
    doc = {"suite": "s", "run_id": name, "cases": cases}
    (path / "disagreement.json").write_text(json.dumps(doc), encoding="utf-8")
    return path


def write_snapshot(directory: Path, cases: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "s.json"
    doc = {"version": SNAPSHOT_VERSION, "suite": "s", "cases": cases}
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


# --- load_snapshot -------------------------------------------------------------------------


def test_a_missing_snapshot_is_empty(tmp_path: Path) -> None:
    """No snapshot yet means every case is new."""
    expected = {}
    assert expected == load_snapshot(tmp_path / "nope.json")


def test_snapshot_path_is_the_suite_name(tmp_path: Path) -> None:
    """snapshots/<suite>.json."""
    assert tmp_path / "cities.json" == snapshot_path(tmp_path, "cities")


def test_a_valid_snapshot_loads_its_cases(tmp_path: Path) -> None:
    """The cases object comes back by id."""
    entry = {"fixture_sha": SHA, "disagreement": ["x"]}
    path = write_snapshot(tmp_path, {"c1": entry})
    assert {"c1": entry} == load_snapshot(path)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"\xff\xfe", "not UTF-8 at byte 0"),
        (b"[]", "not a parallax snapshot (no 'cases' object)"),
        (b'{"version": 1, "cases": []}', "not a parallax snapshot (no 'cases' object)"),
        (b'{"cases": {}}', "unsupported snapshot version None"),
        (b'{"version": 3, "cases": {}}', "unsupported snapshot version 3"),
        (b'{"version": true, "cases": {}}', "unsupported snapshot version True"),
        (b'{"version": 1, "cases": {"c1": []}}', "case 'c1': entry needs a fixture_sha"),
        (
            b'{"version": 1, "cases": {"c1": {"fixture_sha": 3}}}',
            "case 'c1': entry needs a fixture_sha",
        ),
        (
            b'{"version": 1, "cases": {"c1": {"fixture_sha": "x", "disagreement": "a"}}}',
            "case 'c1': disagreement must be a list",
        ),
        (
            b'{"version": 1, "cases": {"c1": {"fixture_sha": "x", "candidate_misses": 5}}}',
            "case 'c1': candidate_misses must be a list",
        ),
        (
            b'{"version": 1, "cases": {"c1": {"fixture_sha": "x", "reference_noise": [1, null]}}}',
            "case 'c1': reference_noise must hold only strings",
        ),
        (
            b'{"version": 1, "cases": {"c1": {"fixture_sha": "x", "models": "x"}}}',
            "case 'c1': models must map each side to a string or null",
        ),
        (
            b'{"version": 1, "cases": {"c1": {"fixture_sha": "x", "models": {"reference": [1]}}}}',
            "case 'c1': models must map each side to a string or null",
        ),
    ],
)
def test_a_broken_snapshot_is_a_data_error_naming_the_file(
    tmp_path: Path, content: bytes, reason: str
) -> None:
    """Every broken shape raises DataError (exit 65) as `path: reason`."""
    path = tmp_path / "s.json"
    path.write_bytes(content)
    with pytest.raises(DataError) as info:
        load_snapshot(path)
    assert f"{path}: {reason}" == str(info.value)
    expected = 65
    assert expected == info.value.exit_code


def test_invalid_snapshot_json_names_the_line(tmp_path: Path) -> None:
    """A JSON typo is reported at `path:line`."""
    path = tmp_path / "s.json"
    path.write_text('{\n  "version": 1,\n  "cases": {,}\n}\n', encoding="utf-8")
    with pytest.raises(DataError) as info:
        load_snapshot(path)
    assert str(info.value).startswith(f"{path}:3: invalid JSON")


# --- promote -------------------------------------------------------------------------------


def test_promote_writes_every_admitted_case_and_reports_additions(tmp_path: Path) -> None:
    """A first promote adds every case, as entry_for describes it, with version and suite."""
    cases = {"c1": verdict([], ["missing:SKU-9"]), "c2": verdict(["a"], ["a"])}
    snapshots = tmp_path / "snapshots"
    changes = promote(run_dir(tmp_path, cases), snapshots, suite="s")
    expected = {
        "added": ["c1", "c2"],
        "removed": [],
        "changed": [],
        "kept_unscored": [],
        "left_out_unscored": [],
        "rolled_back": [],
    }
    assert expected == changes
    doc = json.loads((snapshots / "s.json").read_text(encoding="utf-8"))
    expected = (SNAPSHOT_VERSION, "s", "run1")
    assert expected == (doc["version"], doc["suite"], doc["promoted_from"])
    expected_c1 = {
        "fixture_sha": SHA,
        "disagreement": ["missing:SKU-9"],
        "reference_misses": [],
        "candidate_misses": ["missing:SKU-9"],
        "reference_noise": [],
        "candidate_noise": [],
        "models": {"reference": "ref-model", "candidate": "cand-model"},
        "system_fingerprints": {"reference": "fp", "candidate": "fp"},
        "requests": {"reference": None, "candidate": None},
    }
    assert expected_c1 == doc["cases"]["c1"]
    assert {"c1": expected_c1, "c2": entry_for(cases["c2"])} == load_snapshot(snapshots / "s.json")


def test_promote_reports_changed_and_removed_cases(tmp_path: Path) -> None:
    """A second promote lists what changed and which snapshot cases are gone."""
    snapshots = tmp_path / "snapshots"
    promote(
        run_dir(tmp_path, {"c1": verdict(), "c2": verdict(), "c3": verdict()}), snapshots, suite="s"
    )
    second = {"c1": verdict(), "c2": verdict([], ["new"]), "c4": verdict()}
    changes = promote(run_dir(tmp_path, second, name="run2"), snapshots, suite="s")
    expected = {
        "added": ["c4"],
        "removed": ["c3"],
        "changed": ["c2"],
        "kept_unscored": [],
        "left_out_unscored": [],
        "rolled_back": [],
    }
    assert expected == changes
    expected = ["c1", "c2", "c4"]
    assert expected == sorted(load_snapshot(snapshots / "s.json"))


def test_promote_refuses_unadmitted_rows(tmp_path: Path) -> None:
    """A run with an unscoreable case raises IncompleteError (exit 2) and writes nothing."""
    snapshots = tmp_path / "snapshots"
    old = write_snapshot(snapshots, {"c1": {"fixture_sha": SHA, "disagreement": []}})
    before = old.read_bytes()
    cases = {"c1": verdict(["x"]), "c2": verdict(admitted=False)}
    with pytest.raises(IncompleteError) as info:
        promote(run_dir(tmp_path, cases), snapshots, suite="s")
    expected = 2
    assert expected == info.value.exit_code
    assert "1 case(s) could not be scored (c2)" in str(info.value)
    assert "--allow-partial" in str(info.value)
    assert before == old.read_bytes()


def test_promote_allow_partial_keeps_old_entries_for_unscoreable_cases(tmp_path: Path) -> None:
    """With allow_partial an unscoreable case keeps its old entry; a new one is not added."""
    snapshots = tmp_path / "snapshots"
    old_entry = {"fixture_sha": "old", "disagreement": ["kept"]}
    write_snapshot(snapshots, {"c1": old_entry, "c2": {"fixture_sha": SHA, "disagreement": []}})
    cases = {
        "c1": verdict(admitted=False),
        "c2": verdict([], ["moved"]),
        "c3": verdict(admitted=False),
    }
    changes = promote(run_dir(tmp_path, cases), snapshots, allow_partial=True, suite="s")
    expected = {
        "added": [],
        "removed": [],
        "changed": ["c2"],
        "kept_unscored": ["c1"],
        "left_out_unscored": ["c3"],
        "rolled_back": [],
    }
    assert expected == changes
    snapshot = load_snapshot(snapshots / "s.json")
    assert old_entry == snapshot["c1"]
    expected = ["moved"]
    assert expected == snapshot["c2"]["disagreement"]
    assert "c3" not in snapshot


def test_promote_leaves_no_temporary_file(tmp_path: Path) -> None:
    """After a promote only the snapshot and the lock file sit in snapshots/."""
    snapshots = tmp_path / "snapshots"
    promote(run_dir(tmp_path, {"c1": verdict()}), snapshots, suite="s")
    expected = [".promote.lock", "s.json"]
    assert expected == sorted(p.name for p in snapshots.iterdir())


def test_a_failed_write_leaves_the_old_snapshot_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write is atomic: if it fails before the rename the old file is byte-identical."""
    snapshots = tmp_path / "snapshots"
    old = write_snapshot(snapshots, {"c1": {"fixture_sha": SHA, "disagreement": []}})
    before = old.read_bytes()

    def boom(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(runner.ledger.os, "fsync", boom)
    with pytest.raises(DataError, match=r"s\.json: cannot write the snapshot: No space left"):
        promote(run_dir(tmp_path, {"c1": verdict(["x"])}), snapshots, suite="s")
    assert before == old.read_bytes()


def test_a_failed_write_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A promote that fails mid-write cleans up after itself."""
    snapshots = tmp_path / "snapshots"
    write_snapshot(snapshots, {"c1": {"fixture_sha": SHA, "disagreement": []}})

    def boom(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(runner.ledger.os, "fsync", boom)
    with pytest.raises(DataError):
        promote(run_dir(tmp_path, {"c1": verdict(["x"])}), snapshots, suite="s")
    expected = [".promote.lock", "s.json"]
    assert expected == sorted(p.name for p in snapshots.iterdir())


def test_promote_refuses_to_replace_a_broken_snapshot(tmp_path: Path) -> None:
    """A broken snapshot is reported, never silently overwritten."""
    snapshots = tmp_path / "snapshots"
    snapshots.mkdir()
    broken = snapshots / "s.json"
    broken.write_text("{oops", encoding="utf-8")
    with pytest.raises(DataError):
        promote(run_dir(tmp_path, {"c1": verdict()}), snapshots, suite="s")
    expected = "{oops"
    assert expected == broken.read_text(encoding="utf-8")


def test_promote_without_a_disagreement_map_names_the_file(tmp_path: Path) -> None:
    """A run that never finished has no disagreement.json: DataError naming it."""
    (tmp_path / "run").mkdir()
    with pytest.raises(DataError) as info:
        promote(tmp_path / "run", tmp_path / "snapshots", suite="s")
    expected = f"{tmp_path / 'run' / 'disagreement.json'}: no such file (did the run finish?)"
    assert expected == str(info.value)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("{not json", "unreadable"),
        ('{"cases": {}}', "not a parallax disagreement map"),
        ('{"suite": "s", "cases": []}', "not a parallax disagreement map"),
    ],
)
def test_promote_rejects_a_malformed_disagreement_map(
    tmp_path: Path, content: str, reason: str
) -> None:
    """A disagreement.json that is not the expected document is a DataError."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "disagreement.json").write_text(content, encoding="utf-8")
    with pytest.raises(DataError) as info:
        promote(run, tmp_path / "snapshots", suite="s")
    assert str(info.value).startswith(f"{run / 'disagreement.json'}: {reason}")


@pytest.mark.parametrize(
    ("side_key", "value", "reason"),
    [
        ("misses", "abc", "candidate_misses must be a list"),
        ("noise", 5, "candidate_noise must be a list"),
        ("response_model", 5, "models must map each side to a string or null"),
    ],
)
def test_promote_refuses_a_verdict_the_gate_could_not_read(
    tmp_path: Path, side_key: str, value: Any, reason: str
) -> None:
    """A tampered disagreement.json never becomes a snapshot that stops the next run mid-way:
    promote names the case and writes nothing."""
    bad = verdict()
    bad["candidate"][side_key] = value
    run = run_dir(tmp_path, {"c1": verdict(), "c2": bad})
    with pytest.raises(DataError) as info:
        promote(run, tmp_path / "snapshots", suite="s")
    assert str(info.value) == f"{run / 'disagreement.json'}: case 'c2': {reason}"
    assert not (tmp_path / "snapshots" / "s.json").exists()


# --- promote never rolls the snapshot back ------------------------------------------------------

NIGHT_1, NIGHT_2 = "20261130T030000Z-aaaaaa", "20261201T030000Z-bbbbbb"
OLD_SHA, NEW_SHA = "0" * 16, "1" * 16


def night(tmp_path: Path, name: str, cases: dict[str, Any], **manifest: Any) -> Path:
    """A run dir named as parallax names them, with a manifest saying when it started."""
    path = run_dir(tmp_path, cases, name=name)
    started = f"{name[:4]}-{name[4:6]}-{name[6:8]}T{name[9:11]}:{name[11:13]}:00+00:00"
    manifest = {"run_id": name, "mode": "run", "parent": None, "started_at": started, **manifest}
    (path / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return path


def test_a_snapshot_records_the_run_and_when_its_calls_were_made(tmp_path: Path) -> None:
    """The snapshot names the run it came from and when that run's calls were made, so a
    later promote can tell an older run from a newer one."""
    snapshots = tmp_path / "snapshots"
    promote(night(tmp_path, NIGHT_2, {"c1": verdict()}), snapshots, suite="s")
    doc = json.loads((snapshots / "s.json").read_text(encoding="utf-8"))
    expected = (2, NIGHT_2, "2026-12-01T03:00:00+00:00")
    assert expected == (doc["version"], doc["promoted_from"], doc["promoted_calls_at"])


def test_promote_refuses_a_run_older_than_the_snapshots_and_says_what_would_roll_back(
    tmp_path: Path,
) -> None:
    """Promoting last night's run over tonight's is refused (exit 64) naming the cases it
    would roll back, with their fixture_sha from the snapshot's to the run's, and how many;
    the snapshot keeps its bytes."""
    snapshots = tmp_path / "snapshots"
    tonight = {"c1": verdict(sha=NEW_SHA), "c2": verdict(), "c3": verdict()}
    promote(night(tmp_path, NIGHT_2, tonight), snapshots, suite="s")
    before = (snapshots / "s.json").read_bytes()
    older = {"c1": verdict(sha=OLD_SHA), "c2": verdict([], ["x"]), "c3": verdict()}
    with pytest.raises(RollbackRefused) as info:
        promote(night(tmp_path, NIGHT_1, older), snapshots, suite="s")
    expected = (
        f"{tmp_path / 'runs' / NIGHT_1}: refused: its calls (2026-11-30T03:00:00+00:00) are older "
        f"than those of the snapshot's run ({NIGHT_2}, 2026-12-01T03:00:00+00:00): it would roll "
        f"back 2 case(s) (c1 {NEW_SHA} (snapshot) -> {OLD_SHA} (run), c2); to promote it "
        f"anyway: `parallax promote --force {tmp_path / 'runs' / NIGHT_1}`"
    )
    assert (expected, 64) == (str(info.value), info.value.exit_code)
    assert before == (snapshots / "s.json").read_bytes()


def test_force_promotes_an_older_run_and_reports_what_rolled_back(tmp_path: Path) -> None:
    """--force writes the older run's map and lists the cases it rolled back."""
    snapshots = tmp_path / "snapshots"
    promote(night(tmp_path, NIGHT_2, {"c1": verdict(), "c2": verdict()}), snapshots, suite="s")
    older = night(tmp_path, NIGHT_1, {"c1": verdict(["x"]), "c2": verdict()})
    changes = promote(older, snapshots, suite="s", force=True)
    expected = (["c1"], ["c1"])
    assert expected == (changes["changed"], changes["rolled_back"])
    expected_from = NIGHT_1
    assert expected_from == json.loads((snapshots / "s.json").read_text())["promoted_from"]


def test_a_newer_run_and_the_same_run_again_are_promoted(tmp_path: Path) -> None:
    """Only an older run is refused: a newer one, or the snapshot's own run again (to accept
    its unscored cases later, say), is promoted as before."""
    snapshots = tmp_path / "snapshots"
    first = night(tmp_path, NIGHT_1, {"c1": verdict()})
    promote(first, snapshots, suite="s")
    promote(first, snapshots, suite="s")
    changes = promote(night(tmp_path, NIGHT_2, {"c1": verdict(["x"])}), snapshots, suite="s")
    expected = (["c1"], [])
    assert expected == (changes["changed"], changes["rolled_back"])


def test_a_replay_of_an_older_run_counts_as_that_run(tmp_path: Path) -> None:
    """A replay made today regrades an older night's replies: it is as old as that night, so
    promoting it over a newer snapshot is refused too."""
    snapshots = tmp_path / "snapshots"
    night(tmp_path, NIGHT_1, {"c1": verdict()})
    promote(night(tmp_path, NIGHT_2, {"c1": verdict()}), snapshots, suite="s")
    replay = night(
        tmp_path, "20261201T120000Z-cccccc", {"c1": verdict(["x"])}, mode="replay", parent=NIGHT_1
    )
    with pytest.raises(RollbackRefused) as info:
        promote(replay, snapshots, suite="s")
    assert "its calls (2026-11-30T03:00:00+00:00) are older" in str(info.value)


def test_a_version_1_snapshot_is_read_and_dated_by_its_runs_name(tmp_path: Path) -> None:
    """A snapshot written before it recorded its calls' time still loads; the run it names
    (a run dir's name begins with its start) dates it, and a name that is no run dir's
    (a hand-made baseline) leaves only the fixture check."""
    snapshots = tmp_path / "snapshots"
    snapshots.mkdir()
    entry = {"fixture_sha": SHA, "disagreement": []}
    for promoted_from, refused in ((NIGHT_2, True), ("demo-baseline", False)):
        doc = {"version": 1, "suite": "s", "promoted_from": promoted_from, "cases": {"c1": entry}}
        (snapshots / "s.json").write_text(json.dumps(doc), encoding="utf-8")
        assert {"c1": entry} == load_snapshot(snapshots / "s.json")
        older = tmp_path / "runs" / NIGHT_1
        shutil.rmtree(older, ignore_errors=True)
        older = night(tmp_path, NIGHT_1, {"c1": verdict(["x"])})
        if refused:
            with pytest.raises(RollbackRefused):
                promote(older, snapshots, suite="s")
        else:
            promote(older, snapshots, suite="s")


def test_promote_refuses_a_run_of_fixtures_that_are_not_todays(tmp_path: Path) -> None:
    """A run whose cases carry fixture_shas other than today's would make the next run read
    them as fixture_move: refused (64) naming each case, the run's sha -> today's, and how
    many; a case no longer in the fixtures is named too. Nothing is written."""
    snapshots = tmp_path / "snapshots"
    cases = {"c1": verdict(sha=OLD_SHA), "c2": verdict(), "c3": verdict()}
    today = {"c1": NEW_SHA, "c2": SHA}
    with pytest.raises(RollbackRefused) as info:
        promote(night(tmp_path, NIGHT_2, cases), snapshots, suite="s", today=today)
    expected = (
        f"{tmp_path / 'runs' / NIGHT_2}: refused: 2 case(s) were run on fixtures that are not "
        f"today's, and would read as fixture_move on the next run (c1 {OLD_SHA} (run) -> "
        f"{NEW_SHA} (today), c3 (no longer in the fixtures)); to regrade it with today's: "
        f"`parallax replay {tmp_path / 'runs' / NIGHT_2}`; to promote it anyway: "
        f"`parallax promote --force {tmp_path / 'runs' / NIGHT_2}`"
    )
    assert (expected, 64) == (str(info.value), info.value.exit_code)
    assert not (snapshots / "s.json").exists()
    forced = night(tmp_path, NIGHT_1, cases)
    changes = promote(forced, snapshots, suite="s", today=today, force=True)
    expected_rolled = ["c1", "c3"]
    assert expected_rolled == changes["rolled_back"]


def test_recording_requests_in_an_entry_that_had_none_is_no_change(tmp_path: Path) -> None:
    """An entry promoted before requests were recorded gains them on the next promote without
    being listed as changed; a request that differs from a recorded one is a change."""
    snapshots = tmp_path / "snapshots"
    promote(run_dir(tmp_path, {"c1": verdict(["a"], ["a"])}, "run1"), snapshots, suite="s")
    path = snapshots / "s.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    del doc["cases"]["c1"]["requests"]
    path.write_text(json.dumps(doc), encoding="utf-8")
    again = verdict(["a"], ["a"])
    again["reference"]["request_sha"] = "1" * 16
    assert promote(run_dir(tmp_path, {"c1": again}, "run2"), snapshots, suite="s")["changed"] == []
    assert load_snapshot(path)["c1"]["requests"] == {"reference": "1" * 16, "candidate": None}
    again["reference"]["request_sha"] = "2" * 16
    changes = promote(run_dir(tmp_path, {"c1": again}, "run3"), snapshots, suite="s")
    assert changes["changed"] == ["c1"]
