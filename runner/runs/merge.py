"""`parallax merge`: one run of a suite from the run dirs of its shards.

The shards' exchanges and outcome rows go into a new run dir, in one defined order (the
fixture file's, then side, then sample), and from there the run is finished as any run is:
`heal` folds its rows, `finalize` gates them against the snapshot and writes
disagreement.json, summary.json and the alerts, `after_run` the reports. So the merged dir's
verdict, files and exit code are those of one unsharded run over the same exchanges, and
replay, report and promote read it as one. It refuses, before writing anything, shards that do
not add up to one run: one missing or given twice, of other suites, configs, fixtures or
snapshots than each other or than today's, and unfinished ones unless told.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import Any

from runner import logs
from runner.batch.journal import JOURNAL
from runner.config import LoadedConfig
from runner.cost.budget import Budget
from runner.errors import DataError, StorageError, UsageError
from runner.gate import Folds
from runner.invocation import command
from runner.ledger import (
    PACKED,
    decode_line,
    disk_refusal,
    open_ledger,
    stored,
    unpack_temporary,
    write_json,
)
from runner.model import NOISE, SIDES
from runner.regrade import heal
from runner.reports.write import after_run
from runner.request import sha as requestsha
from runner.results.record import record_run
from runner.runs.calls import meters
from runner.runs.finalize import finalize, finished_event, side_kinds, side_prices
from runner.runs.mode import RunMode
from runner.runs.rundir import (
    config_for_run,
    file_digest,
    manifest_for,
    new_run_dir,
    read_manifest,
    snapshot_digest,
)
from runner.runs.shard import Shard
from runner.suite import Suite, prepare_suite
from runner.text import visible

_SIDE_RANK = {side: rank for rank, side in enumerate((*SIDES, NOISE))}
Order = Callable[[Mapping[str, Any]], tuple[int, str, int, int]]


@dataclass(frozen=True)
class _Part:
    """One shard's run dir, as its manifest describes it."""

    run_dir: Path
    manifest: dict[str, Any]
    shard: Shard

    @property
    def finished(self) -> bool:
        return self.manifest.get("finished_at") is not None


def merge_shards(
    run_dirs: Sequence[Path], *, config_path: Path | None, allow_partial: bool
) -> tuple[Path, int, dict[str, Any]]:
    """Merge every shard of one suite into a new run dir; return it, its exit code and
    summary."""
    import structlog

    parts = _parts(run_dirs, allow_partial=allow_partial)
    loaded = config_for_run(parts[0].run_dir, config_path)
    (name,) = loaded.suite_names(parts[0].manifest["suite"])
    suite = prepare_suite(loaded, name)
    try:
        if (why := _changed(loaded, suite, parts[0])) is not None:
            raise UsageError(f"cannot merge: {why} since the shards ran; run them again")
        run_dir = new_run_dir(loaded.runs_dir, name)
        structlog.contextvars.bind_contextvars(run_id=run_dir.name, suite=name)
        try:
            return _merged(loaded, suite, run_dir, parts)
        except BaseException as exc:  # nothing was called: the shards stay the record
            if not _finished(run_dir):
                shutil.rmtree(run_dir, ignore_errors=True)
            if isinstance(exc, StorageError):
                raise exc.advised(
                    "its new run dir is removed: once there is space, "
                    f"`{command('merge', *(p.run_dir for p in parts))}` again"
                ) from None
            raise
        finally:
            structlog.contextvars.unbind_contextvars("run_id", "suite")
    finally:
        suite.fixtures.close()


def _merged(
    loaded: LoadedConfig, suite: Suite, run_dir: Path, parts: Sequence[_Part]
) -> tuple[Path, int, dict[str, Any]]:
    """The new run dir filled from the shards and finished as a run is."""
    log = logs.get_logger()
    manifest = manifest_for(loaded, suite, run_dir, mode=RunMode.RUN, parent=None)
    starts = [p.manifest.get("started_at") for p in parts]
    manifest["started_at"] = min(s for s in (*starts, manifest["started_at"]) if isinstance(s, str))
    manifest["merged"] = {
        "count": len(parts),
        "shards": [
            {"index": p.shard.index, "run_id": p.run_dir.name, "finished": p.finished}
            for p in parts
        ],
    }
    with disk_refusal(run_dir / "manifest.json"):
        write_json(run_dir / "manifest.json", manifest)
    order = _order(suite)
    for ledger, unique in (("raw.jsonl", False), ("outcomes.jsonl", True)):
        _sorted_copy([p.run_dir / ledger for p in parts], run_dir / ledger, order, unique=unique)
    _journals([p.run_dir / JOURNAL for p in parts], run_dir / JOURNAL)
    folds = Folds(suite.samples, side_prices(loaded, suite), side_kinds(loaded, suite))
    heal(run_dir, suite, folds)  # folds every row; grades only what a killed shard left
    if any(not p.finished for p in parts):  # what heal graded went to the end: put in order
        graded = run_dir / "outcomes.jsonl"
        unsorted = graded.rename(run_dir / "outcomes.unsorted.jsonl")
        _sorted_copy([unsorted], graded, order, unique=True)
        unsorted.unlink()
    limit = loaded.budget_usd(suite.name)
    budget = Budget(limit) if limit is not None else None
    if budget is not None:  # the whole budget, and what all the shards spent of it
        budget.count_ledgers(run_dir, suite, meters(loaded, suite, budget))
    log.info(
        logs.RUN_MERGED,
        shards=len(parts),
        unfinished=[p.shard.index for p in parts if not p.finished],
        cases=len(suite.refs),
        samples=suite.samples,
        run_dir=str(run_dir.absolute()),
    )
    exit_code, summary = finalize(loaded, suite, run_dir, folds, log, budget=budget)
    del folds
    after_run(run_dir, retire_after=suite.thresholds.retire_after, log=log)
    log.info(logs.RUN_FINISHED, **finished_event(exit_code, summary))
    record_run(loaded, run_dir, log)  # the merged dir is complete: indexed, with its shards'
    return run_dir, exit_code, summary


def _finished(run_dir: Path) -> bool:
    """Whether finalize finished the merged run (its reports are no part of its verdict)."""
    try:
        return read_manifest(run_dir).get("finished_at") is not None
    except (UsageError, DataError):
        return False


def _parts(run_dirs: Sequence[Path], *, allow_partial: bool) -> list[_Part]:
    """The shards named, in index order, once each checked to add up to one run."""
    parts = []
    for run_dir in _expanded(run_dirs):
        manifest = read_manifest(run_dir)
        shard = Shard.from_json(manifest.get("shard"), run_dir / "manifest.json")
        if shard is None:
            raise UsageError(f"cannot merge: {_shown(run_dir)} is no shard (not run with --shard)")
        parts.append(_Part(run_dir, manifest, shard))
    parts = _retried(parts)
    first = parts[0]
    for part in parts[1:]:
        if (why := _differs(first, part)) is not None:
            raise UsageError(
                f"cannot merge: {_shown(part.run_dir)} {why} than {_shown(first.run_dir)}"
            )
    by_index: dict[int, _Part] = {}
    for part in parts:
        if (twice := by_index.get(part.shard.index)) is not None:
            raise UsageError(
                f"cannot merge: shard {part.shard.label} given twice: "
                f"{_shown(twice.run_dir)} and {_shown(part.run_dir)}"
            )
        by_index[part.shard.index] = part
    count = first.shard.count
    if missing := [i for i in range(count) if i not in by_index]:
        listed = ", ".join(map(str, missing))
        raise UsageError(f"cannot merge: shard {listed} of {count} missing (indices are 0-based)")
    if not allow_partial and (unfinished := [p for p in parts if not p.finished]):
        part = min(unfinished, key=lambda p: p.shard.index)
        raise UsageError(
            f"cannot merge: shard {part.shard.label} ({_shown(part.run_dir)}) did not finish: "
            f"`{command('run', '--resume', part.run_dir)}` finishes it, or merge with "
            "--allow-partial"
        )
    return [by_index[i] for i in range(count)]


def _retried(parts: Sequence[_Part]) -> list[_Part]:
    """The parts less any shard run a `--retry-unscored` run of the same shard among them
    retried: as in history, the retry (its scored rows copied, the rest called again) stands
    for it, so a folder holding both merges as one."""
    retried = {
        (p.shard.index, p.manifest.get("parent"))
        for p in parts
        if RunMode.read(p.manifest.get("mode")) is RunMode.RETRY
    }
    return [p for p in parts if (p.shard.index, p.run_dir.name) not in retried]


def _expanded(paths: Sequence[Path]) -> list[Path]:
    """Each run dir named, and for a folder that holds run dirs (a suite's folder of one
    night's shards, as a Kubernetes Job leaves it) every run dir in it."""
    found = []
    for path in paths:
        if path.is_dir() and not (path / "manifest.json").exists():
            inside = sorted(p for p in path.iterdir() if (p / "manifest.json").is_file())
            if inside:
                found += inside
                continue
        found.append(path)
    return found


def _differs(first: _Part, other: _Part) -> str | None:
    """What makes two shards parts of different runs, as "is of another ..."; None: none."""
    a, b = first.manifest, other.manifest
    checks = (
        ("suite", a.get("suite"), b.get("suite")),
        ("shard count", first.shard.count, other.shard.count),
        ("config", _digest(a, "config"), _digest(b, "config")),
        ("fixtures", _digest(a, "fixtures"), _digest(b, "fixtures")),
        ("snapshot", _digest(a, "snapshot"), _digest(b, "snapshot")),
        ("samples", a.get("samples"), b.get("samples")),
        ("request", _requests(a), _requests(b)),
        ("shard limits", first.shard.limits, other.shard.limits),
    )
    for what, mine, theirs in checks:
        if mine != theirs:
            return f"is of another {what} ({visible(str(theirs), one_line=True)})"
    return None


def _changed(loaded: LoadedConfig, suite: Suite, part: _Part) -> str | None:
    """What changed between the shards' run and today: the merge gates with today's."""
    manifest = part.manifest
    if _digest(manifest, "config") != loaded.digest:
        return "the config changed"
    if _digest(manifest, "fixtures") != file_digest(suite.fixtures.path):
        return "the fixtures changed"
    if _digest(manifest, "snapshot") != snapshot_digest(loaded, suite.name):
        return "the snapshot changed"
    return requestsha.request_problem(loaded, suite.name, manifest)


def _digest(manifest: Mapping[str, Any], key: str) -> Any:
    block = manifest.get(key)
    return block.get("digest") if isinstance(block, dict) else None


def _requests(manifest: Mapping[str, Any]) -> Any:
    endpoints = manifest.get("endpoints")
    if not isinstance(endpoints, dict):
        return None
    return {s: e.get("request_sha") for s, e in endpoints.items() if isinstance(e, dict)}


def _shown(path: Path) -> str:
    return visible(str(path), one_line=True)


def _order(suite: Suite) -> Order:
    """A ledger row's place in the merged run: its case's in the fixture file (a case gone
    from it last), then side, then sample."""
    at = {case_id: i for i, case_id in enumerate(suite.refs.ids)}
    last = len(at)

    def order(row: Mapping[str, Any]) -> tuple[int, str, int, int]:
        case_id, side, sample = row["case_id"], row["side"], row["sample"]
        if not isinstance(case_id, str) or not isinstance(side, str) or type(sample) is not int:
            raise TypeError(f"key {case_id!r}, {side!r}, {sample!r}")
        place = at.get(case_id, last)
        return (
            place,
            case_id if place == last else "",
            _SIDE_RANK.get(side, len(_SIDE_RANK)),
            sample,
        )

    return order


def _journals(sources: Sequence[Path], target: Path) -> None:
    """The shards' batch journals one after another, so the merged run's summary counts the
    batches its shards sent together and a replay of it copies them; a torn last line (a
    shard killed while it wrote one) is left out, as its resume left it."""
    found = [source for source in sources if stored(source).exists()]
    if not found:
        return
    with disk_refusal(target), target.open("wb") as out:
        for source in found:
            _, handle = open_ledger(source)
            with handle:
                data = handle.read()
            out.write(data if data.endswith(b"\n") else data[: data.rfind(b"\n") + 1])


@contextlib.contextmanager
def _plain(path: Path) -> Iterator[int]:
    """A descriptor on a ledger's plain bytes, compressed by retention or not."""
    source = stored(path)
    try:
        fd = (
            unpack_temporary(source)
            if source.name.endswith(PACKED)
            else os.open(source, os.O_RDONLY)
        )
    except FileNotFoundError:
        raise DataError(path, "no such file") from None
    except OSError as exc:
        raise DataError(source, f"cannot read: {exc.strerror}") from None
    try:
        yield fd
    finally:
        os.close(fd)


def _sorted_copy(sources: Sequence[Path], target: Path, order: Order, *, unique: bool) -> None:
    """Write the rows of every source into `target` in `order` (rows of one key keep their
    order); with `unique`, only the first row of each key. A torn last line (a killed shard)
    is left out, as a resume leaves it."""
    with contextlib.ExitStack() as stack:
        fds = []
        entries: list[tuple[tuple[int, str, int, int], int, int, int]] = []
        for n, source in enumerate(sources):
            if not stored(source).exists():  # a shard with no case, or killed before a row
                fds.append(-1)
                continue
            fd = stack.enter_context(_plain(source))
            fds.append(fd)
            offset = 0
            with os.fdopen(os.dup(fd), "rb") as handle:
                for line_no, raw in enumerate(handle, 1):
                    start, offset = offset, offset + len(raw)
                    if not raw.strip():
                        continue
                    try:
                        row = decode_line(source, line_no, raw)
                        key = order(row)
                    except DataError:
                        if not raw.endswith(b"\n"):
                            break
                        raise
                    except (KeyError, TypeError) as exc:
                        raise DataError(source, f"not a ledger row: {exc!r}", line_no) from None
                    entries.append((key, n, start, len(raw)))
        entries.sort(key=itemgetter(0))
        seen: set[tuple[int, str, int, int]] = set()
        with disk_refusal(target), target.open("wb") as out:
            for key, n, start, length in entries:
                if unique:
                    if key in seen:
                        continue
                    seen.add(key)
                data = os.pread(fds[n], length, start)
                out.write(data if data.endswith(b"\n") else data + b"\n")
