"""Why a run could not score some of its cases, and what the person reading the summary can do.

An incomplete run (exit 2 or 3) left cases unscored for one of two kinds of reason, and they
are not the same news. A transport miss (a timeout, a refused connection, a 5xx, a rate limit,
a call the budget cancelled) is infrastructure: no reply came back to grade. A schema miss is
the side's own failure of format: a reply came back that was not JSON when JSON was asked, with
tool arguments that are not a JSON object, or as a broken stream; a candidate that stops
answering in the format asked has regressed, even though no grade can say by how much
(`blame` says which, in one set of words for every place that says it). The one question the
summary must answer is which: `candidate: 20 connect_error (...: Connection refused)` says it
at a glance where a list of case ids does not. `summary.json` keeps, per side, how many cases that
side left unscored and the most common reasons (a stamp and its detail); the printed summary
shows the top ones and the next step that can work: `promote` refuses a run with unscored
cases unless told `--allow-partial`, so it is never suggested bare for such a run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.gate import NEW_CASE
from runner.history import mapping_of
from runner.invocation import command
from runner.model import SIDES, Transport

if TYPE_CHECKING:  # annotations only
    from runner.gate import SideView, Verdict

KEPT = 5  # reasons per side kept in summary.json
SHOWN = 3  # reasons per side printed


SCHEMA = "schema"  # the stamp `reason_of` gives an unscored side whose reply came back


def blame(schema: bool, side: str) -> str:
    """Whose trouble an unscored case is: infrastructure for a transport miss, the side's own
    format failure for a schema miss."""
    return f"the {side}'s own format failure" if schema else "infrastructure"


def reason_of(view: SideView) -> tuple[str, str]:
    """An unscored side's (stamp, detail): its transport stamp, or `schema` when the call was
    answered but the reply could not be read; the detail without the stamp it repeats."""
    if view.transport != Transport.OK:
        detail = view.detail.removeprefix(view.transport).removeprefix(": ")
        return view.transport, detail
    return SCHEMA, view.detail


def unscored_summary(results: Sequence[Verdict]) -> dict[str, Any]:
    """Per side, the cases it left unscored and their most common reasons; and how many of
    the unscored cases are new (a promote cannot accept those)."""
    out: dict[str, Any] = {}
    for side in SIDES:
        reasons = Counter(
            reason_of(view) for v in results if not (view := getattr(v, side)).admitted
        )
        out[side] = {
            "cases": sum(reasons.values()),
            "reasons": [
                {"stamp": stamp, "detail": detail, "cases": n}
                for (stamp, detail), n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))[
                    :KEPT
                ]
            ],
        }
    out["new_cases"] = sum(1 for v in results if v.gate == NEW_CASE and not v.admitted)
    return out


def why_lines(summary: Mapping[str, Any]) -> list[str]:
    """`  candidate: 20 connect_error (detail) — infrastructure` per side and reason, the most
    common first; the rest counted on one line, or named when it is a single reason (a line
    that says "1 more, for other reasons" is as long as the reason it hides)."""
    unscored = mapping_of(summary.get("unscored"))
    lines = []
    for side in SIDES:
        view = mapping_of(unscored.get(side))
        reasons = view.get("reasons")
        rows = [mapping_of(r) for r in reasons] if isinstance(reasons, list) else []
        total = view.get("cases")
        counted = sum(r["cases"] for r in rows if isinstance(r.get("cases"), int))
        last = len(rows) == SHOWN + 1 and total == counted  # nothing left after the next one
        for row in rows[: SHOWN + 1 if last else SHOWN]:
            detail = f" ({row.get('detail')})" if row.get("detail") else ""
            why = blame(row.get("stamp") == SCHEMA, side)
            lines.append(f"  {side}: {row.get('cases')} {row.get('stamp')}{detail} — {why}")
        shown = sum(r["cases"] for r in rows[:SHOWN] if isinstance(r.get("cases"), int))
        if isinstance(total, int) and total > shown and rows and not last:
            lines.append(f"  {side}: {total - shown} more, for other reasons (see report.html)")
    return lines


def next_steps(summary: Mapping[str, Any], run_dir: Path) -> list[str]:
    """What to do next, as commands that will work on this run.

    A run without unscored cases that has new ones is promoted to start gating them (a
    partial run with `--allow-partial`). A run with unscored cases is retried first
    (`--retry-unscored` calls only those again); its new cases can be accepted only with
    `--allow-partial`, and only the scored ones, so when none was scored no promote is
    suggested at all.
    """
    counts = mapping_of(summary.get("gate_counts"))
    new = counts.get("new_case") if isinstance(counts.get("new_case"), int) else 0
    unadmitted = summary.get("unadmitted")
    lines = []
    if isinstance(unadmitted, int) and unadmitted:
        lines.append(
            f"  {unadmitted} case(s) could not be scored: once the cause above is fixed, "
            f"`{command('run', '--retry-unscored', run_dir)}` calls only those again"
        )
    elif new and isinstance(summary.get("partial"), dict):  # promote refuses it unless told
        lines.append(
            f"  {new} new case(s) are not gated until accepted: this is a partial run; "
            f"`{command('promote', '--allow-partial', run_dir)}` accepts them and keeps the "
            "other cases' entries"
        )
    elif new:  # a suite never promoted is never gated: say how it starts
        lines.append(
            f"  {new} new case(s) are not gated until accepted: review the report, then "
            f"`{command('promote', run_dir)}`"
        )
    if not (isinstance(unadmitted, int) and unadmitted) or not new:
        return lines
    unscored_new = mapping_of(summary.get("unscored")).get("new_cases")
    if not isinstance(unscored_new, int):  # a summary written before this was counted
        lines.append(
            f"  {new} new case(s) are not gated until accepted: promote refuses this run; "
            f"`{command('promote', '--allow-partial', run_dir)}` accepts the scored ones"
        )
    elif unscored_new >= new:
        lines.append(
            f"  {new} new case(s) are not gated until accepted, and none was scored: "
            "there is nothing to promote until a retry scores them"
        )
    else:
        lines.append(
            f"  {new} new case(s) are not gated until accepted: promote refuses this run; "
            f"`{command('promote', '--allow-partial', run_dir)}` accepts the "
            f"{new - unscored_new} scored one(s) and leaves the {unscored_new} unscored out"
        )
    return lines
