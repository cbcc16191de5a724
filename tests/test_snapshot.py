"""Specification of snapshots: strict loading, and promote's atomic, admission-aware write."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import runner.ledger
from runner.errors import DataError
from runner.snapshot import (
    SNAPSHOT_VERSION,
    IncompleteError,
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
        (b'{"version": 2, "cases": {}}', "unsupported snapshot version 2"),
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
