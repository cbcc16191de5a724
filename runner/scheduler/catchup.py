"""What a daemon's start makes up for: the fires that passed while no daemon ran, read from the
heartbeat the last one left and the runs made since, and the interrupted run to resume."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from runner.config import LoadedConfig
from runner.errors import ParallaxError
from runner.jsontext import loads
from runner.lock import is_locked
from runner.runs.mode import RunMode
from runner.runs.names import started_of
from runner.runs.plan import resume_problem
from runner.runs.rundir import read_manifest
from runner.scheduler.trigger import LOOKBACK

CLOCK_SLACK = timedelta(days=1)  # how far ahead of now a handled fire is still believed


def resume_points(path: Path, now: datetime) -> dict[str, tuple[datetime, bool]]:
    """Where each suite's fire times go on from, by the heartbeat a stopped daemon left: after
    the last fire it handled, or (when it handled none) from the fire it was waiting for, which
    is then still due; the flag says whether that time itself is a fire still to come.

    What cannot be read (no heartbeat yet, a hand-edited one) tells of nothing, and neither
    does a time more than LOOKBACK back or one ahead of now by more than CLOCK_SLACK (a
    handled fire a little ahead is a clock stepped back since, and stands).
    """
    try:
        suites = loads(path.read_bytes())["suites"]
        entries = suites.items()
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}
    points: dict[str, tuple[datetime, bool]] = {}
    for name, entry in entries:
        if not isinstance(entry, dict):
            continue
        handled, waited = _time_in(entry, "handled"), _time_in(entry, "next_fire")
        if handled is not None and now - LOOKBACK <= handled <= now + CLOCK_SLACK:
            points[name] = (handled, False)
        elif (
            entry.get("handled") is None and waited is not None and now - LOOKBACK <= waited <= now
        ):
            points[name] = (waited, True)
    return points


def _time_in(entry: dict[str, Any], key: str) -> datetime | None:
    try:
        when = datetime.fromisoformat(entry[key])
    except (KeyError, TypeError, ValueError):
        return None
    return when if when.tzinfo is not None else None


def runs_since(
    loaded: LoadedConfig, suite: str, *, since: datetime
) -> Iterator[tuple[Path, dict[str, Any], datetime]]:
    """The runs of `suite` that called every case (mode `run`: the daemon's or one started by
    hand; not a replay, a retry or a partial run) made since `since`, with their manifests and
    starts.

    Run dirs are named by their start, so the dirs named before `since` are not read: a
    start-up reads only what was made since the last fire the heartbeat names, however many
    runs came before. A dir renamed by hand is read, and counts by the start it records.
    """
    suite_dir = loaded.runs_dir / suite
    if not suite_dir.is_dir():
        return
    earliest = since.replace(microsecond=0)
    for path in sorted((p for p in suite_dir.iterdir() if p.is_dir()), reverse=True):
        named = started_of(path.name)
        if named is not None and named < earliest:
            return
        try:
            manifest = read_manifest(path)
        except (ParallaxError, OSError):
            continue  # a dir that cannot be read stands for nothing
        started = _time_in(manifest, "started_at")
        whole = manifest.get("partial") is None
        if RunMode.read(manifest.get("mode")) is RunMode.RUN and whole and started is not None:
            yield path, manifest, started


def find_interrupted(loaded: LoadedConfig, suite: str) -> tuple[Path | None, str | None]:
    """The latest run of `suite` (replays call nothing and partial runs are a person's quick
    check: both are passed over) if it was interrupted and can resume; else why not.

    (None, None) means there is nothing to resume: no run yet, or the latest one finished.
    """
    suite_dir = loaded.runs_dir / suite
    if not suite_dir.is_dir():
        return None, None
    dirs = sorted((p for p in suite_dir.iterdir() if p.is_dir()), key=lambda p: p.name)
    for latest in reversed(dirs):
        try:
            manifest = read_manifest(latest)
        except (ParallaxError, OSError) as exc:
            return None, f"latest run dir is not readable: {exc}"
        whole = manifest.get("partial") is None
        if RunMode.read(manifest.get("mode")) is not RunMode.REPLAY and whole:
            break
    else:
        return None, None
    if manifest.get("finished_at") is not None:
        return None, None
    holder = is_locked(loaded.runs_dir, suite)
    if holder is not None:
        return None, f"another process holds the suite lock (pid {holder.get('pid')})"
    why = resume_problem(loaded, suite, manifest)
    if why is not None:
        return None, f"{why}; the next fire starts a new run"
    return latest, None
