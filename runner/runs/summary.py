"""A run's summary.json read back, and the few lines a finished run prints on stderr."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runner import logs
from runner.cost.budget import budget_line
from runner.cost.regressions import lines as regression_lines
from runner.cost.usage import side_lines
from runner.errors import DataError
from runner.history import mapping_of, strings_of, verdict_code_of
from runner.invocation import shown_path
from runner.ledger import read_json_object
from runner.request import sha as requestsha
from runner.text import visible
from runner.unscored import next_steps, why_lines

SUMMARY_VERSION = 1
SHOWN = 8  # case ids a summary line names before it counts the rest


def recorded_summary(run_dir: Path) -> dict[str, Any] | None:
    """A finished run's summary when it holds a verdict (an exit code 0 to 3), else None."""
    try:
        summary = read_json_object(run_dir / "summary.json")
    except DataError:
        return None
    if summary.get("version") != SUMMARY_VERSION or verdict_code_of(summary) is None:
        return None
    return summary


def drift_lines(summary: Mapping[str, Any]) -> list[str]:
    """`  alias swap (candidate): accepted M, served N on 3 cases` per drift summary.json
    records, the most cases first, at most SHOWN (a summary recorded before it kept them
    prints none: the review line still names the cases)."""
    found = summary.get("alias_drift")
    rows = [mapping_of(row) for row in found] if isinstance(found, list) else []
    rows.sort(key=lambda row: -(row["count"] if isinstance(row.get("count"), int) else 0))
    lines = [
        f"  alias swap ({row.get('side')}): accepted {row.get('accepted') or 'no model'}, "
        f"served {row.get('served') or 'no model name'} on {row.get('count')} case(s)"
        for row in rows[:SHOWN]
    ]
    if len(rows) > SHOWN:
        lines.append(f"  alias swap: {len(rows) - SHOWN} more (see report.html)")
    return lines


def print_summary(summary: Mapping[str, Any], run_dir: Path) -> None:
    """A few human lines on stderr; stdout stays one JSON object a line for log shippers.

    The summary may be one a run recorded earlier (a resumed finished run), so every field is
    read through history's tolerant readers: a hand-edited file prints as unknown, no crash.
    """
    counts = mapping_of(summary.get("gate_counts"))
    shown = ", ".join(f"{k} {v}" for k, v in counts.items() if v)
    verdict = summary.get("verdict")
    lines = [
        f"parallax · {summary.get('suite')}: {str(verdict).upper()} "
        f"(exit {summary.get('exit_code')})",
        f"  cases {summary.get('cases', '?')} · admitted {summary.get('admitted', '?')} · "
        f"unadmitted {summary.get('unadmitted', '?')} · {shown or 'nothing to report'}",
    ]
    for key in ("review", "flaky", "incomplete", "grader_errors", "retired"):
        if ids := strings_of(summary.get(key)):
            more = f" (+{len(ids) - SHOWN} more)" if len(ids) > SHOWN else ""
            lines.append(f"  {key.replace('_', ' ')}: {', '.join(ids[:SHOWN])}{more}")
    lines.extend(f"  {line}" for line in requestsha.request_lines(summary))
    lines.extend(drift_lines(summary))
    lines.extend(why_lines(summary))  # what kept the incomplete ones unscored, per side
    for side, alerts in mapping_of(summary.get("stratum_alerts")).items():
        if alerts := strings_of(alerts):
            lines.append(f"  strata alert ({side}): {', '.join(alerts)}")
    if isinstance(note := summary.get("strata_note"), str):
        lines.append(f"  {note}")
    paired = mapping_of(mapping_of(summary.get("paired")).get("overall"))
    if isinstance(text := paired.get("text"), str):
        gates = "significant_regression" in strings_of(summary.get("fail_on"))
        lines.append(f"  paired: {text}{' (gates: fail_on)' if gates else ''}")
    claim = mapping_of(paired.get("non_inferiority"))
    if isinstance(text := claim.get("text"), str):
        gates = "not_non_inferior" in strings_of(summary.get("fail_on"))
        lines.append(f"  non-inferiority: {text}{' (gates: fail_on)' if gates else ''}")
    lines.extend(f"  {line}" for line in side_lines(summary))
    if (budget := budget_line(summary)) is not None:
        lines.append(f"  {budget}")
    lines.extend(f"  {line}" for line, _ in regression_lines(summary))
    if summary.get("parent_finished") is False:
        lines.append(
            f"  parent {summary.get('parent')} never finished: "
            "the calls it never made read `cancelled`"
        )
    lines.extend(next_steps(summary, run_dir))
    lines.append(f"  run dir: {shown_path(run_dir)}")
    # a case id or a suite name is untrusted: a bidi control, a NUL or a newline in it is shown
    logs.say("\n".join(visible(line, one_line=True) for line in lines))
