"""Retention: what a runs dir keeps of its runs as they age (`[retention]`).

A finished run that started more than `compress_after_nights` ago keeps its ledgers compressed
(`raw.jsonl.gz`, `outcomes.jsonl.gz`: `ledger.pack`), which every reader opens as before. A run
that started more than `keep_nights` ago is deleted, except the runs that must stay: the latest
finished run of its suite, the run the suite's snapshot was promoted from, every unfinished run
(it may yet be resumed), and the runs `keep` names. A night is 24 hours from a run's start, read
from its directory's name (`runs.names`). Each deleted run leaves a one-line record for
`history` (`runner.tombstones`) and is logged as `run.pruned`.

Nothing here races a run. Deletions are decided and made while the suite's lock is held (a run,
a resume or a retry of the suite holds it while it works: that suite is then left for the next
prune) and the snapshots' lock (a promote in flight finishes first, so the run it promotes is
seen as promoted); a deleted dir is first renamed out of the suite folder, which takes no time,
and removed once the locks are let go. A compression touches only finished runs, which nothing
appends to, and never takes the plain file away before the compressed one is whole. Two prunes
take turns (`runs/.parallax-prune.lock`).
"""

from __future__ import annotations

import contextlib
import enum
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from runner import logs
from runner.config import LoadedConfig, Retention
from runner.errors import DataError, StorageError
from runner.history import read_run, run_dirs
from runner.ledger import PACKED, pack, packed_path, read_json_object
from runner.lock import SuiteLocked, prune_lock, suite_lock
from runner.results.record import forget
from runner.runs.names import started_of
from runner.snapshot import aware_time, promote_lock, promoted_from
from runner.tombstones import Tombstone, record

LEDGERS = ("raw.jsonl", "outcomes.jsonl")  # what a finished run keeps compressed
TRASH = ".pruning"  # runs/.pruning/<suite>.<run>: a deleted run dir on its way out
NIGHT = timedelta(days=1)


class Kept(enum.StrEnum):
    """Why a run past `keep_nights` stays."""

    LATEST = "the latest finished run"
    PROMOTED = "the snapshot's run"
    UNFINISHED = "unfinished"
    LISTED = "named in keep"
    UNREADABLE = "no readable manifest"


@dataclass(frozen=True)
class Run:
    """A run dir as retention sees it."""

    path: Path
    started: datetime | None
    finished: bool
    readable: bool

    def age(self, now: datetime) -> int | None:
        """Whole nights since it started, or None when its start is unknown."""
        return None if self.started is None else (now - self.started) // NIGHT


@dataclass(frozen=True)
class Done:
    """One run deleted or compressed (or, in a dry run, that would be)."""

    suite: str
    run: Run
    deleted: bool  # False: compressed
    before: int  # bytes: the whole dir, or its plain ledgers
    after: int = 0  # bytes of the compressed ledgers
    stone: Tombstone | None = None


@dataclass
class SuitePrune:
    """What one suite's prune did (or would do), and what it left and why."""

    suite: str
    at: datetime  # the prune's now: what the runs' ages are counted to
    done: list[Done] = field(default_factory=list)
    kept: list[tuple[Run, Kept]] = field(default_factory=list)
    busy: dict[str, Any] | None = None  # the suite lock's holder: its deletions wait
    notes: list[str] = field(default_factory=list)


def _run(path: Path) -> Run:
    try:
        manifest = read_json_object(path / "manifest.json")
    except DataError:
        return Run(path, started_of(path.name), finished=False, readable=False)
    started = started_of(path.name) or aware_time(manifest.get("started_at"))
    finished = manifest.get("finished_at") is not None
    return Run(path, started, finished=finished, readable=True)


def _kept(run: Run, latest: Path | None, promoted: str | None, keep: list[str]) -> Kept | None:
    """Why a run past `keep_nights` must stay, or None: it goes."""
    if not run.readable:
        return Kept.UNREADABLE
    if not run.finished:
        return Kept.UNFINISHED
    if run.path == latest:
        return Kept.LATEST
    if run.path.name == promoted:
        return Kept.PROMOTED
    name = run.path.name
    if name in keep or name.partition("-")[2] in keep:
        return Kept.LISTED
    return None


def plan(
    loaded: LoadedConfig, suite: str, now: datetime
) -> tuple[list[Run], list[Run], SuitePrune]:
    """The runs of `suite` to delete and to compress, and the ones past `keep_nights` that
    stay (with why). A broken snapshot deletes nothing: which run it came from is unknown."""
    policy: Retention = loaded.config.retention
    result = SuitePrune(suite, now)
    runs = [_run(path) for path in run_dirs(loaded.runs_dir / suite)]
    finished = [r for r in runs if r.finished]
    latest = finished[-1].path if finished else None
    try:
        promoted = promoted_from(loaded.snapshots_dir, suite)
        blocked = False
    except DataError as exc:
        promoted, blocked = None, True
        result.notes.append(f"{exc}: no run of the suite is deleted until it is mended")
    delete: list[Run] = []
    compress: list[Run] = []
    for run in runs:
        age = run.age(now)
        if age is not None and age >= policy.keep_nights:
            why = _kept(run, latest, promoted, policy.keep)
            if why is not None:
                result.kept.append((run, why))
            elif not blocked:
                delete.append(run)
                continue
        if (
            run.finished
            and age is not None
            and age >= policy.compress_after_nights
            and any((run.path / name).exists() for name in LEDGERS)
        ):
            compress.append(run)
    return delete, compress, result


def prune(
    loaded: LoadedConfig,
    *,
    suite: str | None = None,
    dry_run: bool = False,
    now: datetime | None = None,
    on_done: Callable[[Done], None] = lambda _done: None,
    stopping: Callable[[], bool] = lambda: False,
) -> list[SuitePrune]:
    """Prune every suite of the config (or one); `on_done` hears of each run deleted or
    compressed as soon as it is, and `stopping` is asked between runs (a daemon going down)."""
    now = now or datetime.now(UTC)
    names = loaded.suite_names(suite)
    if dry_run:
        return [_dry(loaded, name, now) for name in names]
    results = []
    with prune_lock(loaded.runs_dir):
        _empty_trash(loaded.runs_dir)
        for name in names:
            if stopping():
                break
            results.append(_prune_suite(loaded, name, now, on_done, stopping))
    return results


def _dry(loaded: LoadedConfig, suite: str, now: datetime) -> SuitePrune:
    delete, compress, result = plan(loaded, suite, now)
    result.done = [
        Done(suite, run, True, _bytes(run.path), stone=_tombstone(run, now)) for run in delete
    ]
    result.done += [
        Done(suite, run, False, sum(_bytes(run.path / n) for n in LEDGERS)) for run in compress
    ]
    return result


def _prune_suite(
    loaded: LoadedConfig,
    suite: str,
    now: datetime,
    on_done: Callable[[Done], None],
    stopping: Callable[[], bool],
) -> SuitePrune:
    if not (loaded.runs_dir / suite).is_dir():
        return SuitePrune(suite, now)
    try:
        result, leaving = _delete(loaded, suite, now)
    except SuiteLocked as exc:  # a run, resume or retry of the suite works: deleted next time
        delete, compress, result = plan(loaded, suite, now)
        compress = sorted([*delete, *compress], key=lambda r: r.path.name)  # all still here
        result.kept, result.busy, leaving = [], exc.holder, []
    else:
        compress = [r for r in plan(loaded, suite, now)[1] if r.path.exists()]
    for done, trash in leaving:  # out of the suite folder already: nothing reads them now
        shutil.rmtree(trash, ignore_errors=True)
        result.done.append(done)
        on_done(done)
    forget(loaded, [done.run.path.name for done, _ in leaving], logs.get_logger())
    for run in compress:
        if stopping():
            break
        done = _compress(suite, run)
        result.done.append(done)
        on_done(done)
    return result


def _delete(
    loaded: LoadedConfig, suite: str, now: datetime
) -> tuple[SuitePrune, list[tuple[Done, Path]]]:
    """Under the suite's and the snapshots' locks: decide, record each run's night and move
    its dir out of the suite folder. The removal itself is left to the caller."""
    leaving: list[tuple[Done, Path]] = []
    snapshots = loaded.snapshots_dir
    with (
        suite_lock(loaded.runs_dir, suite),
        promote_lock(snapshots) if snapshots.is_dir() else contextlib.nullcontext(),
    ):
        delete, _, result = plan(loaded, suite, now)
        for run in delete:
            stone = _tombstone(run, now)
            size = _bytes(run.path)
            try:
                record(run.path.parent, stone)
            except StorageError:  # a full disk: the deletion makes the room for its record
                trash = _move_out(loaded, suite, run.path)
                shutil.rmtree(trash, ignore_errors=True)
                record(run.path.parent, stone)
            else:
                trash = _move_out(loaded, suite, run.path)
            leaving.append((Done(suite, run, True, size, stone=stone), trash))
    return result, leaving


def _move_out(loaded: LoadedConfig, suite: str, path: Path) -> Path:
    trash = loaded.runs_dir / TRASH
    trash.mkdir(exist_ok=True)
    target = trash / f"{suite}.{path.name}"
    path.rename(target)
    return target


def _empty_trash(runs_dir: Path) -> None:
    """What a prune killed mid-removal left: already recorded, already out of sight."""
    trash = runs_dir / TRASH
    if trash.is_dir():
        for path in trash.iterdir():
            shutil.rmtree(path, ignore_errors=True)


def _tombstone(run: Run, now: datetime) -> Tombstone:
    row, _ = read_run(run.path)
    pruned_at = now.isoformat(timespec="seconds")
    if row is None:  # a finished manifest, an unreadable summary: what its name says
        started = run.started.isoformat(timespec="seconds") if run.started else None
        return Tombstone(run.path.name, started, None, None, None, None, pruned_at)
    return Tombstone(
        run_id=row.run_dir.name,
        started_at=row.started_at,
        finished_at=row.finished_at,
        mode=row.mode,
        exit_code=row.exit_code,
        verdict=row.verdict,
        pruned_at=pruned_at,
        gate_counts=dict(row.gate_counts),
        parent=row.parent,
    )


def _compress(suite: str, run: Run) -> Done:
    before = after = 0
    for name in LEDGERS:
        path = run.path / name
        for stale in run.path.glob(f".{name}{PACKED}.*.tmp"):  # a prune killed mid-write
            stale.unlink(missing_ok=True)
        if path.exists():
            plain, packed = pack(path)
            before, after = before + plain, after + packed
        elif packed_path(path).exists():
            after += packed_path(path).stat().st_size
    return Done(suite, run, False, before, after)


def _bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += (Path(root) / name).lstat().st_size
    return total


def sizes(n: int) -> str:
    """A byte count as a person reads it: `812 B`, `3.4 kB`, `1.2 MB`, `2.0 GB`."""
    value = float(n)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError  # pragma: no cover - the loop returns at GB


def log_done(log: Any, done: Done, retention: Retention) -> None:
    """`run.pruned` for a run deleted, `run.compressed` for one whose ledgers were packed."""
    from runner import logs

    common = {"suite": done.suite, "run_id": done.run.path.name, "run_dir": str(done.run.path)}
    if done.deleted:
        stone = done.stone
        log.info(
            logs.RUN_PRUNED,
            **common,
            started_at=stone.started_at if stone is not None else None,
            verdict=stone.verdict if stone is not None else None,
            bytes=done.before,
            keep_nights=retention.keep_nights,
        )
    else:
        log.info(
            logs.RUN_COMPRESSED,
            **common,
            bytes_before=done.before,
            bytes_after=done.after,
            compress_after_nights=retention.compress_after_nights,
        )


def said(
    result: SuitePrune, *, dry_run: bool, retention: Retention, shown: Callable[[Path], str]
) -> str:
    """The human lines `parallax prune` prints on stderr for one suite (a run dir's name or a
    note may hold any character: each line is shown as one line)."""
    from runner.text import visible

    deleted = [d for d in result.done if d.deleted]
    packed = [d for d in result.done if not d.deleted]
    verb = ("would delete", "would compress") if dry_run else ("deleted", "compressed")
    head = f"parallax · prune {result.suite}{' (dry run)' if dry_run else ''}: "
    head += f"{verb[0]} {len(deleted)} run(s) ({sizes(sum(d.before for d in deleted))})"
    head += f", {verb[1]} {len(packed)}"
    if packed:
        before = sizes(sum(d.before for d in packed))
        head += (
            f" ({before})" if dry_run else f" ({before} -> {sizes(sum(d.after for d in packed))})"
        )
    out = [head]
    for done in deleted:
        age = done.run.age(result.at)
        verdict = done.stone.verdict if done.stone is not None else None
        out.append(
            f"  {verb[0]} {shown(done.run.path)}"
            + (f": started {age} nights ago" if age is not None else "")
            + (f", {verdict}" if verdict else "")
        )
    for done in packed:
        what = sizes(done.before) if dry_run else f"{sizes(done.before)} -> {sizes(done.after)}"
        out.append(f"  {verb[1]} {shown(done.run.path)}: its ledgers, {what}")
    out.extend(
        f"  kept past keep_nights = {retention.keep_nights}: {shown(run.path)} ({why})"
        for run, why in result.kept
    )
    if result.busy is not None:
        out.append(
            f"  a run of {result.suite} is in flight (pid {result.busy.get('pid')}): its old "
            "runs are deleted by the next prune"
        )
    out.extend(f"  {note}" for note in result.notes)
    return "\n".join(visible(line, one_line=True) for line in out)
