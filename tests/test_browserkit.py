"""tests/browserkit.py hears everything that would make a page not inert, so a browser test that
finds nothing found nothing because there was nothing.

Each page here is a small static file with the report's kind of Content Security Policy (only
hashed inline script, nothing loaded); one misbehaviour at a time.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from browserkit import Browser

from runner.reports.render import content_security_policy

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

OWN_SCRIPT = "document.body.dataset.ran = 'own';"


def _page(folder: Path, name: str, body: str, *, script: str = OWN_SCRIPT) -> Path:
    csp = content_security_policy(scripts=(script,))
    path = folder / f"{name}.html"
    path.write_text(
        "<!doctype html><html><head><meta charset='utf-8'>"
        f'<meta http-equiv="Content-Security-Policy" content="{csp}"></head>'
        f"<body>{body}<script>{script}</script></body></html>",
        encoding="utf-8",
    )
    return path


def _problems(browser: Browser, page: Path) -> list[str]:
    with browser.open(page) as tab:
        problems = tab.problems()
        tab.console.clear()
        tab.errors.clear()
        tab.requests.clear()
        tab.violations.clear()
        tab.scripted.clear()
    return problems


def test_a_clean_page_has_no_problem(browser: Browser, tmp_path: Path) -> None:
    """The page's own hashed script runs, and that alone is no problem."""
    page = _page(tmp_path, "clean", "<p>fine</p>")
    with browser.open(page) as tab:
        actual = (tab.page.evaluate("document.body.dataset.ran"), tab.problems())
    expected: tuple[str, list[str]] = ("own", [])
    assert expected == actual


def test_an_inline_script_the_csp_refuses_is_a_violation(browser: Browser, tmp_path: Path) -> None:
    """An injected script does not run; the refusal is a CSP violation and a console error."""
    page = _page(tmp_path, "script", "<script>window.pwned = 1</script>")
    problems = _problems(browser, page)
    expected = (True, True)
    actual = (
        any(p.startswith("CSP violation:") and "script-src" in p for p in problems),
        any(p.startswith("console error:") for p in problems),
    )
    assert expected == actual


def test_a_request_is_a_problem_and_goes_nowhere(browser: Browser, tmp_path: Path) -> None:
    """A script of the page's own that fetches is heard as a request, and the request is
    aborted (the fetch fails), so nothing leaves the machine."""
    script = (
        "fetch('https://parallax.invalid/x').then("
        "() => { document.body.dataset.got = 'yes'; },"
        "() => { document.body.dataset.got = 'no'; });"
    )
    page = tmp_path / "fetch.html"
    page.write_text(  # no CSP here: the harness itself must stop the request
        f"<!doctype html><html><body><script>{script}</script></body></html>", encoding="utf-8"
    )
    with browser.open(page) as tab:
        tab.page.wait_for_function("document.body.dataset.got !== undefined")
        actual = (list(tab.requests), tab.page.evaluate("document.body.dataset.got"))
        tab.requests.clear()
        tab.console.clear()
    expected = (["https://parallax.invalid/x"], "no")
    assert expected == actual


def test_a_page_error_and_a_dialog_are_problems(browser: Browser, tmp_path: Path) -> None:
    """An uncaught exception and an alert() each show up as a problem."""
    script = "alert('hi'); throw new Error('boom');"
    page = _page(tmp_path, "error", "", script=script)
    problems = _problems(browser, page)
    expected = (True, True)
    actual = (
        any(p.startswith("page error:") and "boom" in p for p in problems),
        any(p == "dialog alert: hi" for p in problems),
    )
    assert expected == actual


def test_a_problem_left_unread_fails_the_test(browser: Browser, tmp_path: Path) -> None:
    """Leaving the block with a problem on record fails the test that opened the page."""
    page = _page(tmp_path, "img", '<img src="https://parallax.invalid/i.png">')
    with pytest.raises(pytest.fail.Exception, match="not inert"), browser.open(page):
        pass


def test_following_a_link_allows_exactly_its_target(browser: Browser, tmp_path: Path) -> None:
    """A link a test follows on purpose leads to its page; that navigation is no problem."""
    _page(tmp_path, "other", "<h1 id='there'>other</h1>")
    page = _page(tmp_path, "first", "<a id='go' href='other.html#x'>go</a>")
    with browser.open(page) as tab:
        url = tab.follow("#go")
        actual = (url, tab.page.locator("#there").inner_text(), tab.problems())
    assert ((tmp_path / "other.html").as_uri() + "#x", "other", []) == actual


def test_screenshot_writes_a_png_where_artifacts_go(
    browser: Browser, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With PARALLAX_ARTIFACTS set, a screenshot is a PNG named after the view."""
    monkeypatch.setenv("PARALLAX_ARTIFACTS", str(tmp_path / "shots"))
    page = _page(tmp_path, "shot", "<p>look</p>")
    with browser.open(page, width=400, height=300) as tab:
        path = tab.screenshot("view")
    assert path is not None
    assert (tmp_path / "shots" / "view.png", b"\x89PNG") == (path, path.read_bytes()[:4])


def test_screenshot_without_artifacts_writes_nothing(
    browser: Browser, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without PARALLAX_ARTIFACTS the helper writes no file anywhere."""
    monkeypatch.delenv("PARALLAX_ARTIFACTS", raising=False)
    page = _page(tmp_path, "noshot", "<p>look</p>")
    with browser.open(page) as tab:
        path = tab.screenshot("view")
    expected = (None, ["noshot.html"])
    assert expected == (path, sorted(p.name for p in tmp_path.iterdir()))


def test_a_page_without_javascript_runs_no_script(browser: Browser, tmp_path: Path) -> None:
    """With javascript=False the page's own script does not run, and that is no problem."""
    page = _page(tmp_path, "nojs", "<p>plain</p>")
    with browser.open(page, javascript=False) as tab:
        actual = (tab.page.locator("body").get_attribute("data-ran"), tab.problems())
    expected: tuple[None, list[str]] = (None, [])
    assert expected == actual
