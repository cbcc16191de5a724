"""Writing a run's reports into its directory, and `run`'s last step that does it."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from runner.errors import StorageError, UsageError
from runner.files import check_writable
from runner.history import ceiling_candidates
from runner.invocation import command
from runner.ledger import disk_refusal, write_atomic
from runner.reports.history_page import PAGE_RUNS, page_path, write_page
from runner.reports.html import html_parts
from runner.reports.markdown import render_markdown
from runner.reports.model import RunReport, build_report
from runner.reports.runinputs import Given
from runner.text import visible

REPORT_FILES = ("report.html", "report.md")  # written into the run directory


def write_reports(
    run_dir: Path,
    *,
    retire_after: int | None = None,
    page_runs: int = 0,
    given: Given | None = None,
) -> RunReport:
    """Render report.html and report.md into the run directory; return what was rendered,
    its history window at least `page_runs` long. `given`: the run's config and suite, when
    this process made it."""
    check_writable(run_dir, REPORT_FILES, action="write its reports here")
    try:
        with build_report(
            run_dir, retire_after=retire_after, page_runs=page_runs, given=given
        ) as rep:
            _write_text(run_dir / "report.html", html_parts(rep))
            _write_text(run_dir / "report.md", [render_markdown(rep)])
    except StorageError as exc:  # each report is written whole or not at all
        raise exc.advised(
            "the run's verdict and ledgers are intact: once there is space, "
            f"`{command('report', run_dir)}` writes its reports"
        ) from None
    return rep


def _write_text(path: Path, parts: Iterable[str]) -> None:
    try:
        with disk_refusal(path):  # a full disk: StorageError (exit 74)
            write_atomic(path, (part.encode("utf-8") for part in parts))
    except OSError as exc:  # checked writable just before: a name taken since
        raise UsageError(f"{path}: cannot write: {exc.strerror or exc}") from None


def after_run(run_dir: Path, *, retire_after: int, log: Any, given: Given | None = None) -> None:
    """`run`'s last step: write the reports, rewrite the suite's history page from the window
    the report read, and raise alert.ceiling_candidates when the list grew. `given`: the
    run's config and suite, as the run that just finished holds them."""
    from runner import logs

    try:
        rep = write_reports(run_dir, retire_after=retire_after, page_runs=PAGE_RUNS, given=given)
    except Exception as exc:  # a report must never cost the run its verdict or exit code
        log.error(  # noqa: TRY400 - a structlog event: the error goes in fields
            logs.REPORT_FAILED, error=f"{type(exc).__name__}: {exc}", run_dir=str(run_dir)
        )
        said = (
            str(exc)
            if isinstance(exc, StorageError)
            else f"{run_dir}: reports not written ({type(exc).__name__}: {exc}); the run's "
            "verdict and ledgers are intact"
        )
        logs.say(visible(f"parallax: {logs.scrub_text(said)}", one_line=True))
        return
    rows = rep.history
    if not rows or rows[-1].run_dir != run_dir:
        return  # a newer run of the suite finished first: its page is the newer one
    try:
        write_page(
            rep.suite,
            rows[-PAGE_RUNS:],
            page_path(run_dir.parent),
            retire_after=retire_after,
            notes=rep.history_notes,
        )
    except Exception as exc:  # nor must the history page
        log.error(  # noqa: TRY400 - a structlog event: the error goes in fields
            logs.REPORT_FAILED, error=f"{type(exc).__name__}: {exc}", run_dir=str(run_dir)
        )
    if not rows[-1].counts_as_night:
        return
    before = set(ceiling_candidates(rows[:-1], retire_after))
    now = rep.ceiling
    new = sorted(set(now) - before)
    if new:
        log.warning(
            logs.ALERT_CEILING_CANDIDATES,
            count=len(now),
            case_ids=now,
            new=new,
            retire_after=retire_after,
        )
