"""report.html's filters, search, sort and open case, driven in Debian's chromium.

One run through the whole pipeline (recorded endpoints, a promoted first run, then a second run
in which the candidate moved on one case, the reference on another, both on a third, a case
timed out and one is new) gives a page with every control something to do. Each test loads it
in a fresh browser context through tests/browserkit.py, which fails the test on any console
error, page error, request or CSP violation, and checks what a person would see.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest
from browserkit import Browser, Tab, in_thread
from reportkit import (
    BASE_CASES,
    CANDIDATE_LOST,
    TIMED,
    UNSTRATIFIED,
    Project,
    ratio_project,
    reasons_project,
)

from runner.reports.html import report_script
from runner.reports.render import source_hash

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

ODD_ID = "odd id/&=#?+"  # every character a fragment or a query treats specially
CASES = [
    *BASE_CASES,
    {"id": "timeout", "stratum": "easy", "prompt": "Say ok.", "expect": {"must_include": ["ok"]}},
]
NEW = [{"id": ODD_ID, "stratum": "medium", "prompt": "Say ok.", "expect": {"must_include": ["ok"]}}]


def _project(root: Path) -> Path:
    project = Project(root, CASES)
    first, _, _ = project.run()
    project.promote(first)
    project.cases = [*CASES, *NEW]
    project._write_jsonl("cases.jsonl", project.cases)
    project.cassettes(
        {
            "med-a": {"completion": "nope", "model": "ref-1"},
            "str-a": {"completion": "nope", "model": "ref-1"},
        },
        {
            "easy-a": {"completion": "Nope, the Fjord Express left.", "model": "cand-1"},
            "str-a": {"completion": "nope", "model": "cand-1"},
            "timeout": {"fault": "timeout"},
            ODD_ID: {"completion": "ok, from the odd one", "model": "cand-1"},
        },
    )
    second, _, _ = project.run()
    return second / "report.html"


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return in_thread(_project, tmp_path_factory.mktemp("filters"))


def shown(tab: Tab) -> list[str]:
    """The ids of the case rows a person sees, top to bottom."""
    ids: list[str] = tab.page.eval_on_selector_all(
        "#cases tr.case", "rows => rows.filter((r) => r.checkVisibility()).map((r) => r.dataset.id)"
    )
    return ids


def fragment(tab: Tab) -> dict[str, list[str]]:
    return parse_qs(tab.page.evaluate("location.hash").lstrip("#"))


def rows(tab: Tab, attribute: str) -> dict[str, str]:
    """Each case row's id and one of its data-* attributes."""
    found: dict[str, str] = tab.page.eval_on_selector_all(
        "#cases tr.case",
        f"rows => Object.fromEntries(rows.map((r) => [r.dataset.id, r.dataset.{attribute}]))",
    )
    return found


def wait_for_count(tab: Tab, count: int) -> None:
    """Until `#shown` says `count` cases are shown (a search waits for typing to pause)."""
    tab.page.wait_for_function(
        "(n) => document.getElementById('shown').textContent.startsWith(`${n} of`)", arg=count
    )


def count_line(tab: Tab) -> str:
    return str(tab.page.text_content("#shown"))


def test_without_javascript_the_cases_to_look_at_show_and_the_form_stays_hidden(
    browser: Browser, report: Path
) -> None:
    """With scripts off, the filters form and the table (which the script draws) are hidden,
    a line says so, and the cases that need review or went unscored are shown in full."""
    with browser.open(report, javascript=False) as tab:
        page = tab.page
        assert not page.is_visible("#filters") and not page.is_visible("#cases")
        details = page.locator("section.case-detail:visible").all()
        assert sorted(str(d.get_attribute("data-id")) for d in details) == [
            "easy-a",
            "med-a",
            "timeout",
        ]
        assert str(page.text_content("#no-table")).startswith("The table of all 8 cases")


def test_the_script_shows_the_form_and_how_many_cases_it_shows(
    browser: Browser, report: Path
) -> None:
    """With the script, the form is visible and says that all cases are shown."""
    with browser.open(report) as tab:
        assert tab.page.is_visible("#filters")
        assert count_line(tab) == "8 of 8 cases"
        assert len(shown(tab)) == 8


def test_each_filter_shows_exactly_its_cases_and_writes_the_fragment(
    browser: Browser, report: Path
) -> None:
    """Choosing a gate class, a stratum, a side that moved or a miss code shows just the rows
    that carry it, says how many, and keeps the choice in the fragment."""
    with browser.open(report) as tab:
        gates, strata = rows(tab, "gate"), rows(tab, "stratum")
        moved = rows(tab, "moved")
        ref, cand = rows(tab, "missReference"), rows(tab, "missCandidate")
        misses = {k: f"{ref[k] or ''}\n{cand[k] or ''}" for k in ref}  # either side's, a line each
        tab.page.select_option("select[name=gate]", "disagreement_changed")
        expected = sorted(k for k, g in gates.items() if g == "disagreement_changed")
        assert sorted(shown(tab)) == expected
        assert {"easy-a", "med-a"} <= set(expected)
        assert count_line(tab) == f"{len(expected)} of 8 cases"
        assert fragment(tab) == {"gate": ["disagreement_changed"]}
        tab.page.select_option("select[name=gate]", "")

        tab.page.select_option("select[name=stratum]", "easy")
        assert sorted(shown(tab)) == sorted(k for k, s in strata.items() if s == "easy")
        assert sorted(shown(tab)) == ["easy-a", "easy-b", "timeout"]
        tab.page.select_option("select[name=stratum]", "")

        tab.page.select_option("select[name=moved]", "reference")  # alone or with the other
        assert sorted(shown(tab)) == sorted(
            k for k, m in moved.items() if m in ("reference", "both")
        )
        assert sorted(shown(tab)) == ["med-a", "str-a"]
        tab.page.select_option("select[name=moved]", "both")
        assert shown(tab) == ["str-a"]
        tab.page.select_option("select[name=moved]", "")

        tab.page.select_option("select[name=miss]", "missing:ok")
        assert sorted(shown(tab)) == sorted(
            k for k, m in misses.items() if "missing:ok" in m.split("\n")
        )
        assert fragment(tab) == {"miss": ["missing:ok"]}
        tab.page.select_option("select[name=miss]", "")

        tab.page.check("input[name=changed]")
        assert sorted(shown(tab)) == sorted(k for k, g in gates.items() if g != "unchanged")
        assert fragment(tab) == {"changed": ["1"]}
        tab.page.uncheck("input[name=changed]")
        assert len(shown(tab)) == 8
        assert tab.page.evaluate("location.hash") == ""


def test_a_search_finds_ids_and_replies_whatever_the_case(browser: Browser, report: Path) -> None:
    """Free text matches case ids and what the sides replied, case-insensitively."""
    with browser.open(report) as tab:
        tab.page.fill("input[name=q]", "fjord EXPRESS")
        wait_for_count(tab, 1)
        assert shown(tab) == ["easy-a"]
        assert fragment(tab) == {"q": ["fjord EXPRESS"]}
        tab.page.fill("input[name=q]", "MED-")
        wait_for_count(tab, 2)
        assert sorted(shown(tab)) == ["med-a", "med-b"]
        tab.page.fill("input[name=q]", "no such words anywhere")
        wait_for_count(tab, 0)
        assert shown(tab) == []


def test_sorting_by_delta_id_and_class_reorders_the_rows(browser: Browser, report: Path) -> None:
    """By score delta the candidate's worst losses come first and unscored cases last; by id
    the rows are in id order; by class they follow the class filter's order."""
    with browser.open(report) as tab:
        tab.page.select_option("select[name=sort]", "delta")
        deltas = [rows(tab, "delta")[k] for k in shown(tab)]
        scored = [float(d) for d in deltas if d]
        assert scored == sorted(scored)
        assert scored[0] < 0
        assert deltas[-1] == ""  # the timed-out case has no score delta
        assert fragment(tab) == {"sort": ["delta"]}
        tab.page.select_option("select[name=sort]", "id")
        assert shown(tab) == sorted(shown(tab))
        tab.page.select_option("select[name=sort]", "class")
        order = tab.page.eval_on_selector_all(
            "select[name=gate] option", "options => options.map((o) => o.value)"
        )
        gates = rows(tab, "gate")
        ranks = [order.index(gates[k]) for k in shown(tab)]
        assert ranks == sorted(ranks)


def test_a_fragment_restores_the_whole_view(browser: Browser, report: Path) -> None:
    """Loading a link with filters, a search, a sort and a case shows that view: the controls
    say so, only matching rows show and the case is open; changing a control then rewrites
    the fragment in place, adding no history entry."""
    view = "gate=disagreement_changed&stratum=easy&q=FJORD&sort=delta&case=easy-a"
    with browser.open(report, fragment=view) as tab:
        page = tab.page
        assert page.input_value("select[name=gate]") == "disagreement_changed"
        assert page.input_value("select[name=stratum]") == "easy"
        assert page.input_value("input[name=q]") == "FJORD"
        assert page.input_value("select[name=sort]") == "delta"
        assert shown(tab) == ["easy-a"]
        assert count_line(tab) == "1 of 8 cases"
        assert page.get_attribute("tr.detail section.case-detail", "data-id") == "easy-a"
        before = page.evaluate("history.length")
        page.select_option("select[name=stratum]", "")
        assert fragment(tab) == {
            "gate": ["disagreement_changed"],
            "q": ["FJORD"],
            "sort": ["delta"],
            "case": ["easy-a"],
        }
        assert page.evaluate("history.length") == before


def test_a_case_fragment_opens_that_case_and_scrolls_to_it(browser: Browser, report: Path) -> None:
    """`#case=ID` (the id URL-encoded, whatever characters it has) opens the clone of that
    case's template right after its row and brings the row into view."""
    with browser.open(report, fragment="case=odd+id%2F%26%3D%23%3F%2B", height=300) as tab:
        detail = tab.page.locator("tr.detail")
        assert detail.count() == 1
        assert detail.locator("section.case-detail").get_attribute("data-id") == ODD_ID
        row_id = tab.page.evaluate("document.querySelector('tr.detail').previousElementSibling.id")
        assert tab.page.get_attribute(f"#{row_id}", "data-id") == ODD_ID
        assert tab.page.is_visible(f"#{row_id}")
        box: dict[str, Any] | None = tab.page.locator(f"#{row_id}").bounding_box()
        assert box is not None
        assert -1 < box["y"] < 300  # at the top of the viewport, give or take a subpixel


def test_opening_a_case_by_its_link_and_closing_it(browser: Browser, report: Path) -> None:
    """Clicking a case's link opens its detail under the row and names it in the fragment;
    clicking it again closes it; opening another closes the first."""
    with browser.open(report) as tab:
        page = tab.page
        page.click("tr.case[data-id='med-a'] a.open")
        assert page.locator("tr.detail").count() == 1
        assert page.get_attribute("tr.detail section.case-detail", "data-id") == "med-a"
        assert page.get_attribute("tr.case[data-id='med-a'] a.open", "aria-expanded") == "true"
        assert fragment(tab) == {"case": ["med-a"]}
        page.click("tr.case[data-id='easy-a'] a.open")
        assert page.locator("tr.detail").count() == 1
        assert page.get_attribute("tr.detail section.case-detail", "data-id") == "easy-a"
        page.click("tr.case[data-id='easy-a'] a.open")
        assert page.locator("tr.detail").count() == 0
        assert page.evaluate("location.hash") == ""


def test_a_reason_link_shows_exactly_the_cases_it_counts(browser: Browser, report: Path) -> None:
    """Following a verdict reason's link filters the table to its cases, as many as it says,
    and sets the controls to match; following it again from another view does the same."""
    with browser.open(report) as tab:
        page = tab.page
        reason = page.locator("#reasons li.reason[data-reason='disagreement_changed']")
        count = int(str(reason.locator(".count").text_content()))
        page.select_option("select[name=sort]", "id")
        reason.locator("a").click()
        tab.view_applied()
        assert page.input_value("select[name=gate]") == "disagreement_changed"
        assert len(shown(tab)) == count
        assert count_line(tab) == f"{count} of 8 cases"
        page.select_option("select[name=gate]", "")
        reason.locator("a").click()
        tab.view_applied()
        assert len(shown(tab)) == count


EXACT = (
    "disagreement_changed",
    "reference_moved",
    "unscored",
    "new_case",
    "alias_drift",
    "stratum_alert",
)


def test_each_counting_reason_links_to_exactly_its_cases(browser: Browser, report: Path) -> None:
    """A reason that counts cases (changed, reference moved, unscored, new) links to a view of
    the table that shows exactly that many."""
    with browser.open(report) as tab:
        page = tab.page
        reasons = page.eval_on_selector_all(
            "#reasons li.reason",
            "items => items.map((li) => [li.dataset.reason, li.querySelector('a').hash, "
            "Number(li.querySelector('.count').textContent)])",
        )
        kinds = {kind for kind, _, _ in reasons}
        assert {"disagreement_changed", "reference_moved", "unscored", "new_case"} <= kinds
        for kind, hash_, count in reasons:
            if kind in EXACT:
                page.evaluate("(h) => { location.hash = h; }", hash_)
                tab.view_applied()
                assert count_line(tab) == f"{count} of 8 cases", kind
                assert len(shown(tab)) == count, kind


@pytest.fixture(scope="module")
def many_reasons(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run with stratum alerts, a significant regression and changed requests."""
    run_dir = in_thread(reasons_project, tmp_path_factory.mktemp("reasons"))
    return run_dir / "report.html"


def test_following_each_reason_shows_exactly_as_many_cases_as_it_counts(
    browser: Browser, many_reasons: Path
) -> None:
    """Clicking each reason's link, as a person would, shows as many rows as the reason's
    count, and #shown says that number; the paired test's link shows the pairs the
    candidate lost."""
    with browser.open(many_reasons) as tab:
        page = tab.page
        reasons = page.locator("#reasons li.reason")
        kinds = set(reasons.evaluate_all("items => items.map((li) => li.dataset.reason)"))
        assert {"stratum_alert", "significant_regression", "request_changed"} <= kinds
        for index in range(reasons.count()):
            reason = reasons.nth(index)
            count = int(str(reason.locator(".count").text_content()))
            page.select_option("select[name=gate]", "unchanged")  # from another view each time
            reason.locator("a").click()
            tab.view_applied()
            assert len(shown(tab)) == count, reason.text_content()
            assert count_line(tab) == f"{count} of 14 cases"
        page.locator("#reasons li[data-reason='significant_regression'] a").click()
        tab.view_applied()
        assert sorted(shown(tab)) == sorted(CANDIDATE_LOST)
        assert (
            page.input_value("select[name=passed]"),
            page.input_value("select[name=failed]"),
        ) == (
            "reference",
            "candidate",
        )
        assert tab.problems() == []


def test_choosing_a_side_that_failed_passed_or_changed_its_request(
    browser: Browser, many_reasons: Path
) -> None:
    """The failed-by, passed-by and request-changed choices show the rows whose side did so,
    together with the other filters, and keep the choice in the fragment."""
    with browser.open(many_reasons) as tab:
        page = tab.page
        page.select_option("select[name=failed]", "reference")
        assert sorted(shown(tab)) == ["m3", "s3"]
        page.select_option("select[name=stratum]", "medium")
        assert shown(tab) == ["m3"]
        assert fragment(tab) == {"failed": ["reference"], "stratum": ["medium"]}
        page.select_option("select[name=failed]", "")
        page.select_option("select[name=stratum]", "")
        page.select_option("select[name=request]", "candidate")
        assert len(shown(tab)) == 12 and "new-a" not in shown(tab)
        assert fragment(tab) == {"request": ["candidate"]}


def test_following_a_latency_regression_shows_the_cases_it_paired(
    browser: Browser, tmp_path: Path
) -> None:
    """The latency gate's reason link shows the cases it paired, as many as it counts, and
    sets the form's paired-by choice."""
    report = in_thread(ratio_project, tmp_path) / "report.html"
    with browser.open(report) as tab:
        page = tab.page
        reason = page.locator("#reasons li[data-reason='latency_regression']")
        count = int(str(reason.locator(".count").text_content()))
        reason.locator("a").click()
        tab.view_applied()
        assert (count, sorted(shown(tab)), count_line(tab)) == (10, sorted(TIMED), "10 of 12 cases")
        assert page.input_value("select[name=paired]") == "latency"
        assert tab.problems() == []


def _unstratified(root: Path) -> Path:
    project = Project(root, UNSTRATIFIED)
    run_dir, _, _ = project.run()
    return run_dir / "report.html"


def test_a_choice_the_run_has_no_case_for_is_hidden_until_a_link_names_it(
    browser: Browser, tmp_path: Path
) -> None:
    """An unstratified suite's filters offer no stratum; a link that names one shows the
    stratum choice with that value, so the view says what it filters on."""
    report = in_thread(_unstratified, tmp_path)
    with browser.open(report) as tab:
        page = tab.page
        assert not page.is_visible("select[name=stratum]")
        assert page.is_visible("select[name=failed]") is False  # no side failed a case
        page.evaluate("() => { location.hash = 'stratum=easy'; }")
        tab.view_applied()
        assert page.is_visible("select[name=stratum]")
        assert page.input_value("select[name=stratum]") == "easy"
        assert tab.problems() == []


def _spaced(root: Path) -> Path:
    """A run in which the candidate misses a needle with a space in it."""
    cases = [
        {"id": "fjord", "prompt": "p", "expect": {"must_include": ["Fjord Express"]}},
        {"id": "plain", "prompt": "p", "expect": {"must_include": ["ok"]}},
    ]
    project = Project(root, cases)
    project.cassettes(
        {"fjord": {"completion": "the Fjord Express", "model": "ref-1"}},
        {"fjord": {"completion": "nope", "model": "cand-1"}},
    )
    run_dir, _, _ = project.run()
    return run_dir / "report.html"


@pytest.mark.parametrize(
    ("view", "expected"),
    [
        ("miss=missing%3AFjord+Express", ["fjord"]),
        ("miss=missing:Fjord%20Express&missed=candidate", ["fjord"]),
        ("miss=missing%3AFjord+Express&missed=reference", []),
        ("missed=candidate", ["fjord"]),
    ],
)
def test_a_link_naming_a_miss_code_with_spaces_shows_its_case(
    browser: Browser, tmp_path: Path, view: str, expected: list[str]
) -> None:
    """`#miss=` with a code as disagreement.json has it, spaces and all, shows the cases with
    it (its spaces were turned into `_`, so it showed none); `missed` narrows it to a side."""
    report = in_thread(_spaced, tmp_path)
    with browser.open(report, fragment=view) as tab:
        options = tab.page.eval_on_selector_all(
            "select[name=miss] option", "options => options.map((o) => o.value)"
        )
        assert (shown(tab), "missing:Fjord Express" in options) == (expected, True)
        assert count_line(tab) == f"{len(expected)} of 2 cases"


def _many(root: Path) -> Path:
    """450 cases, the candidate failing every 50th."""
    cases = [
        {
            "id": f"m-{i:03d}",
            "stratum": "easy",
            "prompt": "Say ok.",
            "expect": {"must_include": ["ok"]},
        }
        for i in range(450)
    ]
    project = Project(root, cases)
    first, _, _ = project.run()
    project.promote(first)
    project.cassettes(
        {}, {f"m-{i:03d}": {"completion": "nope", "model": "cand-1"} for i in range(0, 450, 50)}
    )
    second, _, _ = project.run()
    return second / "report.html"


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return in_thread(_many, tmp_path_factory.mktemp("many"))


def drawn(tab: Tab) -> list[str]:
    """The ids of the rows the table holds, top to bottom."""
    ids: list[str] = tab.page.eval_on_selector_all(
        "#cases tr.case", "rows => rows.map((r) => r.dataset.id)"
    )
    return ids


def test_a_long_table_holds_the_rows_of_a_page_and_more_when_asked(
    browser: Browser, many: Path
) -> None:
    """Of 450 cases the table holds the first 200 shown, and a button says how many are not
    yet; pressing it adds the next 200; a filter shows its cases from the top, the button
    gone when all are there; clearing it starts from the first 200 again."""
    with browser.open(many, height=400) as tab:
        page = tab.page
        assert drawn(tab) == [f"m-{i:03d}" for i in range(200)]
        assert count_line(tab) == "450 of 450 cases"
        assert page.text_content("#more button") == "Show 200 more (250 not shown yet)"
        page.eval_on_selector("#more button", "(b) => b.click()")  # pressed, not scrolled to
        assert drawn(tab) == [f"m-{i:03d}" for i in range(400)]
        assert page.text_content("#more button") == "Show 50 more (50 not shown yet)"
        page.select_option("select[name=gate]", "disagreement_changed")
        assert drawn(tab) == [f"m-{i:03d}" for i in range(0, 450, 50)]
        assert not page.is_visible("#more")
        page.select_option("select[name=gate]", "")
        assert drawn(tab) == [f"m-{i:03d}" for i in range(200)]


def test_scrolling_to_the_end_of_the_table_adds_the_next_rows(browser: Browser, many: Path) -> None:
    """A reader who scrolls down to the last row shown gets the next ones, no click needed."""
    with browser.open(many, height=400) as tab:
        page = tab.page
        page.locator("#more").scroll_into_view_if_needed()
        page.wait_for_function("() => document.querySelectorAll('#cases tr.case').length > 200")
        assert drawn(tab)[:201] == [f"m-{i:03d}" for i in range(201)]


def test_a_link_to_a_case_past_the_rows_shown_draws_it_and_opens_it(
    browser: Browser, many: Path
) -> None:
    """`#case=m-449`, the last of 450, draws the table down to it and opens it there."""
    with browser.open(many, fragment="case=m-449", height=400) as tab:
        page = tab.page
        assert drawn(tab)[-1] == "m-449" and len(drawn(tab)) == 450
        assert page.get_attribute("tr.detail section.case-detail", "data-id") == "m-449"
        box = page.locator("#c-449").bounding_box()
        assert box is not None and -1 < box["y"] < 400


# each group of the table: its rows, and whether the browser lays it out (a group skipped as
# off screen is not visible to `checkVisibility` asked about `content-visibility: auto`)
GROUPS = """() => Array.from(document.querySelectorAll("#cases > tbody"), (group) => ({
  visibility: getComputedStyle(group).contentVisibility,
  rows: Array.from(group.rows, (row) => row.dataset.id || row.className),
  laidOut: group.rows[0].checkVisibility({ contentVisibilityAuto: true }),
}))"""
FIRST_LAID_OUT = (
    "() => document.querySelector('#cases > tbody').rows[0]"
    ".checkVisibility({ contentVisibilityAuto: true })"
)


def test_the_rows_are_in_groups_the_browser_lays_out_only_on_screen(
    browser: Browser, many: Path
) -> None:
    """The 200 rows drawn are 8 tbodies of 25, each `content-visibility: auto`: the first is
    laid out once in view, the last (far below a 400 px window) is skipped. An opened
    case's detail sits right under its row, in its row's group."""
    with browser.open(many, height=400) as tab:
        tab.page.locator("#c-0").scroll_into_view_if_needed()
        tab.page.wait_for_function(FIRST_LAID_OUT)  # decided at the frame after the scroll
        groups = tab.page.evaluate(GROUPS)
        assert [g["rows"] for g in groups] == [
            [f"m-{i:03d}" for i in range(start, start + 25)] for start in range(0, 200, 25)
        ]
        assert {g["visibility"] for g in groups} == {"auto"}
        assert not groups[-1]["laidOut"]
        tab.page.click("#c-30 a.open")
        tab.page.wait_for_selector("tr.detail section.case-detail[data-id='m-030']")
        second = tab.page.evaluate(GROUPS)[1]["rows"]
        assert second[4:7] == ["m-029", "m-030", "detail"] and len(second) == 26


def _sided(root: Path) -> Path:
    """After a promote, both sides left case `both` unscored, each its own way (the reference
    timed out, the candidate answered an HTML page), and the candidate alone timed out on
    `cand`."""
    project = Project(root, BASE_CASES)
    first, _, _ = project.run()
    project.promote(first)
    project.cases = [*BASE_CASES, *({**BASE_CASES[0], "id": i} for i in ("both", "cand"))]
    project._write_jsonl("cases.jsonl", project.cases)
    project.cassettes(
        {"both": {"fault": "timeout"}},
        {"both": {"status": 200, "body": "<html>oops</html>"}, "cand": {"fault": "timeout"}},
    )
    run_dir, _, _ = project.run()
    return run_dir / "report.html"


def test_the_misses_column_says_which_side_missed(browser: Browser, tmp_path: Path) -> None:
    """Each side's codes and unscored stamp stand under that side's name in the misses
    column, and in the row's data-miss-SIDE; a side with none is left out."""
    report = in_thread(_sided, tmp_path)
    found = {}
    with browser.open(report) as tab:
        # the texts the rows hold, not innerText: that is "" for a row whose group the
        # browser has not laid out yet (`content-visibility: auto`), as under load
        for case_id in ("both", "cand", "easy-a"):
            row = tab.page.locator(f"tr.case[data-id='{case_id}']")
            found[case_id] = (
                row.locator("td.misses div").all_text_contents(),
                row.get_attribute("data-miss-reference"),
                row.get_attribute("data-miss-candidate"),
            )
    assert found == {
        "both": (
            ["reference: transport:timeout", "candidate: schema:not_json"],
            "transport:timeout",
            "schema:not_json",
        ),
        "cand": (["candidate: transport:timeout"], None, "transport:timeout"),
        "easy-a": ([], None, None),
    }


def test_the_script_is_inline_hashed_and_cannot_fetch_or_run_text(report: Path) -> None:
    """report.html's one script is report.js, allowed by its hash and nothing else, and the
    script names no API that makes a request, evaluates text or parses markup."""
    page = report.read_text(encoding="utf-8")
    script = report_script()
    data = '<script type="application/octet-stream" class="case-data" data-cases="'
    assert page.count("<script") == 1 + page.count(data) and page.count(data) == 1
    assert f"<script>{script}</script>" in page
    csp = page.split('http-equiv="Content-Security-Policy" content="', 1)[1].split('"', 1)[0]
    assert f"script-src {source_hash(script)};".replace("'", "&#39;") in csp
    assert "connect-src &#39;none&#39;" in csp
    forbidden = (
        "fetch", "XMLHttpRequest", "WebSocket", "EventSource", "sendBeacon", "import(",
        "eval(", "Function(", "innerHTML", "outerHTML", "insertAdjacentHTML", "document.write",
        "DOMParser", "createContextualFragment", "srcdoc", "window.open", "postMessage",
        "</script", "<!--",
    )  # fmt: skip
    assert [name for name in forbidden if name in script] == []
