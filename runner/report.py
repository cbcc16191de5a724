"""Reports of one run: a self-contained `report.html` for people, `report.md` for CI.

Both are rendered from the run directory alone (summary.json, disagreement.json, manifest.json,
raw.jsonl) plus the suite's earlier run directories for the trend, so `parallax report RUN_DIR`
works on a copied CI artifact. The HTML needs no network: inline CSS, inline SVG, no script.

Everything a model or an endpoint returned, and every case id, is untrusted text. It goes
through `text.visible` first, so a bidi control or a NUL shows as its escape; then in HTML
through `html.escape` and nowhere else; in Markdown `md_text` escapes the characters that could
open markup or break a table and caps a cell between escapes, and `md_code` puts text in a code
span as it is, fenced by more backticks than it holds.
"""

from __future__ import annotations

import base64
import binascii
import html
import json
import re
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runner import __version__, usage
from runner.errors import DataError, UsageError
from runner.files import check_writable
from runner.gate import ALIAS_SWAP, DISAGREEMENT_CHANGED, GATE_CLASSES, SCHEMA_MISS, TRANSPORT_MISS
from runner.history import (
    History,
    RunRow,
    ceiling_candidates,
    load_history,
    mapping_of,
    pass_rate_of,
    streaks,
    strings_of,
)
from runner.ledger import read_json_map, read_json_object, read_jsonl, write_atomic
from runner.model import ROW_ERRORS, SIDES, STRATA, Exchange, Response
from runner.protocols import read
from runner.requestsha import REFERENCE, request_lines
from runner.text import visible

TREND_RUNS = 14
REPORT_FILES = ("report.html", "report.md")  # written into the run directory
REPLY_CAP = 6000  # characters of a reply kept for the HTML report
MD_REPLY_CAP = 160  # characters of a reply (or a detail) in a Markdown table cell
MD_MISS_CAP = 60  # characters of one miss code (a tool miss names a tool and a key)
MD_CALLS_CAP = 100  # of that, the reply's tool calls; its text keeps the rest
CALL_CAP = 1000  # characters of one tool call (name and arguments) in report.html
MD_ID_CAP = 80  # characters of a case id, a model or a misses list in a Markdown line
MD_LINE_CAP = 800  # no Markdown line longer than this: a review row's cells add up to less
MD_TOP_CASES = 10
HTML_TOP_CASES = 200  # cases shown in detail per section of report.html; all are in its table
REVIEW_ORDER = (DISAGREEMENT_CHANGED, ALIAS_SWAP)
INCOMPLETE_ORDER = (TRANSPORT_MISS, SCHEMA_MISS)
GATE_COLOURS = {
    "new_case": "#7c8db5",
    "fixture_move": "#a78bfa",
    "transport_miss": "#64748b",
    "schema_miss": "#94a3b8",
    "alias_swap": "#f59e0b",
    "disagreement_changed": "#e11d48",
    "flaky": "#0ea5e9",
    "unchanged": "#10b981",
    "retired_case": "#d6d3d1",
}
STRATUM_COLOURS = {"easy": "#10b981", "medium": "#3b82f6", "stretch": "#a855f7"}
VERDICT_COLOURS = {
    "clean": "#047857",
    "review": "#b45309",
    "incomplete": "#475569",
    "review+incomplete": "#be123c",
}


@dataclass(frozen=True)
class ReplyView:
    """What one side said for one case (sample 0), as text for a report."""

    text: str | None  # the reply text, or the raw body when it did not parse
    kind: str  # "reply" (parsed), "body" (raw body, schema failed), "none" (no body)
    truncated: bool = False
    status: int | None = None
    tool_calls: tuple[str, ...] = ()  # each `name(arguments as JSON)`, as the reply made them


def call_text(name: str, arguments: Mapping[str, Any]) -> str:
    """One tool call as people read it: `get_weather({"city": "Oslo"})`."""
    return f"{name}({json.dumps(arguments, ensure_ascii=False, sort_keys=True)})"


@dataclass
class RunReport:
    """Everything a rendered report needs, read from a run directory."""

    run_dir: Path
    summary: Mapping[str, Any]
    manifest: Mapping[str, Any]
    cases: Mapping[str, Mapping[str, Any]]  # the cases shown in detail (all when uncapped)
    replies: dict[tuple[str, str], ReplyView]
    trend: list[RunRow]
    retire_after: int | None
    ceiling: list[str]
    quiet_runs: dict[str, int]
    notes: list[str] = field(default_factory=list)
    history: list[RunRow] = field(default_factory=list)  # the window read, oldest first
    # how many cases each review gate and each unscored stamp has, shown in detail or not
    totals: dict[str, int] = field(default_factory=dict)
    count: int = 0  # cases in disagreement.json

    def table(self) -> Iterator[tuple[str, str, str | None, str]]:
        """Every case as (id, gate, stratum, detail), read again from disagreement.json as it
        is written out: at 20,000 cases, held as a list it was the largest part of a report."""
        for case_id, case in read_json_map(self.run_dir / "disagreement.json", "cases"):
            if isinstance(case, dict):
                stratum = case.get("stratum")
                yield (
                    case_id,
                    str(case.get("gate")),
                    stratum if isinstance(stratum, str) else None,
                    str(case.get("detail")),
                )

    @property
    def suite(self) -> str:
        return str(self.summary.get("suite") or self.run_dir.parent.name)

    def total(self, sections: Sequence[str]) -> int:
        """Cases in these review gates or unscored stamps, whether shown in detail or not."""
        return sum(self.totals.get(s, 0) for s in sections)

    def cases_in(self, gates: Sequence[str]) -> list[tuple[str, Mapping[str, Any]]]:
        """Cases of the given gate classes, in the order of `gates`, then by id."""
        rank = {g: i for i, g in enumerate(gates)}
        chosen = [(k, v) for k, v in self.cases.items() if str(v.get("gate")) in rank]
        return sorted(chosen, key=lambda kv: (rank[str(kv[1].get("gate"))], kv[0]))


def _load_object(path: Path) -> dict[str, Any]:
    return read_json_object(path, missing="no such file: not a finished parallax run")


def _body_text(response: Response) -> str:
    if response.encoding == "utf-8":
        return response.body
    try:
        return base64.b64decode(response.body, validate=True).decode("utf-8", "replace")
    except (ValueError, binascii.Error):
        return f"<{len(response.body)} bytes of base64 that do not decode>"


def _cap(text: str, limit: int) -> tuple[str, bool]:
    return (text, False) if len(text) <= limit else (text[:limit], True)


def reply_of(exchange: Exchange) -> ReplyView:
    """The reply text of one exchange, through the same adapter that stamped it."""
    response = exchange.response
    if response is None:
        return ReplyView(text=None, kind="none")
    if exchange.transport == "ok":
        reply = read(
            exchange.adapter,
            response,
            expects_json=False,
            answer_pointer=exchange.answer_pointer,
        ).reply
        if reply is not None:
            text, cut = _cap(reply.text, REPLY_CAP)
            calls = tuple(
                _cap(call_text(c.name, c.arguments), CALL_CAP)[0] for c in reply.tool_calls
            )
            return ReplyView(text, "reply", cut, response.status, calls)
    text, cut = _cap(_body_text(response), REPLY_CAP)
    return ReplyView(text=text, kind="body", truncated=cut, status=response.status)


def read_replies(
    run_dir: Path, wanted: Collection[str] | None = None
) -> tuple[dict[tuple[str, str], ReplyView], list[str]]:
    """Sample 0's reply per (case, side) from raw.jsonl; unreadable rows become notes."""
    replies: dict[tuple[str, str], ReplyView] = {}
    notes: list[str] = []
    path = run_dir / "raw.jsonl"
    if not path.exists():
        return replies, [f"{path.name}: missing; replies are not shown"]
    if wanted is not None and not wanted:
        return replies, notes
    try:
        for line_no, row in read_jsonl(path):
            if not isinstance(row, dict) or row.get("sample", 0) != 0:
                continue
            if wanted is not None and row.get("case_id") not in wanted:
                continue
            try:
                exchange = Exchange.from_json(row)
            except ROW_ERRORS:
                notes.append(f"{path.name}:{line_no}: not an exchange; skipped")
                continue
            replies[(exchange.case_id, exchange.side)] = reply_of(exchange)
    except DataError as exc:
        notes.append(f"{exc}; replies after it are not shown")
    return replies, notes


def history_window(trend_runs: int, retire_after: int | None) -> int:
    """How many runs back a report reads: the trend, or a full streak plus the run before."""
    return max(trend_runs, (retire_after or 0) + 1)


def _wants_detail(case: Mapping[str, Any]) -> str | None:
    """The section a case is shown in detail in: a review gate, an unscored stamp, or none."""
    gate = str(case.get("gate"))  # a hand-edited map may hold anything here
    if gate in INCOMPLETE_ORDER or not case.get("admitted", True):
        return _stamp_of(case)
    return gate if gate in REVIEW_ORDER else None


def read_cases(
    path: Path, top: int | None
) -> tuple[dict[str, Mapping[str, Any]], dict[str, int], int]:
    """Stream disagreement.json: the cases to show in detail, section totals, the case count.

    With `top`, each review gate and each unscored stamp keeps its first `top` cases by id
    (the map is sorted by id), so a report's memory does not grow with the suite.
    """
    cases: dict[str, Mapping[str, Any]] = {}
    totals: dict[str, int] = {}
    count = 0
    for case_id, case in read_json_map(path, "cases"):
        if not isinstance(case, dict):
            continue
        count += 1
        section = _wants_detail(case)
        if section is not None:
            totals[section] = totals.get(section, 0) + 1
        if top is None or (section is not None and totals[section] <= top):
            cases[case_id] = case
    return cases, totals, count


def build_report(
    run_dir: Path,
    *,
    retire_after: int | None = None,
    trend_runs: int = TREND_RUNS,
    top: int | None = HTML_TOP_CASES,
) -> RunReport:
    """Read a finished run directory (and its suite's earlier runs) into a RunReport.

    `top` caps the cases shown in detail per section; None keeps every case (JUnit).
    """
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir}: no such run directory")  # as replay and promote say
    if not (run_dir / "manifest.json").exists() and not (run_dir / "summary.json").exists():
        raise UsageError(f"{run_dir}: not a parallax run directory (no manifest.json)")
    summary = _load_object(run_dir / "summary.json")
    try:
        manifest: Mapping[str, Any] = _load_object(run_dir / "manifest.json")
    except DataError:
        manifest = {}
    path = run_dir / "disagreement.json"
    if not path.exists():
        raise DataError(path, "no such file: not a finished parallax run")
    cases, totals, count = read_cases(path, top)
    # replies are shown only for the cases that need review and the unscored ones
    wanted = {k for k, v in cases.items() if _wants_detail(v) is not None}
    replies, notes = read_replies(run_dir, wanted)
    # a bounded window: the trend and a ceiling streak never need more, and a year of nightly
    # runs must not make every report read the whole history
    history: History = load_history(
        run_dir.parent, until=run_dir.name, last=history_window(trend_runs, retire_after)
    )
    notes.extend(history.notes)
    ceiling = ceiling_candidates(history.rows, retire_after) if retire_after else []
    return RunReport(
        history=history.rows,
        run_dir=run_dir,
        summary=summary,
        manifest=manifest,
        cases=cases,
        replies=replies,
        trend=history.rows[-trend_runs:],
        retire_after=retire_after,
        ceiling=ceiling,
        quiet_runs=streaks(history.rows),
        notes=notes,
        totals=totals,
        count=count,
    )


# ---------------------------------------------------------------- HTML


def e(value: Any) -> str:
    """Escape anything for HTML text or a quoted attribute, hidden characters shown."""
    return html.escape(visible(value), quote=True)


# no script, no fetch: even a missed escape could not run or phone home
_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
_CSS = """
:root{--fg:#0f172a;--muted:#64748b;--line:#e2e8f0;--bg:#f8fafc;--card:#fff}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);
 font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1180px;margin:0 auto;padding:20px 24px 48px}
h1{font-size:20px;margin:0} h2{font-size:16px;margin:28px 0 10px}
h3{font-size:14px;margin:0 0 6px}
code,pre,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px}
.banner{border-radius:10px;color:#fff;padding:16px 20px;display:flex;gap:18px;align-items:center;
 flex-wrap:wrap}
.banner .word{font-size:24px;font-weight:700;letter-spacing:.04em}
.banner .meta{opacity:.92}
.grid{display:grid;gap:12px}
.g2{grid-template-columns:repeat(auto-fit,minmax(340px,1fr))}
.card{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:14px 16px;
 min-width:0}
.chips{display:flex;flex-wrap:wrap;gap:8px}
.chip{border:1px solid var(--line);border-radius:999px;padding:4px 12px;background:#fff}
.chip b{margin-left:6px} .chip i{display:inline-block;width:9px;height:9px;border-radius:50%;
 margin-right:6px}
.chip.zero{opacity:.45}
.bar{display:grid;grid-template-columns:70px 1fr 150px;gap:8px;align-items:center;margin:5px 0}
.track{background:#eef2f7;border-radius:6px;height:14px;overflow:hidden}
.fill{height:100%;border-radius:6px}
.muted{color:var(--muted)} .small{font-size:12px}
.alert{color:#b91c1c;font-weight:600}
.case{margin:12px 0}
.case header{display:flex;gap:10px;align-items:baseline;flex-wrap:wrap;margin-bottom:8px}
.tag{border-radius:6px;padding:1px 8px;color:#fff;font-size:12px;font-weight:600}
.sides{display:grid;grid-template-columns:1fr 1fr;gap:10px}
.side{border:1px solid var(--line);border-radius:8px;padding:10px;min-width:0;background:#fcfdfe}
pre.reply{white-space:pre-wrap;overflow-wrap:anywhere;word-break:break-word;margin:6px 0 0;
 background:#f1f5f9;border-radius:6px;padding:8px;max-height:360px;overflow:auto}
.misses code{background:#fee2e2;border-radius:4px;padding:0 4px;margin-right:4px;
 overflow-wrap:anywhere}
ul.calls{margin:4px 0 0;padding-left:18px;font-size:12px}
ul.calls code{overflow-wrap:anywhere;word-break:break-word}
table{border-collapse:collapse;width:100%}
td,th{border-bottom:1px solid var(--line);padding:5px 8px;text-align:left;vertical-align:top;
 overflow-wrap:anywhere}
th{font-weight:600;color:var(--muted);font-size:12px}
table.inc{table-layout:fixed}
table.inc th:nth-child(1){width:20%} table.inc th:nth-child(2){width:14%}
details summary{cursor:pointer;color:var(--muted)}
svg text{font-family:system-ui,sans-serif;font-size:11px;fill:#475569}
footer{margin-top:36px;color:var(--muted);font-size:12px}
@media (max-width:760px){.sides{grid-template-columns:1fr}}
"""


def _colour(gate: str) -> str:
    """A gate class's colour; one added later gets a neutral grey, never a crash."""
    return GATE_COLOURS.get(gate, "#64748b")


def _gate_tag(gate: str) -> str:
    colour = _colour(gate)
    return f'<span class="tag" style="background:{colour}">{e(gate)}</span>'


def _misses(misses: Any) -> str:
    items = [m for m in misses if isinstance(m, str)] if isinstance(misses, list) else []
    if not items:
        return '<span class="muted">no misses</span>'
    return "".join(f"<code>{e(m)}</code>" for m in items)


def _reply_block(view: ReplyView | None, side_view: Mapping[str, Any]) -> str:
    admitted = side_view.get("admitted")
    if view is None or view.text is None:
        detail = side_view.get("detail") or side_view.get("transport") or "no reply"
        return f'<p class="muted">no reply body: {e(detail)}</p>'
    label = "reply" if view.kind == "reply" else f"raw body (HTTP {e(view.status)})"
    if not admitted and view.kind == "reply":
        label = "reply (not admitted)"
    cut = '<div class="muted small">… cut for the report</div>' if view.truncated else ""
    empty = '<span class="muted">(empty)</span>' if view.text == "" else ""
    calls = "".join(f"<li><code>{e(call)}</code></li>" for call in view.tool_calls)
    if calls:
        calls = f'<div class="muted small">tool calls</div><ul class="calls">{calls}</ul>'
        if view.text == "":  # it answered with calls only: no empty text to show
            return f"{calls}{cut}"
    return (
        f'<div class="muted small">{label}</div><pre class="reply">{e(view.text)}{empty}</pre>'
        f"{cut}{calls}"
    )


def _side_html(rep: RunReport, case_id: str, side: str, view: Mapping[str, Any]) -> str:
    stamps = f"transport {e(view.get('transport'))} · schema {e(view.get('schema'))}"
    score = view.get("task_score")
    score_text = f" · task {score:.2f}" if isinstance(score, int | float) else ""
    return (
        f'<div class="side"><h3>{e(side)}</h3>'
        f'<div class="small">model <span class="mono">{e(view.get("response_model") or "-")}'
        f"</span> · {stamps}{score_text}</div>"
        f'<div class="misses small" style="margin-top:6px">{_misses(view.get("misses"))}</div>'
        f"{_reply_block(rep.replies.get((case_id, side)), view)}</div>"
    )


def _case_html(rep: RunReport, case_id: str, case: Mapping[str, Any]) -> str:
    delta = case.get("disagreement")
    delta_html = (
        f'<span class="misses small">disagreement {_misses(delta) if delta else "empty"}</span>'
        if isinstance(delta, list)
        else ""
    )
    sides = "".join(_side_html(rep, case_id, side, mapping_of(case.get(side))) for side in SIDES)
    return (
        f'<article class="card case" id="case-{e(case_id)}">'
        f"<header>{_gate_tag(str(case.get('gate')))}"
        f'<strong class="mono">{e(case_id)}</strong>'
        f'<span class="muted small">{e(case.get("stratum") or "")}</span>'
        f'<span class="small">{e(case.get("detail"))}</span>{delta_html}</header>'
        f'<div class="sides">{sides}</div></article>'
    )


def _stamp_of(case: Mapping[str, Any]) -> str:
    """`transport: timeout` or `schema: not_json`, from the first side that failed."""
    for side in SIDES:
        view = mapping_of(case.get(side))
        if view.get("transport") not in (None, "ok"):
            return f"transport: {view.get('transport')}"
    for side in SIDES:
        view = mapping_of(case.get(side))
        if view.get("schema") not in (None, "ok"):
            detail = str(view.get("detail") or view.get("schema"))
            return f"schema: {detail.split(':', maxsplit=1)[0]}"
    return "unscored"


def incomplete_groups(rep: RunReport) -> dict[str, list[tuple[str, Mapping[str, Any]]]]:
    """Unscoreable cases grouped by their stamp, so one outage reads as one line."""
    groups: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
    for case_id, case in sorted(rep.cases.items()):
        if case.get("gate") in INCOMPLETE_ORDER or not case.get("admitted", True):
            groups.setdefault(_stamp_of(case), []).append((case_id, case))
    return dict(sorted(groups.items()))


def _incomplete_html(rep: RunReport) -> str:
    groups = incomplete_groups(rep)
    if not groups:
        return '<p class="muted">Every row was scored.</p>'
    parts = []
    for stamp_, rows in groups.items():
        body = []
        for case_id, case in rows:
            cells = []
            for side in SIDES:
                view = mapping_of(case.get(side))
                reply = rep.replies.get((case_id, side))
                excerpt = ""
                if reply is not None and reply.text and not view.get("admitted"):
                    excerpt = f'<pre class="reply">{e(reply.text[:600])}</pre>'
                cells.append(
                    f"<td><span class='mono small'>{e(view.get('transport'))} / "
                    f"{e(view.get('schema'))}</span><div class='small'>{e(view.get('detail'))}"
                    f"</div>{excerpt}</td>"
                )
            body.append(
                f"<tr><td class='mono'>{e(case_id)}</td><td>{_gate_tag(str(case.get('gate')))}"
                f"</td>{''.join(cells)}</tr>"
            )
        parts.append(
            f'<div class="card" style="margin-bottom:10px"><h3>{e(stamp_)} '
            f'<span class="muted">· {rep.totals.get(stamp_, len(rows))} case(s)</span></h3>'
            f'{_more(rep.totals.get(stamp_, len(rows)) - len(rows))}<table class="inc">'
            "<tr><th>case</th><th>gate</th><th>reference</th><th>candidate</th></tr>"
            f"{''.join(body)}</table></div>"
        )
    return "".join(parts)


def _strata_html(rep: RunReport) -> str:
    summary = rep.summary
    strata = mapping_of(summary.get("strata"))
    alerts = mapping_of(summary.get("stratum_alerts"))
    cards = []
    for side in SIDES:
        rates = mapping_of(strata.get(side))
        rows = []
        for name in STRATA:
            rate = mapping_of(rates.get(name))
            value = pass_rate_of(rate)
            n, passed, unadmitted = rate.get("n", 0), rate.get("passed", 0), rate.get("unadmitted")
            width = round(value * 100, 1) if value is not None else 0
            label = f"{value:.0%} · {passed} of n={n}" if value is not None else f"no rows (n={n})"
            if unadmitted:
                label += f" · {unadmitted} unscored"
            rows.append(
                f'<div class="bar"><span>{e(name)}</span><div class="track">'
                f'<div class="fill" style="width:{width}%;background:{STRATUM_COLOURS[name]}">'
                f'</div></div><span class="small">{e(label)}</span></div>'
            )
        side_alerts = strings_of(alerts.get(side))
        alert_html = (
            f'<div class="alert small">alerts: {e(", ".join(side_alerts))}</div>'
            if side_alerts
            else '<div class="muted small">no stratum alerts</div>'
        )
        cards.append(f'<div class="card"><h3>{e(side)}</h3>{"".join(rows)}{alert_html}</div>')
    note = summary.get("strata_note")
    note_html = f'<p class="muted small">{e(note)}</p>' if note else ""
    return f'{note_html}<div class="grid g2">{"".join(cards)}</div>'


def signal_lines(summary: Mapping[str, Any]) -> list[str]:
    """The paired test and the noise floor in words, one line each (plain text, unescaped)."""
    lines = []
    paired = mapping_of(summary.get("paired"))
    for scope in ("overall", *STRATA):
        test = mapping_of(paired.get(scope))
        if test.get("text"):
            lines.append(str(test["text"]))
    # the release question is asked of the whole suite: its answer overall only
    claim = mapping_of(mapping_of(paired.get("overall")).get("non_inferiority"))
    if claim.get("text"):
        lines.append(f"non-inferiority: {claim['text']}")
    floor = mapping_of(summary.get("noise_floor"))
    for scope in ("overall", *STRATA):
        row = mapping_of(floor.get(scope))
        if row.get("n"):
            lines.append(
                f"noise floor ({scope}): the reference disagreed with itself on "
                f"{row.get('disagreeing')} of {row.get('n')} cases"
            )
    return lines


def _signal_html(rep: RunReport) -> str:
    lines = signal_lines(rep.summary)
    if not lines:
        return '<p class="muted">No paired cases.</p>'
    flag = (
        "<p><b>significant regression</b>"
        + (
            " (gating: fail_on)"
            if "significant_regression" in (rep.summary.get("fail_on") or [])
            else ""
        )
        + "</p>"
        if rep.summary.get("significant_regression")
        else ""
    )
    return flag + "<ul>" + "".join(f"<li>{e(line)}</li>" for line in lines) + "</ul>"


def _models_html(rep: RunReport) -> str:
    served = mapping_of(rep.summary.get("served_models"))
    endpoints = mapping_of(rep.manifest.get("endpoints"))
    rows = []
    for side in SIDES:
        ep = mapping_of(endpoints.get(side))
        models = strings_of(served.get(side))
        rows.append(
            f"<tr><td>{e(side)}</td><td class='mono'>{e(ep.get('name') or '-')}</td>"
            f"<td class='mono'>{e(ep.get('model') or '-')}</td>"
            f"<td class='mono'>{e(ep.get('request_sha') or '-')}</td>"
            f"<td class='mono'>{e(', '.join(map(str, models)) or '-')}</td></tr>"
        )
    # the candidate's request moving is the change under test: said here, not under review
    changed = "".join(f"<p>{e(line)}</p>" for line in request_lines(rep.summary, "candidate"))
    return (
        '<div class="card"><table><tr><th>side</th><th>endpoint</th><th>requested alias</th>'
        f"<th>request_sha</th><th>served model(s)</th></tr>{''.join(rows)}</table>"
        f"{changed}</div>"
    )


def _usage_html(rep: RunReport) -> str:
    rows = usage.table(rep.summary)
    if not rows:
        return '<p class="muted">No usage recorded.</p>'
    head = "".join(f"<th>{e(c)}</th>" for c in usage.COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _gate_chips(rep: RunReport) -> str:
    counts = mapping_of(rep.summary.get("gate_counts"))
    chips = []
    for gate in GATE_CLASSES:
        n = counts.get(gate, 0)
        chips.append(
            f'<span class="chip{" zero" if not n else ""}">'
            f'<i style="background:{_colour(gate)}"></i>{e(gate)}<b>{e(n)}</b></span>'
        )
    return f'<div class="chips">{"".join(chips)}</div>'


def _label(row: RunRow) -> str:
    stamp_ = row.started_at or row.run_id
    return stamp_[5:16].replace("T", " ")


def trend_gates_svg(rows: Sequence[RunRow], width: int = 1100, height: int = 200) -> str:
    """Stacked bars of gate classes, one bar per run, oldest left."""
    if not rows:
        return '<p class="muted">No earlier runs of this suite.</p>'
    left, bottom, top = 36, 34, 10
    plot_w, plot_h = width - left - 10, height - bottom - top
    most = max(1, *(sum(r.gate_counts.values()) for r in rows))
    slot = plot_w / len(rows)
    bar_w = min(42.0, slot * 0.7)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="100%" role="img" aria-label="gate classes per run">'
    ]
    for frac in (0, 0.5, 1):
        y = top + plot_h * (1 - frac)
        parts.append(
            f'<line x1="{left}" x2="{width - 10}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e2e8f0"/>'
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{round(most * frac)}</text>'
        )
    for i, row in enumerate(rows):
        x = left + slot * i + (slot - bar_w) / 2
        y = top + plot_h
        for gate in GATE_CLASSES:
            n = row.gate_counts.get(gate, 0)
            if not n:
                continue
            h = plot_h * n / most
            y -= h
            parts.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{h:.1f}" '
                f'fill="{_colour(gate)}"><title>{e(row.run_id)}: {e(gate)} {n}</title></rect>'
            )
        if len(rows) <= 16 or i % max(1, len(rows) // 12) == 0:
            parts.append(
                f'<text x="{x + bar_w / 2:.1f}" y="{height - 14}" text-anchor="middle">'
                f"{e(_label(row))}</text>"
            )
    parts.append("</svg>")
    return "".join(parts)


def trend_strata_svg(rows: Sequence[RunRow], side: str, width: int = 540, height: int = 180) -> str:
    """One line per stratum: that side's pass rate per run (gaps where no row was admitted)."""
    if not rows:
        return ""
    left, bottom, top, right = 36, 24, 10, 10
    plot_w, plot_h = width - left - right, height - bottom - top
    step = plot_w / max(1, len(rows) - 1)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="100%" role="img" aria-label="{e(side)} strata pass rates per run">'
    ]
    for frac in (0, 0.5, 1):
        y = top + plot_h * (1 - frac)
        parts.append(
            f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e2e8f0"/>'
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{frac:.0%}</text>'
        )
    for name in STRATA:
        colour = STRATUM_COLOURS[name]
        points: list[tuple[float, float, str]] = []
        for i, row in enumerate(rows):
            rate = mapping_of(row.strata.get(side, {}).get(name))
            value = pass_rate_of(rate)
            if value is not None:
                x = left + (step * i if len(rows) > 1 else plot_w / 2)
                y = top + plot_h * (1 - value)
                points.append((x, y, f"{row.run_id}: {name} {value:.0%} (n={rate.get('n')})"))
        if len(points) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y, _ in points)
            parts.append(
                f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>'
            )
        parts.extend(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{colour}"><title>{e(t)}</title>'
            "</circle>"
            for x, y, t in points
        )
    legend_x = left
    for name in STRATA:
        parts.append(
            f'<rect x="{legend_x}" y="{height - 12}" width="10" height="10" '
            f'fill="{STRATUM_COLOURS[name]}"/><text x="{legend_x + 14}" y="{height - 3}">'
            f"{name}</text>"
        )
        legend_x += 80
    parts.append("</svg>")
    return "".join(parts)


def _trend_html(rep: RunReport) -> str:
    rows = rep.trend
    legend = " ".join(
        f'<span class="chip small"><i style="background:{_colour(g)}"></i>{e(g)}</span>'
        for g in GATE_CLASSES
    )
    strata = "".join(
        f'<div class="card"><h3>{e(side)} pass rates</h3>{trend_strata_svg(rows, side)}</div>'
        for side in SIDES
    )
    return (
        f'<div class="card"><h3>gate classes, last {len(rows)} run(s)</h3>'
        f"{trend_gates_svg(rows)}<div class='chips'>{legend}</div></div>"
        f'<div class="grid g2" style="margin-top:12px">{strata}</div>'
    )


def _ceiling_html(rep: RunReport) -> str:
    if rep.retire_after is None:
        return '<p class="muted">No retire_after threshold known for this run.</p>'
    if not rep.ceiling:
        return (
            f'<p class="muted">None: no case has been passed by both sides with an empty '
            f"disagreement for {rep.retire_after} runs in a row.</p>"
        )
    items = "".join(
        f"<li><span class='mono'>{e(c)}</span> "
        f"<span class='muted'>quiet for {rep.quiet_runs.get(c, 0)} runs</span></li>"
        for c in rep.ceiling
    )
    return (
        f"<p>Both sides passed these with an empty disagreement for at least "
        f"{rep.retire_after} runs running: retire them or make them harder.</p><ul>{items}</ul>"
    )


def _all_cases_html(rep: RunReport) -> Iterator[str]:
    """The table of every case, a row at a time: at 20,000 cases it is most of the page."""
    yield (
        f"<details><summary>all {rep.count} case(s)</summary><div class='card'>"
        "<table><tr><th>case</th><th>gate</th><th>stratum</th><th>detail</th></tr>"
    )
    for k, gate, stratum, detail in rep.table():
        yield (
            f"<tr><td class='mono'>{e(k)}</td><td>{_gate_tag(gate)}</td>"
            f"<td>{e(stratum or '')}</td><td class='small'>{e(detail)}</td></tr>"
        )
    retired = strings_of(rep.summary.get("retired"))
    retired_html = (
        f"<p class='small muted'>retired (in the snapshot, not in the fixtures): "
        f"{e(', '.join(map(str, retired)))}</p>"
        if retired
        else ""
    )
    yield f"</table>{retired_html}</div></details>"


def _more(hidden: int) -> str:
    """The note under a section cut at HTML_TOP_CASES cases."""
    if hidden <= 0:
        return ""
    return (
        f'<p class="muted small">… and {hidden} more, not shown in detail: see the table of '
        "all cases below and disagreement.json.</p>"
    )


def html_parts(rep: RunReport) -> Iterator[str]:
    """The whole report as one self-contained HTML document, in pieces, so writing it never
    holds the whole page."""
    s = rep.summary
    verdict = str(s.get("verdict") or "unknown")
    colour = VERDICT_COLOURS.get(verdict, "#334155")
    review = rep.cases_in(REVIEW_ORDER)
    # a reference whose request moved needs review whatever its cases' gate classes
    moved = "".join(f"<p><b>{e(line)}</b></p>" for line in request_lines(s, REFERENCE))
    review_html = moved + "".join(_case_html(rep, k, v) for k, v in review)
    if review:
        review_html += _more(rep.total(REVIEW_ORDER) - len(review))
    elif not moved:
        review_html = '<p class="muted">Nothing moved against the accepted snapshot.</p>'
    notes_html = (
        "<ul class='small muted'>" + "".join(f"<li>{e(n)}</li>" for n in rep.notes) + "</ul>"
        if rep.notes
        else ""
    )
    meta = (
        f"run <span class='mono'>{e(s.get('run_id') or rep.run_dir.name)}</span> · "
        f"{e(s.get('mode') or 'run')} · started {e(s.get('started_at'))} · "
        f"finished {e(s.get('finished_at'))}"
    )
    if s.get("parent"):
        meta += f" · parent <span class='mono'>{e(s.get('parent'))}</span>"
    counts = (
        f"{e(s.get('cases'))} cases · {e(s.get('admitted'))} admitted · "
        f"{e(s.get('unadmitted'))} unadmitted · samples {e(s.get('samples'))}"
    )
    generated = datetime.now(UTC).isoformat(timespec="seconds")
    yield f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="{_CSP}">
<title>parallax · {e(rep.suite)} · {e(verdict)}</title>
<style>{_CSS}</style></head>
<body><main>
<div class="banner" style="background:{colour}">
<div><div class="small" style="opacity:.85">parallax · suite</div><h1>{e(rep.suite)}</h1></div>
<div class="word">{e(verdict.upper())}</div>
<div class="meta">exit {e(s.get("exit_code"))} · {counts}<br><span class="small">{meta}</span></div>
</div>
<h2>Gate classes</h2>{_gate_chips(rep)}
<h2>Needs review ({rep.total(REVIEW_ORDER)})</h2>{review_html}
<h2>Strata pass rates (admitted rows only)</h2>{_strata_html(rep)}
<h2>Reference vs candidate: paired test</h2>{_signal_html(rep)}
<h2>Transport and schema misses</h2>{_incomplete_html(rep)}
<h2>Served models</h2>{_models_html(rep)}
<h2>Cost and latency</h2>{_usage_html(rep)}
<h2>Trend</h2>{_trend_html(rep)}
<h2>Ceiling candidates</h2>{_ceiling_html(rep)}
<h2>Cases</h2>"""
    yield from _all_cases_html(rep)
    yield f"""
{notes_html}
<footer>parallax {e(__version__)} · generated {e(generated)} · {e(rep.run_dir)}</footer>
</main></body></html>
"""


# ---------------------------------------------------------------- Markdown

_MD_SPECIAL = str.maketrans(
    {
        "\\": "\\\\",
        "`": "\\`",
        "|": "\\|",
        "*": "\\*",
        "_": "\\_",
        "[": "\\[",
        "]": "\\]",
        "#": "\\#",
        "~": "\\~",
        "!": "\\!",
    }
)


def _folded(value: Any) -> str:
    """One line: runs of whitespace (newlines included) become one space."""
    return " ".join(("" if value is None else str(value)).split())


def _capped(units: Iterable[str], cap: int) -> str:
    """The units joined, at most `cap` characters: cut between units, with "…" if cut."""
    kept: list[str] = []
    size = 0
    for unit in units:
        kept.append(unit)
        size += len(unit)
        if size > cap:
            while size > cap - 1:
                size -= len(kept.pop())
            return "".join(kept) + "…"
    return "".join(kept)


def md_text(value: Any, cap: int = MD_REPLY_CAP) -> str:
    """Untrusted text as one safe Markdown table cell: no markup, no newline, hidden
    characters shown, at most `cap` characters.

    Each character is escaped on its own (an entity, a backslash escape, a `visible` escape)
    and the cell is cut between those, so a cap never leaves half of `&lt;` or a lone `\\`.
    """
    units = (
        html.escape(visible(char), quote=False).translate(_MD_SPECIAL) for char in _folded(value)
    )
    return _capped(units, cap)


def md_code(value: Any, cap: int = MD_ID_CAP) -> str:
    """Untrusted text as a Markdown code span, shown as it is, the span at most `cap` + 4.

    Inside a code span GitHub shows entities and backslashes literally, so nothing is escaped
    but what `visible` shows; a backtick in the text cannot end the span, as the fence is one
    backtick longer than the longest run in it (padded with a space where the text starts or
    ends with one, as CommonMark asks).
    """
    text = _capped((visible(char) for char in _folded(value)), cap)
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if not text or text[0] == "`" or text[-1] == "`" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _md_list(items: Sequence[str], budget: int, total: int | None = None) -> str:
    """Items joined by ", " within `budget` characters, then "and N more" for the rest
    (`total` counts items not passed in too)."""
    count = len(items) if total is None else total
    shown: list[str] = []
    for item in items:
        rest = count - len(shown) - 1
        more = f" and {rest} more" if rest else ""
        if shown and len(", ".join([*shown, item])) + len(more) > budget:
            break
        shown.append(item)
    rest = count - len(shown)
    return ", ".join(shown) + (f" and {rest} more" if rest else "")


def _md_misses(misses: Any) -> str:
    items = [m for m in misses if isinstance(m, str)] if isinstance(misses, list) else []
    return _md_list([md_text(m, MD_MISS_CAP) for m in items], MD_ID_CAP) or "—"


def _md_reply(rep: RunReport, case_id: str, side: str, view: Mapping[str, Any]) -> str:
    reply = rep.replies.get((case_id, side))
    if reply is None or reply.text is None:
        return f"*{md_text(view.get('detail') or 'no reply', 80)}*"
    if not reply.tool_calls:
        return md_text(reply.text) or "*(empty)*"
    calls = "calls: " + md_text(", ".join(reply.tool_calls), MD_CALLS_CAP)
    text = md_text(reply.text, MD_REPLY_CAP - MD_CALLS_CAP - len("<br>calls: "))
    return f"{text}<br>{calls}" if text else calls


def render_markdown(rep: RunReport) -> str:
    """A short summary for a pull-request comment or a CI step summary."""
    s = rep.summary
    verdict = str(s.get("verdict") or "unknown")
    icon = {"clean": "✅", "review": "🟠", "incomplete": "⚪", "review+incomplete": "🔴"}
    lines = [
        f"### {icon.get(verdict, '')} parallax · {md_text(rep.suite, 80)}: "
        f"**{md_text(verdict.upper(), 40)}** (exit {md_text(s.get('exit_code'), 4)})",
        "",
        f"run {md_code(s.get('run_id') or rep.run_dir.name)} · {md_text(s.get('cases'))} "
        f"cases · {md_text(s.get('admitted'))} admitted · {md_text(s.get('unadmitted'))} "
        "unadmitted",
        "",
    ]
    counts = mapping_of(s.get("gate_counts"))
    shown = [g for g in GATE_CLASSES if counts.get(g)]
    if shown:
        lines += [
            "| " + " | ".join(md_text(g) for g in shown) + " |",
            "|" + "---:|" * len(shown),
            "| " + " | ".join(md_text(counts.get(g)) for g in shown) + " |",
            "",
        ]
    if changed := request_lines(s):
        lines += [f"- {md_text(line, 200)}" for line in changed] + [""]
    review = rep.cases_in(REVIEW_ORDER)
    if review:
        lines += [
            f"**Needs review ({rep.total(REVIEW_ORDER)})**",
            "",
            "| case | gate | detail | reference | candidate |",
            "|---|---|---|---|---|",
        ]
        for case_id, case in review[:MD_TOP_CASES]:
            # at most 80 + 40 + 160 + 2 x (160 + 12 + 80) characters, under MD_LINE_CAP
            cells = [
                md_text(case_id, MD_ID_CAP),
                md_text(case.get("gate"), 40),
                md_text(case.get("detail")),
            ]
            for side in SIDES:
                view = mapping_of(case.get(side))
                cells.append(
                    f"{_md_reply(rep, case_id, side, view)}<br>misses: "
                    f"{_md_misses(view.get('misses'))}"
                )
            lines.append("| " + " | ".join(cells) + " |")
        if rep.total(REVIEW_ORDER) > MD_TOP_CASES:
            hidden = rep.total(REVIEW_ORDER) - MD_TOP_CASES
            lines.append(f"| … {hidden} more in report.html | | | | |")
        lines.append("")
    groups = incomplete_groups(rep)
    if groups:
        lines.append("**Unscored (transport and schema misses)**")
        lines.append("")
        for stamp_, rows in groups.items():
            total = rep.totals.get(stamp_, len(rows))
            head = f"- {md_text(stamp_, MD_ID_CAP)} — {total} case(s): "
            ids = [md_code(k, 60) for k, _ in rows[:MD_TOP_CASES]]
            lines.append(head + _md_list(ids, MD_LINE_CAP - len(head), total))
        lines.append("")
    alerts = mapping_of(s.get("stratum_alerts"))
    for side in SIDES:
        if side_alerts := strings_of(alerts.get(side)):
            joined = _md_list([md_text(a, 40) for a in side_alerts], MD_LINE_CAP - 40)
            lines.append(f"- strata alert ({side}): {joined}")
    served = mapping_of(s.get("served_models"))
    models = {
        side: _md_list([md_text(m, MD_ID_CAP) for m in strings_of(served.get(side))], 380)
        for side in SIDES
    }
    lines.append("- served: " + "; ".join(f"{side} {models[side] or '—'}" for side in SIDES))
    lines.extend(f"- {md_text(line, 200)}" for line in signal_lines(s))
    if figures := usage.table(s):
        lines += ["", "| " + " | ".join(usage.COLUMNS) + " |", "|---" + "|---:" * 11 + "|"]
        lines += ["| " + " | ".join(md_text(c, 40) for c in row) + " |" for row in figures]
        lines.append("")
    if rep.ceiling:
        head = f"- ceiling candidates ({len(rep.ceiling)}): "
        ids = [md_code(c, 60) for c in rep.ceiling[:MD_TOP_CASES]]
        lines.append(head + _md_list(ids, MD_LINE_CAP - len(head), len(rep.ceiling)))
    lines.append("")
    lines.append("Full report: `report.html` in the run directory.")
    return "\n".join(lines) + "\n"  # each line built within MD_LINE_CAP


# ---------------------------------------------------------------- files and the run hook


def write_reports(run_dir: Path, *, retire_after: int | None = None) -> RunReport:
    """Render report.html and report.md into the run directory; return what was rendered."""
    check_writable(run_dir, REPORT_FILES, action="write its reports here")
    rep = build_report(run_dir, retire_after=retire_after)
    _write_text(run_dir / "report.html", html_parts(rep))
    _write_text(run_dir / "report.md", [render_markdown(rep)])
    return rep


def _write_text(path: Path, parts: Iterable[str]) -> None:
    try:
        write_atomic(path, (part.encode("utf-8") for part in parts))
    except OSError as exc:  # checked writable just before: a full disk, a name taken since
        raise UsageError(f"{path}: cannot write: {exc.strerror or exc}") from None


def after_run(run_dir: Path, *, retire_after: int, log: Any) -> None:
    """`run`'s last step: write the reports and raise alert.ceiling_candidates when it grew."""
    from runner import logs

    try:
        rep = write_reports(run_dir, retire_after=retire_after)
    except Exception as exc:  # a report must never cost the run its verdict or exit code
        log.error(  # noqa: TRY400 - a structlog event: the error goes in fields
            logs.REPORT_FAILED, error=f"{type(exc).__name__}: {exc}", run_dir=str(run_dir)
        )
        return
    rows = rep.history
    if not rows or rows[-1].run_dir != run_dir or not rows[-1].counts_as_night:
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
