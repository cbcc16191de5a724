"""The `parallax` command line. Thin: parse, call a stage, map errors to exit codes.

Heavy modules are imported inside each command so `parallax --help` starts fast. Every
ParallaxError becomes one line on stderr and its exit code; argparse's usage errors exit 64
(not argparse's 2, which means "incomplete" here). Any other exception is a bug in parallax:
exit 70 (an `InternalError`), never the 1 a Python traceback exits with, which reads as "review
needed". For the commands whose stdout is the log stream (`run`, `replay`, `serve`) the same
failure is also one `run.failed` line there (a bug's with its traceback), so a nightly job that
never started, or stopped, is seen by whatever alerts on its logs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

# _Refused keeps its leading underscore: run.failed names the first public class, UsageError
from runner.arguments import DEFAULT_CONFIG, GRADE_THRESHOLDS, _Refused, build_parser
from runner.errors import (
    ConfigError,
    DataError,
    Errors,
    Gathered,
    InternalError,
    ParallaxError,
    UsageError,
    bug_trace,
)

if TYPE_CHECKING:
    from runner.config import LoadedConfig
    from runner.shutdown import Shutdown

EXIT_CLOSED_PIPE = 141  # 128 + SIGPIPE, what a shell reports of a tool whose reader went away
_LOG_STREAM = (
    "run",
    "replay",
    "merge",
    "serve",
    "prune",
)  # commands whose stdout is their log lines


def _config_path(args: argparse.Namespace) -> Path:
    value = args.config or os.environ.get("PARALLAX_CONFIG")
    if value:
        return Path(value)
    path = Path(DEFAULT_CONFIG)
    if not path.exists():  # the newcomer's first command: say where a config comes from
        raise ConfigError(
            path, None, "no such config file (the default: pass --config F or set PARALLAX_CONFIG)"
        )
    return path


def _existing_file(value: str) -> Path:
    """A file named on the command line: a regular file (a FIFO or /dev/zero is refused)."""
    from runner.files import file_problem

    path = Path(value)
    if (problem := file_problem(path)) is not None:
        raise UsageError(f"{value}: {problem}")
    return path


def _ledger(value: str) -> Path:
    """An outcome ledger, or the run dir that holds one (compressed, by retention, or not)."""
    from runner.ledger import stored

    path = Path(value)
    return _existing_file(str(stored(path / "outcomes.jsonl") if path.is_dir() else path))


def cmd_run(args: argparse.Namespace) -> int:
    """Stop signals are handled from here on: one that arrives while fixtures are validated
    still ends the command as `Interrupted`, as PID 1 of a container too."""
    from runner.shutdown import RUN_SIGNALS, Interrupted, Shutdown

    with Shutdown().handling(RUN_SIGNALS) as shutdown:
        from runner import logs

        logs.configure()
        try:
            return _run(args, shutdown)
        except Interrupted as stop:
            return stop.report()


def _run_again(args: argparse.Namespace, shutdown: Shutdown) -> int:
    """`run --resume` and `run --retry-unscored`: one suite, the one the run dir is of, and
    the cases it ran (a partial run's selection is kept)."""
    from runner.config import check_files, check_keys
    from runner.request.sha import request_problem
    from runner.runs.mode import RunMode
    from runner.runs.plan import all_scored, replay_problem
    from runner.runs.run import run_suite
    from runner.runs.rundir import config_for_run, read_manifest
    from runner.runs.selection import Selection
    from runner.runs.shard import recorded_shard
    from runner.runs.summary import print_summary, recorded_summary
    from runner.shutdown import Interrupted
    from runner.suite import prepare_suite

    if args.resume and args.retry_unscored:
        raise UsageError("use either --resume or --retry-unscored, not both")
    again = "--resume" if args.resume else "--retry-unscored"
    if args.cases or args.strata:
        raise UsageError(
            f"{again} runs the cases the run dir ran (a partial one keeps its selection): "
            "--case and --stratum are for a new run"
        )
    run_dir = Path(args.resume or args.retry_unscored)
    loaded = config_for_run(run_dir, Path(args.config) if args.config else None)
    manifest = read_manifest(run_dir)
    (suite,) = loaded.suite_names(manifest["suite"])
    selection = Selection.of(manifest, run_dir / "manifest.json")
    finished = manifest.get("finished_at") is not None
    if args.retry_unscored and finished and all_scored(run_dir, recorded_summary(run_dir)):
        raise UsageError(f"{run_dir}: every row was scored; nothing to retry")
    if args.resume and (why := replay_problem(loaded, suite, manifest)) is not None:
        raise UsageError(f"{run_dir}: cannot resume: {why}")
    if args.suite and args.suite != suite:
        raise UsageError(f"{run_dir}: is a run of suite {suite!r}, not {args.suite!r}")
    if args.retry_unscored and (why := request_problem(loaded, suite, manifest)) is not None:
        # its scored rows are copied: with a moved request one verdict would mix two prompts
        raise UsageError(f"{run_dir}: cannot retry: {why}; start a new run instead")
    check_files(loaded)
    check_keys(loaded, [suite])
    loaded, shard = recorded_shard(loaded, suite, run_dir, manifest, args.shard)
    prepared = prepare_suite(loaded, suite).cut(shard) if shard is not None else None
    if shutdown.signal is not None:
        raise Interrupted(shutdown.signal, run_dir if args.resume else None)
    if args.resume:
        out_dir, code, summary = run_suite(
            loaded,
            suite,
            resume_dir=run_dir,
            mode=RunMode.RESUME,
            selection=selection,
            shutdown=shutdown,
            suite=prepared,
        )
    else:
        out_dir, code, summary = run_suite(
            loaded,
            suite,
            parent_dir=run_dir,
            mode=RunMode.RETRY,
            selection=selection,
            shutdown=shutdown,
            suite=prepared,
        )
    print_summary(summary, out_dir)
    _junit(args, [out_dir])
    return _process_code(args, code)


def _run(args: argparse.Namespace, shutdown: Shutdown) -> int:
    from runner.config import check_keys, load_config
    from runner.lock import SuiteLocked, is_locked, lock_path
    from runner.runs.run import run_suite
    from runner.runs.selection import Selection
    from runner.runs.shard import Limits, parse_shard, shard_config
    from runner.runs.summary import print_summary
    from runner.shutdown import Interrupted
    from runner.suite import checked_suites

    if args.resume or args.retry_unscored:
        return _run_again(args, shutdown)
    loaded = load_config(_config_path(args))
    shard = parse_shard(args.shard, Limits(args.shard_limits)) if args.shard else None
    if shard is not None and (args.cases or args.strata):
        raise UsageError(
            "--shard runs a slice of the whole suite, --case and --stratum a quick check of "
            "some cases: use one or the other"
        )
    names = loaded.suite_names(args.suite)
    selection = Selection.given(args.cases, args.strata)
    found = Gathered()  # every suite's errors at once, before any call
    with found.checking():
        check_keys(loaded, names)
    checked = {}
    configs = dict.fromkeys(names, loaded)
    for suite in checked_suites(loaded, names, found):  # fixtures, graders, snapshot
        selected = suite.cut(shard).selected(selection)  # one that selects nothing: refused
        if len(names) == 1 or shard is not None:  # run as checked: loading twice costs seconds
            configs[suite.name] = shard_config(loaded, suite.name, shard)
            checked[suite.name] = selected
        else:
            suite.fixtures.close()
    found.raise_found()
    part = None if shard is None else shard.lock_part
    for name in names:  # a busy suite refuses the command before the first suite's calls
        holder = is_locked(loaded.runs_dir, name, part)
        if holder is not None:
            raise SuiteLocked(name, lock_path(loaded.runs_dir, name, part), holder)
    worst = 0
    out_dirs = []
    refused: SuiteLocked | None = None
    for name in names:
        if shutdown.signal is not None:  # the suites not started yet are not started
            raise Interrupted(shutdown.signal, None)
        try:
            out_dir, code, summary = run_suite(
                configs[name], name, suite=checked.get(name), selection=selection, shutdown=shutdown
            )
        except SuiteLocked as exc:  # taken since the check: the other suites' verdicts stand
            refused = refused or exc
            continue
        print_summary(summary, out_dir)
        out_dirs.append(out_dir)
        worst |= code
    _junit(args, out_dirs)
    if refused is not None:
        raise refused
    return _process_code(args, worst)


REVIEW = 1  # the verdict bit that --exit-zero-on-review clears (2, incomplete, stays)


def _process_code(args: argparse.Namespace, verdict: int) -> int:
    """The exit code of `run`: the verdict's, less the review bit when asked. A job scheduler
    (a Kubernetes CronJob) then fails a night only on an incomplete run or an error; review is
    paged from the `alert.*` log lines, and the run dir keeps the verdict's own code."""
    return verdict & ~REVIEW if args.exit_zero_on_review else verdict


def cmd_replay(args: argparse.Namespace) -> int:
    """SIGTERM stops a replay where it stands from here on, as Ctrl-C does (it calls nothing:
    its unfinished new run dir is replayed again), as PID 1 of a container too."""
    import signal

    from runner.shutdown import stopping_where_it_stands

    with stopping_where_it_stands((signal.SIGTERM,)):
        from runner import logs
        from runner.runs.mode import RunMode
        from runner.runs.run import run_suite
        from runner.runs.rundir import config_for_run, read_manifest
        from runner.runs.selection import Selection
        from runner.runs.shard import recorded_shard
        from runner.runs.summary import print_summary
        from runner.suite import prepare_suite

        logs.configure()
        run_dir = Path(args.run_dir)
        loaded = config_for_run(run_dir, Path(args.config) if args.config else None)
        manifest = read_manifest(run_dir)
        (suite,) = loaded.suite_names(manifest["suite"])
        loaded, shard = recorded_shard(loaded, suite, run_dir, manifest)
        prepared = prepare_suite(loaded, suite).cut(shard) if shard is not None else None
        out_dir, code, summary = run_suite(
            loaded,
            suite,
            parent_dir=run_dir,
            mode=RunMode.REPLAY,
            # a partial run's replay regrades the cases it called, and is partial too
            selection=Selection.of(manifest, run_dir / "manifest.json"),
            suite=prepared,
        )
        print_summary(summary, out_dir)
        _junit(args, [out_dir])
        return code


def cmd_merge(args: argparse.Namespace) -> int:
    from runner import logs
    from runner.runs.merge import merge_shards
    from runner.runs.summary import print_summary

    logs.configure()
    out_dir, code, summary = merge_shards(
        [Path(d) for d in args.run_dirs],
        config_path=Path(args.config) if args.config else None,
        allow_partial=args.allow_partial,
    )
    print_summary(summary, out_dir)
    _junit(args, [out_dir])
    return code


def cmd_promote(args: argparse.Namespace) -> int:
    from runner.fixtures.load import FixtureFile
    from runner.runs.rundir import config_for_run, read_manifest
    from runner.snapshot import promote

    run_dir = Path(args.run_dir)
    loaded = config_for_run(run_dir, Path(args.config) if args.config else None)
    (suite,) = loaded.suite_names(read_manifest(run_dir)["suite"])  # a suite of this config
    fixtures = FixtureFile(
        loaded.resolve(loaded.config.suites[suite].fixtures), root=loaded.input_root
    )
    try:  # today's pins: a run of other fixtures would roll the snapshot back
        today = {ref.id: ref.fixture_sha for ref in fixtures.validate()}
    finally:
        fixtures.close()
    changes = promote(
        run_dir,
        loaded.snapshots_dir,
        suite=suite,
        allow_partial=args.allow_partial,
        today=today,
        force=args.force,
    )
    print(json.dumps(changes, sort_keys=True, allow_nan=False))
    return 0


def cmd_pin(args: argparse.Namespace) -> int:
    from runner.fixtures.load import pin_lines

    for line in pin_lines(_existing_file(args.file)):
        print(line)
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    from runner import logs
    from runner.diff import compare, exit_code, finding_lines
    from runner.text import visible

    counts, findings = compare(_ledger(args.base), _ledger(args.cand))
    print(json.dumps(counts, sort_keys=True, allow_nan=False))
    for line in finding_lines(findings):  # which rows: case, side, sample, what went wrong
        logs.say(visible(line, one_line=True))
    return exit_code(counts)


def cmd_grade(args: argparse.Namespace) -> int:
    import functools

    from runner.ceiling import detect, strata_rates
    from runner.config import Thresholds
    from runner.fixtures.load import load_cases
    from runner.grading.graders import check_case, grade, load_graders
    from runner.model import Reply
    from runner.protocols.message import read_answer

    thresholds = Thresholds(
        **{key: value for key in GRADE_THRESHOLDS if (value := getattr(args, key)) is not None}
    )
    graders = load_graders(args.graders, Path.cwd(), config_path="--graders", key="graders")
    results: list[tuple[str | None, bool | None]] = []
    failures: list[dict[str, Any]] = []
    path = _existing_file(args.file)
    cases = load_cases(path, check=functools.partial(check_case, graders=graders))
    if not any(c.completion is not None or c.completion_calls for c in cases):
        # else every case grades as empty
        raise DataError(path, "no case has a recorded `completion` or `tool_calls` to grade")
    stratified = any(c.stratum for c in cases)
    for case in cases:
        text = case.completion or ""
        stratum = case.stratum or "medium"
        # the answer is read as a run reads it: a JSON case answered otherwise is unscored
        # (a schema miss, kept out of the rates), never graded as a wrong answer
        answer, problem = read_answer(text, expects_json=case.expects_json)
        reply = Reply(text, answer, tool_calls=case.completion_calls)
        graded = None if problem else grade(case, reply, graders)
        misses = [problem] if graded is None else list(graded.misses)
        # a custom grader past its time limit leaves the answer unscored too
        scored = graded is not None and graded.task_score is not None
        results.append((stratum, not misses if scored else None))
        if misses:
            failure = {
                "case_id": case.id,
                "stratum": stratum,
                "passed": False,
                "scored": scored,
                "reasons": misses,
            }
            if case.tools or case.completion_calls:  # the calls the tool misses are about
                failure["tool_calls"] = [
                    {"name": call.name, "arguments": call.arguments}
                    for call in case.completion_calls
                ]
            failures.append(failure)
    rates = strata_rates(results)
    alerts = detect(rates, thresholds) if stratified else []
    unscored = sum(1 for _, passed in results if passed is None)
    report: dict[str, Any] = {
        "n": len(cases),
        "rates": {
            k: {"n": v["n"], "pass_rate": v["pass_rate"], "unscored": v["unadmitted"]}
            for k, v in rates.items()
        },
        "alerts": alerts,
        "ok": not alerts and not unscored,
        "unscored": unscored,
        "failures": failures,
    }
    if not stratified:
        report["note"] = "unstratified: no case names a stratum, ceiling detector skipped"
    print(json.dumps(report, indent=2, allow_nan=False))
    return (1 if alerts else 0) | (2 if unscored else 0)


def cmd_serve(args: argparse.Namespace) -> int:
    """Stop signals are handled from here on, as in `run`: one that arrives while the config
    is read still ends in scheduler.stopped, as PID 1 of a container too."""
    from runner.shutdown import SERVE_SIGNALS, Shutdown

    with Shutdown().handling(SERVE_SIGNALS) as shutdown:
        from runner import logs
        from runner.config import check_files, load_config
        from runner.scheduler.daemon import serve

        logs.configure(after_stdout=logs.AfterStdout.STDERR)  # its last lines say why it stopped
        loaded = load_config(_config_path(args))
        check_files(loaded)
        return serve(loaded, run_now=args.run_now, shutdown=shutdown)


def cmd_prune(args: argparse.Namespace) -> int:
    """Each run deleted or compressed is a log line on stdout (none in a dry run); what was
    done, and what was kept and why, a few lines on stderr, as `run` prints its summary."""
    from runner import logs
    from runner.config import load_config
    from runner.invocation import shown_path
    from runner.retention import log_done, prune, said

    logs.configure()
    loaded = load_config(_config_path(args))
    log = logs.get_logger()
    for result in prune(
        loaded,
        suite=args.suite,
        dry_run=args.dry_run,
        on_done=lambda done: log_done(log, done, loaded.config.retention),
    ):
        logs.say(
            said(result, dry_run=args.dry_run, retention=loaded.config.retention, shown=shown_path)
        )
    return 0


def cmd_health(args: argparse.Namespace) -> int:
    from runner.health import daemon_health

    # not $PARALLAX_CONFIG: an image sets it for `run`, while its daemon may name another config
    report = daemon_health(Path(args.config) if args.config else None, max_age=args.max_age)
    print(json.dumps(report, sort_keys=True, allow_nan=False))
    return 0 if report["healthy"] else 1


def cmd_validate(args: argparse.Namespace) -> int:
    """Nothing is called, so no key is needed: one not in the environment is a note on stderr
    (a run refuses it), never a failure; one that is there but unusable fails as in a run."""
    from runner import logs
    from runner.config import load_config, missing_keys
    from runner.recorded.endpoint import load_cassette
    from runner.scheduler.trigger import Trigger
    from runner.suite import checked_suites
    from runner.text import visible

    loaded = load_config(_config_path(args))
    names = loaded.suite_names(args.suite)
    found = Gathered()  # every error of every suite, schedule and cassette, then exit
    total = 0
    for suite in checked_suites(loaded, names, found):
        total += len(suite.refs)
        suite.fixtures.close()
    for name in names:
        with found.checking():
            Trigger.for_suite(loaded, name)  # a bad cron line fails here, not once deployed
    refused = found.keys()
    for endpoint_name, endpoint in loaded.config.endpoints.items():
        key = f"endpoints.{endpoint_name}.cassette"
        with found.checking():
            if endpoint.cassette and key not in refused:
                load_cassette(loaded.input(endpoint.cassette, key))
            elif endpoint.kind != "recorded":
                from runner.client.endpoint import request_problem

                if problem := request_problem(endpoint):
                    found.add(ConfigError(loaded.path, f"endpoints.{endpoint_name}", problem))
    found.raise_found()
    missing = missing_keys(loaded, names)
    print(f"{loaded.path}: ok ({len(names)} suite(s), {total} case(s))")
    for unset in missing:
        note = f"parallax: note: {unset}: validate needs no key, a run does"
        logs.say(visible(note, one_line=True))
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    from runner.scaffold import Provider, init
    from runner.text import visible

    for line in init(Path(args.dir), Provider(args.provider)).lines():
        print(visible(line, one_line=True))  # DIR is the user's, shown as an escape if odd
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from runner.importers.suite import lines, write_suite
    from runner.text import visible

    if args.source == "openai-evals":
        from runner.importers.openai_evals import Check, import_samples
        from runner.scaffold import Provider

        path = _existing_file(args.file)
        imported = import_samples(path, Check(args.check), Provider(args.provider))
    else:
        from runner.importers.promptfoo import import_config

        imported = import_config(_existing_file(args.config))
    for line in lines(imported, write_suite(imported, Path(args.out))):
        print(visible(line, one_line=True))  # a test's description is the source's text
    return 0


def _junit(args: argparse.Namespace, run_dirs: list[Path]) -> None:
    """Write `--junit PATH` when it was asked for."""
    if getattr(args, "junit", None):
        from runner.junit import write_junit

        write_junit(run_dirs, Path(args.junit))


def cmd_report(args: argparse.Namespace) -> int:
    from runner.history import verdict_code_of
    from runner.reports.write import write_reports
    from runner.runs.rundir import config_for_run, read_manifest

    run_dir = Path(args.run_dir)
    retire_after: int | None = None
    try:
        loaded = config_for_run(run_dir, Path(args.config) if args.config else None)
        (suite,) = loaded.suite_names(read_manifest(run_dir)["suite"])
        retire_after = loaded.thresholds(suite).retire_after
    except ParallaxError:
        if args.config:
            raise
        # a copied CI artifact: its config is elsewhere; render without ceiling candidates
    rep = write_reports(run_dir, retire_after=retire_after)
    _junit(args, [run_dir])  # every file first: a reader gone from stdout cannot stop one
    print(run_dir / "report.html")
    print(run_dir / "report.md")
    code = verdict_code_of(rep.summary)
    if code is None:
        found = rep.summary.get("exit_code")
        raise DataError(run_dir / "summary.json", f"'exit_code' must be 0 to 3, got {found!r}")
    return code


def cmd_history(args: argparse.Namespace) -> int:
    from runner.config import load_config
    from runner.history import format_text, suite_report
    from runner.text import visible

    if args.last is not None and args.last < 0:
        raise UsageError("--last must be 0 or more")
    loaded = load_config(_config_path(args))
    if args.every_suite:
        return _every_suite(args, loaded)
    if args.html is not None:
        return _history_pages(args, loaded)
    names = loaded.suite_names(args.suite)
    recorded: dict[str, list[dict[str, Any]]] = {}
    notes: list[str] = []
    if not args.json:  # the text lists the fleet's runs too; --json is the run dirs' detail
        from runner.results.listing import suite_runs

        recorded, notes = suite_runs(loaded.runs_dir, loaded.config.results_url, names)
    reports = [
        suite_report(
            loaded.runs_dir / name,
            retire_after=loaded.thresholds(name).retire_after,
            last=args.last,
            recorded=recorded.get(name, ()),
        )
        for name in names
    ]
    if args.json:
        print(json.dumps({"suites": reports}, indent=2, sort_keys=True, allow_nan=False))
        return 0
    print("\n\n".join(format_text(r) for r in reports))
    for note in notes:
        print(visible(f"parallax: {note}", one_line=True), file=sys.stderr)
    for report in reports:
        for note in report["notes"]:
            print(visible(f"parallax: {report['suite']}: {note}", one_line=True), file=sys.stderr)
    return 0


def _every_suite(args: argparse.Namespace, loaded: LoadedConfig) -> int:
    """`history --all`: a row per run of every suite, from the results database."""
    from runner.results.listing import every_run, format_runs
    from runner.text import visible

    if args.suite or args.html is not None:
        raise UsageError("--all lists every suite: give it without --suite and --html")
    runs, notes = every_run(loaded.runs_dir, loaded.config.results_url)
    if args.last is not None:
        runs = runs[len(runs) - args.last :] if args.last else []
    if args.json:
        print(json.dumps({"runs": runs, "notes": notes}, indent=2, sort_keys=True))
    else:
        print(format_runs(runs))
    for note in notes:
        print(visible(f"parallax: {note}", one_line=True), file=sys.stderr)
    return 0


def cmd_index(args: argparse.Namespace) -> int:
    from runner.config import load_config
    from runner.results.index import index

    runs_dir = Path(args.runs_dir)
    if not runs_dir.is_dir():
        raise UsageError(f"{runs_dir}: no such directory")
    url = load_config(Path(args.config)).config.results_url if args.config else None
    written = index(runs_dir, url)
    print(f"parallax: {written} run(s) recorded", file=sys.stderr)
    return 0


def _history_pages(args: argparse.Namespace, loaded: LoadedConfig) -> int:
    """`history --html`: write each suite's page and print where; a suite without a finished
    run gets no page (a note), and nothing to write at all is a usage error."""
    from runner.history import load_history
    from runner.reports.history_page import PAGE_RUNS, page_path, write_page
    from runner.text import visible

    names = loaded.suite_names(args.suite)
    if args.last == 0:
        raise UsageError("--html --last 0 would write a page of no runs; give 1 or more")
    if args.html and len(names) > 1:
        raise UsageError(f"--html {args.html}: a path holds one suite's page; add --suite NAME")
    written: list[Path] = []
    for name in names:
        suite_dir = loaded.runs_dir / name
        history = load_history(suite_dir, last=PAGE_RUNS if args.last is None else args.last)
        for note in history.notes:
            print(visible(f"parallax: {name}: {note}", one_line=True), file=sys.stderr)
        if not history.rows:
            if len(names) == 1:
                raise UsageError(f"{suite_dir}: no finished run of suite {name}; no page written")
            print(
                visible(f"parallax: {name}: no finished run, no page", one_line=True),
                file=sys.stderr,
            )
            continue
        path = Path(args.html) if args.html else page_path(suite_dir)
        retire_after = loaded.thresholds(name).retire_after
        written.append(
            write_page(name, history.rows, path, retire_after=retire_after, notes=history.notes)
        )
    if not written:
        raise UsageError(f"{loaded.runs_dir}: no finished run of any suite; no page written")
    for path in written:
        print(path)
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": cmd_run,
    "replay": cmd_replay,
    "merge": cmd_merge,
    "promote": cmd_promote,
    "pin": cmd_pin,
    "diff": cmd_diff,
    "grade": cmd_grade,
    "validate": cmd_validate,
    "init": cmd_init,
    "import": cmd_import,
    "serve": cmd_serve,
    "prune": cmd_prune,
    "health": cmd_health,
    "report": cmd_report,
    "history": cmd_history,
    "index": cmd_index,
}


def _command_in(argv: Sequence[str]) -> str | None:
    """The command a command line names: its first word that is not an option."""
    return next((word for word in argv if not word.startswith("-")), None)


def _failed(exc: ParallaxError, command: str | None) -> int:
    """One line on stderr per error (several when the input had several: `Errors`) and the
    error's code; for a command whose stdout is its log stream, one `run.failed` line there
    too, carrying every error (scrubbed as every log line is)."""
    from runner import logs
    from runner.text import visible

    each = [logs.scrub_text(error.message) for error in exc.each]
    decider = exc.decider if isinstance(exc, Errors) else exc  # what the exit code is of
    fields: dict[str, Any] = {"errors": each} if len(each) > 1 else {}
    if isinstance(exc, InternalError):  # what a bug report needs
        fields["traceback"] = found = bug_trace(exc)
        if exc.run_dir is not None:
            fields["run_dir"] = str(exc.run_dir)
        if command not in _LOG_STREAM:  # no log line to carry it: stderr, above the line
            logs.say(logs.scrub_text(found.rstrip()))
    if command in _LOG_STREAM:
        if not logs.configured():  # the command line was refused before the command ran
            logs.configure()
        logs.get_logger().error(
            logs.RUN_FAILED,
            command=command,
            exit_code=exc.exit_code,
            error=next(c.__name__ for c in type(decider).__mro__ if not c.__name__.startswith("_")),
            message=logs.scrub_text(str(exc)),  # several errors: joined by "; "
            **fields,
        )
    lines = each if isinstance(exc, _Refused) else [f"parallax: {line}" for line in each]
    # a control character or a bidi control from a file or an argument (a key with a newline,
    # a NUL) is shown as an escape, so each error stays one line a reader can trust
    logs.say("\n".join(visible(line, one_line=True) for line in lines))
    return exc.exit_code


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help(sys.stderr)
            return UsageError.exit_code
        code = COMMANDS[args.command](args)
        sys.stdout.flush()  # here, not at exit: a reader gone away is caught below
    except ParallaxError as exc:
        return _failed(exc, _command_in(argv))
    except KeyboardInterrupt as stop:  # Ctrl-C before `run` or `serve` handle it, elsewhere,
        # and a replay's SIGTERM (`Stopped`: imported already if it is one)
        from runner.shutdown import Stopped

        what, code = (
            (f"stopped by {stop.signal.name}", stop.exit_code)
            if isinstance(stop, Stopped)
            else ("interrupted", 130)
        )
        replay = _command_in(argv) == "replay"
        print(
            f"parallax: {what}"
            + ("; its new run dir is left unfinished: replay again" if replay else ""),
            file=sys.stderr,
        )
        return code
    except BrokenPipeError:
        # A command's data on stdout (pin, history, diff, ...) found no reader (`| head`): it
        # stops there, quietly. Log lines never raise this (runner.logs).
        from runner.logs import drop_stream

        drop_stream(sys.stdout)
        return EXIT_CLOSED_PIPE
    except Exception as exc:  # a bug, whatever the command: one line and exit 70
        return _failed(InternalError(exc), _command_in(argv))
    return code
