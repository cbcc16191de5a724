"""One run of one suite, its stages in order: plan, call, finalize, report."""

from __future__ import annotations

import functools
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runner import logs
from runner.config import LoadedConfig
from runner.cost.budget import Budget
from runner.errors import DataError, InternalError, ParallaxError, StorageError, UsageError
from runner.files import check_writable
from runner.gate import Folds
from runner.invocation import command
from runner.ledger import packed_path
from runner.lock import holds_suite_lock
from runner.model import Endpoint
from runner.regrade import Key, heal
from runner.reports.runinputs import Given
from runner.reports.write import REPORT_FILES, after_run
from runner.results.record import record_run
from runner.runs.calls import build_endpoints, call_all, close_endpoints, meters
from runner.runs.finalize import finalize, finished_event, side_kinds, side_prices
from runner.runs.mode import RunMode
from runner.runs.plan import resume_problem, start
from runner.runs.rundir import new_run_dir, read_manifest
from runner.runs.selection import Selection
from runner.runs.summary import recorded_summary
from runner.shutdown import Interrupted, Shutdown
from runner.suite import Suite, prepare_suite
from runner.text import visible

_RESUMED_FILES = ("manifest.json", "raw.jsonl", "outcomes.jsonl")


def run_suite(
    loaded: LoadedConfig,
    name: str,
    *,
    resume_dir: Path | None = None,
    parent_dir: Path | None = None,
    mode: RunMode = RunMode.RUN,
    suite: Suite | None = None,
    selection: Selection | None = None,
    shutdown: Shutdown | None = None,
) -> tuple[Path, int, dict[str, Any]]:
    """Blocking wrapper of `run_suite_async` for the one-shot commands."""
    import gc

    import anyio

    # Ledger rows are acyclic and freed by reference counting; at the default threshold the
    # cycle collector rescans every live case and outcome over and over in a big run, which
    # took a third of a 40,000-row replay (bench/RESULTS.md).
    thresholds = gc.get_threshold()
    gc.set_threshold(50_000, 20, 100)
    try:
        return anyio.run(
            functools.partial(
                run_suite_async,
                loaded,
                name,
                resume_dir=resume_dir,
                parent_dir=parent_dir,
                mode=mode,
                suite=suite,
                selection=selection,
                shutdown=shutdown,
            )
        )
    finally:
        gc.set_threshold(*thresholds)


@holds_suite_lock  # runs/<suite>/.lock: one run of a suite at a time (not replay)
async def run_suite_async(
    loaded: LoadedConfig,
    name: str,
    *,
    resume_dir: Path | None = None,
    parent_dir: Path | None = None,
    mode: RunMode = RunMode.RUN,
    suite: Suite | None = None,
    selection: Selection | None = None,
    shutdown: Shutdown | None = None,
) -> tuple[Path, int, dict[str, Any]]:
    """One run of one suite; returns the run dir, exit code and summary.

    RunMode.RUN calls everything; RESUME finishes `resume_dir` in place; RETRY starts a new
    run from `parent_dir`'s scored rows and re-calls the rest; REPLAY regrades `parent_dir`'s
    raw.jsonl with today's fixtures and graders and calls nothing. `suite` is the suite as
    `prepare_suite` already loaded it, if the caller has it; `selection` the cases of a
    partial run (a resume, retry or replay passes its parent's); `shutdown` is the one-shot
    command's stop (see `call_all`).
    """

    if suite is None:
        suite = prepare_suite(loaded, name)
    limit = loaded.budget_usd(name)
    budget = Budget(limit) if limit is not None else None
    started: list[Path] = []  # the run dir once there is one: what a bug would leave unfinished
    try:
        suite = suite.selected(selection)
        endpoints = build_endpoints(loaded, suite, budget) if mode.calls else {}
        try:
            return await _run_prepared(
                loaded,
                suite,
                endpoints,
                resume_dir=resume_dir,
                parent_dir=parent_dir,
                mode=mode,
                shutdown=shutdown,
                budget=budget,
                started=started,
            )
        except (ParallaxError, Interrupted):
            raise
        except Exception as exc:  # a bug: exit 70, the run dir left as a killed run's is
            run_dir = started[0] if started else None
            then = _finish(run_dir, mode, parent_dir) if run_dir is not None else None
            raise InternalError(exc, run_dir, then) from exc
        finally:
            await close_endpoints(endpoints)
    finally:
        suite.fixtures.close()


def _finish(run_dir: Path, mode: RunMode, parent_dir: Path | None) -> str:
    """What finishes a run a bug stopped, as the user types it: a run resumes in place; a
    replay's new run dir is left unfinished, and the parent is replayed again."""
    if mode is RunMode.REPLAY and parent_dir is not None:
        again = visible(command("replay", parent_dir), one_line=True)
        return f"its new run dir {visible(str(run_dir), one_line=True)} is unfinished: `{again}`"
    return f"finish the run with `{visible(command('run', '--resume', run_dir), one_line=True)}`"


async def _run_prepared(
    loaded: LoadedConfig,
    suite: Suite,
    endpoints: Mapping[str, Endpoint],
    *,
    resume_dir: Path | None,
    parent_dir: Path | None,
    mode: RunMode,
    shutdown: Shutdown | None,
    budget: Budget | None,
    started: list[Path],
) -> tuple[Path, int, dict[str, Any]]:
    import anyio.to_thread
    import structlog

    name = suite.name
    folds = Folds(suite.samples, side_prices(loaded, suite), side_kinds(loaded, suite))
    if mode is RunMode.RESUME:
        assert resume_dir is not None
        run_dir = resume_dir
        started.append(run_dir)
        resumed = _resumed(loaded, suite, run_dir, folds)
        if isinstance(resumed, dict):  # finished already: its verdict is a record
            return run_dir, resumed["exit_code"], resumed
        done = resumed
    else:
        run_dir = new_run_dir(loaded.runs_dir, name)
        started.append(run_dir)
        done = _started(loaded, suite, run_dir, folds, parent_dir=parent_dir, mode=mode)
    if budget is not None:  # what the run dir already spent counts: resumed, copied, replayed
        budget.count_ledgers(run_dir, suite, meters(loaded, suite, budget))
    structlog.contextvars.bind_contextvars(run_id=run_dir.name, suite=name)
    log = logs.get_logger()
    try:
        log.info(
            logs.RUN_RESUMED if mode is RunMode.RESUME else logs.RUN_STARTED,
            mode=mode,
            cases=len(suite.refs),
            partial=suite.partial,  # a partial run's selection, else null
            samples=suite.samples,
            already_done=len(done),
            parent=parent_dir.name if parent_dir is not None else None,
            # absolute whatever the config path or the argument was: the same field, the same
            # meaning for a run, a resume, a retry and a replay
            run_dir=str(run_dir.absolute()),
        )
        if mode.calls:
            await call_all(
                loaded,
                suite,
                run_dir,
                done,
                folds,
                endpoints=endpoints,
                shutdown=shutdown,
                budget=budget,
            )
        exit_code, summary = finalize(loaded, suite, run_dir, folds, log, budget=budget)
        del folds, done  # a run's largest structures: the reports read disagreement.json back
        given = Given(loaded, suite)  # the reports read neither the config nor the suite again
        after_run(run_dir, retire_after=suite.thresholds.retire_after, log=log, given=given)
        log.info(logs.RUN_FINISHED, **finished_event(exit_code, summary))
        # the run dir is complete: indexed now, off the event loop (a daemon's other runs go on)
        await anyio.to_thread.run_sync(record_run, loaded, run_dir, log)
    except StorageError as exc:  # the writer stopped, and with it every call
        if mode is RunMode.REPLAY:  # it called nothing: made again from its parent in full
            shutil.rmtree(run_dir, ignore_errors=True)
            raise exc.advised(_start_again(mode, parent_dir)) from None
        raise exc.advised(_resume_later(run_dir)) from None
    finally:
        structlog.contextvars.unbind_contextvars("run_id", "suite")
    return run_dir, exit_code, summary


def _resumed(
    loaded: LoadedConfig, suite: Suite, run_dir: Path, folds: Folds
) -> set[Key] | dict[str, Any]:
    """A run dir to finish in place: what it holds already, or its recorded summary when it
    finished."""
    manifest = read_manifest(run_dir)
    if manifest.get("suite") != suite.name:
        raise UsageError(
            f"{run_dir}: is a run of suite {manifest.get('suite')!r}, not {suite.name!r}"
        )
    if (recorded := _finished(run_dir, manifest, suite)) is not None:
        return recorded
    if (why := resume_problem(loaded, suite.name, manifest)) is not None:
        anew = (
            ""
            if RunMode.read(manifest.get("mode")) is RunMode.REPLAY
            else "; start a new run instead"
        )
        raise UsageError(f"{run_dir}: cannot resume: {why}{anew}")
    _check_appendable(run_dir)
    try:
        return heal(run_dir, suite, folds)
    except StorageError as exc:  # what it regraded so far stays: a resume goes on from there
        raise exc.advised(_resume_later(run_dir)) from None


def _started(
    loaded: LoadedConfig,
    suite: Suite,
    run_dir: Path,
    folds: Folds,
    *,
    parent_dir: Path | None,
    mode: RunMode,
) -> set[Key]:
    """A new run dir made ready: its manifest, and the rows copied from a parent."""
    try:
        start(loaded, suite, run_dir, parent_dir=parent_dir, mode=mode)
        return heal(run_dir, suite, folds)
    except (DataError, StorageError) as exc:
        # nothing was called: the new directory holds only a manifest and copies, and a
        # broken parent is reported where the user can mend it, not in the copy
        shutil.rmtree(run_dir, ignore_errors=True)
        if isinstance(exc, StorageError):
            raise exc.advised(_start_again(mode, parent_dir)) from None
        if parent_dir is not None and exc.path == str(run_dir / "raw.jsonl"):
            raise DataError(parent_dir / "raw.jsonl", exc.reason, exc.line) from None
        raise


def _finished(run_dir: Path, manifest: Mapping[str, Any], suite: Suite) -> dict[str, Any] | None:
    """A finished run's recorded summary, or None while it is unfinished.

    A finished run's verdict is a record: resuming it (after a crash in its reports) writes
    what is missing and never regrades it against today's snapshot.
    """
    recorded = recorded_summary(run_dir) if manifest.get("finished_at") is not None else None
    if recorded is not None and not all((run_dir / n).is_file() for n in REPORT_FILES):
        after_run(run_dir, retire_after=suite.thresholds.retire_after, log=logs.get_logger())
    return recorded


def _check_appendable(run_dir: Path) -> None:
    """A resume appends to the ledgers in place: refuse before any call if it cannot."""
    if any(packed_path(run_dir / name).exists() for name in _RESUMED_FILES[1:]):
        # only a finished run is compressed (retention): its verdict went missing since
        raise UsageError(
            f"{run_dir}: cannot resume: its ledgers are compressed, so it finished; "
            f"`{command('replay', run_dir)}` regrades it into a new run dir"
        )
    check_writable(run_dir, _RESUMED_FILES, action="resume this run here")


def _resume_later(run_dir: Path) -> str:
    """What a run the disk stopped says: its ledgers hold every row written, and a resume
    calls only the rest."""
    return (
        "the run stopped, its ledgers keep every row written: once there is space, "
        f"`{command('run', '--resume', run_dir)}` finishes it"
    )


def _start_again(mode: RunMode, parent_dir: Path | None) -> str:
    """What a run stopped before any call says: nothing is left behind to resume."""
    if mode is RunMode.REPLAY and parent_dir is not None:
        again = f"`{command('replay', parent_dir)}` again"
    elif mode is RunMode.RETRY and parent_dir is not None:
        again = f"`{command('run', '--retry-unscored', parent_dir)}` again"
    else:
        again = "start it again"
    return f"nothing was called and its new run dir is removed: once there is space, {again}"
