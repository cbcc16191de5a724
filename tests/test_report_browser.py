"""report.html in a real browser: hostile replies render as text, nothing injected runs.

The run goes through the whole pipeline (recorded endpoints, stamps, gate, finalize, reports)
with replies that carry `<script>`, `<img onerror>`, a closing `</table>`, Markdown pipes and a
very long line. Debian's chromium (tests/browserkit.py) then loads the page and every test
fails on a console error, a page error, a request or a CSP violation. Set PARALLAX_ARTIFACTS to
a folder to keep a screenshot for a human to look at.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from browserkit import Browser, Tab, in_thread
from reportkit import (
    HOSTILE_IMG,
    HOSTILE_INPUTS,
    HOSTILE_PIPES,
    HOSTILE_QUIET,
    HOSTILE_SCRIPT,
    HOSTILE_TABLE,
    PWNED,
    hostile_inputs_project,
    hostile_project,
)

from runner.reports.render import source_hash
from runner.text import visible

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

# the page's case data blocks (no browser runs their type) that hold anything but base64
_NOT_DATA = (
    "[...document.querySelectorAll('script[type=\"application/octet-stream\"]')]"
    ".filter((e) => !/^[A-Za-z0-9+/=]*$/.test(e.textContent)).length"
)
_SCRIPTS = 'script:not([type="application/octet-stream"])'  # the ones a browser runs

# what the DOM holds after the page's own scripts ran, as the browser built it
_DOM_FACTS = f"""() => ({{
  tags: [...document.querySelectorAll('{_SCRIPTS}, img, iframe, object, embed, frame')]
    .map((e) => e.tagName.toLowerCase()),
  scripts: [...document.querySelectorAll('{_SCRIPTS}')].map((e) => e.textContent),
  data: {_NOT_DATA},
  injected: document.querySelectorAll('#injected').length,
  pwned: [...document.querySelectorAll('[data-pwned]')].map((e) => e.dataset.pwned),
  csp: document.querySelector('meta[http-equiv="Content-Security-Policy"]')?.content ?? null,
}})"""


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
    """After the browser ran the page and every case was opened: no img, frame or injected
    element, no handler ran, every script element a browser runs is one the page's CSP allows
    by its hash, and the case data blocks hold base64 only."""
    with browser.open(report) as tab:
        _open_every_case(tab)
        facts = _facts(tab)
    csp = str(facts["csp"])
    scripts = [str(s) for s in facts["scripts"]]  # type: ignore[attr-defined]
    expected: tuple[list[str], int, list[str], list[bool], int] = (
        ["script"],
        0,
        [],
        [True],
        0,
    )
    actual = (
        facts["tags"],
        facts["injected"],
        facts["pwned"],
        [source_hash(s) in csp for s in scripts],
        facts["data"],
    )
    assert expected == actual


# the opened cases' details, as the page's script built them: their <pre>s and anything
# injected there
_OPENED_FACTS = """() => {
  const parts = [...document.querySelectorAll('tr.detail')];
  return {
    pre: parts.flatMap((c) => [...c.querySelectorAll('pre')].map((e) => e.textContent)),
    injected: parts.flatMap((c) => [...c.querySelectorAll('script, img, iframe, #injected')])
      .length,
  };
}"""


def _open_every_case(tab: Tab, facts: str | None = None) -> list[object]:
    """Click each case's link as a person would; what `facts` says of each opened case."""
    rows = tab.page.locator("tr.case")
    shown = []
    for n in range(rows.count()):
        row = rows.nth(n)
        row.locator("a.open").click()
        tab.page.locator("tr.detail section.case-detail").wait_for()
        if facts is not None:
            shown.append(tab.page.evaluate(facts, row.get_attribute("data-id")))
    return shown


def test_replies_show_as_text(browser: Browser, report: Path) -> None:
    """Each hostile reply is the text content of a <pre> in its case's detail once opened,
    character for character, and no element came out of one."""
    with browser.open(report) as tab:
        found = _open_every_case(tab, _OPENED_FACTS)
    shown = [text for facts in found for text in facts["pre"]]  # type: ignore[index]
    assert sum(facts["injected"] for facts in found) == 0  # type: ignore[index]
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


# ------------------------------------------------ hostile inputs: ids, prompts, tools, models

# everything in the DOM that would show a payload escaped its text: the global a script sets,
# elements that load or run something, handlers, link targets, and the raw characters
# text.visible turns into escapes: format characters (bidi controls, zero-width ones) and NUL
# (a parser drops a raw NUL from text and makes it U+FFFD in an attribute, so only its escape
# shown as text proves it was handled: see below)
_INERT_FACTS = f"""() => {{
  const all = (s) => [...document.querySelectorAll(s)];
  const html = document.documentElement.outerHTML;
  return {{
    pwned: window.{PWNED} ?? null,
    loaders: all('img, iframe, frame, object, embed, link, base, video, audio, source')
      .map((e) => e.tagName.toLowerCase()),
    scripts: all('{_SCRIPTS}').map((e) => e.textContent),
    data: {_NOT_DATA},
    injected: all('#injected').length,
    handlers: all('*').flatMap((e) => [...e.attributes]
      .filter((a) => a.name.startsWith('on')).map((a) => e.tagName + ' ' + a.name)),
    hrefs: all('[href], [src], [action], [formaction]')
      .map((e) => e.getAttribute('href') ?? e.getAttribute('src') ?? e.getAttribute('action')
        ?? e.getAttribute('formaction')),
    raw: [...html.matchAll(/[\\p{{Cf}}\\u0000\\ufffd]/gu)]
      .map((m) => m[0].codePointAt(0).toString(16)),
    csp: document.querySelector('meta[http-equiv="Content-Security-Policy"]')?.content ?? '',
  }};
}}"""


# the opened case's parts, as text, for the case whose data-id is the argument
_DETAIL = """(id) => {
  const found = [...document.querySelectorAll('tr.detail section.case-detail')]
    .find((s) => s.dataset.id === id);
  if (!found) return null;
  const text = (sel) => [...found.querySelectorAll(sel)].map((e) => e.textContent.trim());
  const cand = '.cd-side[data-side="candidate"] ';
  return {
    id: text('.cd-head strong'),
    system: text(cand + '.cd-turn[data-role="system"] pre'),
    prompt: text(cand + '.cd-turn[data-role="user"] pre'),
    reply: text(cand + '.cd-text'),
    calls: text(cand + '.cd-calls code'),
    served: text(cand + '.cd-meta code'),
    row: found.closest('tr.detail').previousElementSibling.dataset.id,
  };
}"""


@dataclass(frozen=True)
class Hostile:
    """The hostile-inputs run's report.html, its suite's history page, and the case ids."""

    report: Path
    history: Path
    run_dir: Path


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Hostile:
    _, run_dir, history = in_thread(hostile_inputs_project, tmp_path_factory.mktemp("inputs"))
    return Hostile(run_dir / "report.html", history, run_dir)


def _inert(tab: Tab, *, allowed_hrefs: Callable[[str], bool]) -> dict[str, object]:
    """What of the page is not its own; every list empty, every count zero, when inert."""
    facts = tab.page.evaluate(_INERT_FACTS)
    assert isinstance(facts, dict)
    csp = str(facts["csp"])
    return {
        "pwned": facts["pwned"],
        "loaders": facts["loaders"],
        "foreign scripts": [s for s in facts["scripts"] if source_hash(s) not in csp],
        "data blocks not base64": facts["data"],
        "injected": facts["injected"],
        "handlers": facts["handlers"],
        "foreign links": [h for h in facts["hrefs"] if not allowed_hrefs(h)],
        "raw characters": facts["raw"],
    }


INERT = {
    "pwned": None,
    "loaders": [],
    "foreign scripts": [],
    "data blocks not base64": 0,
    "injected": 0,
    "handlers": [],
    "foreign links": [],
    "raw characters": [],
}


def _report_link(href: str) -> bool:
    """report.html links only to its own views and to raw.jsonl beside it."""
    return href.startswith("#") or href == "raw.jsonl"


def _history_link(href: str) -> bool:
    """The history page links only to a run's report.html beside it."""
    parts = href.split("/")
    return len(parts) == 2 and parts[1] == "report.html" and ":" not in href


def test_hostile_inputs_stay_inert_in_the_report(browser: Browser, hostile: Hostile) -> None:
    """Payloads in case ids, prompts, system prompts, replies, tool calls and model names run
    nothing and add no element, link or raw control character, before and after every case
    is opened; no console error, request or CSP violation (the harness fails on those)."""
    with browser.open(hostile.report) as tab:
        before = _inert(tab, allowed_hrefs=_report_link)
        opened = _open_every_case(tab, _DETAIL)
        after = _inert(tab, allowed_hrefs=_report_link)
        tab.screenshot("report-hostile-inputs")
    expected = (INERT, INERT, len(HOSTILE_INPUTS) + 1, [])
    actual = (before, after, len(opened), [o for o in opened if o is None])
    assert expected == actual


def test_hostile_inputs_stay_inert_without_javascript(browser: Browser, hostile: Hostile) -> None:
    """Without JavaScript the review cases are expanded in the page itself (inside
    <noscript>, which a payload's `</noscript>` must not close): still nothing injected."""
    with browser.open(hostile.report, javascript=False) as tab:
        actual = _inert(tab, allowed_hrefs=_report_link)
        shown = tab.page.locator("section.case-detail").count()
    expected = (INERT, True)
    assert expected == (actual, shown > 0)


def test_hostile_inputs_show_as_text_in_an_opened_case(browser: Browser, hostile: Hostile) -> None:
    """Opening a case shows its id, system prompt, prompt, reply, tool call and served model
    as the text they are, a bidi control or NUL as its escape."""
    with browser.open(hostile.report) as tab:
        opened = {str(o["row"]): o for o in _open_every_case(tab, _DETAIL) if o}  # type: ignore[index]
    expected = {}
    actual = {}
    for n, text in enumerate(HOSTILE_INPUTS.values()):
        shown = visible(text)
        expected[shown] = {
            "id": [shown],
            "system": [shown],
            "prompt": [shown],
            "reply": [shown],
            "call names the tool": True,
            "served": True,
        }
        got = opened.get(shown) or {}
        calls = got.get("calls") or [""]
        actual[shown] = {
            "id": got.get("id"),
            "system": got.get("system"),
            "prompt": got.get("prompt"),
            "reply": got.get("reply"),
            "call names the tool": str(calls[0]).startswith(shown + "("),
            "served": (f"cand-{shown}" if n % 2 else "cand-1") in (got.get("served") or []),
        }
    assert expected == actual


def test_escapes_are_what_a_reader_sees(browser: Browser, hostile: Hostile) -> None:
    """The bidi and NUL case ids read as their escapes in the case table."""
    with browser.open(hostile.report) as tab:
        ids = tab.page.locator("tr.case a.open").all_inner_texts()
    expected = [True, True]
    actual = ["invoice\\u202egpj.exe \\u2066isolated\\u2069" in ids, "before\\x00after" in ids]
    assert expected == actual


def test_hostile_inputs_stay_inert_in_the_history_page(browser: Browser, hostile: Hostile) -> None:
    """The suite's history page, which names the hostile served models and a hostile case id
    among its ceiling candidates, runs and injects nothing, with and without JavaScript, and
    shows them as text."""
    with browser.open(hostile.history) as tab:
        with_script = _inert(tab, allowed_hrefs=_history_link)
        models = set(tab.page.locator("code.model").all_text_contents())
        ceiling = tab.page.locator("li.ceiling code").all_text_contents()
        tab.screenshot("history-hostile-inputs")
    with browser.open(hostile.history, javascript=False) as tab:
        without = _inert(tab, allowed_hrefs=_history_link)
    served = {f"cand-{visible(t)}" for n, t in enumerate(HOSTILE_INPUTS.values()) if n % 2}
    expected = (INERT, INERT, set(), [visible(HOSTILE_QUIET)])
    assert expected == (with_script, without, served - models, ceiling)


# ------------------------------------------------ following links, and no JavaScript


def _shown_ids(tab: Tab) -> list[str]:
    return [str(r.get_attribute("data-id")) for r in tab.page.locator("tr.case:visible").all()]


def test_a_reason_link_shows_exactly_its_cases(browser: Browser, hostile: Hostile) -> None:
    """Following the verdict's disagreement reason and its alias drift reason each leaves
    exactly the cases of that gate class in the table, as many as the reason says."""
    texts = list(HOSTILE_INPUTS.values())
    expected = {
        "disagreement_changed": sorted(visible(t) for t in texts[0::2]),
        "alias_drift": sorted(visible(t) for t in texts[1::2]),
    }
    actual = {}
    counts = {}
    with browser.open(hostile.report) as tab:
        for kind in expected:
            reason = tab.page.locator(f'#reasons li.reason[data-reason="{kind}"]')
            counts[kind] = int(reason.locator(".count").inner_text())
            reason.locator("a").click()
            tab.view_applied()
            actual[kind] = sorted(_shown_ids(tab))
    assert (expected, {k: len(v) for k, v in expected.items()}) == (actual, counts)


def test_a_case_opened_is_a_link_that_opens_it_again(browser: Browser, hostile: Hostile) -> None:
    """Opening a case puts it in the URL; loading that URL shows the same case opened."""
    case_id = visible(HOSTILE_INPUTS["bidi"])
    with browser.open(hostile.report) as tab:
        tab.page.locator("tr.case").filter(has_text=case_id).locator("a.open").click()
        fragment = tab.page.evaluate("location.hash").removeprefix("#")
    with browser.open(hostile.report, fragment=fragment) as tab:
        tab.page.locator("tr.detail section.case-detail").first.wait_for()
        shown = tab.page.evaluate(_DETAIL, case_id)
    assert shown is not None
    assert ([case_id], case_id) == (shown["id"], shown["row"])


def test_searching_for_a_payload_finds_its_case_and_runs_nothing(
    browser: Browser, hostile: Hostile
) -> None:
    """Typing each payload into the search box, as the page shows it, leaves exactly its case
    in the table and puts it in the URL; the page stays inert."""
    searched = "(q) => new URLSearchParams(location.hash.slice(1)).get('q') === q"
    found = {}
    with browser.open(hostile.report) as tab:
        for text in HOSTILE_INPUTS.values():
            tab.page.fill("input[name=q]", visible(text))
            tab.page.wait_for_function(searched, arg=visible(text))
            found[visible(text)] = _shown_ids(tab)
        after = _inert(tab, allowed_hrefs=_report_link)
    expected = {visible(t): [visible(t)] for t in HOSTILE_INPUTS.values()}
    assert (expected, INERT) == (found, after)


def test_a_history_run_link_opens_that_run_s_report(browser: Browser, hostile: Hostile) -> None:
    """The history page's newest run links to that run's report.html, which says the same
    verdict the row does."""
    with browser.open(hostile.history) as tab:
        row = tab.page.locator("tr.night").first
        said = row.get_attribute("data-verdict")
        url = tab.follow("tr.night >> nth=0 >> a.run")
        verdict = tab.page.locator("#verdict").get_attribute("data-verdict")
    expected = (hostile.report.as_uri(), "review", "review")
    assert expected == (url, said, verdict)


def test_without_javascript_the_verdict_and_every_case_to_review_show(
    browser: Browser, hostile: Hostile
) -> None:
    """With JavaScript off the page still shows the verdict, its reasons and every case that
    needs review in full (each payload case: its disagreement changed, or its served model),
    and the filters and the table of all cases, which need the script, stay hidden."""
    with browser.open(hostile.report, javascript=False) as tab:
        page = tab.page
        details = page.locator("section.case-detail:visible")
        actual = (
            page.locator("#verdict").is_visible(),
            page.locator("#verdict").get_attribute("data-verdict"),
            page.locator("#reasons li.reason:visible").count() > 0,
            sorted(str(d.get_attribute("data-id")) for d in details.all()),
            page.locator("section.case-detail .cd-text:visible").count(),
            page.locator("#filters").is_visible(),
            page.locator("#cases").is_visible(),
        )
        tab.screenshot("report-without-javascript", full_page=True)
    every = sorted(map(visible, HOSTILE_INPUTS.values()))
    expected = (True, "review", True, every, 2 * len(every), False, False)
    assert expected == actual
