"""report.html as a page: its CSP allows exactly its own inline style and nothing else."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest
from reportkit import hostile_project

from runner.reports.render import source_hash


class _Page(HTMLParser):
    """Start tags with their attributes, and the text of each <style> and <script>."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.inline: dict[str, list[str]] = {"style": [], "script": []}
        self._open: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag in self.inline and "type" not in dict(attrs):  # a data block is no script
            self._open = tag
            self.inline[tag].append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == self._open:
            self._open = None

    def handle_data(self, data: str) -> None:
        if self._open:
            self.inline[self._open][-1] += data


def parse(text: str) -> _Page:
    page = _Page()
    page.feed(text)
    page.close()
    return page


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> _Page:
    _, run_dir = hostile_project(tmp_path_factory.mktemp("hostile"))
    return parse((run_dir / "report.html").read_text(encoding="utf-8"))


def _csp(page: _Page) -> dict[str, list[str]]:
    [meta] = [a for t, a in page.tags if t == "meta" and a.get("http-equiv")]
    directives = [d.split() for d in str(meta["content"]).split(";") if d.strip()]
    return {d[0]: d[1:] for d in directives}


def test_csp_names_the_hash_of_the_one_inline_style(hostile: _Page) -> None:
    """style-src lists the sha256 of the page's only <style>, exactly as it is in the file."""
    [style] = hostile.inline["style"]
    expected = [source_hash(style)]
    actual = _csp(hostile)["style-src"]
    assert expected == actual


def test_csp_forbids_everything_else(hostile: _Page) -> None:
    """No script without a hash, no fetch, no base or form target, nothing by default."""
    csp = _csp(hostile)
    expected = (["'none'"], ["'none'"], ["'none'"], ["'none'"])
    actual = (csp["default-src"], csp["connect-src"], csp["base-uri"], csp["form-action"])
    assert expected == actual
    assert csp["script-src"] == ([source_hash(s) for s in hostile.inline["script"]] or ["'none'"])


def test_no_element_has_a_style_attribute_or_a_handler(hostile: _Page) -> None:
    """The CSP would block inline style="" and on* handlers, so the page uses neither."""
    expected: list[tuple[str, str]] = []
    actual = [
        (tag, name)
        for tag, attrs in hostile.tags
        for name in attrs
        if name == "style" or name.startswith("on")
    ]
    assert expected == actual


def _render(root: Path, n: int) -> tuple[int, int, int]:
    """A synthetic run of `n` cases (one in five to review) rendered: the page's size, the
    size of its cases' data uncompressed, and the memory rendering it took at its peak."""
    import tracemalloc

    from reportkit import page_blocks, page_cases
    from test_report import _synthetic_run

    from runner.reports.html import html_parts
    from runner.reports.model import build_report

    gates = {f"c{i:05d}": "disagreement_changed" if i % 5 == 0 else "unchanged" for i in range(n)}
    rep = build_report(_synthetic_run(root, gates))
    tracemalloc.start()
    try:
        size = sum(len(part) for part in html_parts(rep))  # written, never held
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    page = "".join(html_parts(rep))
    assert len(page_cases(page)) == n
    return size, sum(len(json.dumps(block)) for block in page_blocks(page)), peak


def test_a_large_page_is_written_without_holding_its_cases(tmp_path: Path) -> None:
    """Every case's row and detail is in the page, compressed, and rendering holds a block of
    cases at a time: from 2,000 to 6,000 cases its memory grows by less than a quarter of
    what the cases' data grows uncompressed (the compressed blocks held until written), so
    no list of case views, no record of every case and no joined string."""
    small = _render(tmp_path / "small", 2000)
    large = _render(tmp_path / "large", 6000)
    data_growth = large[1] - small[1]
    assert data_growth > 1_500_000  # every case with its detail
    assert large[0] < large[1] / 4  # the page is small
    assert large[2] - small[2] < data_growth / 4, (small, large)


def test_an_unreadable_raw_ledger_is_noted_on_a_page_with_nothing_to_review(
    tmp_path: Path,
) -> None:
    """A clean run whose raw.jsonl is broken still says so under the table: the ledger is
    read before the page's notes are written, not only when a case needs review."""
    from reportkit import UNSTRATIFIED, Project

    from runner.reports.html import html_parts
    from runner.reports.model import build_report

    project = Project(tmp_path, UNSTRATIFIED)
    run_dir, _, _ = project.run()
    (run_dir / "raw.jsonl").write_text("{broken\n", encoding="utf-8")
    with build_report(run_dir) as rep:
        page = "".join(html_parts(rep))
    notes = page[page.index("</table>") :]
    assert "raw.jsonl:1" in notes
