"""report.html in a real browser: hostile replies render as text, nothing injected runs.

The run goes through the whole pipeline (recorded endpoints, stamps, gate, finalize, reports)
with replies that carry `<script>`, `<img onerror>`, a closing `</table>`, Markdown pipes and a
very long line. Headless Chromium then takes a screenshot and dumps the DOM after scripts would
have run. Set PARALLAX_ARTIFACTS to a folder to keep the screenshot for a human to look at.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest
from reportkit import HOSTILE_IMG, HOSTILE_PIPES, HOSTILE_SCRIPT, HOSTILE_TABLE, hostile_project

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("headless Chromium is not installed (Debian: apt-get install -y chromium)")


def _browse(binary: str, *args: str) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [binary, *FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


class _Dom(HTMLParser):
    """Tags, attributes and visible text of the dumped DOM."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.pre_text: list[str] = []
        self._in_pre = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_pre += tag == "pre"
        if tag == "pre":
            self.pre_text.append("")

    def handle_endtag(self, tag: str) -> None:
        self._in_pre -= tag == "pre"

    def handle_data(self, data: str) -> None:
        if self._in_pre and self.pre_text:
            self.pre_text[-1] += data


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, Path]:
    binary = _chromium()
    root = tmp_path_factory.mktemp("browser")
    _, run_dir = hostile_project(root)
    page = run_dir / "report.html"
    shot = root / "report.png"
    done = _browse(binary, "--window-size=1280,2400", f"--screenshot={shot}", page.as_uri())
    if not shot.exists():
        pytest.fail(f"chromium made no screenshot: {done.stderr[-2000:]}")
    dom = _browse(binary, "--dump-dom", page.as_uri())
    keep = os.environ.get("PARALLAX_ARTIFACTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / "report-hostile.png")
        shutil.copy(page, Path(keep) / "report-hostile.html")
    return shot, dom.stdout, page


def test_screenshot_is_a_full_png(rendered: tuple[Path, str, Path]) -> None:
    """Chromium drew the page at the window size asked for."""
    shot, _, _ = rendered
    data = shot.read_bytes()
    width, height = struct.unpack(">II", data[16:24])
    expected = (b"\x89PNG", 1280, 2400, True)
    actual = (data[:4], width, height, len(data) > 20_000)
    assert expected == actual


def test_no_injected_element_exists_in_the_dom(rendered: tuple[Path, str, Path]) -> None:
    """After the browser ran the page: no script, img or injected element, no handler ran."""
    _, dom, _ = rendered
    parser = _Dom()
    parser.feed(dom)
    expected: tuple[list[str], list[str], list[str]] = ([], [], [])
    actual = (
        [t for t, _ in parser.tags if t in ("script", "img", "iframe", "object", "embed")],
        [str(a.get("id")) for _, a in parser.tags if a.get("id") == "injected"],
        [str(a.get("data-pwned")) for _, a in parser.tags if "data-pwned" in a],
    )
    assert expected == actual


def test_replies_show_as_text(rendered: tuple[Path, str, Path]) -> None:
    """Each hostile reply is the text content of a <pre>, character for character."""
    _, dom, _ = rendered
    parser = _Dom()
    parser.feed(dom)
    expected = [True, True, True, True]
    actual = [
        any(s in text for text in parser.pre_text)
        for s in (HOSTILE_SCRIPT, HOSTILE_IMG, HOSTILE_TABLE, HOSTILE_PIPES)
    ]
    assert expected == actual


def test_page_structure_survives_a_closing_table(rendered: tuple[Path, str, Path]) -> None:
    """The report's own sections all follow the hostile replies: nothing was closed early."""
    _, dom, _ = rendered
    expected = [True, True, True]
    actual = [h in dom for h in ("Served models</h2>", "Trend</h2>", "Ceiling candidates</h2>")]
    assert expected == actual
