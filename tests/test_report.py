"""report.html and report.md: what they show, and that untrusted text never becomes markup."""

from __future__ import annotations

import json
import re
import shutil
import unicodedata
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from markupsafe import escape
from reportkit import (
    HOSTILE_IMG,
    HOSTILE_LONG,
    HOSTILE_SCRIPT,
    HOSTILE_TABLE,
    UNSTRATIFIED,
    Project,
    hostile_project,
    page_blocks,
    page_cases,
    page_strings,
)
from structlog.testing import capture_logs

from runner.cli import main
from runner.reports.html import html_parts, report_script
from runner.reports.markdown import MD_LINE_CAP, md_text, render_markdown
from runner.reports.model import RunReport, build_report


def _html(rep: RunReport) -> str:
    return "".join(html_parts(rep))


class _Tags(HTMLParser):
    """Collects start tags and their attributes, as a browser's tokenizer would see them."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _tags(text: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Tags()
    parser.feed(text)
    return parser.tags


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _, run_dir = hostile_project(tmp_path_factory.mktemp("hostile"))
    return run_dir


def test_run_writes_both_reports(hostile: Path) -> None:
    """A run ends with report.html and report.md in its run directory."""
    expected = [True, True]
    actual = [(hostile / "report.html").is_file(), (hostile / "report.md").is_file()]
    assert expected == actual


def test_html_has_no_element_from_a_reply(hostile: Path) -> None:
    """No script, img, or injected element comes out of a reply; only the report's own tags,
    whose one script a browser runs is report.js, beside the case data blocks (base64 in a
    type no browser runs)."""
    text = (hostile / "report.html").read_text(encoding="utf-8")
    tags = _tags(text)
    blocks = page_blocks(text)
    expected: tuple[list[str], list[str], list[str], int] = (["script"], [], [], len(blocks))
    actual = (
        [tag for tag, attrs in tags if tag == "script" and "type" not in attrs],
        [tag for tag, attrs in tags if tag in ("img", "iframe") or attrs.get("id") == "injected"],
        [tag for tag, attrs in tags if any(k.startswith("on") for k in attrs)],
        len([a for t, a in tags if t == "script" and a.get("type") == "application/octet-stream"]),
    )
    assert expected == actual
    assert blocks and sum(b["count"] for b in blocks) == 14
    assert f"<script>{report_script()}</script>" in text


def test_html_shows_replies_as_escaped_text(hostile: Path) -> None:
    """Each hostile reply appears html-escaped, so a reader sees the markup as text."""
    page = (hostile / "report.html").read_text(encoding="utf-8")
    expected = [True, True, True]
    actual = [escape(s) in page for s in (HOSTILE_SCRIPT, HOSTILE_IMG, HOSTILE_TABLE)]
    assert expected == actual


def test_html_needs_no_network(hostile: Path) -> None:
    """The page fetches nothing: no http(s) URL, no src or href to another file."""
    page = (hostile / "report.html").read_text(encoding="utf-8")
    own = [(t, a) for t, a in _tags(page) if "src" in a or ("href" in a and t == "link")]
    expected: tuple[list[str], list[tuple[str, dict[str, str | None]]]] = ([], [])
    actual = (re.findall(r"https?://(?!www\.w3\.org/2000/svg)[^\s\"'<]+", page), own)
    assert expected == actual


def test_review_cases_come_first_in_gate_order(hostile: Path) -> None:
    """disagreement_changed cases are listed before alias_swap, both before other sections."""
    rep = build_report(hostile, retire_after=2)
    expected = [
        ("hostile-img", "disagreement_changed"),
        ("hostile-long", "disagreement_changed"),
        ("hostile-pipes", "disagreement_changed"),
        ("hostile-script", "disagreement_changed"),
        ("hostile-table", "disagreement_changed"),
        ("alias", "alias_swap"),
    ]
    actual = [(k, v["gate"]) for k, v in rep.cases_in(("disagreement_changed", "alias_swap"))]
    assert expected == actual


def test_long_reply_is_capped_in_html(hostile: Path) -> None:
    """A 9000-character reply is cut for the page and says so, in the markup shown without
    the script and in the case data the script shows."""
    page = (hostile / "report.html").read_text(encoding="utf-8")
    [case] = [c for c in page_cases(page) if c.id == "hostile-long"]
    reply = case.reply(1)
    expected = (False, True, "L" * 6000, True)
    actual = (HOSTILE_LONG in page, "cut for the report" in page, case.text(reply["text"]),
              reply["cut"])  # fmt: skip
    assert expected == actual


def test_incomplete_cases_grouped_by_stamp(hostile: Path) -> None:
    """Transport and schema misses are grouped under their stamp with their case ids."""
    from runner.reports.model import incomplete_groups

    rep = build_report(hostile)
    expected = {"schema: not_json": ["schema"], "transport: timeout": ["timeout"]}
    actual = {k: [cid for cid, _ in v] for k, v in incomplete_groups(rep).items()}
    assert expected == actual


def test_served_models_and_trend_in_html(hostile: Path) -> None:
    """The served models per side are listed and the trend has one bar group per run."""
    page = (hostile / "report.html").read_text(encoding="utf-8")
    expected = (True, True, 2)
    actual = (
        "cand-2-&lt;b&gt;preview&lt;/b&gt;" in page,
        "ref-1" in page,
        len(set(re.findall(r"<title>[^<(]*\((\d{8}T\d{6}Z-[0-9a-f]{6})\): ", page))),
    )
    assert expected == actual


def test_markdown_escapes_and_keeps_table_shape(hostile: Path) -> None:
    """Every review row keeps its five cells, no raw tag survives, no line is overlong."""
    text = (hostile / "report.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| hostile-")]
    expected = (5, [6] * 5, [], True)
    actual = (
        len(rows),
        [len(re.findall(r"(?<!\\)\|", row)) for row in rows],
        re.findall(r"<(?!br>)[a-z/]", text),
        max(len(line) for line in text.splitlines()) <= MD_LINE_CAP,
    )
    assert expected == actual


def test_markdown_has_verdict_first(hostile: Path) -> None:
    """The first line carries the verdict word and the exit code."""
    first = (hostile / "report.md").read_text(encoding="utf-8").splitlines()[0]
    expected = True
    actual = "**REVIEW+INCOMPLETE** (exit 3)" in first
    assert expected == actual


def test_md_text_escapes_markup_characters() -> None:
    """Pipes, backticks, angle brackets and link brackets are neutralised; newlines folded."""
    expected = "a \\| b \\` &lt;i&gt; \\[x\\](y) c"
    actual = md_text("a | b ` <i> [x](y)\n c")
    assert expected == actual


def test_md_text_caps_length() -> None:
    """A long value is cut to the cap with an ellipsis."""
    expected = 10
    actual = len(md_text("x" * 100, cap=10))
    assert expected == actual


def test_clean_run_says_nothing_moved(tmp_path: Path) -> None:
    """A run identical to its snapshot renders a clean verdict, says so in words, and lists
    no reason and no review card."""
    project = Project(tmp_path, UNSTRATIFIED)
    first, _, _ = project.run()
    project.promote(first)
    run_dir, code, _ = project.run()
    page = _html(build_report(run_dir))
    tags = _tags(page)
    expected = (0, ["clean"], True, [], 0)
    actual = (
        code,
        [a.get("data-verdict") for t, a in tags if a.get("id") == "verdict"],
        "Nothing needs review: every case is as the accepted snapshot has it" in page,
        [a for t, a in tags if a.get("class") == "reason"],
        page.count('<section class="case-detail"') - page.count("<template"),
    )
    assert expected == actual


def test_report_command_rewrites_reports_and_returns_run_exit(hostile: Path) -> None:
    """`parallax report RUN_DIR` rewrites both files and exits with the run's own code."""
    (hostile / "report.md").unlink()
    expected = (3, True)
    actual = (main(["report", str(hostile)]), (hostile / "report.md").is_file())
    assert expected == actual


def test_report_on_missing_run_dir_is_a_usage_error(tmp_path: Path) -> None:
    """A run directory that does not exist is exit 64, as for replay, promote and --resume."""
    for command in ("report", "replay", "promote"):
        assert main([command, str(tmp_path / "nope")]) == 64, command


@pytest.mark.parametrize("code", ["x", None, 300, -5, True, 1.0], ids=repr)
def test_report_refuses_a_summary_exit_code_that_is_no_verdict(
    hostile: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], code: Any
) -> None:
    """CI takes `report`'s exit as the run's verdict: a corrupt one is exit 65, never 0."""
    import shutil

    copy = tmp_path / "s" / hostile.name
    shutil.copytree(hostile, copy)
    summary = json.loads((copy / "summary.json").read_text(encoding="utf-8"))
    summary["exit_code"] = code
    (copy / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    assert main(["report", str(copy)]) == 65
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "summary.json" in err[0] and "exit_code" in err[0], err


@pytest.mark.parametrize(
    ("name", "path", "value"),
    [
        ("summary.json", ("retired",), -1),
        ("summary.json", ("served_models",), {"candidate": 1}),
        ("summary.json", ("stratum_alerts",), {"reference": True}),
        ("summary.json", ("strata",), {"reference": {"easy": {"pass_rate": 10**400, "n": 1}}}),
        ("disagreement.json", ("cases", "*", "gate"), []),
    ],
    ids=["retired-number", "served-number", "alerts-true", "rate-400-digits", "gate-list"],
)
def test_report_renders_a_run_whose_files_hold_a_field_of_the_wrong_shape(
    hostile: Path, tmp_path: Path, name: str, path: tuple[str, ...], value: Any
) -> None:
    """A hand-edited field shows as unknown in the report, which still exits with the run's
    own code: no traceback, and both files are written."""
    copy = tmp_path / "s" / hostile.name
    shutil.copytree(hostile, copy)
    doc = json.loads((copy / name).read_text(encoding="utf-8"))
    target = doc
    for key in path[:-1]:
        target = target[next(iter(target)) if key == "*" else key]  # "*": the first case
    target[path[-1]] = value
    (copy / name).write_text(json.dumps(doc), encoding="utf-8")
    (copy / "report.md").unlink()
    assert main(["report", str(copy)]) == 3
    assert (copy / "report.md").is_file() and (copy / "report.html").is_file()


def test_report_without_a_reachable_config_still_renders(hostile: Path, tmp_path: Path) -> None:
    """A run dir copied elsewhere (a CI artifact) still renders from its own files."""
    import shutil

    copy = tmp_path / "s" / hostile.name
    shutil.copytree(hostile, copy)
    manifest = json.loads((copy / "manifest.json").read_text(encoding="utf-8"))
    manifest["config"]["path"] = str(tmp_path / "gone.toml")
    (copy / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    expected = 3
    actual = main(["report", str(copy)])
    assert expected == actual


def test_markdown_of_a_run_with_unreadable_raw_still_renders(hostile: Path, tmp_path: Path) -> None:
    """A broken raw.jsonl costs the replies, not the report: a note, under the table, says so."""
    import shutil

    copy = tmp_path / "s" / hostile.name
    shutil.copytree(hostile, copy)
    (copy / "raw.jsonl").write_text("{broken\n{}\n", encoding="utf-8")
    rep = build_report(copy)
    markdown, page = render_markdown(rep), _html(rep)
    expected = (True, True, True)
    actual = (
        any("raw.jsonl" in n for n in rep.notes),
        "parallax" in markdown,
        "raw.jsonl:1" in page,
    )
    assert expected == actual


def test_ceiling_alert_logged_when_the_list_grows(tmp_path: Path) -> None:
    """With retire_after 2, the second quiet run raises alert.ceiling_candidates once."""
    project = Project(tmp_path)
    events = []
    for _ in range(3):
        with capture_logs() as logs:
            project.run()
        events.append([e for e in logs if e["event"] == "alert.ceiling_candidates"])
    everything = ["easy-a", "easy-b", "med-a", "med-b", "str-a", "str-b"]
    expected = [0, 1, 0]
    actual = [len(batch) for batch in events]
    assert expected == actual
    expected_fields = (6, everything, everything)
    actual_fields = (events[1][0]["count"], events[1][0]["case_ids"], events[1][0]["new"])
    assert expected_fields == actual_fields


def test_an_unknown_gate_class_still_renders(hostile: Path, tmp_path: Path) -> None:
    """A gate class added after this report was written gets a neutral colour, not a crash."""
    run_dir = tmp_path / "runs" / hostile.parent.name / hostile.name
    shutil.copytree(hostile, run_dir)
    path = run_dir / "disagreement.json"
    path.write_text(path.read_text().replace('"gate":"unchanged"', '"gate":"brand_new_class"'))
    page = _html(build_report(run_dir, top=None))
    rows = [c for c in page_cases(page) if c.gate == "brand_new_class"]
    assert len(rows) == 6  # each case that had it, in the table of all


def _synthetic_run(root: Path, gates: dict[str, str]) -> Path:
    """A finished run directory with one case per entry of `gates`, and nothing else."""
    from runner.ledger import write_json, write_json_map

    run_dir = root / "runs" / "big" / "20260101T000000Z-aaaaaa"
    run_dir.mkdir(parents=True)
    side = {"transport": "ok", "schema": "ok", "admitted": True, "misses": [], "detail": "ok"}
    down = {**side, "transport": "timeout", "schema": "skipped", "admitted": False}

    def entry(gate: str) -> dict[str, object]:
        admitted = gate != "transport_miss"
        view = side if admitted else down
        return {
            "gate": gate,
            "detail": gate,
            "admitted": admitted,
            "stratum": "easy",
            "disagreement": [],
            "reference": view,
            "candidate": view,
        }

    write_json_map(
        run_dir / "disagreement.json",
        {"version": 1, "suite": "big", "retired": []},
        "cases",
        ((case_id, entry(gates[case_id])) for case_id in sorted(gates)),
    )
    write_json(run_dir / "summary.json", {"suite": "big", "verdict": "review+incomplete"})
    return run_dir


def _brief_ids(section: str) -> list[str]:
    """The case ids of a no-script section's table of cases in brief, in order."""
    if '<table class="brief">' not in section:
        return []
    table = section[section.index('<table class="brief">') : section.index("</table>")]
    return re.findall(r"<tr><td><code>([^<]*)</code>", table)


def test_a_big_run_lists_every_case_and_caps_only_the_details_shown_without_script(
    tmp_path: Path,
) -> None:
    """Every case is in the page's data, its row and its detail; only the review cases
    readable without JavaScript stop at `top` a gate, saying how many more there are; JUnit
    keeps every case whatever `top` is."""
    from runner.junit import junit_xml

    gates = {f"r{i}": "disagreement_changed" for i in range(5)}
    gates |= {f"t{i}": "transport_miss" for i in range(3)}
    gates |= {f"u{i}": "unchanged" for i in range(2)}
    run_dir = _synthetic_run(tmp_path, gates)
    rep = build_report(run_dir, top=2)
    expected_kept = ["r0", "r1", "t0", "t1"]
    assert expected_kept == sorted(rep.cases)
    assert len(gates) == rep.count == len(list(rep.every_case()))
    page = _html(rep)
    cases = page_cases(page)
    assert [c.id for c in cases] == sorted(gates)
    assert [c.n for c in cases] == list(range(len(gates)))
    assert all(c.side(0)["side"] == "reference" for c in cases)
    noscript = page[page.index("<noscript>") : page.index("</noscript>")]
    review, unscored = noscript.split('<section id="unscored">')
    assert "Needs review (5)" in review and "Unscored (3)" in unscored
    assert review.count('<section class="case-detail"') == 2
    assert unscored.count('<section class="case-detail"') == 2
    # the rest of each section, one line a case, so every such case reads without the script
    assert _brief_ids(review) == ["r2", "r3", "r4"] and _brief_ids(unscored) == ["t2"]
    assert "The other 3, in brief" in review and "transport: timeout" in unscored
    assert "… and" not in page.replace(noscript, "")  # no section of the page is cut
    assert "**Needs review (5)**" in render_markdown(rep)
    xml = junit_xml([rep])
    assert xml.count(b"<testcase") == len(gates)
    assert xml.count(b"<failure") == 5 and xml.count(b"<error") == 3


# --- text that could disguise itself ---------------------------------------------------------

RLO_ID = "invoice\u202egpj.exe"  # displays as "invoiceexe.jpg"
NUL_ID = "nul\x00id"
ZW_ID = "ref\u200bund\u2060\ufeff"  # displays as "refund"
TICK_ID = "t`ick<b>&amp;"
DISGUISED_REPLY = "ok \u202eesrever\u202c and a NUL\x00 and \x1b[2J"
# an escape or an entity per character, long enough to be cut in every cell and line
ENTITIES = "<&>\\|" * 400
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _hidden(text: str) -> list[str]:
    """The format characters (bidi controls, zero-width ones: Unicode category Cf) and the
    control characters but tab and newline that `text` holds."""
    return [c for c in text if unicodedata.category(c) == "Cf"] + _CONTROL.findall(text)


@pytest.fixture(scope="module")
def disguised(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second run whose case ids and replies hold bidi controls, NULs and markup."""
    cases = [
        {"id": case_id, "prompt": "p", "expect": {"must_include": ["ok"]}}
        for case_id in (RLO_ID, NUL_ID, ZW_ID, TICK_ID, "entities", ENTITIES[:200])
    ]
    project = Project(tmp_path_factory.mktemp("disguised"), cases)
    first, _, _ = project.run()
    project.promote(first)
    project.cassettes(
        {RLO_ID: {"completion": f"ok {DISGUISED_REPLY}", "model": "ref-1\u202e"}},
        {
            RLO_ID: {"completion": DISGUISED_REPLY, "model": "cand-1"},
            NUL_ID: {"completion": f"{DISGUISED_REPLY} {ENTITIES}", "model": "cand-1"},
            ZW_ID: {"completion": "o\u200bk\u200c\u200d", "model": "cand-1"},
            "entities": {"completion": ENTITIES, "model": "cand-1"},
            TICK_ID: {"fault": "timeout"},
            ENTITIES[:200]: {"fault": "timeout"},
        },
    )
    second, _, _ = project.run()
    return second


def test_html_shows_bidi_controls_and_nuls_as_escapes(disguised: Path) -> None:
    """No bidi control and no control character but tab and newline reaches report.html:
    the case id reads `invoice\\u202egpj.exe`, the reply's override and NUL are escapes, and so
    are zero-width characters, which would make two different ids look the same."""
    page = (disguised / "report.html").read_text(encoding="utf-8")
    data = "\n".join(page_strings(page))  # what the script shows, as the markup would
    assert _hidden(page) == [] and _hidden(data) == []
    assert "ref\\u200bund\\u2060\\ufeff" in page
    assert "o\\u200bk\\u200c\\u200d" in page
    assert "invoice\\u202egpj.exe" in page
    assert "ref-1\\u202e" in page  # a served model is untrusted too
    for shown in (
        "ref\\u200bund\\u2060\\ufeff",
        "invoice\\u202egpj.exe",
        "nul\\x00id",
        "ok \\u202eesrever\\u202c and a NUL\\x00 and \\x1b[2J",
        "ref-1\\u202e",
    ):
        assert shown in data, shown


def test_cases_in_brief_are_inert_text_too(disguised: Path, hostile: Path) -> None:
    """Listed in brief (no case shown in full), a hostile id, stamp or miss code is escaped
    text with bidi controls and NULs as escapes, as in a case shown in full."""
    for run_dir in (disguised, hostile):
        page = _html(build_report(run_dir, top=0))
        noscript = page[page.index("<noscript>") : page.index("</noscript>")]
        assert '<section class="case-detail"' not in noscript
        assert _brief_ids(noscript) and _hidden(noscript) == []
        tags = _tags(noscript)
        injected = [t for t, a in tags if t in ("script", "img", "iframe") or "onerror" in a]
        assert injected == [] and {a.get("id") for t, a in tags if a.get("id")} == {
            "review",
            "unscored",
        }
    page = _html(build_report(disguised, top=0))
    brief = page[page.index('<table class="brief">') : page.index("</noscript>")]
    assert "invoice\\u202egpj.exe" in brief and "t`ick&lt;b&gt;&amp;amp;" in brief


def test_markdown_shows_bidi_controls_and_nuls_as_escapes(disguised: Path) -> None:
    """The same in report.md, where a backslash is itself escaped: `\\\\u202e` shows `\\u202e`."""
    text = (disguised / "report.md").read_text(encoding="utf-8")
    assert _hidden(text) == []
    assert "ref\\\\u200bund" in text
    assert "invoice\\\\u202egpj.exe" in text
    assert "esrever\\\\u202c and a NUL\\\\x00" in text


def test_markdown_code_spans_hold_text_as_it_is_with_a_longer_fence(disguised: Path) -> None:
    """Inside a code span GitHub shows entities and backslashes literally: an id there is not
    HTML-escaped, and its backticks are fenced by a longer run."""
    text = (disguised / "report.md").read_text(encoding="utf-8")
    [line] = [line for line in text.splitlines() if line.startswith("- transport: timeout")]
    assert line.endswith(", ``t`ick<b>&amp;``")
    assert "&lt;" not in line and "&amp;&gt;" not in line
    assert "- ceiling candidates (1): `invoice\\u202egpj.exe`" in text.splitlines()


def _whole_escapes(line: str) -> bool:
    """Every & opens a whole entity and every backslash escapes the character after it."""
    return re.fullmatch(r"(?:[^&\\]|&(?:amp|lt|gt);|\\.)*", line) is not None


def test_markdown_cells_and_lines_are_cut_between_escapes(disguised: Path) -> None:
    """Replies and ids made of entities and escapes are capped without cutting one in half,
    every review row keeps its five cells, and no line passes the cap."""
    text = (disguised / "report.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= MD_LINE_CAP
    table = [line for line in lines if line.startswith("| ")]
    assert table and all(_whole_escapes(line) for line in table), table
    rows = [line for line in table if "entities" in line or "nul" in line]
    assert [len(re.findall(r"(?<!\\)\|", row)) for row in rows] == [6, 6]


@given(st.text(alphabet="<&>\\|`*_ab\u202e\x00\n", max_size=300), st.integers(2, 200))
def test_md_text_is_capped_between_escapes(text: str, cap: int) -> None:
    """At most `cap` characters, and a cut never leaves half an entity or a lone backslash."""
    cell = md_text(text, cap=cap)
    assert len(cell) <= cap
    assert _whole_escapes(cell.removesuffix("…")), cell
    assert _hidden(cell) == []


TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
HOSTILE_ARG = "<script>x</script> | pipe"


@pytest.fixture(scope="module")
def tool_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run whose candidate calls a tool with other arguments, and one nobody offered."""
    expect = {"tool_calls": [{"name": "lookup", "arguments": {"id": "7"}}]}
    cases = [
        {"id": "call", "prompt": "p", "tools": [TOOL], "expect": expect},
        {"id": "unknown", "prompt": "p", "tools": [TOOL], "expect": expect},
    ]
    project = Project(tmp_path_factory.mktemp("tools"), cases)
    good = {"tool_calls": [{"name": "lookup", "arguments": {"id": "7"}}], "model": "m"}
    project.cassettes({"call": good, "unknown": good}, {"call": good, "unknown": good})
    first, _, _ = project.run()
    project.promote(first)
    wrong = {"tool_calls": [{"name": "lookup", "arguments": {"id": HOSTILE_ARG}}], "model": "m"}
    unknown = {"completion": "Looking.", "tool_calls": [{"name": "find", "arguments": {}}]}
    project.cassettes({"call": good, "unknown": good}, {"call": wrong, "unknown": unknown})
    second, _, _ = project.run()
    return second


def test_html_shows_each_side_s_tool_calls_and_tool_misses(tool_run: Path) -> None:
    """report.html lists each side's calls, name and arguments escaped, beside its misses."""
    html_text = _html(build_report(tool_run))
    seven = escape('lookup({"id": "7"})')
    assert f"<code>{seven}</code>" in html_text
    escaped = escape('lookup({"id": "<script>x</script> | pipe"})')
    assert f"<code>{escaped}</code>" in html_text
    assert "<code>find({})</code>" in html_text
    for miss in ("tool_arg_mismatch:lookup.id", "tool_missing:lookup", "tool_unknown:find"):
        assert f"<code>{miss}</code>" in html_text
    scripts = [t for t, attrs in _tags(html_text) if t == "script" and "type" not in attrs]
    assert scripts == ["script"]  # report.js


def test_markdown_shows_each_side_s_tool_calls_in_its_review_cell(tool_run: Path) -> None:
    """report.md's review rows give each side's text and calls, the table shape intact."""
    markdown = render_markdown(build_report(tool_run))
    rows = {line.split(" | ")[0]: line for line in markdown.splitlines() if line.startswith("| ")}
    call_row, unknown_row = rows["| call"], rows["| unknown"]
    assert 'calls: lookup({"id": "7"})' in call_row
    assert "pipe" in call_row and call_row.count(" | ") == 4  # the pipe is escaped
    assert "Looking.<br>calls: find({})<br>misses: tool\\_missing:lookup, tool\\_unknown:find" in (
        unknown_row
    )
    assert all(len(line) <= MD_LINE_CAP for line in markdown.splitlines())
