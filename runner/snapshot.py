"""Accepted disagreement snapshots: committed and reviewed like a lockfile.

Only `promote` writes here, atomically and under a lock, so two promotes at once cannot
interleave and a reader never sees half a file. A broken snapshot is reported, never
silently replaced.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runner.config import valid_name
from runner.errors import DataError, ParallaxError, reason_of
from runner.invocation import command
from runner.jsontext import loads
from runner.ledger import read_json_object, write_json
from runner.text import holds_surrogate, may_hold_surrogates

SNAPSHOT_VERSION = 1


class IncompleteError(ParallaxError):
    """Promote refused: the run has rows that could not be scored."""

    exit_code = 2


def snapshot_path(snapshots_dir: Path, suite: str) -> Path:
    return snapshots_dir / f"{suite}.json"


def load_snapshot(path: Path) -> dict[str, Any]:
    """The accepted cases by id; a missing file is an empty snapshot (every case is new)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except UnicodeDecodeError as exc:
        raise DataError(path, f"not UTF-8 at byte {exc.start}") from None
    except OSError as exc:  # a directory, a symlink loop, snapshots_dir naming a file
        raise DataError(path, f"cannot read: {exc.strerror or exc}") from None
    try:
        doc = loads(text)
    except ValueError as exc:
        reason = f"invalid JSON: {reason_of(exc)}"
        raise DataError(path, reason, getattr(exc, "lineno", None)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("cases"), dict):
        raise DataError(path, "not a parallax snapshot (no 'cases' object)")
    if may_hold_surrogates(text) and holds_surrogate(doc):
        raise DataError(path, "lone surrogate escape (\\ud800-\\udfff) is not text")
    if doc.get("version") != SNAPSHOT_VERSION:
        raise DataError(path, f"unsupported snapshot version {doc.get('version')!r}")
    for case_id, entry in doc["cases"].items():
        if (problem := entry_problem(entry)) is not None:
            raise DataError(path, f"case {case_id!r}: {problem}")
    cases: dict[str, Any] = doc["cases"]
    return cases


_LISTS = (
    *("disagreement", "reference_misses", "candidate_misses"),
    *("reference_noise", "candidate_noise"),
)
_SIDE_MAPS = ("models", "system_fingerprints")


def entry_problem(entry: Any) -> str | None:
    """Why the gate could not read this snapshot entry, or None.

    Checked when a snapshot is loaded, before the first call of a run, and on every entry
    `promote` is about to write, so a hand-edited file or a tampered run cannot stop a run
    after a night's calls are paid for.
    """
    if not isinstance(entry, dict) or not isinstance(entry.get("fixture_sha"), str):
        return "entry needs a fixture_sha"
    for key in _LISTS:
        value = entry.get(key, [])
        if not isinstance(value, list):
            return f"{key} must be a list"
        if not all(isinstance(item, str) for item in value):
            return f"{key} must hold only strings"
    for key in _SIDE_MAPS:
        value = entry.get(key, {})
        if not isinstance(value, dict) or not all(
            item is None or isinstance(item, str) for item in value.values()
        ):
            return f"{key} must map each side to a string or null"
    return None


def entry_for(verdict: Mapping[str, Any]) -> dict[str, Any]:
    """The snapshot entry that accepts one case of disagreement.json as it stands."""
    ref, cand = verdict["reference"], verdict["candidate"]
    return {
        "fixture_sha": verdict["fixture_sha"],
        "disagreement": verdict["disagreement"],
        "reference_misses": ref["misses"],
        "candidate_misses": cand["misses"],
        "reference_noise": ref.get("noise", []),
        "candidate_noise": cand.get("noise", []),
        "models": {"reference": ref["response_model"], "candidate": cand["response_model"]},
        "system_fingerprints": {
            "reference": ref["system_fingerprint"],
            "candidate": cand["system_fingerprint"],
        },
    }


def _acceptable(verdict: Mapping[str, Any]) -> bool:
    """An admitted verdict carries everything `entry_for` reads."""
    sides = [verdict.get("reference"), verdict.get("candidate")]
    return (
        isinstance(verdict.get("fixture_sha"), str)
        and isinstance(verdict.get("disagreement"), list)
        and all(
            isinstance(s, dict) and {"misses", "response_model", "system_fingerprint"} <= set(s)
            for s in sides
        )
    )


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / ".promote.lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def promote(
    run_dir: Path, snapshots_dir: Path, *, suite: str, allow_partial: bool = False
) -> dict[str, list[str]]:
    """Accept a run's disagreement map as `suite`'s snapshot; returns what changed.

    `suite` is the run's, from its manifest and the config: the map must say the same, so a
    map edited to name another suite can never overwrite that suite's accepted snapshot.
    """
    disagreement_file = run_dir / "disagreement.json"
    doc = read_json_object(disagreement_file, missing="no such file (did the run finish?)")
    named, cases = doc.get("suite"), doc.get("cases")
    if not isinstance(named, str) or not isinstance(cases, dict):
        raise DataError(disagreement_file, "not a parallax disagreement map")
    if not valid_name(named):
        raise DataError(disagreement_file, f"suite {named!r} is not a valid suite name")
    if named != suite:
        raise DataError(disagreement_file, f"is a map of suite {named!r}, not of {suite!r}")
    for case_id, verdict in cases.items():
        if not isinstance(verdict, dict) or (verdict.get("admitted") and not _acceptable(verdict)):
            raise DataError(disagreement_file, f"case {case_id!r}: not a parallax verdict")
    accepted = {cid: entry_for(v) for cid, v in sorted(cases.items()) if v.get("admitted")}
    for case_id, entry in accepted.items():  # before the lock: nothing is written on a refusal
        if (problem := entry_problem(entry)) is not None:
            raise DataError(disagreement_file, f"case {case_id!r}: {problem}")
    unscored = sorted(cid for cid, v in cases.items() if not v.get("admitted"))
    if unscored and not allow_partial:
        raise IncompleteError(
            f"{run_dir}: {len(unscored)} case(s) could not be scored "
            f"({', '.join(unscored[:5])}{', ...' if len(unscored) > 5 else ''}); "
            f"rerun them (`{command('run', '--retry-unscored', run_dir)}`) "
            "or pass --allow-partial"
        )
    path = snapshot_path(snapshots_dir, suite)
    try:
        with _locked(snapshots_dir):
            old = load_snapshot(path)
            new = {
                cid: accepted[cid] if cid in accepted else old[cid]
                for cid in sorted(cases)
                if cid in accepted or cid in old
            }
            changes = {
                "added": sorted(set(new) - set(old)),
                "removed": sorted(set(old) - set(new)),
                "changed": sorted(c for c in set(new) & set(old) if new[c] != old[c]),
                "kept_unscored": sorted(c for c in unscored if c in old),
                # unscored and never accepted: still `new_case` on the next run
                "left_out_unscored": sorted(c for c in unscored if c not in old),
            }
            write_json(
                path,
                {
                    "version": SNAPSHOT_VERSION,
                    "suite": suite,
                    "promoted_from": doc.get("run_id") or run_dir.name,
                    "promoted_at": datetime.now(UTC).isoformat(timespec="seconds"),
                    "cases": new,
                },
            )
    except OSError as exc:  # the old snapshot stays whole: the write is atomic
        raise DataError(path, f"cannot write the snapshot: {exc.strerror or exc}") from None
    return changes
