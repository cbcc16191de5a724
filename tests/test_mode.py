"""A run's mode: one type in the code, the same words in manifest.json as always."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from relkit import write_cases, write_config

from runner.config import load_config
from runner.history import RunRow, read_run
from runner.runs.mode import RunMode
from runner.runs.plan import resume_problem
from runner.runs.run import run_suite
from runner.scheduler.catchup import find_interrupted


def _offline_suite(root: Path) -> Path:
    """Both sides recorded; the candidate has no reply for the first case (unscored), so a
    retry has a row to re-call."""
    write_cases(root, 3)
    rows = [{"case_id": f"case-{i:03d}", "completion": f"word{i}"} for i in range(3)]
    (root / "ref.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "cand.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[1:]))
    endpoints = "".join(
        f'[endpoints.{side}]\nkind = "recorded"\nmodel = "{side}-1"\ncassette = "{side}.jsonl"\n'
        for side in ("ref", "cand")
    )
    suites = '[suites.s]\nfixtures = "cases.jsonl"\nreference = "ref"\ncandidate = "cand"\n'
    return write_config(root, endpoints, suites)


def test_each_manifest_records_its_mode_as_the_word_manifests_always_held(
    tmp_path: Path,
) -> None:
    """A run, a retry of it and a replay of the retry write `"mode": "run"`, `"retry"` and
    `"replay"` into manifest.json and summary.json, as before the modes were a type."""
    loaded = load_config(_offline_suite(tmp_path))
    first, _, _ = run_suite(loaded, "s")
    retried, _, _ = run_suite(loaded, "s", parent_dir=first, mode=RunMode.RETRY)
    replayed, _, _ = run_suite(loaded, "s", parent_dir=retried, mode=RunMode.REPLAY)

    for run_dir, word in ((first, "run"), (retried, "retry"), (replayed, "replay")):
        for name in ("manifest.json", "summary.json"):
            assert f'"mode": "{word}"' in (run_dir / name).read_text(), (run_dir, name)


@pytest.mark.parametrize("word", ["run", "resume", "retry", "replay"])
def test_a_recorded_word_reads_back_as_its_mode(word: str) -> None:
    """Each word a run dir may hold reads back as the member it serialises as."""
    mode = RunMode.read(word)
    assert mode is not None
    assert (mode, str(mode), json.dumps(mode)) == (RunMode(word), word, f'"{word}"')


@pytest.mark.parametrize("found", [None, "", "Replay", "nightly", 1, ["replay"], {"a": 1}])
def test_a_missing_or_hand_edited_mode_reads_as_none(found: object) -> None:
    """A manifest without a mode, or with a word parallax never wrote, names no mode."""
    assert RunMode.read(found) is None


def test_a_run_dir_written_with_plain_words_is_read_by_every_decision(tmp_path: Path) -> None:
    """A replay's run dir as parallax always wrote it (a plain `"replay"` in its manifest and
    summary) is refused by resume, passed over by the daemon's start-up and not counted as a
    night by history."""
    loaded = load_config(_offline_suite(tmp_path))
    first, _, _ = run_suite(loaded, "s")
    replayed = first.with_name("29990101T000000Z-aaaaaa")  # the latest run dir of the suite
    replayed.mkdir()
    manifest = json.loads((first / "manifest.json").read_text())
    summary = json.loads((first / "summary.json").read_text())
    manifest.update(mode="replay", parent=first.name, finished_at=None)
    (replayed / "manifest.json").write_text(json.dumps(manifest))
    (replayed / "summary.json").write_text(json.dumps(summary | {"mode": "replay"}))

    why = resume_problem(loaded, "s", manifest)
    assert why is not None and why.startswith("an interrupted replay calls nothing")
    assert find_interrupted(loaded, "s") == (None, None)  # passed over for `first`, finished
    row, _ = read_run(replayed)
    assert isinstance(row, RunRow) and (row.mode, row.counts_as_night) == ("replay", False)
