"""report.html: one self-contained page per run, rendered from templates a piece at a time.

`html_parts` hands the template plain values (and an iterator over the case table, so a
20,000-case page is never one string or one list in memory); every piece of markup comes from
`templates/`, where autoescape and `text.visible` handle untrusted text. The page loads nothing:
its style (and script) are inline and the Content Security Policy names their exact hashes.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from markupsafe import Markup

from runner import __version__, regressions, usage
from runner.budget import budget_line
from runner.gate import GATE_CLASSES
from runner.history import mapping_of, pass_rate_of, run_labels, strings_of
from runner.model import SIDES, STRATA
from runner.reports import trend
from runner.reports.caseview import CaseView, RunCases
from runner.reports.model import (
    REVIEW_ORDER,
    RunReport,
    incomplete_groups,
    signal_lines,
)
from runner.reports.render import content_security_policy, environment
from runner.requestsha import REFERENCE, request_lines

VERDICT_COLOURS = {
    "clean": "#047857",
    "review": "#b45309",
    "incomplete": "#475569",
    "review+incomplete": "#be123c",
}
EXCERPT_CAP = 600  # characters of an unscored reply shown beside its stamp


def page_assets(script: str = "") -> dict[str, Any]:
    """The inline style (and script) of a page and the CSP that allows exactly those."""
    env = environment()
    style = env.get_template("report.css").render(
        verdict_colours=VERDICT_COLOURS,
        gate_colours=trend.GATE_COLOURS,
        other_colour=trend.OTHER_COLOUR,
    )
    style += env.get_template("case.css").render()  # a case's detail (`case.html.j2`)
    return {
        "style": Markup(style),  # noqa: S704 - our own template's output, hashed as it is
        "script": Markup(script) if script else None,  # noqa: S704 - the same
        "csp": content_security_policy(styles=(style,), scripts=(script,) if script else ()),
    }


def _review(rep: RunReport) -> list[CaseView]:
    """The cases that need review, in the order `cases_in` gives them, each in full detail."""
    shown = rep.cases_in(REVIEW_ORDER)
    wanted = {case_id for case_id, _ in shown}
    views: dict[str, CaseView] = {}
    with RunCases(rep.run_dir) as cases:
        for index, (case_id, *_) in enumerate(rep.table()):
            if case_id in wanted:
                views[case_id] = cases.view(index, case_id, rep.cases[case_id])
    return [views[case_id] for case_id, _ in shown if case_id in views]


def _strata(rep: RunReport) -> list[dict[str, Any]]:
    strata = mapping_of(rep.summary.get("strata"))
    alerts = mapping_of(rep.summary.get("stratum_alerts"))
    cards = []
    for side in SIDES:
        rates = mapping_of(strata.get(side))
        bars = []
        for name in STRATA:
            rate = mapping_of(rates.get(name))
            value = pass_rate_of(rate)
            n, passed, unadmitted = rate.get("n", 0), rate.get("passed", 0), rate.get("unadmitted")
            label = f"{value:.0%} · {passed} of n={n}" if value is not None else f"no rows (n={n})"
            if unadmitted:
                label += f" · {unadmitted} unscored"
            width = round(value * 100, 1) if value is not None else 0
            bars.append(
                {
                    "name": name,
                    "width": width,
                    "colour": trend.STRATUM_COLOURS[name],
                    "label": label,
                }
            )
        cards.append({"side": side, "bars": bars, "alerts": strings_of(alerts.get(side))})
    return cards


def _incomplete(rep: RunReport) -> list[dict[str, Any]]:
    groups = []
    for stamp_, rows in incomplete_groups(rep).items():
        cases = []
        for case_id, case in rows:
            cells = []
            for side in SIDES:
                view = mapping_of(case.get(side))
                reply = rep.replies.get((case_id, side))
                excerpt = None
                if reply is not None and reply.text and not view.get("admitted"):
                    excerpt = reply.text[:EXCERPT_CAP]
                cells.append(
                    {
                        "transport": view.get("transport"),
                        "schema": view.get("schema"),
                        "detail": view.get("detail"),
                        "excerpt": excerpt,
                    }
                )
            cases.append({"id": case_id, "gate": str(case.get("gate")), "cells": cells})
        total = rep.totals.get(stamp_, len(rows))
        groups.append({"stamp": stamp_, "total": total, "hidden": total - len(rows), "rows": cases})
    return groups


def _models(rep: RunReport) -> list[dict[str, Any]]:
    served = mapping_of(rep.summary.get("served_models"))
    endpoints = mapping_of(rep.manifest.get("endpoints"))
    rows = []
    for side in SIDES:
        ep = mapping_of(endpoints.get(side))
        rows.append(
            {
                "side": side,
                "endpoint": ep.get("name") or "-",
                "model": ep.get("model") or "-",
                "request_sha": ep.get("request_sha") or "-",
                "served": ", ".join(map(str, strings_of(served.get(side)))) or "-",
            }
        )
    return rows


def _table(rep: RunReport) -> Iterator[dict[str, Any]]:
    for case_id, gate, stratum, detail in rep.table():
        yield {"id": case_id, "gate": gate, "stratum": stratum or "", "detail": detail}


def context(rep: RunReport) -> dict[str, Any]:
    """Everything `report.html.j2` shows, the case table as an iterator."""
    s = rep.summary
    review = _review(rep)
    counts = mapping_of(s.get("gate_counts"))
    fail_on = s.get("fail_on")
    labels = run_labels(rep.trend)
    return {
        **page_assets(),
        "suite": rep.suite,
        "verdict": str(s.get("verdict") or "unknown"),
        "s": s,
        "run_id": s.get("run_id") or rep.run_dir.name,
        "gate_chips": [(g, counts.get(g, 0)) for g in GATE_CLASSES],
        "moved": request_lines(s, REFERENCE),
        "review": review,
        "review_total": rep.total(REVIEW_ORDER),
        "review_hidden": rep.total(REVIEW_ORDER) - len(review),
        "strata": _strata(rep),
        "strata_note": s.get("strata_note"),
        "signal": signal_lines(s),
        "significant": bool(s.get("significant_regression")),
        "significant_gates": isinstance(fail_on, list) and "significant_regression" in fail_on,
        "incomplete": _incomplete(rep),
        "models": _models(rep),
        "candidate_changed": request_lines(s, "candidate"),
        "usage_columns": usage.COLUMNS,
        "usage_rows": usage.table(s),
        "budget_line": budget_line(s),
        "regressions": regressions.lines(s),
        "gates_chart": trend.gate_chart(rep.trend, labels),
        "strata_charts": [(side, trend.rate_chart(rep.trend, labels, side)) for side in SIDES]
        if rep.trend
        else [],
        "trend_runs": len(rep.trend),
        "retire_after": rep.retire_after,
        "ceiling": [(c, rep.quiet_runs.get(c, 0)) for c in rep.ceiling],
        "count": rep.count,
        "cases": _table(rep),
        "retired": [str(r) for r in strings_of(s.get("retired"))],
        "notes": rep.notes,
        "version": __version__,
        "generated": datetime.now(UTC).isoformat(timespec="seconds"),
        "run_dir": str(rep.run_dir),
    }


def html_parts(rep: RunReport) -> Iterator[str]:
    """The whole report as one self-contained HTML document, in pieces as they render."""
    return environment().get_template("report.html.j2").generate(context(rep))
