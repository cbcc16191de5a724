"""report.html: one self-contained page per run, rendered from templates a piece at a time.

The page is light: its markup is the verdict, its reasons and the run's figures, and, for a
reader without JavaScript, the cases that need review and the unscored ones in full; every
case (its row and its detail) is data, compressed into a few blocks (`casedata`) that the
page's script renders on demand. `html_parts` hands the template plain values; every piece of
markup comes from `templates/`, where autoescape and `text.visible` handle untrusted text.
The page loads nothing: its style and script are inline and the Content Security Policy names
their exact hashes (the data blocks are no script a browser runs).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Any

from markupsafe import Markup

from runner import __version__
from runner.batch.summary import batch_lines
from runner.cost import regressions, usage
from runner.cost.budget import budget_line
from runner.gate import GATE_CLASSES
from runner.history import mapping_of, pass_rate_of, run_labels, strings_of
from runner.ledger import json_map_lines
from runner.model import SIDES, STRATA
from runner.reports import trend
from runner.reports.casedata import DISAGREEMENT, Blocks, Built, Row, build_blocks
from runner.reports.caseview import BRIEF_NOTE
from runner.reports.model import REVIEW_ORDER, RunReport, incomplete_groups, signal_lines
from runner.reports.paired import paired_cases
from runner.reports.render import content_security_policy, environment
from runner.reports.verdict import (
    MOVED,
    Kind,
    grouped,
    headline,
    reasons,
    request_sides,
    said,
)
from runner.request.sha import request_lines
from runner.runs.selection import partial_line

VERDICT_COLOURS = {
    "clean": "#047857",
    "review": "#b45309",
    "incomplete": "#475569",
    "review+incomplete": "#be123c",
}
MISS_OPTIONS = 200  # the most common miss codes offered by the table's miss filter


@cache
def report_script() -> str:
    """report.js, report.html's one inline script (filters, search, sort, the open case),
    exactly as it is inlined and hashed into the page's Content Security Policy."""
    env = environment()
    assert env.loader is not None  # environment() has a PackageLoader
    return env.loader.get_source(env, "report.js")[0]


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


@dataclass(frozen=True)
class NoScript:
    """The cases shown in full without JavaScript: those that need review in the order
    `cases_in` gives them, the unscored ones by stamp then id (only the first `top` of each
    gate and stamp are kept), and how many are unscored in all."""

    review: list[str]
    unscored: list[str]
    unscored_total: int


def _no_script(rep: RunReport) -> NoScript:
    groups = incomplete_groups(rep)
    return NoScript(
        [case_id for case_id, _ in rep.cases_in(REVIEW_ORDER)],
        [case_id for rows in groups.values() for case_id, _ in rows],
        rep.total(list(groups)),
    )


def _strata(rep: RunReport) -> list[dict[str, Any]]:
    """Per side, a pass-rate bar per stratum; an unstratified suite's one bar, `all`, is its
    every case (summary.json counts them all in `medium`, as the trend does)."""
    strata = mapping_of(rep.summary.get("strata"))
    alerts = mapping_of(rep.summary.get("stratum_alerts"))
    stratified = rep.summary.get("stratified", True) is not False
    cards = []
    for side in SIDES:
        rates = mapping_of(strata.get(side))
        bars = []
        for name in STRATA if stratified else ("medium",):
            rate = mapping_of(rates.get(name))
            value = pass_rate_of(rate)
            n, passed, unadmitted = rate.get("n", 0), rate.get("passed", 0), rate.get("unadmitted")
            label = f"{value:.0%} · {passed} of n={n}" if value is not None else f"no rows (n={n})"
            if unadmitted:
                label += f" · {unadmitted} unscored"
            width = round(value * 100, 1) if value is not None else 0
            bars.append(
                {
                    "name": name if stratified else "all",
                    "width": width,
                    "colour": trend.STRATUM_COLOURS[name],
                    "label": label,
                }
            )
        cards.append(
            {
                "side": side,
                "bars": bars,
                "alerts": strings_of(alerts.get(side)),
                "stratified": stratified,
            }
        )
    return cards


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


def blocks(rep: RunReport, shown: NoScript, paired: Mapping[str, tuple[str, ...]]) -> list[Built]:
    """Every case of the run as data, in disagreement.json's order, and the HTML of the cases
    in `shown`."""
    job = Blocks(
        rep.details(),
        Row(request_sides(rep.summary), paired),
        frozenset([*shown.review, *shown.unscored]),
        functools.partial(
            environment().get_template("case.html.j2").module.case_detail,  # type: ignore[attr-defined]
            raw_text=False,  # its link: the raw line is in the data for the script
        ),
    )
    lines = json_map_lines(rep.run_dir / DISAGREEMENT, "cases")
    return build_blocks(job, ((i, n, entry) for i, (n, entry) in enumerate(lines)))


def _options(counts: Counter[str], order: Sequence[str] = ()) -> list[tuple[str, int]]:
    """A filter's choices with their counts: `order` first, then the rest by count."""
    known = [(v, counts[v]) for v in order if counts[v]]
    rest = [(v, n) for v, n in counts.items() if v not in order and v and n]  # "": no stratum
    return known + sorted(rest, key=lambda vn: (-vn[1], vn[0]))


def context(rep: RunReport) -> dict[str, Any]:
    """Everything `report.html.j2` shows: the page, and every case as data blocks."""
    s = rep.summary
    verdict = str(s.get("verdict") or "unknown")
    rep.details()  # indexed now: what it could not read is noted before the notes are shown
    shown = _no_script(rep)
    counts = mapping_of(s.get("gate_counts"))
    fail_on = s.get("fail_on")
    labels = run_labels(rep.trend)
    found = reasons(s, rep.tally)
    tally = rep.tally
    paired = paired_cases(s, rep.details(), (case_id for case_id, _ in rep.every_case()))
    built = blocks(rep, shown, paired)
    html = {case_id: text for b in built for case_id, text in b.details.items()}
    return {
        **page_assets(report_script()),
        "suite": rep.suite,
        "verdict": verdict,
        "headline": headline(verdict),
        "reasons": found,
        "reason_groups": grouped(found),
        "said": said(verdict, found),
        "s": s,
        "run_id": s.get("run_id") or rep.run_dir.name,
        "gate_chips": [(g, counts.get(g, 0)) for g in GATE_CLASSES],
        "review": [html[c] for c in shown.review if c in html],
        "review_total": rep.total(REVIEW_ORDER),
        "review_brief": [b for gate in REVIEW_ORDER for b in rep.beyond.get(gate, ())],
        "unscored_cases": [html[c] for c in shown.unscored if c in html],
        "unscored_total": shown.unscored_total,
        "unscored_brief": [
            b for stamp in sorted(set(rep.beyond) - set(REVIEW_ORDER)) for b in rep.beyond[stamp]
        ],
        "strata": _strata(rep),
        "strata_note": s.get("strata_note"),
        "partial": partial_line(s),
        "signal": signal_lines(s),
        "significant": bool(s.get("significant_regression")),
        "significant_gates": isinstance(fail_on, list) and "significant_regression" in fail_on,
        "unscored": [r for r in found if r.kind is Kind.UNSCORED],
        "models": _models(rep),
        "candidate_changed": request_lines(s, "candidate"),
        "usage_columns": usage.COLUMNS,
        "usage_rows": usage.table(s),
        "budget_line": budget_line(s),
        "batch_lines": batch_lines(s),
        "regressions": regressions.lines(s),
        "gates_chart": trend.gate_chart(rep.trend, labels),
        "strata_charts": [(side, trend.rate_chart(rep.trend, labels, side)) for side in SIDES]
        if rep.trend
        else [],
        "trend_runs": len(rep.trend),
        "retire_after": rep.retire_after,
        "ceiling": [(c, rep.quiet_runs.get(c, 0)) for c in rep.ceiling],
        "count": rep.count,
        "filter_gates": _options(tally.gates, GATE_CLASSES),
        "filter_strata": _options(tally.strata, STRATA),
        "filter_moved": [(m, n) for m in MOVED if (n := tally.moved_count(m))],
        "filter_misses": _options(tally.misses)[:MISS_OPTIONS],
        "filter_missed": _options(tally.missed, SIDES),
        "filter_failed": _options(tally.failed, SIDES),
        "filter_passed": _options(tally.passed, SIDES),
        "filter_request": _options(
            Counter(side for sides in request_sides(s).values() for side in sides), SIDES
        ),
        "filter_paired": _options(Counter(m for ms in paired.values() for m in ms)),
        "blocks": [(Markup(b.data), b.count) for b in built],  # noqa: S704 - base64 only
        "brief_note": BRIEF_NOTE,
        "retired": [str(r) for r in strings_of(s.get("retired"))],
        "notes": rep.notes,
        "version": __version__,
        "generated": datetime.now(UTC).isoformat(timespec="seconds"),
        "run_dir": str(rep.run_dir),
    }


def html_parts(rep: RunReport) -> Iterator[str]:
    """The whole report as one self-contained HTML document, in pieces as they render."""
    return environment().get_template("report.html.j2").generate(context(rep))
