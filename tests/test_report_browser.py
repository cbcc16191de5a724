"""report.html in a real browser: hostile replies render as text, nothing injected runs.

The run goes through the whole pipeline (recorded endpoints, stamps, gate, finalize, reports)
with replies that carry `<script>`, `<img onerror>`, a closing `</table>`, Markdown pipes and a
very long line. Debian's chromium (tests/browserkit.py) then loads the page and every test
fails on a console error, a page error, a request or a CSP violation. Set PARALLAX_ARTIFACTS to
a folder to keep a screenshot for a human to look at.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from browserkit import Browser, Tab, in_thread
from reportkit import HOSTILE_IMG, HOSTILE_PIPES, HOSTILE_SCRIPT, HOSTILE_TABLE, hostile_project

from runner.reports.render import source_hash

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

# what the DOM holds after the page's own scripts ran, as the browser built it
_DOM_FACTS = """() => ({
  tags: [...document.querySelectorAll('script, img, iframe, object, embed, frame')]
    .map((e) => e.tagName.toLowerCase()),
  scripts: [...document.querySelectorAll('script')].map((e) => e.textContent),
  injected: document.querySelectorAll('#injected').length,
  pwned: [...document.querySelectorAll('[data-pwned]')].map((e) => e.dataset.pwned),
  csp: document.querySelector('meta[http-equiv="Content-Security-Policy"]')?.content ?? null,
})"""


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _, run_dir = in_thread(hostile_project, tmp_path_factory.mktemp("browser"))
    return run_dir / "report.html"


def _facts(tab: Tab) -> dict[str, object]:
    facts = tab.page.evaluate(_DOM_FACTS)
    assert isinstance(facts, dict)
    return facts


def test_screenshot_is_a_full_png(browser: Browser, report: Path) -> None:
    """Chromium drew the page at the window size asked for, with no problem on the way."""
    with browser.open(report, width=1280, height=2400) as tab:
        data = tab.page.screenshot()
        tab.screenshot("report-hostile")
    width, height = struct.unpack(">II", data[16:24])
    expected = (b"\x89PNG", 1280, 2400, True)
    actual = (data[:4], width, height, len(data) > 20_000)
    assert expected == actual


def test_no_injected_element_exists_in_the_dom(browser: Browser, report: Path) -> None:
    """After the browser ran the page: no img, frame or injected element, no handler ran, and
    every script element is one the page's CSP allows by its hash."""
    with browser.open(report) as tab:
        facts = _facts(tab)
    csp = str(facts["csp"])
    scripts = [str(s) for s in facts["scripts"]]  # type: ignore[attr-defined]
    expected: tuple[list[str], int, list[str], list[bool]] = (
        ["script"] * len(scripts),
        0,
        [],
        [True] * len(scripts),
    )
    actual = (
        facts["tags"],
        facts["injected"],
        facts["pwned"],
        [source_hash(s) in csp for s in scripts],
    )
    assert expected == actual


# each case's detail waits in a <template> until it is opened: its <pre>s, as the browser
# parsed them, and anything injected there
_TEMPLATE_FACTS = """() => {
  const parts = [...document.querySelectorAll('template')].map((t) => t.content);
  return {
    pre: parts.flatMap((c) => [...c.querySelectorAll('pre')].map((e) => e.textContent)),
    injected: parts.flatMap((c) => [...c.querySelectorAll('script, img, iframe, #injected')])
      .length,
  };
}"""


def test_replies_show_as_text(browser: Browser, report: Path) -> None:
    """Each hostile reply is the text content of a <pre> in its case's detail, character for
    character, and no element came out of one."""
    with browser.open(report) as tab:
        facts = tab.page.evaluate(_TEMPLATE_FACTS)
    shown = facts["pre"]
    assert facts["injected"] == 0
    expected = [True, True, True, True]
    actual = [
        any(s in text for text in shown)
        for s in (HOSTILE_SCRIPT, HOSTILE_IMG, HOSTILE_TABLE, HOSTILE_PIPES)
    ]
    assert expected == actual


def test_page_structure_survives_a_closing_table(browser: Browser, report: Path) -> None:
    """The report's own sections all follow the hostile replies: nothing was closed early."""
    with browser.open(report) as tab:
        headings = tab.page.locator("main h2").all_inner_texts()
    expected = [True, True, True]
    actual = [h in headings for h in ("Served models", "Trend", "Ceiling candidates")]
    assert expected == actual
