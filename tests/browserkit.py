"""Debian's chromium, driven by Playwright, for tests that look at a page as a person would.

`launch()` starts the system chromium (never a browser Playwright downloads) headless;
`Browser.open(path)` loads a file:// page in a fresh context and watches everything that would
mean the page is not inert or not self-contained:

- console messages (an error is a problem: CSP refusals and failed loads are reported there),
- uncaught page errors, dialogs (`alert` and kin) and popups (a script ran),
- every request other than the page itself and the pages a test follows on purpose; such a
  request is a problem and is aborted, so nothing leaves the machine,
- Content Security Policy violations, heard through a `securitypolicyviolation` listener that an
  init script adds before the page's own code (the init script runs outside the page's CSP).

Leaving `with browser.open(...) as tab:` without an exception fails the test on any of these;
`tab.problems()` lists them for a test that asserts on them itself. `tab.screenshot(name)`
writes `$PARALLAX_ARTIFACTS/<name>.png` when that variable is set, for a human to look at.

The `browser` fixture launches chromium once per test module and skips with the reason when
chromium or Playwright is missing; tests/conftest.py registers this module as a plugin.
Playwright's sync API keeps its asyncio loop marked as running in the test's thread, so
`anyio.run` (a parallax run made in-process, e.g. reportkit's `Project.run`) fails there once
the browser is up: make such runs through `in_thread`.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urldefrag, urljoin

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Browser as PlaywrightBrowser
    from playwright.sync_api import ConsoleMessage, Dialog, Page, Request, Route

T = TypeVar("T")
WAIT_MS = 15_000  # the longest a page action may take: a local file, a loaded machine
CHROMIUM_NAMES = ("chromium", "chromium-browser")
_CSP_LISTENER = """
document.addEventListener('securitypolicyviolation', (e) => {
  window.__parallaxCspViolation({
    directive: e.violatedDirective, blocked: e.blockedURI, sample: e.sample,
  });
}, true);
"""


# report.html's case table is drawn (the view its fragment names applied), or there is none
_DRAWN = "() => { const t = document.getElementById('cases'); return !t || 'view' in t.dataset; }"


def in_thread(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`function(*args, **kwargs)` in a thread of its own, where no event loop runs."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(function, *args, **kwargs).result()


class BrowserMissing(Exception):
    """Chromium or Playwright is not installed; the message says how to install it."""


def chromium_path() -> str:
    """Debian's chromium binary; `$PARALLAX_CHROMIUM` names another."""
    named = os.environ.get("PARALLAX_CHROMIUM")
    if named:
        if not os.access(named, os.X_OK):
            raise BrowserMissing(f"PARALLAX_CHROMIUM={named} is not an executable file")
        return named
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    raise BrowserMissing("chromium is not installed (Debian: apt-get install -y chromium)")


@dataclass
class Tab:
    """One page in its own browser context, and everything it did that it should not."""

    page: Page
    allowed: set[str]
    javascript: bool
    console: list[tuple[str, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    violations: list[dict[str, Any]] = field(default_factory=list)
    scripted: list[str] = field(default_factory=list)

    def settle(self) -> None:
        """Let the page's queued tasks run (a CSP violation event is dispatched as one) and
        their reports reach the harness. Without JavaScript nothing is queued."""
        if self.javascript:
            self.page.evaluate("() => new Promise((done) => setTimeout(done, 0))")

    def problems(self) -> list[str]:
        """One line per console error, page error, dialog, popup, request or CSP violation."""
        self.settle()
        return [
            *(f"console {kind}: {text}" for kind, text in self.console if kind == "error"),
            *(f"page error: {e}" for e in self.errors),
            *self.scripted,
            *(f"request: {url}" for url in self.requests),
            *(f"CSP violation: {v}" for v in self.violations),
        ]

    def follow(self, selector: str) -> str:
        """Click the link `selector` names, as a person would, and wait for where it leads; the
        link's target is the one request allowed for it. Returns the new URL."""
        link = self.page.locator(selector)
        href = link.get_attribute("href")
        assert href is not None, f"{selector} has no href"
        target = urldefrag(urljoin(self.page.url, href)).url
        self.allowed.add(target)
        with self.page.expect_navigation(wait_until="load"):
            link.click()
        return self.page.url

    def view_applied(self) -> None:
        """Until report.html says its case table shows the view its URL names: the table's
        `data-view` equals the fragment. A followed link's `hashchange` is handled in a task
        of its own, after the click returns, and on a loaded machine well after; a search
        typed applies once typing pauses, so wait for its `q` in the fragment instead."""
        self.page.wait_for_function(
            "() => document.getElementById('cases')?.dataset.view === location.hash.slice(1)"
        )

    def screenshot(self, name: str, *, full_page: bool = False) -> Path | None:
        """`$PARALLAX_ARTIFACTS/<name>.png` when that variable is set, else nothing."""
        folder = os.environ.get("PARALLAX_ARTIFACTS")
        if not folder:
            return None
        path = Path(folder) / f"{name}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=path, full_page=full_page)
        return path

    # ------------------------------------------------------------ what the page did

    def _on_console(self, message: ConsoleMessage) -> None:
        self.console.append((message.type, message.text))

    def _on_violation(self, violation: dict[str, Any]) -> None:
        self.violations.append(violation)

    def _on_dialog(self, dialog: Dialog) -> None:
        self.scripted.append(f"dialog {dialog.type}: {dialog.message}")
        dialog.dismiss()

    def _on_popup(self, page: Page) -> None:
        self.scripted.append(f"popup: {page.url}")

    def _on_request(self, request: Request) -> None:
        if urldefrag(request.url).url not in self.allowed:
            self.requests.append(request.url)

    def _on_route(self, route: Route) -> None:
        if urldefrag(route.request.url).url in self.allowed:
            route.continue_()
        else:
            route.abort("blockedbyclient")


@dataclass
class Browser:
    """A running chromium; each `open` gets a fresh context (no shared cookies or storage)."""

    browser: PlaywrightBrowser

    @contextmanager
    def open(
        self,
        page: Path | str,
        *,
        fragment: str = "",
        javascript: bool = True,
        width: int = 1280,
        height: int = 900,
    ) -> Iterator[Tab]:
        """Load `page` (a path or a file:// URL, `#fragment` appended) and watch it; on a clean
        exit from the block, any problem the page had fails the test."""
        url = page.as_uri() if isinstance(page, Path) else page
        context = self.browser.new_context(
            java_script_enabled=javascript,
            viewport={"width": width, "height": height},
            service_workers="block",
        )
        context.set_default_timeout(WAIT_MS)
        try:
            tab = Tab(context.new_page(), allowed={urldefrag(url).url}, javascript=javascript)
            context.expose_function("__parallaxCspViolation", tab._on_violation)
            context.add_init_script(_CSP_LISTENER)
            context.route("**/*", tab._on_route)
            context.on("console", tab._on_console)
            context.on("weberror", lambda error: tab.errors.append(str(error.error)))
            context.on("dialog", tab._on_dialog)
            context.on("request", tab._on_request)
            tab.page.on("popup", tab._on_popup)
            tab.page.goto(f"{url}#{fragment}" if fragment else url, wait_until="load")
            if javascript:  # report.html draws its case table once its data is read
                tab.page.wait_for_function(_DRAWN)
            yield tab
            problems = tab.problems()
            if problems:
                pytest.fail("the page was not inert:\n" + "\n".join(problems), pytrace=False)
        finally:
            context.close()


@contextmanager
def launch() -> Iterator[Browser]:
    """Debian's chromium, headless; `BrowserMissing` when it or Playwright is not installed."""
    binary = chromium_path()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        raise BrowserMissing(f"Playwright for Python is not installed ({exc})") from exc
    args = ["--disable-gpu", "--disable-background-networking", "--disable-component-update"]
    if os.geteuid() == 0:
        args.append("--no-sandbox")  # chromium refuses to run as root with its sandbox
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=binary, headless=True, args=args)
        try:
            yield Browser(browser)
        finally:
            browser.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Chromium, launched once for the test module; the module skips when it is missing."""
    try:
        with launch() as running:
            yield running
    except BrowserMissing as missing:
        pytest.skip(str(missing))
