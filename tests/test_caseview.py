"""Case details: every case of a run opens onto its request, expectation, replies, stamps,
cost and raw exchange, built from the run dir one case at a time."""

from __future__ import annotations

import json
import re
import shutil
import tracemalloc
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from reportkit import HOSTILE_IMG, HOSTILE_SCRIPT, Node, Project, page_cases, parse_page

from runner.reports.caseview import CaseView, RunCases, SideDetail, case_views
from runner.reports.marks import mark
from runner.reports.render import environment
from runner.reports.requestview import Source, request_view
from runner.reports.wordiff import MAX_WORDS, Piece, shown_words, word_diff, words

REPO = Path(__file__).resolve().parent.parent
TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Find an order.",
        "parameters": {"type": "object", "properties": {"id": {"type": "string"}}},
    },
}
LONG = " ".join(f"word{i}" for i in range(1200))  # some 9,000 characters
USAGE = {"prompt_tokens": 1000, "completion_tokens": 500}
CASES = [
    {"id": "same", "prompt": "Say ok.", "expect": {"must_include": ["ok"]}},
    {"id": "moved", "prompt": "Say ok.", "expect": {"must_include": ["ok"]}},
    {"id": "flaky", "prompt": "Say ok.", "expect": {"must_include": ["ok"]}},
    {"id": "timeout", "prompt": "Say ok.", "expect": {"must_include": ["ok"]}},
    {"id": "schema", "prompt": "Say ok.", "expect": {"must_include": ["ok"]}},
    {"id": "edited", "prompt": "Say ok.", "expect": {"must_include": ["ok"]}},
    {
        "id": "city",
        "prompt": "Capital of France as JSON.",
        "expect": {"json_fields": {"city": "Paris"}},
    },
    {
        "id": "tool",
        "system": "Use the tools.",
        "prompt": "Where is order 7?",
        "tools": [TOOL],
        "expect": {"tool_calls": [{"name": "lookup", "arguments": {"id": "7"}}]},
    },
    {"id": "long", "prompt": "Count.", "expect": {"must_include": ["word1"], "max_chars": 20000}},
    {
        "id": "rude",
        "prompt": "Say ok.",
        "expect": {"must_include": ["ok"], "must_not_include": ["darn"]},
    },
]
GOOD: dict[str, dict[str, Any]] = {
    "city": {"completion": {"city": "Paris"}},
    "tool": {"tool_calls": [{"name": "lookup", "arguments": {"id": "7"}}]},
    "long": {"completion": LONG},
}


def _cassette(path: Path, cases: Sequence[Mapping[str, Any]], rows: Mapping[str, Any]) -> None:
    """Every case replies "ok" with usage unless `rows` says otherwise (a list: extra rows)."""
    lines = []
    for case in cases:
        found = rows.get(case["id"], GOOD.get(case["id"], {"completion": "ok"}))
        for row in found if isinstance(found, list) else [found]:
            lines.append({"case_id": case["id"], "usage": USAGE, **row})
    path.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")


@pytest.fixture(scope="module")
def gates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second run, three samples a side, with a case of every gate class that has a reply
    or a reason it has none: new, edited, unchanged, flaky, changed, transport, schema."""
    project = Project(tmp_path_factory.mktemp("gates"), CASES)
    root = project.root
    config = project.config.read_text(encoding="utf-8")
    config = config.replace(
        'cassette = "cand.jsonl"\n',
        'cassette = "cand.jsonl"\nprice = { input_per_mtok = 2.0, output_per_mtok = 8.0 }\n',
    ).replace('candidate = "cand"\n', 'candidate = "cand"\nsamples = 3\n')
    project.config.write_text(config, encoding="utf-8")
    _cassette(root / "ref.jsonl", CASES, {})
    _cassette(root / "cand.jsonl", CASES, {})
    first, _, _ = project.run()
    project.promote(first)
    cases = [dict(c) for c in CASES]
    next(c for c in cases if c["id"] == "edited")["prompt"] = "Say ok, please."
    cases.append({"id": "fresh", "prompt": "Say hi.", "expect": {"must_include": ["hi"]}})
    (root / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    _cassette(root / "ref.jsonl", cases, {"fresh": {"completion": "hi there"}})
    _cassette(
        root / "cand.jsonl",
        cases,
        {
            "moved": {"completion": "Sure thing, done."},
            "flaky": [{"completion": "ok"}, {"completion": "nope", "sample": 1}],
            "timeout": {"fault": "timeout"},
            "schema": {"body": f"<html>{HOSTILE_SCRIPT}</html>"},
            "fresh": {"completion": "hello"},
            "city": {"completion": {"city": "Lyon"}},
            "tool": {
                "completion": HOSTILE_IMG,
                "tool_calls": [
                    {"name": "lookup", "arguments": {"id": "<b>8</b>"}},
                    {"name": "erase", "arguments": {}},
                ],
            },
            "long": {"completion": LONG.replace("word600", "changed600")},
            "rude": {"completion": "Oh DARN, ok."},
        },
    )
    second, _, _ = project.run()
    return second


@pytest.fixture(scope="module")
def views(gates: Path) -> dict[str, CaseView]:
    return {v.id: v for v in case_views(gates)}


def _side(view: CaseView, side: str) -> SideDetail:
    return view.reference if side == "reference" else view.candidate


def _render(view: CaseView) -> str:
    return str(environment().get_template("case.html.j2").module.case_detail(view))  # type: ignore[attr-defined]


def _detail(view: CaseView) -> Node:
    return parse_page(_render(view)).one("section", class_="case-detail")


def test_every_gate_class_has_its_case(views: dict[str, CaseView]) -> None:
    """The run under test holds each gate class the details must open."""
    expected = {
        "fresh": "new_case",
        "edited": "fixture_move",
        "same": "unchanged",
        "flaky": "flaky",
        "moved": "disagreement_changed",
        "timeout": "transport_miss",
        "schema": "schema_miss",
    }
    assert expected == {k: views[k].gate for k in expected}


@pytest.mark.parametrize("case_id", ["fresh", "edited", "same", "flaky", "moved"])
def test_a_scored_case_of_any_class_shows_both_replies(
    views: dict[str, CaseView], case_id: str
) -> None:
    """new_case, fixture_move, unchanged, flaky and disagreement_changed cases show each
    side's reply text, not only the review gates."""
    detail = _detail(views[case_id])
    assert detail.attrs["data-id"] == case_id
    for side in ("reference", "candidate"):
        column = detail.one("article", data_side=side)
        assert column.one("div", class_="cd-reply").attrs["data-kind"] == "reply"
        assert column.one("pre", class_="cd-text").text().strip()


def test_report_html_holds_every_case_s_detail_in_its_data(gates: Path) -> None:
    """The run's report.html holds, for each case, its detail beside its row, whatever its
    class, with a reply or the reason there is none."""
    cases = page_cases((gates / "report.html").read_text(encoding="utf-8"))
    assert len(cases) == len(CASES) + 1  # and the new one
    gates_seen = set()
    for case in cases:
        gates_seen.add(case.gate)
        for n in (0, 1):
            reply = case.reply(n)
            shown = case.text(reply["text"]) or case.side(n)["calls"] or case.text(reply["why"])
            assert shown, (case.id, n)
    assert {"new_case", "fixture_move", "unchanged", "flaky", "transport_miss"} <= gates_seen
    assert {"schema_miss", "disagreement_changed"} <= gates_seen


def test_a_transport_miss_says_why_there_is_no_reply(views: dict[str, CaseView]) -> None:
    """A timed-out side has no reply, and the detail says it timed out, with its attempts."""
    view = views["timeout"]
    assert view.candidate.reply.kind == "none"
    column = _detail(view).one("article", data_side="candidate")
    assert "No reply: timeout" in column.one("p", class_="cd-none").text()
    stamp = column.one("li", data_stamp="transport")
    assert stamp.attrs["data-value"] == "timeout"
    attempts = column.one("table", class_="cd-attempts").text()
    assert "timeout" in attempts and "recorded timeout" in attempts


def test_a_schema_miss_shows_the_body_it_got_as_text(views: dict[str, CaseView]) -> None:
    """A body that is no reply is shown as received, escaped, with the schema detail."""
    view = views["schema"]
    assert view.candidate.reply.kind == "body"
    html_text = _render(view)
    assert "<script>" not in html_text and "&lt;script&gt;" in html_text
    column = _detail(view).one("article", data_side="candidate")
    assert "schema not_json" in column.one("p", class_="cd-why").text()
    assert HOSTILE_SCRIPT in column.one("pre", class_="cd-text").text()
    assert view.diff is None  # a raw body is not diffed against a reply


def test_the_expected_value_is_shown_beside_its_miss(views: dict[str, CaseView]) -> None:
    """`field_mismatch:city` is shown with the expected city and the one the reply gave."""
    column = _detail(views["city"]).one("article", data_side="candidate")
    miss = column.one("li", data_miss="field_mismatch:city")
    assert 'expected city = "Paris"' in miss.one("span", class_="expected").text()
    assert 'got "Lyon"' in miss.one("span", class_="got").text()
    assert "moved" in (miss.attrs.get("class") or "").split()
    expect = _detail(views["city"]).one("section", class_="cd-expect").text()
    assert "json_fields" in expect and '"Paris"' in expect


def test_the_diff_marks_the_changed_words(views: dict[str, CaseView]) -> None:
    """Words only one side has are marked on that side; shared words are not."""
    detail = _detail(views["moved"])
    ref = detail.one("article", data_side="reference").one("pre", class_="cd-text")
    cand = detail.one("article", data_side="candidate").one("pre", class_="cd-text")
    assert [d.text() for d in ref.find("del")] == ["ok"]
    assert [i.text() for i in cand.find("ins")] == ["Sure thing, done."]
    long = _detail(views["long"]).one("article", data_side="candidate")
    marked = [i.text().strip() for i in long.one("pre", class_="cd-text").find("ins")]
    assert marked == ["changed600"]


def test_the_text_a_miss_is_about_is_marked_in_the_reply(views: dict[str, CaseView]) -> None:
    """A `forbidden:` needle is marked where the reply says it; a `missing:` needle where the
    other side's reply has it."""
    rude = _detail(views["rude"]).one("article", data_side="candidate").one("pre", class_="cd-text")
    assert [(m.attrs["data-miss"], m.text()) for m in rude.find("mark")] == [
        ("forbidden:darn", "DARN")
    ]
    moved = (
        _detail(views["moved"]).one("article", data_side="reference").one("pre", class_="cd-text")
    )
    assert [(m.attrs["data-miss"], m.text()) for m in moved.find("mark")] == [("missing:ok", "ok")]
    assert [d.text() for d in moved.find("del")] == ["ok"]  # and the diff's mark inside it


@given(st.text(max_size=200), st.text(max_size=200), st.lists(st.text(min_size=1, max_size=4)))
def test_diff_and_marks_keep_every_character(left: str, right: str, found: list[str]) -> None:
    """However the words differ and the needles fall, each side's pieces read back as its
    reply, and a marked piece is one its needle matches."""
    diff = word_diff(left, right)
    for text, pieces in ((left, diff.reference), (right, diff.candidate)):
        marked = mark(pieces, [(n, f"forbidden:{n}") for n in found])
        assert "".join(p.text for p in marked) == text
        for p in marked:  # a marked piece is (part of) a match of its needle
            if p.miss is not None:
                needle = p.miss.partition(":")[2]
                assert re.search(re.escape(p.text), needle, re.IGNORECASE), (p, needle)


def test_a_long_reply_is_diffed_only_up_to_the_word_cap() -> None:
    """Past MAX_WORDS words a diff stops comparing and says so; the text is kept whole."""
    left = " ".join(f"a{i}" for i in range(MAX_WORDS * 3))
    right = " ".join(f"b{i}" for i in range(MAX_WORDS * 3))
    diff = word_diff(left, right)
    assert diff.cut
    assert "".join(p.text for p in diff.reference) == left
    assert not diff.reference[-1].changed  # the uncompared tail


def test_equal_replies_are_one_unchanged_piece_each_however_long() -> None:
    """Two equal replies are not compared word by word: each side is its whole text,
    unmarked, and nothing is said to be left uncompared."""
    text = " ".join(f"w{i}" for i in range(MAX_WORDS * 2))
    diff = word_diff(text, text)
    assert diff.reference == diff.candidate == (Piece(text, changed=False),)
    assert not diff.cut
    assert word_diff("", "").reference == ()


@given(st.text(max_size=400), st.integers(min_value=0, max_value=300))
def test_a_brief_diff_compares_every_word_it_shows(text: str, chars: int) -> None:
    """The words compared for a reply cut at `chars` characters cover at least those
    characters, so a brief detail never shows an uncompared word as unchanged."""
    compared, _ = words(text, shown_words(chars))
    assert len("".join(compared)) >= min(chars, len(text))


def test_a_brief_detail_is_the_full_one_cut_shorter(
    gates: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A brief detail has what a full one has (its attempts, usage and request) but no raw
    line, no other sample and no snapshot entry, and its diff is the same as the full
    detail's excerpt."""
    import runner.reports.caseview as caseview

    full = {v.id: v for v in case_views(gates)}["flaky"]
    monkeypatch.setattr(caseview, "FULL_UP_TO", 0)
    brief = {v.id: v for v in case_views(gates)}["flaky"]
    assert brief.brief and not full.brief
    cand = brief.candidate
    assert cand.samples == () and len(full.candidate.samples) > 1
    assert cand.attempts == full.candidate.attempts and cand.attempts
    assert cand.usage.tokens is not None and cand.usage.tokens.prompt == 1000
    assert cand.request is not None and brief.accepted is None and full.accepted is not None
    assert cand.raw is not None and full.candidate.raw is not None
    assert (cand.raw.text, cand.raw.line) == ("", full.candidate.raw.line)
    shown = "".join(p.text for p in cand.pieces)
    assert shown == "".join(p.text for p in full.candidate.pieces)[: len(shown)]


def test_tool_calls_and_tool_misses_are_shown(views: dict[str, CaseView]) -> None:
    """Each side's calls are listed with their arguments; each tool miss with what was wanted."""
    detail = _detail(views["tool"])
    ref_calls = [c.text() for c in detail.one("article", data_side="reference").find("code")]
    assert 'lookup({"id": "7"})' in ref_calls
    column = detail.one("article", data_side="candidate")
    calls = [li.text() for li in column.one("ul", class_="cd-calls").find("li")]
    assert calls == ['lookup({"id": "<b>8</b>"})', "erase({})"]
    mismatch = column.one("li", data_miss="tool_arg_mismatch:lookup.id")
    assert 'id = "7"' in mismatch.one("span", class_="expected").text()
    assert 'id = "<b>8</b>"' in mismatch.one("span", class_="got").text()
    unknown = column.one("li", data_miss="tool_unknown:erase")
    assert "lookup" in unknown.one("span", class_="expected").text()
    assert [b.text() for b in detail.find("b") if "8" in b.text()] == []  # stamps only
    assert not list(detail.find("img"))


def test_the_request_shows_system_prompt_turns_and_tools(views: dict[str, CaseView]) -> None:
    """A recorded side shows the request it stands in for: system, user turn, tools, params."""
    request = views["tool"].candidate.request
    assert request is not None and request.source is Source.STANDS_IN
    assert request.system == "Use the tools."
    assert [(t.role, t.text) for t in request.turns] == [("user", "Where is order 7?")]
    assert [t.name for t in request.tools] == ["lookup"]
    assert ("model", '"cand-1"') in request.params
    text = (
        _detail(views["tool"])
        .one("article", data_side="candidate")
        .one("details", class_="cd-request")
        .text()
    )
    assert "Use the tools." in text and "Find an order." in text


def test_stamps_samples_latency_tokens_and_cost_per_side(views: dict[str, CaseView]) -> None:
    """Each side shows its three stamps, every sample's score, its latency and tokens, and
    the candidate's cost from its price (the reference has none: unknown, never zero)."""
    view = views["flaky"]
    cand = view.candidate
    assert [s.sample for s in cand.samples] == [0, 1, 2]
    assert [s.misses for s in cand.samples] == [(), ("missing:ok",), ()]
    assert cand.noise == ("missing:ok",)
    assert cand.usage.tokens is not None and cand.usage.tokens.prompt == 1000
    assert cand.usage.cost_usd == pytest.approx(0.006)  # 1000 x $2 + 500 x $8 per million
    assert view.reference.usage.cost_usd is None
    detail = _detail(view)
    column = detail.one("article", data_side="candidate")
    assert column.one("li", data_stamp="task").one("b").text() == "0.89"  # 1, 2/3, 1
    assert "$0.006000" in column.one("dl", class_="cd-usage").text()
    assert "no price" in detail.one("article", data_side="reference").one("dl").text()
    row = column.one("table", class_="cd-samples").one("tr", data_sample="1")
    assert "missing:ok" in row.text()


def test_the_accepted_snapshot_entry_is_shown(views: dict[str, CaseView]) -> None:
    """A case in the snapshot shows its accepted entry; a new case says it has none."""
    accepted = dict(views["moved"].accepted.keys or ())
    assert accepted["candidate_misses"] == "[]"
    assert views["fresh"].accepted.keys is None
    assert views["fresh"].accepted.note == "not in the snapshot"
    accepted_html = _detail(views["moved"]).one("details", class_="cd-accepted").text()
    assert "candidate_misses" in accepted_html and "disagreement []" in accepted_html


def test_an_edited_case_says_its_row_changed_since_the_run(gates: Path, tmp_path: Path) -> None:
    """The fixture_move case's row is today's; a row edited after the run says so, and a
    fixture file that is gone leaves the request and reply and says the expectation is not
    known."""
    copy = tmp_path / "run"
    shutil.copytree(gates, copy)
    fixtures = Path(json.loads((copy / "manifest.json").read_text())["fixtures"]["path"])
    saved = fixtures.read_bytes()
    try:
        fixtures.write_text(saved.decode().replace('"Say ok."', '"Say OK."', 1))
        same = {v.id: v for v in case_views(copy)}["same"]
        assert any("was edited since this run" in n for n in same.notes)
        fixtures.unlink()
        gone = {v.id: v for v in case_views(copy)}["moved"]
        assert not gone.expectation.known
        assert gone.expectation.note is not None and "is not there" in gone.expectation.note
        assert gone.candidate.reply.text == "Sure thing, done."
        assert "not known" in _detail(gone).one("section", class_="cd-expect").text()
    finally:
        fixtures.write_bytes(saved)


def test_a_run_copied_without_its_config_still_opens_and_is_priced(
    gates: Path, tmp_path: Path
) -> None:
    """A run dir whose config is gone (copied off the CI machine) still shows each case: the
    cost from the price the manifest recorded, the case's own turns as its request, and a
    snapshot entry said to be unknown."""
    copy = tmp_path / "run"
    shutil.copytree(gates, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    assert manifest["endpoints"]["candidate"]["price"]["output_per_mtok"] == 8.0
    assert manifest["endpoints"]["reference"]["price"] is None
    manifest["config"]["path"] = str(tmp_path / "gone.toml")
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with RunCases(copy) as opened:
        assert any("config is not readable" in note for note in opened.notes)
        view = next(v for v in opened if v.id == "tool")
    assert view.candidate.usage.cost_usd == pytest.approx(0.006)
    request = view.candidate.request
    assert request is not None and request.source is Source.CASE
    assert [(t.role, t.text) for t in request.turns] == [("user", "Where is order 7?")]
    assert request.system == "Use the tools."
    assert view.accepted.keys is None and view.accepted.note is not None
    assert "not known" in view.accepted.note


def test_a_run_with_a_broken_or_missing_raw_ledger_still_opens(gates: Path, tmp_path: Path) -> None:
    """A raw.jsonl line that is no exchange, or no raw.jsonl at all, leaves each case its
    stamps and expectation, and says why its reply is not shown."""
    copy = tmp_path / "run"
    shutil.copytree(gates, copy)
    raw = copy / "raw.jsonl"
    lines = raw.read_text(encoding="utf-8").splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if '"case_id":"same"' in line)
    lines[at] = lines[at].replace('"attempts":[', '"attempts":7,"x":[', 1)
    raw.write_text("".join(lines), encoding="utf-8")
    broken = {v.id: v for v in case_views(copy)}["same"]
    side = next(s for s in broken.sides if s.reply.kind == "none")
    assert side.reply.why == f"raw.jsonl:{at + 1} does not read as an exchange"
    assert f"raw.jsonl:{at + 1}: not an exchange" in broken.notes
    raw.unlink()
    with RunCases(copy) as opened:
        assert "raw.jsonl: missing" in opened.notes
        gone = next(v for v in opened if v.id == "city")
    assert gone.candidate.reply.kind == "none"
    assert gone.candidate.reply.why == "raw.jsonl is not in the run dir (field_mismatch:city)"
    assert [m.code for m in gone.candidate.misses] == ["field_mismatch:city"]
    assert 'city = "Paris"' in (gone.candidate.misses[0].expected or "")
    assert gone.candidate.transport == "ok" and gone.candidate.raw is None


def test_the_raw_exchange_link_names_its_raw_jsonl_line(
    views: dict[str, CaseView], gates: Path
) -> None:
    """A raw exchange past the cap ends in a link to raw.jsonl naming the line that holds it."""
    view = views["long"]
    raw = view.candidate.raw
    assert raw is not None and raw.cut
    line = (gates / "raw.jsonl").read_text(encoding="utf-8").splitlines()[raw.line - 1]
    row = json.loads(line)
    assert (row["case_id"], row["side"], row["sample"]) == ("long", "candidate", 0)
    link = _detail(view).one("article", data_side="candidate").one("a", class_="raw-link")
    assert link.attrs["href"] == "raw.jsonl"
    assert link.text() == f"raw.jsonl, line {raw.line}"
    short = views["same"].reference.raw
    assert short is not None and not short.cut
    assert not list(_detail(views["same"]).find("a", class_="raw-link"))


def test_untrusted_text_stays_text_and_uses_no_style_attribute(views: dict[str, CaseView]) -> None:
    """No element comes from a reply, an argument or a body, and no detail has style=""."""
    for view in views.values():
        html_text = _render(view)
        assert "style=" not in html_text
        detail = _detail(view)
        assert not list(detail.find("script")) and not list(detail.find("img"))


@pytest.fixture(scope="module")
def tools_demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's tools suite (an Anthropic-shaped streamed candidate), run from a copy."""
    from runner.config import load_config
    from runner.runs.run import run_suite

    root = tmp_path_factory.mktemp("demo")
    for name in ("config", "fixtures", "snapshots"):
        shutil.copytree(REPO / name, root / name)
    run_dir, _, _ = run_suite(load_config(root / "config" / "demo.toml"), "tools")
    return run_dir


def test_the_demo_tools_suite_shows_streams_and_their_ttft(tools_demo: Path) -> None:
    """A streamed Anthropic candidate shows its ttft, tokens, calls and misses; a conversation
    case shows the tool result it carried."""
    found = {v.id: v for v in case_views(tools_demo)}
    quote = found["tool.quote.unknown_tool"].candidate
    assert quote.stream and quote.ttft_ms == 0
    assert quote.usage.tokens is not None and quote.usage.tokens.completion == 45
    assert quote.tool_calls == ('calculate_shipping({"kg": 2, "to": "Denver"})',)
    assert [m.code for m in quote.misses] == [
        "tool_missing:get_shipping_quote",
        "tool_unknown:calculate_shipping",
    ]
    detail = _detail(found["tool.quote.unknown_tool"]).one("article", data_side="candidate")
    assert "ttft" in detail.one("dl", class_="cd-usage").text()
    answered = found["tool.order.answered"].candidate.request
    assert answered is not None
    assert [t.role for t in answered.turns] == ["user", "assistant", "tool"]
    assert answered.turns[1].calls == ('get_order_status({"order_id": "1842"})',)
    assert answered.turns[2].answers == "call_1"


def test_request_bodies_of_each_protocol_read_as_sent() -> None:
    """The bodies the openai-chat, anthropic-messages and http-json wires build read back as
    the same system prompt, turns, tools and params."""
    from runner.config import EndpointConfig
    from runner.fixtures.load import load_cases
    from runner.protocols import anthropic_messages, http_json, openai_chat
    from runner.request.shape import PLAIN

    case = next(
        c for c in load_cases(REPO / "fixtures" / "tools.jsonl") if c.id == "tool.order.answered"
    )
    for wire, kind in ((openai_chat, "openai-chat"), (anthropic_messages, "anthropic-messages")):
        cfg = EndpointConfig(kind=kind, base_url="http://127.0.0.1:1", model="m")  # type: ignore[arg-type]
        body = wire.body(cfg, PLAIN, case)
        view = request_view(kind, {"method": "POST", "url": "u", "body": body}, cap=4000)
        assert view.system is not None and view.system.startswith("You are the shop")
        assert [t.role for t in view.turns] == ["user", "assistant", "tool"], kind
        assert view.turns[1].calls and view.turns[1].calls[0].startswith("get_order_status(")
        assert "shipped" in view.turns[2].text
        assert [t.name for t in view.tools] == ["get_order_status", "get_shipping_quote"]
        assert ("model", '"m"') in view.params
    template = {"q": "{{prompt}}", "sys": "{{system}}", "n": 1}
    cfg = EndpointConfig(kind="http-json", base_url="http://127.0.0.1:1", body_template=template)
    prompt_case = next(c for c in load_cases(REPO / "fixtures" / "tools.jsonl") if c.prompt)
    view = request_view("http-json", {"body": http_json.body(cfg, PLAIN, prompt_case)}, cap=4000)
    assert dict(view.params)["q"] == json.dumps(prompt_case.prompt)


def test_a_live_side_shows_the_body_it_sent(fault_server: Any, tmp_path: Path) -> None:
    """Against a real server, the request shown is raw.jsonl's body, templates rendered, and
    the tokens are the server's, priced by the endpoint's price; a stream shows its ttft."""
    from relkit import endpoint_toml, suite_toml, write_config

    from runner.config import load_config
    from runner.runs.run import run_suite

    (tmp_path / "cases.jsonl").write_text(
        json.dumps({"id": "c1", "prompt": "word1 please", "expect": {"must_include": ["word1"]}})
        + "\n"
    )
    ref = endpoint_toml("ref", fault_server.url("sse")) + 'system = "Be brief, {{ prompt }}"\n'
    ref += "params = { seed = 7 }\nstream = true\n"
    cand = endpoint_toml("cand", fault_server.url("ok", suffix="")).replace(
        'kind = "openai-chat"', 'kind = "anthropic-messages"'
    )
    cand += "price = { input_per_mtok = 3.0, output_per_mtok = 15.0 }\n"
    config = write_config(tmp_path, ref + cand, suite_toml("s"))
    run_dir, _, _ = run_suite(load_config(config), "s")
    view = next(iter(case_views(run_dir)))
    ref_request, cand_request = view.reference.request, view.candidate.request
    assert ref_request is not None and ref_request.source is Source.SENT
    assert ref_request.system == "Be brief, word1 please"
    assert ("seed", "7") in ref_request.params
    assert cand_request is not None and cand_request.source is Source.SENT
    assert cand_request.url is not None and cand_request.url.endswith("/v1/messages")
    assert [t.text for t in cand_request.turns] == ["word1 please"]
    tokens = view.candidate.usage.tokens  # the server's own usage, priced as the run was
    assert tokens is not None and tokens.prompt > 0 and tokens.completion > 0
    expected = (tokens.prompt * 3.0 + tokens.completion * 15.0) / 1e6
    assert view.candidate.usage.cost_usd == pytest.approx(expected)
    assert view.reference.usage.cost_usd is None  # no price: unknown, never $0
    assert view.reference.elapsed_ms is not None and view.reference.attempts[0].status == 200
    assert view.reference.stream and view.reference.ttft_ms is not None
    assert ("stream", "true") in ref_request.params
    usage = _detail(view).one("article", data_side="reference").one("dl", class_="cd-usage")
    assert f"{view.reference.ttft_ms} ms" in usage.text() and "ttft" in usage.text()


@pytest.mark.slow
@pytest.mark.timeout(300)  # a bound for a hung test: a 20,000-case run, then its views traced
def test_a_20000_case_run_is_viewed_one_case_at_a_time(tmp_path: Path) -> None:
    """Views come from an iterator, built when asked for: opening a 20,000-case run keeps its
    ledgers indexed, not read, and walking its views holds none of the ones already seen."""
    cases = [
        {"id": f"c{i:05d}", "prompt": "Say ok.", "expect": {"must_include": ["ok"]}}
        for i in range(20_000)
    ]
    run_dir, _, _ = Project(tmp_path, cases).run()
    lazy = case_views(run_dir)
    assert iter(lazy) is lazy  # a generator: nothing is built before it is asked for
    tracemalloc.start()
    try:
        with RunCases(run_dir) as opened:
            walk = iter(opened)
            first = next(walk)
            for _ in range(199):
                next(walk)
            settled, _ = tracemalloc.get_traced_memory()
            for _ in range(1000):
                next(walk)
            after, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            rest = sum(1 for _ in walk)
    finally:
        tracemalloc.stop()
    assert rest == 18_800
    brief = _detail(first)  # a case that needs no review, in a run this large, is in brief
    assert first.brief and "brief" in (brief.attrs.get("class") or "").split()
    assert [a.text() for a in brief.find("a", class_="raw-link")] == [
        f"raw.jsonl, line {first.reference.raw.line}" if first.reference.raw else "",
        f"raw.jsonl, line {first.candidate.raw.line}" if first.candidate.raw else "",
    ]
    assert after - settled < 2**19, f"grew {(after - settled) / 2**20:.1f} MB over 1,000 views"
    assert peak < 48 * 2**20, f"peak {peak / 2**20:.1f} MB"  # some 15 MB, of indexes


def test_only_a_large_run_s_quiet_cases_are_in_brief() -> None:
    """Review and unscored cases are always in full; the rest only past FULL_UP_TO cases."""
    from runner.reports.caseview import BRIEF, FULL, FULL_UP_TO, caps_for

    assert caps_for("unchanged", True, FULL_UP_TO) is FULL
    assert caps_for("unchanged", True, FULL_UP_TO + 1) is BRIEF
    assert caps_for("new_case", True, 20_000) is BRIEF
    assert caps_for("new_case", False, 20_000) is FULL  # unscored
    for gate in ("disagreement_changed", "alias_swap", "transport_miss", "schema_miss"):
        assert caps_for(gate, gate != "transport_miss", 20_000) is FULL


def test_bidi_controls_and_nuls_show_as_escapes_everywhere_in_a_detail(tmp_path: Path) -> None:
    """A case id, prompt, reply, tool argument and model name holding bidi controls and NULs
    render as visible escapes, never as the characters themselves."""
    rlo = "invoice\u202egpj.exe"
    cases = [
        {"id": rlo, "prompt": f"say {rlo}\x00", "tools": [TOOL], "expect": {"must_include": ["ok"]}}
    ]
    project = Project(tmp_path, cases)
    project.cassettes(
        {rlo: {"completion": f"ok {rlo}\x00", "model": "ref\u202e"}},
        {rlo: {"completion": "no", "tool_calls": [{"name": "lookup", "arguments": {"id": rlo}}]}},
    )
    run_dir, _, _ = project.run()
    view = next(iter(case_views(run_dir)))
    html_text = _render(view)
    assert "\u202e" not in html_text and "\x00" not in html_text
    assert "invoice\\u202egpj.exe" in html_text and "\\x00" in html_text
    assert 'data-id="invoice\\u202egpj.exe"' in html_text


def test_every_attempt_of_a_retried_call_is_shown(fault_server: Any, tmp_path: Path) -> None:
    """A call that got a 503 and was retried lists both attempts: stamp, status and time."""
    from relkit import endpoint_toml, suite_toml, write_config

    from runner.config import load_config
    from runner.runs.run import run_suite

    (tmp_path / "cases.jsonl").write_text(
        json.dumps({"id": "c1", "prompt": "word1", "expect": {"must_include": ["word1"]}}) + "\n"
    )
    # long timeouts: the retry must be answered, however busy the machine
    endpoints = endpoint_toml("ref", fault_server.url("flaky:1", "ref"), deadline=30, read=20)
    endpoints += endpoint_toml("cand", fault_server.url("ok"), deadline=30, read=20)
    run_dir, _, _ = run_suite(load_config(write_config(tmp_path, endpoints, suite_toml("s"))), "s")
    view = next(iter(case_views(run_dir)))
    attempts = view.reference.attempts
    assert [(a.n, a.transport, a.status) for a in attempts] == [
        (1, "http_error", 503),
        (2, "ok", 200),
    ]
    table = _detail(view).one("article", data_side="reference").one("table", class_="cd-attempts")
    cells = [[td.text() for td in tr.find("td")] for tr in table.find("tr")][1:]
    assert [c[:3] for c in cells] == [["1", "http_error", "503"], ["2", "ok", "200"]]


def test_a_ledger_row_with_an_impossible_sample_is_skipped_and_noted(tmp_path: Path) -> None:
    """A hand-edited row numbering its sample past 32 bits is not a ledger row: it is noted
    and skipped, the rows around it still found, never an error."""
    from runner.reports.ledgerindex import LedgerIndex

    path = tmp_path / "raw.jsonl"
    rows = [
        {"case_id": "a", "side": "reference", "sample": 0},
        {"case_id": "a", "side": "reference", "sample": 2**40},
        {"case_id": "b", "side": "candidate", "sample": 1},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    index = LedgerIndex(path)
    try:
        assert [s.sample for s in index.spots("a", "reference")] == [0]
        assert [(s.sample, s.line) for s in index.spots("b", "candidate")] == [(1, 3)]
        assert index.problems == ["raw.jsonl:2: not a ledger row; skipped"]
    finally:
        index.close()


_TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)


@given(
    case_id=_TEXT,
    side=st.sampled_from(["reference", "candidate", "noise"]),
    sample=st.integers(0, 2**31 - 1),
    headers=st.dictionaries(_TEXT, _TEXT, max_size=3),
    body=st.dictionaries(_TEXT, _TEXT, max_size=3),
)
def test_a_raw_row_s_key_found_without_parsing_is_its_own(
    case_id: str, side: str, sample: int, headers: dict[str, str], body: dict[str, str]
) -> None:
    """The index reads a raw row's key from its bytes: a case id, headers and a body spelling
    `"side":`, `"sample":` or `"case_id":` anywhere give the row's own key or none (then the
    row is parsed), never another's."""
    from runner.jsontext import dumps
    from runner.reports.ledgerindex import _raw_key

    row = {
        "adapter": "openai-chat",
        "attempts": [{"n": 1, "message": '"case_id":"x"', "transport": "ok"}],
        "case_id": case_id,
        "request": {"body": {**body, "case_id": "y", "side": "z", "sample": 7}},
        "response": {"body": '{"side": "q"}', "headers": headers},
        "sample": sample,
        "served_model_header": ',"side":"w"',
        "side": side,
        "started_at": ',"sample":3,',
    }
    found = _raw_key(dumps(row) + b"\n")
    assert found in (None, (case_id, side, sample))


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
        max_leaves=8,
    )
)
def test_a_value_s_text_is_the_json_a_person_reads_cached_or_not(value: Any) -> None:
    """value_text is json.dumps's text of a value (keys sorted, non-ASCII kept), the first
    time and when it comes from the texts already made (NaN and null apart)."""
    from runner.reports.expected import value_text

    expected = json.dumps(value, ensure_ascii=False, sort_keys=True)
    assert (value_text(value, 10**6), value_text(value, 10**6)) == (expected, expected)


def test_a_report_s_case_details_share_its_summary_rather_than_read_it_again(gates: Path) -> None:
    """The details a report opens use the summary.json the report already read (over a
    megabyte parsed at 20,000 cases), not a second copy of it."""
    from runner.reports.model import build_report

    with build_report(gates) as rep:
        assert rep.details().inputs.summary is rep.summary
        assert rep.details().count == rep.summary["cases"]


def test_equal_turns_read_once_still_say_what_was_cut() -> None:
    """Two sides sent the same turns read them once (the second view's turns are the first's),
    and the second still says its text was cut; another cap, or other turns, are read anew."""
    long = {"messages": [{"role": "user", "content": "x" * 50}], "model": "a"}
    short = {"messages": [{"role": "user", "content": "short"}], "model": "b"}
    first = request_view("openai-chat", {"body": long}, cap=10)
    again = request_view("openai-chat", {"body": {**long, "model": "b"}}, cap=10)
    assert first.cut and again.cut
    assert again.turns is first.turns
    wider = request_view("openai-chat", {"body": long}, cap=100)
    assert not wider.cut and wider.turns[0].text == "x" * 50
    other = request_view("openai-chat", {"body": short}, cap=10)
    assert not other.cut and other.turns[0].text == "short"


def test_a_string_table_keeps_each_text_once_by_its_text() -> None:
    """Interned values are keyed by their text: `True` and `1` are two texts, not one key,
    None stays None, and a text that needs escaping is stored as `visible` shows it."""
    from runner.reports.casedata import Strings
    from runner.text import visible

    table = Strings()
    s = table.add
    ids = [s("1"), s(1), s(True), s(None), s("True"), s("a\u202eb"), s("1")]
    assert ids == [0, 0, 1, None, 1, 2, 0]
    assert table.table == ["1", "True", visible("a\u202eb")]
