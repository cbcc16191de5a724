"""report.md: the compact form of a run's report, for a pull-request comment or a CI summary.

Everything a model or an endpoint returned, and every case id, is untrusted text. `md_text`
shows hidden characters as escapes (`text.visible`), escapes the characters that could open
Markdown or HTML or break a table, and caps a cell between escapes; `md_code` puts text in a
code span as it is, fenced by more backticks than it holds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from runner.cost import regressions, usage
from runner.cost.budget import budget_line
from runner.gate import GATE_CLASSES
from runner.history import mapping_of, strings_of
from runner.model import SIDES
from runner.reports.caseview import CaseView
from runner.reports.model import REVIEW_ORDER, RunReport, incomplete_groups, signal_lines
from runner.reports.verdict import Weight, grouped, reasons
from runner.request.sha import request_lines
from runner.text import visible

MD_REPLY_CAP = 160  # characters of a reply (or a detail) in a Markdown table cell
MD_MISS_CAP = 60  # characters of one miss code (a tool miss names a tool and a key)
MD_CALLS_CAP = 100  # of that, the reply's tool calls; its text keeps the rest
MD_ID_CAP = 80  # characters of a case id, a model or a misses list in a Markdown line
MD_LINE_CAP = 800  # no Markdown line longer than this: a review row's cells add up to less
MD_TOP_CASES = 10
MD_WHY_CAP = 200  # characters of one of the verdict's reasons

# each character that could open HTML or Markdown, or end a table cell, and its escape
_MD_SPECIAL = str.maketrans(
    {
        "&": "&amp;",
        "<": "&lt;",
        ">": "&gt;",
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
    units = (visible(char).translate(_MD_SPECIAL) for char in _folded(value))
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


def _md_list(items: Sequence[str], budget: int, total: int | None = None, sep: str = ", ") -> str:
    """Items joined by `sep` within `budget` characters, then "and N more" for the rest
    (`total` counts items not passed in too)."""
    count = len(items) if total is None else total
    shown: list[str] = []
    for item in items:
        rest = count - len(shown) - 1
        more = f" and {rest} more" if rest else ""
        if shown and len(sep.join([*shown, item])) + len(more) > budget:
            break
        shown.append(item)
    rest = count - len(shown)
    return sep.join(shown) + (f" and {rest} more" if rest else "")


def _md_misses(misses: Any) -> str:
    items = [m for m in misses if isinstance(m, str)] if isinstance(misses, list) else []
    return _md_list([md_text(m, MD_MISS_CAP) for m in items], MD_ID_CAP) or "—"


def _md_reply(found: CaseView | None, side: str, view: Mapping[str, Any]) -> str:
    detail = None if found is None else dict(zip(SIDES, found.sides, strict=True))[side]
    if detail is None or detail.reply.text is None:
        return f"*{md_text(view.get('detail') or 'no reply', 80)}*"
    text = detail.reply.text
    if not detail.tool_calls:
        return md_text(text) or "*(empty)*"
    calls = "calls: " + md_text(", ".join(detail.tool_calls), MD_CALLS_CAP)
    text = md_text(text, MD_REPLY_CAP - MD_CALLS_CAP - len("<br>calls: "))
    return f"{text}<br>{calls}" if text else calls


def _md_usage(s: Mapping[str, Any]) -> list[str]:
    """report.md's cost and latency table, its budget line and the regression gates' lines."""
    lines = []
    if figures := usage.table(s):
        lines += ["", "| " + " | ".join(usage.COLUMNS) + " |", "|---" + "|---:" * 11 + "|"]
        lines += ["| " + " | ".join(md_text(c, 40) for c in row) + " |" for row in figures]
        lines.append("")
    if (budget := budget_line(s)) is not None:
        lines.append(f"- {md_text(budget, MD_LINE_CAP - 2)}")
    lines.extend(f"- {md_text(line, MD_LINE_CAP - 2)}" for line, _ in regressions.lines(s))
    return lines


def _md_head(rep: RunReport) -> list[str]:
    """The verdict, the run, and the verdict's reasons, what gates apart from what each side
    left unscored: a red run's review list may be empty."""
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
    groups = dict(grouped(reasons(s, rep.tally)))
    for weight, head in (
        (Weight.REVIEW, "Needs review"),
        (Weight.INCOMPLETE, "Unscored, per side"),
    ):
        said = [f"{r.text} ({r.blame})" if r.blame else r.text for r in groups.get(weight, ())]
        if said:
            budget = MD_LINE_CAP - len(head) - 6
            why = _md_list([md_text(t, MD_WHY_CAP) for t in said], budget, sep="; ")
            lines += [f"**{head}:** {why}", ""]
    return lines


def _md_unstratified(s: Mapping[str, Any]) -> str:
    """An unstratified suite's pass rates, every case in one (summary.json's `medium`)."""
    strata = mapping_of(s.get("strata"))
    rates = []
    for side in SIDES:
        rate = mapping_of(mapping_of(strata.get(side)).get("medium"))
        rates.append(f"{side} {md_text(rate.get('passed'), 12)} of {md_text(rate.get('n'), 12)}")
    return "- pass rates, all cases (the suite has no strata): " + "; ".join(rates)


def render_markdown(rep: RunReport) -> str:
    """A short summary for a pull-request comment or a CI step summary."""
    s = rep.summary
    lines = _md_head(rep)
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
        views = rep.views({case_id for case_id, _ in review[:MD_TOP_CASES]})
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
                    f"{_md_reply(views.get(case_id), side, view)}<br>misses: "
                    f"{_md_misses(view.get('misses'))}"
                )
            lines.append("| " + " | ".join(cells) + " |")
        if rep.total(REVIEW_ORDER) > MD_TOP_CASES:
            hidden = rep.total(REVIEW_ORDER) - MD_TOP_CASES
            lines.append(f"| … {hidden} more in report.html | | | | |")
        lines.append("")
    groups = incomplete_groups(rep)
    if groups:
        lines.append(
            "**Unscored** (not compared: a transport miss is infrastructure, a schema miss the "
            "side's own format failure)"
        )
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
    if s.get("stratified", True) is False:
        lines.append(_md_unstratified(s))
    served = mapping_of(s.get("served_models"))
    models = {
        side: _md_list([md_text(m, MD_ID_CAP) for m in strings_of(served.get(side))], 380)
        for side in SIDES
    }
    lines.append("- served: " + "; ".join(f"{side} {models[side] or '—'}" for side in SIDES))
    lines.extend(f"- {md_text(line, 200)}" for line in signal_lines(s))
    lines.extend(_md_usage(s))
    if rep.ceiling:
        head = f"- ceiling candidates ({len(rep.ceiling)}): "
        ids = [md_code(c, 60) for c in rep.ceiling[:MD_TOP_CASES]]
        lines.append(head + _md_list(ids, MD_LINE_CAP - len(head), len(rep.ceiling)))
    lines.append("")
    lines.append("Full report: `report.html` in the run directory.")
    return "\n".join(lines) + "\n"  # each line built within MD_LINE_CAP
