"""The command line's grammar: every command, its options and argument types, and the --help
texts, each command's exit codes among them. Pure argparse: `parallax --help` imports no stage.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import NoReturn

from runner import __version__
from runner.errors import UsageError

DEFAULT_CONFIG = "parallax.toml"
Adder = Callable[[str, str], "argparse.ArgumentParser"]

_VERDICT = """  0   clean
  1   review needed: disagreement_changed, alias_swap, a stratum alert,
      a significant regression, non-inferiority not shown, or a latency or
      cost regression not ruled out when fail_on asks for it, a reference
      whose request changed
  2   incomplete: unscored cases, not compared: transport misses (infrastructure:
      no reply to grade) or schema misses (the side's own format failure: not
      JSON, tool arguments not a JSON object, a broken stream)
  3   both 1 and 2
"""
_BUG = "  70  a bug in parallax (one line naming it; a run dir it stopped resumes)\n"
_ERRORS = (
    "  64  usage error    65  bad fixture or data file    78  bad config\n"
    "      (every error found is one line; with both a config and a data error, 78)\n" + _BUG
)
_LOGGED = _ERRORS + "      each of them also one run.failed line on stdout\n"
_CLOSED_PIPE = "  141 stdout closed by its reader (`| head`): stopped quietly\n"
_DISK_FULL = "  74  the disk refused a write to the run dir (full, over quota, a file-size limit)\n"
_DATA = _ERRORS + _CLOSED_PIPE

# Every command shares one contract; each --help lists only the codes that command returns.
EXIT_CODES = (
    f"exit codes:\n{_VERDICT}{_ERRORS}"
    "  74  serve: its stdout was closed; run, replay, report, prune: the disk refused a\n"
    "      write (full, quota, size limit)\n"
    "  130 / 143  run, replay: stopped by SIGINT / SIGTERM (a run resumes with --resume)\n"
    "  141  a command's data on stdout found no reader (`| head`)\n"
)
_COMMAND_EXIT_CODES = {
    "run": _VERDICT
    + "      (with --exit-zero-on-review, 1 exits 0 and 3 exits 2)\n"
    + _LOGGED
    + "  64  also: --case or --stratum selects no case of a suite (named)\n"
    + _DISK_FULL
    + "      (run.failed): the calls stop, the ledgers keep every row written; once there is\n"
    "      space, --resume finishes the run (a report it cannot write is no error: the\n"
    "      verdict stands, report.failed)\n"
    + "  130 stopped by SIGINT (Ctrl-C), 143 by SIGTERM: calls in flight got run_grace_seconds,\n"
    "      the run dir is left to finish with --resume (run.interrupted)\n",
    "replay": _VERDICT
    + _LOGGED
    + _DISK_FULL
    + "      (run.failed): its new run dir is removed, replay again once there is space\n"
    + "  130 stopped by SIGINT (Ctrl-C), 143 by SIGTERM: its new run dir is left unfinished,\n"
    "      replay again\n",
    "merge": "  0-3 the merged run's verdict, as one unsharded run's (see `parallax run --help`)\n"
    + _LOGGED
    + "  64  also: refused, nothing written: a shard missing or given twice, shards of\n"
    "      different suites, config, fixtures or snapshot (or these changed since), a\n"
    "      run dir that is no shard, an unfinished shard without --allow-partial\n"
    + _DISK_FULL
    + "      (run.failed): its new run dir is removed, merge again once there is space\n",
    "report": "  0-3 the run's own exit code (see `parallax run --help`)\n"
    + _ERRORS
    + "  64  also: the run dir is not writable    65  also: a report's name is a directory\n"
    + _DISK_FULL
    + "      the verdict and ledgers are untouched: write the reports again once there is space\n"
    + _CLOSED_PIPE,
    "promote": "  0   snapshot written\n"
    "  2   unscored cases, or a partial run, and no --allow-partial\n"
    + _ERRORS
    + "  64  also: refused, the run would roll the snapshot back (its calls are older than\n"
    "      the snapshot's run's, or it ran on fixtures that are not today's) and no --force\n"
    + _CLOSED_PIPE,
    "pin": "  0   every row printed\n" + _DATA,
    "validate": "  0   nothing wrong\n" + _DATA,
    "diff": "  0   clean\n  1   a silent regression\n"
    "  2   transport misses (infrastructure) or schema misses (CAND's format failures)\n"
    "  3   both 1 and 2\n" + _DATA,
    "grade": "  0   no stratum alert\n  1   a stratum alert\n"
    "  2   a case could not be scored (a JSON case answered otherwise: answer_not_json)\n"
    "  3   both 1 and 2\n" + _DATA,
    "serve": "  0   stopped by SIGTERM, SIGINT or SIGHUP\n"
    "  70  also: the scheduler itself crashed\n"
    "  74  stdout closed by its reader: stopped as on SIGTERM (restart it)\n" + _LOGGED,
    "prune": "  0   pruned, or with --dry-run the plan printed (a suite with a run in flight\n"
    "      is left for the next prune)\n"
    + _LOGGED
    + "  64  also: another prune works on this runs dir\n"
    + _DISK_FULL
    + "      (compressing, or recording a pruned night): the plain ledgers stay whole\n",
    "health": "  0   the daemon runs with a fresh heartbeat; without --config, also when no\n"
    "      daemon was ever started on this host (a one-shot container: nothing to check)\n"
    "  1   it does not\n" + _DATA,
    "init": "  0   the starter written, or nothing needed (each file was there: left alone)\n"
    "  64  usage error, or a file cannot be written (DIR is a file, no permission)\n"
    + _BUG
    + _CLOSED_PIPE,
    "import": "  0   the suite written (what could not be mapped is listed, not an error)\n"
    "  64  usage error, no such file, or --out exists and is not empty (nothing written)\n"
    "  65  the file is broken (a line that is no JSON, YAML that does not parse), or no\n"
    "      case in it could be mapped\n" + _BUG + _CLOSED_PIPE,
    "index": "  0   every finished run dir is recorded (the count written on stderr)\n"
    + _ERRORS
    + "  74  the results database cannot be opened or written (the run dirs are untouched)\n",
    "history": "  0   printed (--html: every page written)\n"
    + _DATA
    + "  64  also (--html): no finished run of the suite, PATH for more than one suite, or\n"
    "      a page that cannot be written    65  also: PATH is not a regular file\n",
}


# `init`'s providers, named in its --help without importing the module that writes them; tests
# hold them equal to `runner.scaffold.Provider`.
INIT_PROVIDERS = ("openai", "anthropic", "openai-compatible")
# How OpenAI Evals graded a samples file; tests hold them equal to
# `runner.importers.openai_evals.Check`.
EVALS_CHECKS = (
    *("match", "includes", "includes-ignore-case", "fuzzy-match"),
    *("string-check-eq", "string-check-ne", "string-check-like", "string-check-ilike"),
)

# The strata `run --stratum` selects from, named without importing the model; tests hold them
# equal to `runner.model.STRATA`.
RUN_STRATA = ("easy", "medium", "stretch")
# `run --shard-limits`' choices, the default first; tests hold them equal to
# `runner.runs.shard.Limits`.
SHARD_LIMITS = ("divided", "whole")

# `grade`'s ceiling-detector defaults, named in its --help without importing the config models
# (pydantic) at start-up; tests hold them equal to `runner.config.Thresholds`.
GRADE_THRESHOLDS = {"stretch_high": 0.80, "easy_floor": 1.0, "medium_floor": 0.85}


def _rate(value: str) -> float:
    """A pass-rate threshold from the command line: a number from 0 to 1."""
    try:
        rate = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not 0 <= rate <= 1:  # NaN is refused here too
        raise argparse.ArgumentTypeError(f"{value!r} is not between 0 and 1")
    return rate


def _seconds(value: str) -> float:
    """A positive, finite number of seconds from the command line."""
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not 0 < seconds < math.inf:  # NaN is refused here too
        raise argparse.ArgumentTypeError(f"{value!r} is not a positive number of seconds")
    return seconds


class _Refused(UsageError):
    """The command line itself was refused; the message is the whole line, naming --help."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One line, as for every other bad input, and exit 64 (argparse's 2 means incomplete)."""
        raise _Refused(f"{self.prog}: error: {message} (see `{self.prog} --help`)")


def _add_report_commands(add: Adder, config_help: str) -> None:
    p = add("report", "Write report.html and report.md for a finished run (exit: the run's).")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--config", help="config to use (default: the one the run recorded)")
    p.add_argument("--junit", metavar="PATH", help="also write JUnit XML of the run here")

    p = add("history", "A row per run, ceiling candidates and served-model changes per suite.")
    p.add_argument("--config", help=config_help)
    p.add_argument("--suite", help="only this suite")
    p.add_argument(
        "--last",
        type=int,
        metavar="N",
        help="show only the last N runs (a --html page: the last 30 unless told)",
    )
    p.add_argument(
        "--all",
        action="store_true",
        dest="every_suite",
        help="one row per run of every suite the results database holds (a fleet's, other "
        "configs' too), oldest first; without a database, every suite under the runs dir",
    )
    out = p.add_mutually_exclusive_group()
    out.add_argument(
        "--json",
        action="store_true",
        help="print JSON instead of a table, read from the run dirs only (the table also lists "
        "the suite's runs the results database holds whose run dirs are not here)",
    )
    out.add_argument(
        "--html",
        nargs="?",
        const="",
        metavar="PATH",
        help="write the history page instead, runs/<suite>/index.html per suite (or PATH, for "
        "one suite), and print its path: trends over nights and a row per run linking to its "
        "report.html; every finished run rewrites it",
    )


def _add_index_command(add: Adder) -> None:
    p = add(
        "index",
        "Record every finished run dir under RUNS_DIR in the results database (idempotent).",
    )
    p.add_argument("runs_dir", metavar="RUNS_DIR")
    p.add_argument(
        "--config",
        help="take `results_url` from this config (default: SQLite at RUNS_DIR/parallax.db)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="parallax",
        description="Nightly regression runner for LLM features: a frozen reference and a "
        "candidate, graded by the same code, gated on their disagreement.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"parallax {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def add(name: str, help_: str) -> argparse.ArgumentParser:
        epilog = f"exit codes:\n{_COMMAND_EXIT_CODES[name]}"
        p = sub.add_parser(name, help=help_, description=help_, epilog=epilog)
        p.formatter_class = argparse.RawDescriptionHelpFormatter
        return p

    config_help = f"config file (default: $PARALLAX_CONFIG or ./{DEFAULT_CONFIG})"
    p = add("run", "Run every suite (or one) against both endpoints and gate the result.")
    p.add_argument("--config", help=config_help)
    p.add_argument("--suite", help="run only this suite")
    p.add_argument(
        "--case",
        action="append",
        dest="cases",
        metavar="GLOB",
        help="run only the cases whose id matches GLOB (fnmatch: * ? [seq]; repeatable, any "
        "may match): a partial run, its gate on those cases only, not a night in history, "
        "promoted only with --allow-partial",
    )
    p.add_argument(
        "--stratum",
        action="append",
        dest="strata",
        choices=RUN_STRATA,
        metavar="S",
        help="run only the cases of stratum S (easy, medium, stretch; repeatable; with --case: "
        "the cases that match both): a partial run",
    )
    p.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="finish an interrupted run in place (a partial one keeps its selection)",
    )
    p.add_argument(
        "--retry-unscored",
        metavar="RUN_DIR",
        help="re-call only the rows stamped transport or schema misses (a budget's cancelled "
        "ones too), into a new run dir; its budget_usd counts the scored rows it copies; a "
        "retry of a partial run stays partial",
    )
    p.add_argument(
        "--shard",
        metavar="I/N",
        help="call only shard I of N (0-based) of each suite, the cases a stable hash of their "
        "id gives it; `env` reads I from JOB_COMPLETION_INDEX and N from PARALLAX_SHARDS. "
        "`parallax merge` makes the suite's run of the N shard dirs",
    )
    p.add_argument(
        "--shard-limits",
        choices=SHARD_LIMITS,
        default=SHARD_LIMITS[0],
        help="what a shard takes of each endpoint's concurrency and rpm and of budget_usd: "
        "`divided` (default) 1/N, as the provider's quota and the money are shared; `whole` "
        "all of it",
    )
    p.add_argument("--junit", metavar="PATH", help="also write JUnit XML of the run(s) here")
    p.add_argument(
        "--exit-zero-on-review",
        action="store_true",
        help="exit 0 for a review verdict (3 becomes 2), for schedulers that alert on a failed "
        "job; the verdict stays in the run dir, run.finished and the alert.* log lines",
    )

    p = add("replay", "Regrade a run offline from its raw.jsonl into a new run dir.")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--config", help="config to use (default: the one the run recorded)")
    p.add_argument("--junit", metavar="PATH", help="also write JUnit XML of the replay here")

    p = add("promote", "Accept a run's disagreement map as the suite's snapshot.")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--config", help="config to use (default: the one the run recorded)")
    p.add_argument(
        "--allow-partial",
        action="store_true",
        help="promote despite unscored cases, or a partial run (--case, --stratum); the "
        "unscored and the unselected cases keep their previous entries",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="promote a run that would roll the snapshot back: one whose calls are older than "
        "the snapshot's run's, or whose cases were run on fixtures that are not today's",
    )

    p = add("merge", "Make one run of a suite from the run dirs of all its shards.")
    p.add_argument(
        "run_dirs",
        metavar="RUN_DIR",
        nargs="+",
        help="every shard's run dir, or a folder holding them (a suite's folder in a runs dir "
        "only that night's shards wrote to)",
    )
    p.add_argument("--config", help="config to use (default: the one the shards recorded)")
    p.add_argument(
        "--allow-partial",
        action="store_true",
        help="merge shards that did not finish (killed, not resumed): the calls they never "
        "made are unscored, and the merged run is incomplete",
    )
    p.add_argument("--junit", metavar="PATH", help="also write JUnit XML of the merged run here")

    _add_fixture_commands(add, config_help)
    _add_onboarding_commands(add)
    _add_daemon_commands(add, config_help)
    _add_report_commands(add, config_help)
    _add_index_command(add)
    return parser


def _add_fixture_commands(add: Adder, config_help: str) -> None:
    p = add("pin", "Print every fixture row with its fixture_sha added, one JSON object a line.")
    p.add_argument("file", metavar="FILE")

    p = add(
        "diff",
        "Compare two outcome ledgers row by row over their shared (case, side, sample) keys: "
        "each pair counts once as transport_miss, schema_miss, silent_regression (CAND's "
        "task_score below BASE's) or other.",
    )
    p.add_argument("base", metavar="BASE", help="an outcomes.jsonl, or the run dir holding one")
    p.add_argument("cand", metavar="CAND", help="the same, for the candidate run")

    p = add("grade", "Grade one side's recorded completions and report strata (seed 000).")
    p.add_argument(
        "file",
        metavar="FILE",
        help="a fixture file whose cases carry a recorded `completion` (and `tool_calls`)",
    )
    p.add_argument("--graders", help="custom graders: a Python file or module name")
    for flag, meaning in (
        ("--stretch-high", "stretch pass rate at or above which stretch_too_easy fires"),
        ("--easy-floor", "easy pass rate below which easy_regression fires"),
        ("--medium-floor", "medium pass rate below which medium_regression fires"),
    ):
        default = GRADE_THRESHOLDS[flag.removeprefix("--").replace("-", "_")]
        p.add_argument(flag, type=_rate, metavar="RATE", help=f"{meaning} (default {default})")

    p = add(
        "validate",
        "Check the config, fixtures, snapshots, cassettes, graders and schedules, and render "
        "every endpoint template for every case.",
    )
    p.add_argument("--config", help=config_help)
    p.add_argument("--suite", help="validate only this suite")


def _add_onboarding_commands(add: Adder) -> None:
    p = add(
        "init",
        "Write a starter suite into DIR: a config for two endpoints, example cases in each "
        "stratum (a tool call and a structured answer among them), a custom grader, snapshots/ "
        "and a .gitignore for runs/; then print the next three commands. A file already there "
        "is left alone, never overwritten.",
    )
    p.add_argument(
        "dir", metavar="DIR", nargs="?", default=".", help="where to write (default: here)"
    )
    p.add_argument(
        "--provider",
        required=True,
        choices=INIT_PROVIDERS,
        help="where both endpoints live: OpenAI, Anthropic, or an OpenAI-compatible server "
        "(default http://127.0.0.1:8000/v1, or $OPENAI_BASE_URL)",
    )

    p = add(
        "import",
        "Bring a suite written for another tool over as parallax fixtures (cases.jsonl) and a "
        "config, into a new folder; each check becomes the closest parallax expectation, and "
        "what cannot be mapped is printed and listed in IMPORT-NOTES.md beside it.",
    )
    tools = p.add_subparsers(dest="source", metavar="TOOL", required=True, parser_class=_Parser)
    epilog = f"exit codes:\n{_COMMAND_EXIT_CODES['import']}"
    out_help = "the folder to write (it must not exist, or be empty: nothing is overwritten)"

    def tool(name: str, help_: str) -> argparse.ArgumentParser:
        child = tools.add_parser(name, help=help_, description=help_, epilog=epilog)
        child.formatter_class = argparse.RawDescriptionHelpFormatter
        return child

    e = tool(
        "openai-evals",
        "OpenAI Evals samples (JSONL: `input` a string or chat messages, `ideal` a string or "
        "a list), graded as --check says, on two endpoints of --provider.",
    )
    e.add_argument("file", metavar="FILE", help="a samples.jsonl (or a hosted eval's data file)")
    e.add_argument("--out", metavar="DIR", required=True, help=out_help)
    e.add_argument(
        "--check",
        choices=EVALS_CHECKS,
        default="match",
        help="the eval class that graded the samples (Match, Includes, FuzzyMatch), or a "
        "string_check operation (default: match)",
    )
    e.add_argument(
        "--provider",
        choices=INIT_PROVIDERS,
        default="openai",
        help="where the two endpoints live, as for `init` (default: openai)",
    )
    f = tool(
        "promptfoo",
        "A promptfoo config (YAML): its prompts become endpoint templates, its providers "
        "endpoints and its tests cases, their assertions the closest expectations.",
    )
    f.add_argument("config", metavar="CONFIG", help="promptfooconfig.yaml")
    f.add_argument("--out", metavar="DIR", required=True, help=out_help)


def _add_daemon_commands(add: Adder, config_help: str) -> None:
    p = add(
        "serve",
        "Run each suite on its cron schedule until SIGTERM, SIGINT or SIGHUP "
        "(0 stopped, 70 crashed).",
    )
    p.add_argument("--config", help=config_help)
    p.add_argument(
        "--run-now",
        action="store_true",
        help="also run each scheduled suite at start (one with an interrupted run resumes it)",
    )

    p = add(
        "prune",
        "Compress old runs' ledgers and delete runs past [retention] keep_nights, save the "
        "latest of each suite, the snapshot's, unfinished ones and those named in keep "
        "(serve does it after each run).",
    )
    p.add_argument("--config", help=config_help)
    p.add_argument("--suite", help="only this suite")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="change nothing: print the runs it would delete and compress, and those it keeps",
    )

    p = add("health", "Exit 0 when the serve daemon is running with a fresh heartbeat, else 1.")
    p.description = (
        f"{p.description}\n\nWithout --config it checks the daemon last started on this host "
        "by this user,\nfound by the pointer `serve` writes to $TMPDIR/parallax-UID/serve.json "
        "(TMPDIR\ndefaults to /tmp); where no daemon was ever started (a one-shot `run` "
        "container)\nthere is nothing to check: exit 0."
    )
    p.add_argument(
        "--config",
        help="the daemon's config (default: the daemon the pointer names; $PARALLAX_CONFIG is "
        "not read). A config the pointer names is not read again: only its heartbeat is",
    )
    p.add_argument(
        "--max-age",
        type=_seconds,
        metavar="S",
        help="seconds a heartbeat may age (default: 3 heartbeat intervals + 5)",
    )
