"""The top of report.html says why the verdict is what it is, and the case table holds every
case with what its filters read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import pytest
from reportkit import (
    BASE_CASES,
    CANDIDATE_LOST,
    COSTED,
    TIMED,
    UNSTRATIFIED,
    Node,
    Project,
    hostile_project,
    page_cases,
    page_with_rows,
    ratio_project,
    reasons_project,
)

from runner.model import SIDES
from runner.reports.html import html_parts
from runner.reports.model import build_report
from runner.reports.verdict import Kind, Tally, Weight, reasons, said


def _page(run_dir: Path) -> Node:
    """The run's report.html, its case table holding the rows report.js draws."""
    return page_with_rows((run_dir / "report.html").read_text(encoding="utf-8"))


def _reasons(page: Node) -> list[tuple[str, str | None, str, str, str | None]]:
    """(kind, side, count, text, href) of each reason, in the order the page lists them."""
    found = []
    for li in page.one("div", id="reasons").find("li", class_="reason"):
        link = li.one("a")
        found.append(
            (
                str(li.get("data-reason")),
                li.get("data-side"),
                link.one("b").text(),
                link.text(),
                link.get("href"),
            )
        )
    return found


def _cases(run_dir: Path) -> list[tuple[str, dict[str, Any]]]:
    doc = json.loads((run_dir / "disagreement.json").read_text(encoding="utf-8"))
    return list(doc["cases"].items())


@pytest.fixture(scope="module")
def first_night(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A suite's first run (every case new) whose only trouble is a candidate easy failure."""
    project = Project(tmp_path_factory.mktemp("first"), BASE_CASES)
    project.cassettes({}, {"easy-a": {"completion": "no", "model": "cand-1"}})
    run_dir, code, _ = project.run()
    assert code == 1
    return run_dir


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _, run_dir = hostile_project(tmp_path_factory.mktemp("hostile"))
    return run_dir


@pytest.fixture(scope="module")
def moved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """After a promote: the reference alone misses on med-a, the candidate alone on med-b,
    and both alike on str-a (the disagreement stays empty there)."""
    project = Project(tmp_path_factory.mktemp("moved"), BASE_CASES)
    first, _, _ = project.run()
    project.promote(first)
    no = {"completion": "no"}
    project.cassettes(
        {"med-a": {**no, "model": "ref-1"}, "str-a": {**no, "model": "ref-1"}},
        {"med-b": {**no, "model": "cand-1"}, "str-a": {**no, "model": "cand-1"}},
    )
    run_dir, _, _ = project.run()
    return run_dir


def test_the_verdict_is_the_first_thing_on_the_page(first_night: Path) -> None:
    """`<header id="verdict">` opens <main>, with the verdict in words and its reasons."""
    page = _page(first_night)
    main = page.one("main")
    header = main.elements()[0]
    expected = ("header", "verdict", "review", "Needs review")
    actual = (
        header.tag,
        header.get("id"),
        header.get("data-verdict"),
        header.one("div", class_="word").text(),
    )
    assert expected == actual
    assert header.find("div", id="reasons")


def test_a_candidate_stratum_alert_is_said_at_the_top_not_under_an_empty_review_list(
    first_night: Path,
) -> None:
    """A run red for a candidate easy_regression names that alert first, with its count and a
    link to the easy cases the candidate failed, at the top, and says nowhere "Needs review
    (0)" or "Nothing moved"."""
    page = _page(first_night)
    alerts = [r for r in _reasons(page) if r[0] == "stratum_alert" and r[1] == "candidate"]
    expected = [
        (
            "stratum_alert",
            "candidate",
            "1",
            "1 stratum alert easy_regression on the candidate",
            "#stratum=easy&failed=candidate&sort=delta",
        )
    ]
    actual = [r for r in alerts if "easy_regression" in r[3]]
    assert expected == actual
    assert "easy_regression" in _reasons(page)[0][3]  # before the suite's ceiling alerts
    text = page.text()
    assert "Needs review (0)" not in text and "Nothing moved" not in text


def test_a_first_run_lists_its_new_cases_as_a_note_and_shows_every_reply(
    first_night: Path,
) -> None:
    """Every case of a first run is new: the page says so with a link, and each case's detail
    holds both sides' replies, the candidate's "no" included."""
    page = _page(first_night)
    [note] = [r for r in _reasons(page) if r[0] == "new_case"]
    assert note == ("new_case", None, "6", "6 new_case on 6 cases", "#gate=new_case")
    [li] = page.find("li", data_reason="new_case")
    assert li.get("data-weight") == "note"
    html = (first_night / "report.html").read_text(encoding="utf-8")
    replies = {
        case.id: [case.text(case.reply(n)["text"]) for n in (0, 1)] for case in page_cases(html)
    }
    assert replies.pop("easy-a") == ["ok", "no"]
    assert list(replies.values()) == [["ok", "ok"]] * 5


def test_each_reason_of_a_hostile_run_has_its_count_and_link(hostile: Path) -> None:
    """Disagreement changed, alias drift, each unscored stamp and the stratum alerts, each
    with its count and the filter that shows its cases; review reasons before incomplete."""
    page = _page(hostile)
    found = {(kind, side, href): count for kind, side, count, _, href in _reasons(page)}
    for key, count in {
        ("disagreement_changed", None, "#gate=disagreement_changed"): "5",
        ("alias_drift", None, "#gate=alias_swap"): "1",
        ("unscored", "candidate", "#miss=transport%3Atimeout&missed=candidate"): "1",
        ("unscored", "candidate", "#miss=schema%3Anot_json&missed=candidate"): "1",
        ("stratum_alert", "candidate", "#stratum=medium&failed=candidate&sort=delta"): "5",
    }.items():
        assert found.get(key) == count, (key, found)
    weights = [li.get("data-weight") for li in page.find("li", class_="reason")]
    assert weights == sorted(weights, key=["review", "incomplete", "note"].index)
    assert page.one("header", id="verdict").get("data-verdict") == "review+incomplete"


def test_an_alias_swap_names_the_accepted_and_the_served_model_in_the_summary(
    hostile: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """summary.json keeps each swap (side, the model the snapshot accepted, the one served,
    on how many cases), and the summary on stderr names both models: the review line alone
    named only the case."""
    from runner.runs.summary import print_summary

    summary = json.loads((hostile / "summary.json").read_text(encoding="utf-8"))
    assert summary["alias_drift"] == [
        {"side": "candidate", "accepted": "cand-1", "served": "cand-2-<b>preview</b>", "count": 1}
    ]
    print_summary(summary, hostile)
    line = "  alias swap (candidate): accepted cand-1, served cand-2-<b>preview</b> on 1 case(s)"
    assert line in capsys.readouterr().err.splitlines()


def test_which_side_moved_is_marked_and_the_reference_moving_is_a_reason(moved: Path) -> None:
    """data-moved says whose misses left the accepted ones, the two sides alike included
    (a case whose disagreement stayed empty), and the reference moving is a reason."""
    page = _page(moved)
    marks = {row.get("data-id"): row.get("data-moved") for row in page.find("tr", class_="case")}
    assert (marks["med-a"], marks["med-b"], marks["str-a"], marks["easy-a"]) == (
        "reference",
        "candidate",
        "both",
        "",
    )
    [reason] = [r for r in _reasons(page) if r[0] == "reference_moved"]
    assert reason == (
        "reference_moved",
        "reference",
        "2",
        "2 the reference moved on 2 cases",
        "#moved=reference",
    )


def test_every_case_is_a_row_with_its_marks_and_its_detail(hostile: Path) -> None:
    """Each case of disagreement.json, in its order, is case N of the page's data with its
    gate, stratum, moved side, miss codes and score delta, and its detail beside it."""
    page = _page(hostile)
    rows = page.one("table", id="cases").find("tr", class_="case")
    data = page_cases((hostile / "report.html").read_text(encoding="utf-8"))
    cases = _cases(hostile)
    assert [r.get("data-id") for r in rows] == [case_id for case_id, _ in cases]
    for index, ((case_id, case), row) in enumerate(zip(cases, rows, strict=True)):
        ref, cand = case["reference"], case["candidate"]
        delta = (
            f"{cand['task_score'] - ref['task_score']:.3f}"
            if ref["task_score"] is not None and cand["task_score"] is not None
            else ""
        )
        assert (
            row.get("id"),
            row.get("data-gate"),
            row.get("data-stratum"),
            row.get("data-delta"),
        ) == (
            f"c-{index}",
            case["gate"],
            case["stratum"] or "",
            delta,
        )
        for side, view in (("reference", ref), ("candidate", cand)):
            assert set(view["misses"]) <= set(_codes(row, side)), (case_id, side)
        shown = data[index]
        assert [shown.side(n)["side"] for n in (0, 1)] == ["reference", "candidate"]
        assert [shown.text(shown.side(n)["transport"]) for n in (0, 1)] == [
            view["transport"] for view in (ref, cand)
        ]
    timeout = page.one("tr", data_id="timeout")
    assert (_codes(timeout, "reference"), _codes(timeout, "candidate")) == (
        [],
        ["transport:timeout"],
    )


def test_review_cases_read_without_script(hostile: Path) -> None:
    """The details of the cases that need review, then of the unscored ones, are also in
    <noscript>, outside any <template>."""
    page = _page(hostile)
    [noscript] = [n for n in page.find("noscript") if n.find("section", id="review")]
    review, unscored = noscript.one("section", id="review"), noscript.one("section", id="unscored")
    assert [s.get("data-id") for s in unscored.find("section", class_="case-detail")] == [
        "schema",
        "timeout",
    ]
    shown = [s.get("data-id") for s in review.find("section", class_="case-detail")]
    expected = [
        "hostile-img",
        "hostile-long",
        "hostile-pipes",
        "hostile-script",
        "hostile-table",
        "alias",
    ]
    assert expected == shown


def test_report_md_says_why_in_one_line(hostile: Path) -> None:
    """report.md names the verdict's reasons under its first lines, within the line cap."""
    lines = (hostile / "report.md").read_text(encoding="utf-8").splitlines()
    [review] = [line for line in lines if line.startswith("**Needs review:** ")]
    [unscored] = [line for line in lines if line.startswith("**Unscored, per side:** ")]
    assert review.startswith(
        "**Needs review:** disagreement changed on 5 cases; a served model changed on 1 case"
    )
    assert "unscored" not in review
    assert unscored == (
        "**Unscored, per side:** 1 case unscored on the candidate: schema:not\\_json (the "
        "candidate's own format failure); 1 case unscored on the candidate: "
        "transport:timeout (infrastructure)"
    )
    assert lines.index(review) < lines.index(unscored)


def _summary(**fields: Any) -> dict[str, Any]:
    overall = {
        "text": "overall: candidate worse",
        "ref_only": 7,
        "non_inferiority": {"text": "inferior"},
    }
    return {"paired": {"overall": overall}, **fields}


@pytest.mark.parametrize(
    ("fail_on", "weight"), [(["significant_regression"], Weight.REVIEW), ([], Weight.NOTE)]
)
def test_a_significant_regression_gates_only_when_fail_on_says_so(
    fail_on: list[str], weight: Weight
) -> None:
    """The regression is a review reason under fail_on and a note otherwise, with the cases
    the candidate lost as its count and a view of just those, worst first, as its link."""
    [reason] = reasons(_summary(significant_regression=True, fail_on=fail_on), Tally())
    expected = (
        Kind.SIGNIFICANT_REGRESSION,
        weight,
        7,
        "#passed=reference&failed=candidate&sort=delta",
    )
    assert expected == (reason.kind, reason.weight, reason.count, reason.href)
    assert "7 discordant pairs the candidate lost" in reason.note


def test_not_non_inferior_is_a_reason() -> None:
    """A claim that could not be made is named with the words of the test."""
    [reason] = reasons(_summary(not_non_inferior=True, fail_on=["not_non_inferior"]), Tally())
    assert (reason.kind, reason.weight, "inferior" in reason.note) == (
        Kind.NOT_NON_INFERIOR,
        Weight.REVIEW,
        True,
    )


def test_a_verdict_without_a_known_reason_says_so() -> None:
    """A clean run says why it is clean; a red one whose reason this report does not know
    sends the reader to summary.json instead of showing nothing."""
    assert said("clean", []).startswith("Nothing needs review")
    assert "summary.json" in said("review", [])
    assert (
        said(
            "review",
            reasons(
                _summary(significant_regression=True, fail_on=["significant_regression"]), Tally()
            ),
        )
        == ""
    )


def test_the_page_is_written_in_pieces(hostile: Path) -> None:
    """html_parts is a stream: its first piece is the page's head, not the whole page."""
    parts = html_parts(build_report(hostile))
    first = next(iter(parts))
    assert "<!doctype html>" in first and 'id="cases"' not in first


def test_a_latency_gate_that_fires_is_a_reason_in_its_own_words() -> None:
    """A latency or cost gate asked and not cleared is named with its figures: a review reason
    under fail_on, a note otherwise; one that cleared is not a reason."""
    block = {
        "latency": {"fires": True, "gating": True, "pairs": 40, "text": "candidate slower: x1.31"},
        "cost": {"fires": False, "gating": True, "pairs": 40, "text": "no regression shown"},
    }
    found = reasons({"regressions": block}, Tally())
    expected = [(Kind.LATENCY_REGRESSION, Weight.REVIEW, 40, "#paired=latency")]
    assert expected == [(r.kind, r.weight, r.count, r.href) for r in found]
    assert found[0].note.startswith("candidate slower: x1.31; the cases behind it are the 40")
    block["latency"]["gating"] = False
    assert [r.weight for r in reasons({"regressions": block}, Tally())] == [Weight.NOTE]


def test_both_sides_moving_alike_is_a_note_under_a_clean_verdict(tmp_path: Path) -> None:
    """Both sides newly missing alike leave the disagreement as accepted: the run is clean,
    says so, and lists the reference's move as a note, not as a reason for review."""
    project = Project(tmp_path, BASE_CASES)
    first, _, _ = project.run()
    project.promote(first)
    project.cassettes(
        {"str-a": {"completion": "no", "model": "ref-1"}},
        {"str-a": {"completion": "no", "model": "cand-1"}},
    )
    run_dir, code, _ = project.run()
    page = _page(run_dir)
    [li] = page.find("li", data_reason="reference_moved")
    assert (code, page.one("header", id="verdict").get("data-verdict")) == (0, "clean")
    assert li.get("data-weight") == "note"
    assert page.one("p", class_="said").text().startswith("Nothing needs review")


def test_the_filters_choices_come_with_their_counts(hostile: Path) -> None:
    """The page's filters are offered the gate classes, strata, moved sides and miss codes the
    run has, each with how many cases it shows; a case without a stratum is no choice."""
    from runner.reports.html import context

    with build_report(hostile) as rep:
        found = context(rep)
    assert dict(found["filter_gates"]) == {
        "transport_miss": 1,
        "schema_miss": 1,
        "alias_swap": 1,
        "disagreement_changed": 5,
        "unchanged": 6,
    }
    assert [v for v, _ in found["filter_gates"]][:2] == ["transport_miss", "schema_miss"]
    assert dict(found["filter_strata"]) == {"easy": 2, "medium": 10, "stretch": 2}
    assert dict(found["filter_moved"]) == {"candidate": 5}
    misses = dict(found["filter_misses"])
    assert (misses["missing:ok"], misses["transport:timeout"], misses["schema:not_json"]) == (
        5,
        1,
        1,
    )


@pytest.fixture(scope="module")
def many_reasons(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return reasons_project(tmp_path_factory.mktemp("reasons"))


def _tokens(row: Node, name: str) -> list[str]:
    return (row.get(f"data-{name}") or "").split()


def _codes(row: Node, side: str) -> list[str]:
    """One side's miss codes and unscored stamp, as the row holds them (one a line)."""
    codes = row.get(f"data-miss-{side}")
    return codes.split("\n") if codes else []


def _matches(row: Node, key: str, value: str, view: dict[str, str]) -> bool:
    """Whether one filter of the page's fragment keeps this row, as report.js decides it."""
    if key in ("gate", "stratum"):
        return row.get(f"data-{key}") == value
    if key == "moved":
        return row.get("data-moved") in (value, "both")
    if key in ("miss", "missed"):  # a code on a side: `missed` names it, else either
        code, side = view.get("miss", ""), view.get("missed", "")
        codes = [m for s in ((side,) if side else SIDES) for m in _codes(row, s)]
        return any(not code or m == code or m.startswith(f"{code}:") for m in codes)
    if key in ("failed", "passed", "request", "paired"):
        return value in _tokens(row, key)
    if key == "changed":
        return row.get("data-gate") != "unchanged"
    assert key in ("sort", "case"), f"a reason links to a filter report.js lacks: {key}"
    return True


def _shown(page: Node, href: str) -> list[str]:
    """The ids of the case rows the view `href` shows."""
    view = parse_qsl(href.removeprefix("#"))
    return [
        str(row.get("data-id"))
        for row in page.one("table", id="cases").find("tr", class_="case")
        if all(_matches(row, key, value, dict(view)) for key, value in view)
    ]


@pytest.fixture(scope="module")
def slower(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The candidate slower and dearer: both ratio gates fire."""
    return ratio_project(tmp_path_factory.mktemp("slower"))


@pytest.fixture(scope="module")
def sided(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """After a promote, both sides left case `both` unscored, each its own way (the reference
    timed out, the candidate answered an HTML page), and the candidate alone timed out on
    `cand`: two stamps, two sides, one case with both."""
    project = Project(tmp_path_factory.mktemp("sided"), BASE_CASES)
    first, _, _ = project.run()
    project.promote(first)
    project.cases = [*BASE_CASES, *({**BASE_CASES[0], "id": i} for i in ("both", "cand"))]
    project._write_jsonl("cases.jsonl", project.cases)
    project.cassettes(
        {"both": {"fault": "timeout"}},
        {"both": {"status": 200, "body": "<html>oops</html>"}, "cand": {"fault": "timeout"}},
    )
    run_dir, _, _ = project.run()
    return run_dir


@pytest.fixture(scope="module")
def thin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stratified suite with one easy case, one medium and no stretch case at all."""
    cases = [c for c in BASE_CASES if c["id"] in ("easy-a", "med-a")]
    run_dir, _, _ = Project(tmp_path_factory.mktemp("thin"), cases).run()
    return run_dir


def test_the_reasons_come_in_groups_what_gates_then_what_was_unscored_then_notes(
    many_reasons: Path, hostile: Path
) -> None:
    """The verdict's reasons stand in three groups, each under its heading: what gates
    (review), what each side left unscored (incomplete), then what is only noted."""
    found = []
    for run_dir in (many_reasons, hostile):
        reasons = _page(run_dir).one("div", id="reasons")
        found.append(
            [
                (
                    section.get("data-weight"),
                    section.one("h2").text(),
                    {li.get("data-weight") for li in section.find("li", class_="reason")},
                )
                for section in reasons.find("section", class_="reasons")
            ]
        )
    review = ("review", "Needs review: what gates", {"review"})
    unscored = (
        "incomplete",
        "Unscored, per side: not compared, so the run is incomplete",
        {"incomplete"},
    )
    notes = ("note", "Notes: reported, not gated on", {"note"})
    assert found == [[review, unscored, notes], [review, unscored]]


def test_a_transport_miss_is_infrastructure_and_a_schema_miss_the_side_s_format_failure(
    sided: Path,
) -> None:
    """A case left unscored is not called "an infrastructure problem, not a quality one"
    whatever its stamp: a timeout is infrastructure, an answer that is not JSON the side's
    own format failure (for the candidate, a regression in format), in report.html, in
    report.md and on stderr alike."""
    page = _page(sided)
    notes = {
        (li.get("data-side"), li.one("a").text()): li.one("span", class_="why").text()
        for li in page.find("li", data_reason="unscored")
    }
    schema = notes["candidate", "1 1 case unscored on the candidate: schema:not_json"]
    timeout = notes["candidate", "1 1 case unscored on the candidate: transport:timeout"]
    assert "the candidate's own format failure" in schema and "regressed in format" in schema
    assert "infrastructure" in timeout and "format" not in timeout
    markdown = (sided / "report.md").read_text(encoding="utf-8")
    assert "(the candidate's own format failure)" in markdown
    assert "transport:timeout (infrastructure)" in markdown
    for text in (page.text(), markdown):
        assert "an infrastructure problem, not a quality one" not in text


def test_each_side_s_unscored_cases_are_a_reason_of_their_own_linking_to_exactly_them(
    sided: Path,
) -> None:
    """Per side and stamp, a reason with its count and a link to that side's cases with that
    stamp: the reference's timeout is `both` alone, the candidate's `cand` alone, however
    the other side fared on them."""
    page = _page(sided)
    found = {
        (kind, side, count, href): _shown(page, str(href))
        for kind, side, count, _, href in _reasons(page)
        if kind == "unscored"
    }
    assert found == {
        ("unscored", "reference", "1", "#miss=transport%3Atimeout&missed=reference"): ["both"],
        ("unscored", "candidate", "1", "#miss=schema%3Anot_json&missed=candidate"): ["both"],
        ("unscored", "candidate", "1", "#miss=transport%3Atimeout&missed=candidate"): ["cand"],
    }


def test_each_side_s_codes_are_its_own(sided: Path) -> None:
    """Each side's codes and unscored stamp are that side's in the case's data (the row's
    data-miss-SIDE and misses column; tests/test_report_filters.py looks at them drawn); a
    side with none has none."""
    page = _page(sided)
    found = {}
    for case_id in ("both", "cand", "easy-a"):
        row = page.one("tr", data_id=case_id)
        found[case_id] = (_codes(row, "reference"), _codes(row, "candidate"))
    assert found == {
        "both": (["transport:timeout"], ["schema:not_json"]),
        "cand": ([], ["transport:timeout"]),
        "easy-a": ([], []),
    }


def test_an_alert_about_the_strata_links_to_each_stratum_it_is_about(thin: Path) -> None:
    """Two thin strata were one reason linking to every case, and an empty stratum's reason
    linked to every case too: now each thin stratum is a reason linking to its one case, and
    the empty one links to its stratum, which shows no case, as its count says."""
    page = _page(thin)
    found = [
        (text.split(" on the ")[0], side, count, href, _shown(page, str(href)))
        for kind, side, count, text, href in _reasons(page)
        if kind == "stratum_alert" and ("thin" in text or "missing" in text)
    ]
    per_side = [
        ("1 stratum alert thin_stratum", "#stratum=easy", ["easy-a"]),
        ("1 stratum alert thin_stratum", "#stratum=medium", ["med-a"]),
        ("0 stratum alert missing_stratum", "#stratum=stretch", []),
    ]
    expected = [
        (words, side, words[0], href, ids) for side in SIDES for words, href, ids in per_side
    ]
    assert sorted(expected) == sorted(found)


@pytest.mark.parametrize(
    "run", ["first_night", "hostile", "moved", "many_reasons", "slower", "sided", "thin"]
)
def test_every_reason_links_to_exactly_the_cases_it_counts(
    run: str, request: pytest.FixtureRequest
) -> None:
    """Each reason's link is a view of the table that shows as many cases as its count says
    (an alert about an empty stratum: none)."""
    page = _page(request.getfixturevalue(run))
    checked = [
        (kind, text, len(_shown(page, str(href))), int(count))
        for kind, _, count, text, href in _reasons(page)
    ]
    assert checked
    assert [(k, t, n) for k, t, n, _ in checked] == [(k, t, n) for k, t, _, n in checked]


def test_the_paired_test_links_to_the_pairs_the_candidate_lost(many_reasons: Path) -> None:
    """A significant regression links to the cases the reference passed and the candidate
    failed, and not to those both failed or the candidate won; its note says so."""
    page = _page(many_reasons)
    [li] = page.find("li", data_reason="significant_regression")
    href = str(li.one("a").get("href"))
    assert href == "#passed=reference&failed=candidate&sort=delta"
    assert sorted(_shown(page, href)) == sorted(CANDIDATE_LOST)
    assert "8 discordant pairs the candidate lost" in li.text()


def test_a_stratum_alert_links_to_the_cases_of_that_stratum_its_side_failed(
    many_reasons: Path,
) -> None:
    """The reference's medium_regression shows the medium case it failed alone and the one
    both failed; the candidate's shows the four medium cases it failed."""
    page = _page(many_reasons)
    found = {
        li.get("data-side"): _shown(page, str(li.one("a").get("href")))
        for li in page.find("li", data_reason="stratum_alert")
        if "medium_regression" in li.text()
    }
    assert found == {"reference": ["m3"], "candidate": ["m0", "m1", "m2", "m3"]}


def test_a_changed_request_links_to_the_cases_it_changed_on(many_reasons: Path) -> None:
    """Per side one reason for every case whose request_sha left the snapshot's, linking to
    those: the promoted cases, not the new ones no snapshot holds a request for."""
    page = _page(many_reasons)
    found = {
        li.get("data-side"): (li.one("a").get("href"), _shown(page, str(li.one("a").get("href"))))
        for li in page.find("li", data_reason="request_changed")
    }
    promoted = [f"{s}{i}" for s in "ems" for i in range(4)]
    assert found == {
        "reference": ("#request=reference", sorted(promoted)),
        "candidate": ("#request=candidate", sorted(promoted)),
    }
    new = page.one("tr", data_id="new-a")
    assert (new.get("data-request"), new.get("data-passed")) == (None, "reference candidate")
    options = [o.get("value") for o in page.one("select", name="request").find("option")]
    assert options == ["", "reference", "candidate"]


@pytest.fixture(scope="module")
def unstratified(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A suite no case of which names a stratum, the candidate failing one case."""
    project = Project(tmp_path_factory.mktemp("flat"), UNSTRATIFIED)
    project.cassettes({}, {"easy-a": {"completion": "no", "model": "cand-1"}})
    run_dir, _, _ = project.run()
    return run_dir


def test_an_unstratified_suite_shows_one_bar_of_every_case(unstratified: Path) -> None:
    """Without strata, each side has one pass-rate bar named `all`, over every case, no easy,
    medium or stretch bar and no stratum choice (nor the others it has no case for) in the
    filters; summary.json keeps its three strata as before."""
    page = _page(unstratified)
    bars = [
        [bar.find("span")[0].text() for bar in card.find("div", class_="bar")]
        for card in page.find("div", class_="card")
        if card.find("div", class_="bar")
    ]
    assert bars == [["all"], ["all"]]
    labels = [bar.find("span")[-1].text() for bar in page.find("div", class_="bar")]
    assert labels == ["100% · 6 of n=6", "83% · 5 of n=6"]
    hidden = {
        str(label.one("select").get("name")): "hidden" in label.attrs
        for label in page.one("form", id="filters").find("label")
        if label.find("select")
    }
    assert (hidden["stratum"], hidden["failed"], hidden["request"], hidden["paired"]) == (
        True,
        False,
        True,
        True,
    )
    summary = json.loads((unstratified / "summary.json").read_text(encoding="utf-8"))
    assert (summary["stratified"], sorted(summary["strata"]["candidate"])) == (
        False,
        ["easy", "medium", "stretch"],
    )


def test_an_unstratified_report_md_gives_the_pass_rates_of_all_cases(unstratified: Path) -> None:
    """report.md says each side's pass rate over every case, and names no stratum."""
    text = (unstratified / "report.md").read_text(encoding="utf-8")
    assert (
        "- pass rates, all cases (the suite has no strata): reference 6 of 6; candidate 5 of 6"
        in text
    )
    assert "stretch" not in text and "medium" not in text


def test_a_latency_regression_links_to_the_cases_it_paired(slower: Path) -> None:
    """The latency gate's reason counts its paired cases and links to exactly those: the
    cases both sides answered with a time, not those with none; the form offers each gate's
    choice."""
    page = _page(slower)
    [li] = page.find("li", data_reason="latency_regression")
    href = str(li.one("a").get("href"))
    summary = json.loads((slower / "summary.json").read_text(encoding="utf-8"))
    assert (href, li.one("b").text()) == (
        "#paired=latency",
        str(summary["regressions"]["latency"]["pairs"]),
    )
    assert _shown(page, href) == sorted(TIMED)
    assert "the cases behind it are the 10 cases it paired" in li.text()
    options = [o.text() for o in page.one("select", name="paired").find("option")]
    assert options == ["any", "cost (10)", "latency (10)"]


def test_a_cost_regression_links_to_the_cases_it_priced_on_both_sides(slower: Path) -> None:
    """The cost gate's reason links to the cases whose usage both sides reported, at a price:
    not those whose usage is unknown, however fast."""
    page = _page(slower)
    [li] = page.find("li", data_reason="cost_regression")
    href = str(li.one("a").get("href"))
    assert (href, li.one("b").text()) == ("#paired=cost", "10")
    assert _shown(page, href) == sorted(COSTED)
