"""Accepted disagreement snapshots: committed and reviewed like a lockfile.

Only `promote` writes here, atomically and under a lock, so two promotes at once cannot
interleave and a reader never sees half a file. A broken snapshot is reported, never
silently replaced, and never silently rolled back: a snapshot records the run it came from
and when that run's calls were made, and `promote` refuses (unless forced) a run whose calls
are older, or whose cases were run on fixtures that are not today's (the next run would read
every one of them as `fixture_move`).
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runner.config import valid_name
from runner.errors import DataError, ParallaxError, UsageError, reason_of
from runner.invocation import command
from runner.jsontext import loads
from runner.ledger import read_json_object, write_json
from runner.runs.mode import RunMode
from runner.runs.names import started_of
from runner.text import holds_surrogate, may_hold_surrogates

# 2 added `promoted_calls_at`; an entry's `requests` (each side's request_sha) came later, as
# an optional key: a version 2 reader that predates it ignores it, and an entry without it
# records no request (never read as a change)
SNAPSHOT_VERSION = 2
READ_VERSIONS = (1, 2)  # a version 1 snapshot is read as it is; its calls' time is its run's name
# modes whose verdicts stand on (mostly) their parent's calls
FROM_PARENT = frozenset({RunMode.REPLAY, RunMode.RETRY})
SHOWN = 5  # cases a refusal names before it counts the rest


class IncompleteError(ParallaxError):
    """Promote refused: the run has rows that could not be scored."""

    exit_code = 2


class RollbackRefused(UsageError):
    """Promote refused: the run would roll the snapshot back; `--force` promotes it anyway."""


def snapshot_path(snapshots_dir: Path, suite: str) -> Path:
    return snapshots_dir / f"{suite}.json"


def load_snapshot(path: Path) -> dict[str, Any]:
    """The accepted cases by id; a missing file is an empty snapshot (every case is new)."""
    doc = _read_snapshot(path)
    cases: dict[str, Any] = doc["cases"] if doc is not None else {}
    return cases


def _read_snapshot(path: Path) -> dict[str, Any] | None:
    """The whole snapshot document, checked; None when there is none yet."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
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
    version = doc.get("version")
    if type(version) is not int or version not in READ_VERSIONS:
        raise DataError(path, f"unsupported snapshot version {version!r}")
    for case_id, entry in doc["cases"].items():
        if (problem := entry_problem(entry)) is not None:
            raise DataError(path, f"case {case_id!r}: {problem}")
    return doc


_LISTS = (
    *("disagreement", "reference_misses", "candidate_misses"),
    *("reference_noise", "candidate_noise"),
)
_SIDE_MAPS = ("models", "system_fingerprints", "requests")


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
        # the request each side was shaped by (absent from a map written before it was kept)
        "requests": {"reference": ref.get("request_sha"), "candidate": cand.get("request_sha")},
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


def promoted_from(snapshots_dir: Path, suite: str) -> str | None:
    """The run dir the suite's snapshot was promoted from (its name), None without one; a
    broken snapshot is a DataError (retention then cannot tell which run must stay)."""
    doc = _read_snapshot(snapshot_path(snapshots_dir, suite))
    named = doc.get("promoted_from") if doc is not None else None
    return named if isinstance(named, str) else None


@contextmanager
def promote_lock(directory: Path) -> Iterator[None]:
    """Hold the snapshots' lock: no promote writes while the block runs."""
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / ".promote.lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def promote(
    run_dir: Path,
    snapshots_dir: Path,
    *,
    suite: str,
    allow_partial: bool = False,
    today: Mapping[str, str] | None = None,
    force: bool = False,
) -> dict[str, list[str]]:
    """Accept a run's disagreement map as `suite`'s snapshot; returns what changed.

    `suite` is the run's, from its manifest and the config: the map must say the same, so a
    map edited to name another suite can never overwrite that suite's accepted snapshot.
    `today` maps each case of today's fixture file to its fixture_sha (None: not checked, for
    a map built by hand). Unless `force`, a run that would roll the snapshot back is refused
    (RollbackRefused, exit 64), naming what would roll back; nothing is written.
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
    calls = calls_at(run_dir)
    path = snapshot_path(snapshots_dir, suite)
    try:
        with promote_lock(snapshots_dir):
            old_doc = _read_snapshot(path) or {"cases": {}}
            old: dict[str, Any] = old_doc["cases"]
            new = {
                cid: accepted[cid] if cid in accepted else old[cid]
                for cid in sorted(cases)
                if cid in accepted or cid in old
            }
            changes = {
                "added": sorted(set(new) - set(old)),
                "removed": sorted(set(old) - set(new)),
                "changed": sorted(c for c in set(new) & set(old) if _changed(old[c], new[c])),
                "kept_unscored": sorted(c for c in unscored if c in old),
                # unscored and never accepted: still `new_case` on the next run
                "left_out_unscored": sorted(c for c in unscored if c not in old),
            }
            stale, stale_reason = _stale_fixtures(run_dir, accepted, today)
            older, older_reason = _older_calls(old_doc, new, changes, calls)
            reasons = [r for r in (stale_reason, older_reason) if r is not None]
            if reasons and not force:
                raise RollbackRefused(
                    f"{run_dir}: refused: {'; '.join(reasons)}; to promote it anyway: "
                    f"`{command('promote', '--force', run_dir)}`"
                )
            changes["rolled_back"] = sorted({*stale, *older})
            write_json(
                path,
                {
                    "version": SNAPSHOT_VERSION,
                    "suite": suite,
                    "promoted_from": doc.get("run_id") or run_dir.name,
                    "promoted_at": datetime.now(UTC).isoformat(timespec="seconds"),
                    "promoted_calls_at": calls.isoformat() if calls is not None else None,
                    "cases": new,
                },
            )
    except OSError as exc:  # the old snapshot stays whole: the write is atomic
        raise DataError(path, f"cannot write the snapshot: {exc.strerror or exc}") from None
    return changes


def _changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether promote changes what a case's entry accepts. Recording the requests of an entry
    that had none is no change, as the gate reads no recorded request as none."""
    if "requests" not in old:
        new = {key: value for key, value in new.items() if key != "requests"}
    return dict(old) != dict(new)


def _stale_fixtures(
    run_dir: Path, accepted: Mapping[str, Mapping[str, Any]], today: Mapping[str, str] | None
) -> tuple[list[str], str | None]:
    """The accepted cases whose fixture_sha is not today's, and why that refuses the run."""
    if today is None:
        return [], None
    stale = {
        c: today.get(c) for c, entry in accepted.items() if today.get(c) != entry["fixture_sha"]
    }
    if not stale:
        return [], None
    shown = [
        f"{cid} {accepted[cid]['fixture_sha']} (run) -> {now} (today)"
        if now is not None
        else f"{cid} (no longer in the fixtures)"
        for cid, now in sorted(stale.items())
    ]
    return sorted(stale), (
        f"{len(stale)} case(s) were run on fixtures that are not today's, and would read as "
        f"fixture_move on the next run ({_listed(shown)}); to regrade it with today's: "
        f"`{command('replay', run_dir)}`"
    )


def _older_calls(
    old_doc: Mapping[str, Any],
    new: Mapping[str, Any],
    changes: Mapping[str, list[str]],
    calls: datetime | None,
) -> tuple[list[str], str | None]:
    """The cases a run whose calls are older than the snapshot's would roll back, and why
    that refuses it."""
    before = snapshot_calls_at(old_doc)
    if calls is None or before is None or calls >= before:
        return [], None
    moved = sorted({*changes["changed"], *changes["removed"], *changes["added"]})
    shown = [_change(cid, old_doc["cases"].get(cid), new.get(cid)) for cid in moved]
    return moved, (
        f"its calls ({calls.isoformat()}) are older than those of the snapshot's run "
        f"({old_doc.get('promoted_from')}, {before.isoformat()}): it would roll back "
        f"{len(moved)} case(s) ({_listed(shown) or 'none, only the snapshot itself'})"
    )


def _change(case_id: str, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> str:
    if new is None:
        return f"{case_id} removed"
    if old is None:
        return f"{case_id} added back"
    if old.get("fixture_sha") != new.get("fixture_sha"):
        return f"{case_id} {old.get('fixture_sha')} (snapshot) -> {new.get('fixture_sha')} (run)"
    return case_id


def _listed(items: list[str]) -> str:
    more = f", and {len(items) - SHOWN} more" if len(items) > SHOWN else ""
    return ", ".join(items[:SHOWN]) + more


def calls_at(run_dir: Path) -> datetime | None:
    """When the calls a run's verdicts stand on were made, or None when that cannot be told.

    A run's own start. A replay regrades, and a retry mostly copies, the run it came from, so
    theirs is that run's: followed through the suite's runs directory while it is there, else
    read from the parent's name, which begins with its start (`20261201T030000Z-...`).
    """
    current = run_dir
    for _ in range(100):  # a hand-edited manifest may name itself as its parent
        try:
            manifest = read_json_object(current / "manifest.json")
        except DataError:  # not here (a map built by hand, a parent deleted), or unreadable
            return started_of(current.name)
        parent = manifest.get("parent")
        if (
            RunMode.read(manifest.get("mode")) in FROM_PARENT
            and isinstance(parent, str)
            and valid_name(parent)
        ):
            current = current.parent / parent
            continue
        started = aware_time(manifest.get("started_at"))
        return started if started is not None else started_of(current.name)
    return None


def snapshot_calls_at(doc: Mapping[str, Any]) -> datetime | None:
    """When the calls of the run a snapshot was promoted from were made; a version 1 snapshot
    knows only that run's name, which begins with its start."""
    found = aware_time(doc.get("promoted_calls_at"))
    if found is not None:
        return found
    named = doc.get("promoted_from")
    return started_of(named) if doc.get("version") == 1 and isinstance(named, str) else None


def aware_time(value: Any) -> datetime | None:
    """An ISO-8601 time with its zone, or None (hand-edited, naive or not a time at all)."""
    if not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return None
    return when if when.tzinfo is not None else None
