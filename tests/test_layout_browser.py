"""report.html and the history page laid out in Debian's chromium, at a phone's width (390 px)
and a laptop's (1,280 px): nothing scrolls sideways, nothing is cut, no two boxes overlap.

One project makes every kind of content a layout can break on: a live reference behind the
fault server whose first attempt is cut off (an attempts table with a long error), two samples
a side with misses (the per-sample table), miss codes and a case id long enough to push a
column, a candidate serving a long model name on some nights, and nine runs whose latencies
reach seconds (the history page's charts: ticks, date labels, model names). Each check reads
what the browser laid out (boxes, scroll widths), never a style, so it keeps holding whatever
the page's markup becomes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from browserkit import Browser, Tab, in_thread
from faultserver import FaultServer
from relkit import endpoint_toml

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

WIDTHS = (390, 1280)
NIGHTS = 9
LONG_MODEL = "claude-opus-4-5-20251101-with-a-very-long-deployment-name"
LONG_NEEDLE = "the Fjord Express leaves from platform nine at a quarter past"
LONG_ID = "support.refunds.a-case-id-that-goes-on-and-on-without-a-single-break-in-it"
PROMPTS = {"fjord": "Which train?", LONG_ID: "Refund?", "plain": "Say ok."}


@dataclass(frozen=True)
class Pages:
    report: Path
    history: Path


def _project(root: Path, server: FaultServer) -> Pages:
    """NIGHTS runs of one suite, two samples a side: a live reference whose first attempt at
    each case is cut off each night (an RST mid-body, then a retry), and a recorded candidate
    that takes seconds and serves a long model name every third night."""
    from runner.cli import main
    from runner.config import load_config
    from runner.runs.run import run_suite

    cases = [
        {"id": "fjord", "prompt": PROMPTS["fjord"], "expect": {"must_include": [LONG_NEEDLE]}},
        {"id": LONG_ID, "prompt": PROMPTS[LONG_ID], "expect": {"must_include": ["refund", "ok"]}},
        {"id": "plain", "prompt": PROMPTS["plain"], "expect": {"must_include": ["ok"]}},
    ]
    (root / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    server.replies.update({PROMPTS[LONG_ID]: "refund ok", PROMPTS["plain"]: "ok"})
    server.replies[PROMPTS["fjord"]] = "no train"
    config = root / "parallax.toml"
    for night in range(NIGHTS):
        model = LONG_MODEL if night % 3 == 1 else f"cand-{night // 3}"
        rows = [
            {
                "case_id": "fjord",
                "completion": "the Fjord Express",
                "elapsed_ms": 4824 + 90 * night,
            },
            {"case_id": LONG_ID, "completion": "no", "sample": 1, "elapsed_ms": 9649},
            {"case_id": LONG_ID, "completion": "refund ok", "elapsed_ms": 9649},
            {"case_id": "plain", "completion": "ok", "elapsed_ms": 9649},
        ]
        (root / "cand.jsonl").write_text(
            "".join(json.dumps({**r, "model": model}) + "\n" for r in rows)
        )
        config.write_text(
            'runs_dir = "runs"\nsnapshots_dir = "snapshots"\n'
            # a path of its own each night: the fault server counts requests per path
            + endpoint_toml("ref", server.url("seq:reset+ok", f"n{night}"), deadline=5, read=4)
            + '[endpoints.cand]\nkind = "recorded"\nmodel = "cand"\ncassette = "cand.jsonl"\n'
            '[suites.s]\nfixtures = "cases.jsonl"\nreference = "ref"\ncandidate = "cand"\n'
            "samples = 2\n",
            encoding="utf-8",
        )
        run_dir, _, _ = run_suite(load_config(config), "s")
    assert main(["history", "--html", "--config", str(config)]) == 0
    return Pages(run_dir / "report.html", root / "runs" / "s" / "index.html")


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pages]:
    with FaultServer() as server:
        yield in_thread(_project, tmp_path_factory.mktemp("layout"), server)


# what the browser laid out: the page's own scroll, every scroll box that overflows, and per
# table row or chart the boxes that overlap or reach outside their box
_LAYOUT = """(selector) => {
  const box = (e) => e.getBoundingClientRect();
  const overlap = (a, b) => Math.min(a.right, b.right) - Math.max(a.left, b.left) > 1
    && Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 1;
  const said = (e) => e.textContent.slice(0, 40);
  const name = (e) => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '')
    + (e.className && typeof e.className === 'string' ? '.' + e.className.split(' ')[0] : '');
  const page = document.scrollingElement;
  const out = {
    page: page.scrollWidth - page.clientWidth,
    cut: [],        // an element whose content is wider than its box (scrolls or is clipped)
    outside: [],    // an element reaching past the viewport's right edge
    overlaps: [],   // two cells of one row, or two texts of one chart, on top of each other
  };
  const width = document.documentElement.clientWidth;
  for (const e of document.querySelectorAll(selector)) {
    if (!e.checkVisibility()) continue;
    if (e.scrollWidth > e.clientWidth + 1) out.cut.push(name(e) + ' ' + said(e));
    if (box(e).right > width + 1) out.outside.push(name(e) + ' ' + said(e));
  }
  for (const row of document.querySelectorAll('tr')) {
    if (!row.checkVisibility()) continue;
    const cells = [...row.children].filter((c) => c.checkVisibility());
    cells.forEach((a, i) => cells.slice(i + 1).forEach((b) => {
      if (overlap(box(a), box(b))) out.overlaps.push(`${said(a)} | ${said(b)}`);
    }));
  }
  for (const svg of document.querySelectorAll('svg[role=img]')) {
    const frame = box(svg);
    const texts = [...svg.querySelectorAll('text')];
    texts.forEach((a, i) => {
      const r = box(a);
      const out_of_frame = r.left < frame.left - 1 || r.right > frame.right + 1;
      if (out_of_frame) out.outside.push('svg text ' + a.textContent);
      texts.slice(i + 1).forEach((b) => {
        if (overlap(r, box(b))) out.overlaps.push(`${a.textContent} | ${b.textContent}`);
      });
    });
  }
  return out;
}"""

CLEAN = {"page": 0, "cut": [], "outside": [], "overlaps": []}
# what must neither overflow nor reach past the viewport: every block a reader reads
REPORT_BOXES = "main, header, section, .card, form, label, select, table, td, th, .case-detail, pre"
HISTORY_BOXES = "main, header, section, .card, .scroll, table, td, th, svg"


def _layout(tab: Tab, selector: str) -> dict[str, Any]:
    found = tab.page.evaluate(_LAYOUT, selector)
    assert isinstance(found, dict)
    return {**found, "page": max(0, found["page"])}


def _open_every_case(tab: Tab) -> None:
    """Open each case in turn, with what each side was sent unfolded, and leave the last open."""
    for row in tab.page.locator("tr.case").all():
        row.locator("a.open").click()
        tab.page.locator("tr.detail section.case-detail").wait_for()
        tab.page.locator("tr.detail details").evaluate_all(
            "(all) => all.forEach((d) => { d.open = true; })"
        )


@pytest.mark.parametrize("width", WIDTHS)
def test_the_report_fits_its_width(browser: Browser, pages: Pages, width: int) -> None:
    """At 390 px the page scrolled sideways (the miss filter as wide as its longest code; only
    the case and gate columns in view): now nothing is wider than the viewport, no cell is cut
    and no two cells of a row overlap, at 390 and at 1,280 px."""
    with browser.open(pages.report, width=width, height=900) as tab:
        tab.screenshot(f"layout-report-{width}", full_page=True)
        assert _layout(tab, REPORT_BOXES) == CLEAN


@pytest.mark.parametrize("width", WIDTHS)
def test_an_opened_case_fits_its_width(browser: Browser, pages: Pages, width: int) -> None:
    """Each case opened: its attempts table (a long error beside the milliseconds) and its
    per-sample table (a miss code per sample) keep every cell in its own box."""
    with browser.open(pages.report, width=width, height=900) as tab:
        _open_every_case(tab)
        tab.screenshot(f"layout-case-{width}", full_page=True)
        found = _layout(tab, REPORT_BOXES)
        assert (
            tab.page.locator("tr.detail table.cd-attempts").count()
            + tab.page.locator("tr.detail table.cd-samples").count()
            > 0
        )
    assert found == CLEAN


@pytest.mark.parametrize("width", WIDTHS)
def test_a_per_sample_miss_code_is_not_broken_every_few_characters(
    browser: Browser, pages: Pages, width: int
) -> None:
    """The per-sample table's misses column was a few characters wide: a code broke over a
    line every few characters. A code that fits the column's share of the page stays on one
    line."""
    with browser.open(pages.report, width=width, height=900) as tab:
        tab.page.locator(f'tr.case[data-id="{LONG_ID}"] a.open').click()
        codes = tab.page.locator("tr.detail table.cd-samples td code")
        lines = codes.evaluate_all(
            "(all) => all.map((c) => [c.textContent, c.getClientRects().length])"
        )
    assert lines and all(n == 1 for text, n in lines if len(text) <= 20), lines


@pytest.mark.parametrize("width", WIDTHS)
def test_the_history_page_fits_its_width(browser: Browser, pages: Pages, width: int) -> None:
    """At 390 px the history page was 444 px wide, and at 1,280 px its runs table's usage column
    was cut: now nothing is wider than the viewport or cut, and in every chart each text (tick
    labels in seconds, nine runs' dates, long model names) is inside the chart and clear of
    the others."""
    with browser.open(pages.history, width=width, height=900) as tab:
        tab.screenshot(f"layout-history-{width}", full_page=True)
        found = _layout(tab, HISTORY_BOXES)
        ticks = tab.page.locator("svg[aria-label='median latency per run'] text:not(.label)")
        texts = ticks.all_text_contents()
    assert found == CLEAN
    assert texts == ["0 s", "2.5 s", "5 s", "7.5 s", "10 s"]
