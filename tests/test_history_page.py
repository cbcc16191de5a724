"""The history page: a suite's runs as one self-contained page beside its run directories.

Real runs go through the pipeline against recorded endpoints, each at a set time: four nights
(two of them in one minute) and a replay, then `parallax history --html` writes the page and
the tests read it back as a browser's tokenizer would.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
import time_machine
from reportkit import BASE_CASES, Project

from runner.cli import main
from runner.history import format_text, load_history, run_dirs, run_labels, suite_report
from runner.reports.history_page import build_page, write_page
from runner.reports.render import source_hash

HOSTILE_ID = "<img src=x onerror=alert(1)>\u202eid"
HOSTILE_MODEL = "cand-<script>alert(1)</script>\u202e"
CASES = [*BASE_CASES, {"id": HOSTILE_ID, "prompt": "p", "expect": {"must_include": ["ok"]}}]


@dataclass
class Row:
    """One `tr.night` of the page."""

    attrs: dict[str, str | None]
    href: str | None = None
    label: str = ""
    gates: dict[str, int] = field(default_factory=dict)
    served: dict[str, tuple[bool, list[str]]] = field(default_factory=dict)


class _Page(HTMLParser):
    """The page's rows, chart labels and every start tag, as a browser's tokenizer sees them."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.rows: list[Row] = []
        self.labels: list[list[str]] = []  # per <svg> with column labels, in page order
        self.changes: list[str] = []
        self.ceiling: list[str | None] = []
        self.style = ""
        self._text: list[str] | None = None
        self._into: str = ""
        self._side = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append((tag, a))
        classes = (a.get("class") or "").split()
        row = self.rows[-1] if self.rows else None
        if tag == "tr" and "night" in classes:
            self.rows.append(Row(a))
        elif tag == "svg" and a.get("role") == "img":
            self.labels.append([])
        elif tag == "a" and "run" in classes and row is not None:
            row.href = a.get("href")
            self._capture("label")
        elif tag == "span" and "gate" in classes and row is not None:
            row.gates[str(a["data-gate"])] = int(str(a["data-count"]))
        elif tag == "td" and "served" in classes and row is not None:
            self._side = str(a["data-side"])
            row.served[self._side] = (a.get("data-changed") == "1", [])
        elif tag == "code" and "model" in classes:
            self._capture("model")
        elif tag == "text" and "label" in classes:
            self._capture("chart")
        elif tag == "li" and "change" in classes:
            self._capture("change")
        elif tag == "li" and "ceiling" in classes:
            self.ceiling.append(a.get("data-id"))
        elif tag == "style":
            self._capture("style")

    def _capture(self, into: str) -> None:
        self._text, self._into = [], into

    def handle_data(self, data: str) -> None:
        if self._text is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if self._text is None or tag not in ("a", "code", "text", "li", "style"):
            return
        text, self._text = "".join(self._text), None
        if self._into == "label":
            self.rows[-1].label = text
        elif self._into == "model":
            self.rows[-1].served[self._side][1].append(text)
        elif self._into == "chart":
            self.labels[-1].append(text)
        elif self._into == "change":
            self.changes.append(text)
        elif self._into == "style":
            self.style = text


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


@dataclass
class Suite:
    project: Project
    nights: list[Path]
    replay: Path

    @property
    def dir(self) -> Path:
        return self.project.root / "runs" / "s"


def _at(text: str) -> Iterator[Any]:
    return time_machine.travel(datetime.fromisoformat(text).replace(tzinfo=UTC), tick=True)


def _night(project: Project, at: str) -> Path:
    with _at(at):
        return project.run()[0]


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Suite:
    """Nights on Mar 1 (promoted), Mar 2 (the candidate fails med-a), Mar 3 twice in one
    minute (the candidate serves cand-2, then a hostile model name), then a replay of Mar 2."""
    project = Project(tmp_path_factory.mktemp("history"), CASES)
    nights = [_night(project, "2026-03-01T03:00:00")]
    project.promote(nights[0])
    project.cassettes({}, {"med-a": {"completion": "nope", "model": "cand-1"}})
    nights.append(_night(project, "2026-03-02T03:00:00"))
    cand2 = {c["id"]: {"completion": "ok", "model": "cand-2"} for c in CASES}
    project.cassettes({}, {**cand2, "med-a": {"completion": "nope", "model": "cand-2"}})
    nights.append(_night(project, "2026-03-03T03:00:05"))
    hostile = {c["id"]: {"completion": "ok", "model": HOSTILE_MODEL} for c in CASES}
    project.cassettes({}, {**hostile, "med-a": {"completion": "nope", "model": HOSTILE_MODEL}})
    nights.append(_night(project, "2026-03-03T03:00:40"))
    with _at("2026-03-04T03:00:00"):
        assert main(["replay", str(nights[1]), "--config", str(project.config)]) in (0, 1, 2, 3)
    (replay,) = set(run_dirs(project.root / "runs" / "s")) - {*nights}
    assert main(["history", "--html", "--config", str(project.config)]) == 0
    return Suite(project, nights, replay)


def _rows(suite: Suite) -> dict[str, Row]:
    return {str(r.attrs["data-run"]): r for r in _parse(suite.dir / "index.html").rows}


def test_every_run_is_a_row_linking_to_its_report(suite: Suite) -> None:
    """Each run, the replay too, is a row whose relative link opens that run's report.html."""
    rows = _rows(suite)
    expected = {p.name: (p / "report.html").resolve() for p in [*suite.nights, suite.replay]}
    actual = {
        name: (suite.dir / unquote(str(row.href))).resolve()
        for name, row in rows.items()
        if row.href and not row.href.startswith(("/", "file:")) and ":" not in row.href
    }
    assert expected == actual
    assert all(path.is_file() for path in actual.values())


def test_rows_are_newest_first(suite: Suite) -> None:
    """The table starts with the latest run (the replay) and ends with the first night."""
    names = [str(r.attrs["data-run"]) for r in _parse(suite.dir / "index.html").rows]
    expected = [suite.replay.name, *(p.name for p in reversed(suite.nights))]
    assert expected == names


def test_two_runs_in_one_minute_get_their_seconds(suite: Suite) -> None:
    """Labels are the minute, unless two runs share it: then both show their seconds."""
    page = _parse(suite.dir / "index.html")
    labels = {str(r.attrs["data-run"]): r.label for r in page.rows}
    expected = ["03-01 03:00", "03-02 03:00", "03-03 03:00:05", "03-03 03:00:40", "03-04 03:00"]
    actual = [labels[p.name] for p in [*suite.nights, suite.replay]]
    assert expected == actual
    gate_chart = page.labels[0]  # one column per night, the replay is not one
    assert expected[:4] == gate_chart


def test_report_trends_label_two_runs_in_one_minute_apart(suite: Suite) -> None:
    """report.html's trend, drawn by the same charts, labels each run uniquely too."""
    page = _parse(suite.nights[-1] / "report.html")
    expected = ["03-01 03:00", "03-02 03:00", "03-03 03:00:05", "03-03 03:00:40"]
    actual = page.labels[0]  # the gate classes of the runs up to this one
    assert expected == actual


def test_gate_class_counts_are_each_runs(suite: Suite) -> None:
    """Each row shows exactly the gate classes its summary counted, zeros left out."""
    rows = _rows(suite)
    expected = {}
    for run_dir in [*suite.nights, suite.replay]:
        counts = json.loads((run_dir / "summary.json").read_text())["gate_counts"]
        expected[run_dir.name] = {g: n for g, n in counts.items() if n}
    actual = {name: row.gates for name, row in rows.items()}
    assert expected == actual
    assert {"new_case": len(CASES)} == actual[suite.nights[0].name]
    assert actual[suite.nights[1].name].get("disagreement_changed") == 1


def test_served_model_changes_are_marked_on_the_night_they_happen(suite: Suite) -> None:
    """The candidate's cell is marked changed on the two Mar 3 runs (cand-2, then the hostile
    name) only; the replay of Mar 2 (cand-1) changes nothing, the reference never moves."""
    rows = _rows(suite)
    order = [*suite.nights, suite.replay]
    expected = (
        [False, False, True, True, False],
        [False] * 5,
        [["cand-1"], ["cand-1"], ["cand-2"], [HOSTILE_MODEL.replace("\u202e", "\\u202e")]],
    )
    actual = (
        [rows[p.name].served["candidate"][0] for p in order],
        [rows[p.name].served["reference"][0] for p in order],
        [rows[p.name].served["candidate"][1] for p in suite.nights],
    )
    assert expected == actual
    changes = _parse(suite.dir / "index.html").changes
    expected_changes = ["03-03 03:00:05 · candidate: ", "03-03 03:00:40 · candidate: "]
    assert expected_changes == [c[: c.index(":", 13) + 2] for c in changes]


def test_a_replay_is_listed_but_is_not_a_night(suite: Suite) -> None:
    """The replay's row is marked as one, the header counts four nights and one replay, and
    no trend has a column for it."""
    page = _parse(suite.dir / "index.html")
    text = (suite.dir / "index.html").read_text(encoding="utf-8")
    replay = next(r for r in page.rows if r.attrs["data-run"] == suite.replay.name)
    expected = ("night replay", "replay", True, [4, 4, 4])
    actual = (
        replay.attrs["class"],
        replay.attrs["data-mode"],
        "4 night(s) and 1 replay(s)" in text,
        [len(labels) for labels in page.labels[:3]],  # gates, reference and candidate rates
    )
    assert expected == actual


def test_hostile_model_names_and_case_ids_stay_text(suite: Suite) -> None:
    """A served model and a case id full of markup add no element and show escaped, their
    bidi control made visible; the page has no script and no event handler."""
    page = _parse(suite.dir / "index.html")
    text = (suite.dir / "index.html").read_text(encoding="utf-8")
    expected = ([], [], True, True, [HOSTILE_ID.replace("\u202e", "\\u202e")])
    actual = (
        [t for t, _ in page.tags if t in ("script", "img", "iframe", "object")],
        [t for t, a in page.tags if any(k.startswith("on") for k in a)],
        html.escape("cand-<script>alert(1)</script>\\u202e", quote=False) in text,
        "\u202e" not in text,
        [c for c in page.ceiling if c and c.startswith("<img")],
    )
    assert expected == actual


def test_the_page_loads_nothing_and_allows_only_its_own_style(suite: Suite) -> None:
    """The CSP allows no script and exactly the page's inline style; nothing links elsewhere."""
    page = _parse(suite.dir / "index.html")
    (csp,) = [a["content"] for t, a in page.tags if t == "meta" and "http-equiv" in a]
    text = (suite.dir / "index.html").read_text(encoding="utf-8")
    expected = (True, True, [], [])
    actual = (
        "script-src 'none'" in str(csp),
        f"style-src {source_hash(page.style)};" in str(csp),
        re.findall(r"https?://(?!www\.w3\.org/2000/svg)[^\s\"'<]+", text),
        [a for t, a in page.tags if "src" in a or t == "link"],
    )
    assert expected == actual


def test_ceiling_candidates_are_listed(suite: Suite) -> None:
    """Cases both sides passed quietly for retire_after (2) nights are the page's candidates."""
    expected = sorted(c["id"] for c in CASES if c["id"] != "med-a")
    actual = sorted(
        str(c).replace("\\u202e", "\u202e") for c in _parse(suite.dir / "index.html").ceiling
    )
    assert expected == actual


def test_ceiling_candidates_count_runs_and_say_runs(suite: Suite) -> None:
    """The streak counts runs (those that stand for a night: no replay), as `history` and
    report.html say; the page said "nights" of the same count."""
    text = (suite.dir / "index.html").read_text(encoding="utf-8")
    section = text.split('<section id="ceiling">', 1)[1].split("</section>", 1)[0]
    assert "night" not in section
    assert "in each of the last 2 runs or more" in section
    assert re.search(r"</code> \(\d+ runs in a row\)</li>", section), section


def test_text_history_is_unchanged_but_for_runs_in_one_second(tmp_path: Path) -> None:
    """`history`'s started column keeps the UTC second; two runs in one second add their id."""
    project = Project(tmp_path)
    with time_machine.travel(datetime(2026, 3, 1, 3, tzinfo=UTC), tick=False):
        first, second = project.run()[0], project.run()[0]
    with _at("2026-03-02T03:00:00"):
        third = project.run()[0]
    report = suite_report(project.root / "runs" / "s", retire_after=2)
    lines = format_text(report).splitlines()
    started = [line.split("  run")[0].strip() for line in lines if "  run  " in line]
    same = [f"2026-03-01 03:00:00 {run.name.split('-')[1]}" for run in (first, second)]
    expected = [*sorted(same), "2026-03-02 03:00:00"]
    assert expected == sorted(started[:2]) + started[2:]
    assert third.name.startswith("20260302T030000Z")


def test_run_labels_escalate_only_as_far_as_needed(tmp_path: Path) -> None:
    """Minute, then seconds, then the short id: each run's label goes no further than it must."""
    rows = []
    for name, at in (
        ("20260301T030000Z-aaaaaa", "2026-03-01T03:00:00+00:00"),
        ("20260302T030010Z-bbbbbb", "2026-03-02T03:00:10+00:00"),
        ("20260302T030020Z-cccccc", "2026-03-02T03:00:20+00:00"),
        ("20260303T030000Z-dddddd", "2026-03-03T03:00:00+00:00"),
        ("20260303T030000Z-eeeeee", "2026-03-03T03:00:00+00:00"),
    ):
        run_dir = tmp_path / name
        run_dir.mkdir()
        summary = {"version": 1, "run_id": name, "mode": "run", "started_at": at}
        (run_dir / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    rows = load_history(tmp_path).rows
    expected = [
        "03-01 03:00",
        "03-02 03:00:10",
        "03-02 03:00:20",
        "03-03 03:00:00 dddddd",
        "03-03 03:00:00 eeeeee",
    ]
    assert expected == run_labels(rows)


def test_html_with_a_path_links_back_to_the_runs(suite: Suite, tmp_path: Path) -> None:
    """`--html PATH` writes the page there, its links relative to that folder, and prints it."""
    out = tmp_path / "site" / "s.html"
    out.parent.mkdir()
    code = main(["history", "--html", str(out), "--config", str(suite.project.config)])
    rows = _parse(out).rows
    expected = (0, {(p / "report.html").resolve() for p in [*suite.nights, suite.replay]})
    actual = (code, {(out.parent / unquote(str(r.href))).resolve() for r in rows})
    assert expected == actual
    assert all(str(r.href).startswith("../") for r in rows)


def test_html_prints_each_page_written(suite: Suite, capsys: pytest.CaptureFixture[str]) -> None:
    """`history --html` prints the path of each page it wrote, one a line."""
    capsys.readouterr()
    code = main(["history", "--html", "--config", str(suite.project.config)])
    expected = (0, [str(suite.project.root / "runs" / "s" / "index.html")])
    actual = (code, capsys.readouterr().out.splitlines())
    assert expected == actual


def test_html_last_n_keeps_the_newest_runs(suite: Suite, tmp_path: Path) -> None:
    """`--html --last 2` shows the two newest runs."""
    out = tmp_path / "p.html"
    main(["history", "--html", str(out), "--last", "2", "--config", str(suite.project.config)])
    expected = [suite.replay.name, suite.nights[-1].name]
    assert expected == [r.attrs["data-run"] for r in _parse(out).rows]


def _one_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = main(argv)
    return code, capsys.readouterr().err.splitlines()


def test_no_finished_run_is_one_line_and_64(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A suite that never ran has no page to write: one line naming it, exit 64."""
    project = Project(tmp_path)
    code, err = _one_line(capsys, ["history", "--html", "--config", str(project.config)])
    expected = (64, 1, True)
    actual = (code, len(err), "no finished run of suite s" in err[0])
    assert expected == actual
    assert not (tmp_path / "runs" / "s" / "index.html").exists()


def test_unwritable_path_is_one_line_and_64(
    suite: Suite, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A page that cannot be written (no such folder, a file where its folder should be) is
    one line naming the path, exit 64."""
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    paths = (tmp_path / "missing" / "p.html", blocker / "p.html")
    config = str(suite.project.config)
    results = [_one_line(capsys, ["history", "--html", str(p), "--config", config]) for p in paths]
    expected = [(64, 1, True), (64, 1, True)]
    actual = [
        (code, len(err), str(p) in err[0]) for (code, err), p in zip(results, paths, strict=True)
    ]
    assert expected == actual


def test_a_folder_in_the_way_is_one_line_and_65(
    suite: Suite, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--html PATH` where PATH is a folder is bad data, not a file to replace: exit 65."""
    code, err = _one_line(
        capsys, ["history", "--html", str(tmp_path), "--config", str(suite.project.config)]
    )
    expected = (65, 1, True)
    actual = (code, len(err), str(tmp_path) in err[0])
    assert expected == actual


def test_unknown_suite_and_bad_combinations_are_refused(
    suite: Suite, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown suite is a config error (78); --html with --json, or with --last 0, is a
    usage error (64)."""
    config = str(suite.project.config)
    results = [
        _one_line(capsys, ["history", "--html", "--suite", "nope", "--config", config]),
        _one_line(capsys, ["history", "--html", "--json", "--config", config]),
        _one_line(capsys, ["history", "--html", "--last", "0", "--config", config]),
    ]
    expected = [(78, 1), (64, 1), (64, 1)]
    actual = [(code, len(err)) for code, err in results]
    assert expected == actual


def test_a_path_for_two_suites_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One path cannot hold the pages of two suites: exit 64 until --suite names one."""
    project = Project(tmp_path)
    text = project.config.read_text(encoding="utf-8")
    text += '[suites.t]\nfixtures = "cases.jsonl"\nreference = "ref"\ncandidate = "cand"\n'
    project.config.write_text(text, encoding="utf-8")
    project.run()
    code, err = _one_line(
        capsys, ["history", "--html", str(tmp_path / "p.html"), "--config", str(project.config)]
    )
    expected = (64, 1, True)
    actual = (code, len(err), "--suite" in err[0])
    assert expected == actual


def test_build_page_draws_no_trend_without_nights(tmp_path: Path) -> None:
    """A page of replays only lists them, and its trends say there is nothing to draw."""
    run_dir = tmp_path / "20260301T030000Z-aaaaaa"
    run_dir.mkdir()
    summary = {"version": 1, "run_id": run_dir.name, "mode": "replay"}
    (run_dir / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    rows = load_history(tmp_path).rows
    page = build_page("s", rows, tmp_path, retire_after=None)
    expected = (1, 0, 1, True)
    actual = (len(page.runs), page.nights, page.replays, all(c.empty for c in page.charts.values()))
    assert expected == actual
    path = write_page("s", rows, tmp_path / "index.html", retire_after=None)
    assert _parse(path).rows[0].attrs["data-mode"] == "replay"


def _without_stamp(path: Path) -> str:
    return re.sub(r"Written [0-9T:+-]+\.", "", path.read_text(encoding="utf-8"))


def test_a_finished_run_rewrites_the_page(suite: Suite, tmp_path: Path) -> None:
    """The page a run (or replay) leaves is the page `history --html` writes afterwards."""
    index = suite.dir / "index.html"
    left = _without_stamp(index)  # `history --html` in the fixture wrote it; a run rewrites it
    index.unlink()
    with _at("2026-03-05T03:00:00"):
        project_run = main(["replay", str(suite.nights[0]), "--config", str(suite.project.config)])
    by_run = _without_stamp(index)
    assert main(["history", "--html", "--config", str(suite.project.config)]) == 0
    expected = (True, by_run, True)
    actual = (project_run in (0, 1, 2, 3), _without_stamp(index), left != by_run)
    assert expected == actual
    assert len(_parse(index).rows) == len(suite.nights) + 2


def test_a_run_reads_each_earlier_run_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its report and the history page come from one read of the window: no run dir twice."""
    import runner.history

    project = Project(tmp_path)
    for day in (1, 2, 3):
        _night(project, f"2026-03-0{day}T03:00:00")
    reads: list[str] = []
    real = runner.history.read_run

    def counting(run_dir: Path) -> Any:
        reads.append(run_dir.name)
        return real(run_dir)

    monkeypatch.setattr(runner.history, "read_run", counting)
    last = _night(project, "2026-03-04T03:00:00")
    expected = (sorted(p.name for p in run_dirs(project.root / "runs" / "s")), True)
    actual = (sorted(reads), last.name in (tmp_path / "runs" / "s" / "index.html").read_text())
    assert expected == actual


def test_a_page_that_cannot_be_written_costs_the_run_nothing(tmp_path: Path) -> None:
    """A folder where index.html should be: report.failed is logged, the run keeps its
    verdict and its own reports."""
    from structlog.testing import capture_logs

    project = Project(tmp_path)
    (tmp_path / "runs" / "s" / "index.html").mkdir(parents=True)
    with capture_logs() as logs:
        run_dir, code, summary = project.run()
    failed = [e for e in logs if e["event"] == "report.failed"]
    expected = (summary["exit_code"], 1, True, True)
    actual = (
        code,
        len(failed),
        "index.html" in failed[0]["error"],
        (run_dir / "report.html").is_file(),
    )
    assert expected == actual


def test_cost_per_side_is_a_trend_and_a_column(tmp_path: Path) -> None:
    """With prices and usage recorded, each night's cost per side is a dot on the cost trend
    and a figure in its row; a night without usage is a gap, not a zero."""
    project = Project(tmp_path, BASE_CASES[:2])
    text = project.config.read_text(encoding="utf-8")
    text = text.replace(
        'cassette = "ref.jsonl"\n',
        'cassette = "ref.jsonl"\nprice = { input_per_mtok = 0.5, output_per_mtok = 1.5 }\n',
    ).replace(
        'cassette = "cand.jsonl"\n',
        'cassette = "cand.jsonl"\nprice = { input_per_mtok = 3, output_per_mtok = 15 }\n',
    )
    project.config.write_text(text, encoding="utf-8")
    nights = []
    for day, tokens in ((1, 1000), (2, 2000), (3, 0)):
        usage = {"prompt_tokens": tokens, "completion_tokens": tokens // 5}
        row = {"completion": "ok", "usage": usage} if tokens else {"completion": "ok"}
        project.cassettes(
            {c["id"]: {**row, "model": "ref-1"} for c in project.cases},
            {c["id"]: {**row, "model": "cand-1"} for c in project.cases},
        )
        nights.append(_night(project, f"2026-03-0{day}T03:00:00"))
    index = tmp_path / "runs" / "s" / "index.html"
    page = index.read_text(encoding="utf-8")
    cost = page[page.index('aria-label="cost per run"') :]
    cost = cost[: cost.index("</svg>")]
    dots = re.findall(r"<title>(\d\d-\d\d \d\d:\d\d) \([^)]*\): (\w+) (\$[\d.]+)</title>", cost)
    # 2 cases x (1000 x 0.5 + 200 x 1.5) = 0.0016; the candidate 2 x (1000 x 3 + 200 x 15) = 0.012
    expected = [
        ("03-01 03:00", "reference", "$0.0016"),
        ("03-02 03:00", "reference", "$0.0032"),
        ("03-01 03:00", "candidate", "$0.0120"),
        ("03-02 03:00", "candidate", "$0.0240"),
    ]
    assert expected == dots
    rows = {r.attrs["data-run"]: r for r in _parse(index).rows}
    cells = [
        re.sub(r"<[^>]+>", " ", page[page.index('data-run="' + n.name) :].split("</tr>")[0])
        for n in nights
    ]
    expected_cells = [True, True, True]
    actual_cells = [
        "candidate: $0.0120, 2400 tokens" in cells[0],
        "candidate: $0.0240, 4800 tokens" in cells[1],
        "candidate: cost unknown, no usage" in cells[2],
    ]
    assert expected_cells == actual_cells
    assert len(rows) == 3


def test_a_run_its_retry_completed_is_listed_but_is_not_a_night(tmp_path: Path) -> None:
    """A night cut short (a candidate timeout) and completed by `--retry-unscored` is one
    night: the page lists both runs, marks the cut one as retried by the retry, and the page's
    trends and the retry's report.html have a column for the retry only."""
    project = Project(tmp_path)
    _night(project, "2026-03-01T03:00:00")
    project.cassettes({}, {"easy-a": {"fault": "timeout"}})
    cut = _night(project, "2026-03-02T03:00:00")
    project.cassettes({}, {})
    with _at("2026-03-02T05:00:00"):
        code = main(["run", "--retry-unscored", str(cut), "--config", str(project.config)])
    assert code in (0, 1)
    index = tmp_path / "runs" / "s" / "index.html"
    text = index.read_text(encoding="utf-8")
    page = _parse(index)
    row = next(r for r in page.rows if r.attrs["data-run"] == cut.name)
    cell = re.sub(r"<[^>]+>", " ", text[text.index(f'data-run="{cut.name}"') :].split("</td>")[0])
    (retry,) = [str(r.attrs["data-run"]) for r in page.rows if r.attrs["data-mode"] == "retry"]
    nights = ["03-01 03:00", "03-02 05:00"]
    expected = ("night retried", True, True, [nights] * 3, nights)
    actual = (
        row.attrs["class"],
        "retried by 03-02 05:00, not a night" in cell,
        "2 night(s) and 1 run(s) completed by a later retry" in text,
        page.labels[:3],  # gates, reference and candidate rates
        _parse(tmp_path / "runs" / "s" / retry / "report.html").labels[0],
    )
    assert expected == actual
