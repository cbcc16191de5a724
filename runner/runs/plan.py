"""Where a run starts from: a resume finishes a run dir in place, a retry starts a new one
from its parent's scored rows, a replay from its parent's whole raw ledger."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runner.config import LoadedConfig
from runner.errors import DataError
from runner.invocation import command
from runner.ledger import LedgerWriter, copy_ledger, disk_refusal, stored, write_json
from runner.regrade import read_exchanges, read_outcomes
from runner.request import sha as requestsha
from runner.runs.mode import RunMode
from runner.runs.rundir import file_digest, manifest_for, read_manifest
from runner.suite import Suite


def replay_problem(loaded: LoadedConfig, suite: str, manifest: Mapping[str, Any]) -> str | None:
    """Why a replay is never resumed, finished or not (it calls nothing: replaying again
    is how it is done again), with the command that does; None for any other run."""
    if RunMode.read(manifest.get("mode")) is not RunMode.REPLAY:
        return None
    parent = manifest.get("parent")
    again = (
        command("replay", loaded.runs_dir / suite / parent)
        if isinstance(parent, str)
        else command("replay", "RUN_DIR")
    )
    if manifest.get("finished_at") is None:
        return f"an interrupted replay calls nothing; run `{again}` again"
    return f"a replay calls nothing, so there is nothing to resume; `{again}` replays again"


def resume_problem(loaded: LoadedConfig, suite: str, manifest: Mapping[str, Any]) -> str | None:
    """Why an interrupted run cannot be finished in place, or None.

    Its rows were called for the cases and samples it started with: finished against edited
    fixtures or another `samples`, one run would grade two suites and read as one verdict.
    """
    if (why := replay_problem(loaded, suite, manifest)) is not None:
        return why
    cfg = loaded.config.suites[suite]
    fixtures = manifest.get("fixtures") or {}
    if not isinstance(fixtures, dict):  # a hand-edited manifest: nothing to check it against
        return "its manifest has no fixtures object"
    try:
        digest: str | None = file_digest(loaded.input(cfg.fixtures, f"suites.{suite}.fixtures"))
    except OSError:
        digest = None
    if fixtures.get("digest") != digest:
        return "the fixtures changed since it started"
    if manifest.get("samples") != cfg.samples:
        return "samples changed since it started"
    return requestsha.request_problem(loaded, suite, manifest)


def unscored_keys(run_dir: Path) -> set[tuple[str, str, int]]:
    """Keys of the rows a run could not score (transport or schema misses)."""
    return {o.key for o in read_outcomes(run_dir / "outcomes.jsonl") if not o.admitted}


def all_scored(run_dir: Path, summary: Mapping[str, Any] | None) -> bool:
    """Whether a finished run left nothing to retry. Its summary counts the cases it could not
    score, the calls it never made among them: a replay of a killed run reads those
    `cancelled` and has no row for them, so its outcomes alone say every row was scored.
    Without a summary to read, its outcomes decide."""
    unadmitted = summary.get("unadmitted") if summary is not None else None
    if isinstance(unadmitted, int) and not isinstance(unadmitted, bool):
        return unadmitted == 0
    return not unscored_keys(run_dir)


def _seed_raw(source: Path, target: Path, skip: set[tuple[str, str, int]]) -> None:
    """Copy a parent run's exchanges (except `skip`) so the new run starts from them."""
    writer = LedgerWriter(target / "raw.jsonl")
    try:
        batch: list[dict[str, Any]] = []
        for exchange in read_exchanges(source / "raw.jsonl"):
            if exchange.key not in skip:
                batch.append(exchange.to_json())
            if len(batch) >= 1000:
                writer.write(batch)
                batch = []
        writer.write(batch)
    finally:
        writer.close()


def start(
    loaded: LoadedConfig, suite: Suite, run_dir: Path, *, parent_dir: Path | None, mode: RunMode
) -> None:
    """A new run directory's manifest, and for a replay or retry its parent's exchanges."""
    parent = parent_dir.name if parent_dir is not None else None
    finished = None
    if parent_dir is not None:
        finished = read_manifest(parent_dir).get("finished_at") is not None
    with disk_refusal(run_dir / "manifest.json"):
        write_json(
            run_dir / "manifest.json",
            manifest_for(
                loaded, suite, run_dir, mode=mode, parent=parent, parent_finished=finished
            ),
        )
    if mode is RunMode.REPLAY and parent_dir is not None:  # the raw ledger, as it was written
        source = stored(parent_dir / "raw.jsonl")  # compressed by retention, read as written
        if not source.is_file():
            raise DataError(source, "no such file: nothing to replay")
        copy_ledger(source, run_dir / "raw.jsonl")
    elif parent_dir is not None:
        _seed_raw(parent_dir, run_dir, unscored_keys(parent_dir))
