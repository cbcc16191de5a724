"""Screenshots of the demo's pages for people to look at: `make screenshots`.

Runs the offline demo (config/demo.toml, as `make demo` does) three times into a temporary
copy of the repository's config, fixtures and snapshots, so the trends have nights to draw,
writes each suite's history page, then opens the pages in Debian's chromium
(tests/browserkit.py) and writes into `$PARALLAX_ARTIFACTS` (the Makefile: docs/screenshots/)
per suite: `<suite>-top.png` (the verdict and the first cases), `<suite>-filtered.png` (the
view the verdict's first reason links to), `<suite>-case.png` (the first case of that view,
opened, with the requests unfolded) and `<suite>-history.png` (the whole page). A page that
logs an error, makes a request or breaks its Content Security Policy stops the script, as it
fails a browser test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from browserkit import Browser, BrowserMissing, Tab, launch

REPO = Path(__file__).resolve().parent.parent
NIGHTS = 3
WIDTH, HEIGHT = 1280, 900


def parallax(*args: str, cwd: Path) -> None:
    """One parallax command; the demo's review and incomplete exits (1-3) are its point."""
    command = [sys.executable, "-m", "runner", *args]
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode > 3:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"parallax {' '.join(args)} exited {done.returncode}")


def demo(root: Path) -> list[Path]:
    """The demo's suites run NIGHTS times under `root`; the newest run dir of each suite."""
    for name in ("config", "fixtures", "snapshots"):
        shutil.copytree(REPO / name, root / name)
    for _ in range(NIGHTS):
        parallax("run", "--config", "config/demo.toml", cwd=root)
    parallax("history", "--config", "config/demo.toml", "--html", cwd=root)
    return [
        max(p for p in suite.iterdir() if p.is_dir())
        for suite in (root / "runs").iterdir()
        if suite.is_dir()  # not the results database beside them
    ]


def report_views(browser: Browser, run_dir: Path) -> None:
    """The top of one run's report.html, the view its first reason links to, a case opened."""
    suite = run_dir.parent.name
    page = run_dir / "report.html"
    with browser.open(page, width=WIDTH, height=HEIGHT) as tab:
        tab.screenshot(f"{suite}-top")
        reasons = tab.page.locator("#reasons a")
        href = reasons.first.get_attribute("href") if reasons.count() else None
    fragment = (href or "#changed=1").removeprefix("#")
    with browser.open(page, fragment=fragment, width=WIDTH, height=HEIGHT) as tab:
        tab.screenshot(f"{suite}-filtered")
        row = tab.page.locator("tr.case:visible").first
        row.locator("a.open").click()
        detail = tab.page.locator("tr.detail .case-detail").first
        detail.wait_for()
        # what each side was sent, folded by default, is what a reviewer opens first
        detail.locator("details.cd-request").evaluate_all(
            "(all) => all.forEach((d) => { d.open = true; })"
        )
        _to_top(tab, "tr.case:visible")
        tab.screenshot(f"{suite}-case")


def _to_top(tab: Tab, selector: str) -> None:
    """Scroll the first element `selector` finds to the top of the window, a little below."""
    tab.page.locator(selector).first.evaluate("(e) => e.scrollIntoView({block: 'start'})")
    tab.page.evaluate("window.scrollBy(0, -12)")


def history_view(browser: Browser, suite_dir: Path) -> None:
    with browser.open(suite_dir / "index.html", width=WIDTH, height=HEIGHT) as tab:
        tab.screenshot(f"{suite_dir.name}-history", full_page=True)  # down to the runs table


def main() -> int:
    if not os.environ.get("PARALLAX_ARTIFACTS"):
        print("set PARALLAX_ARTIFACTS to the folder the screenshots go to", file=sys.stderr)
        return 64
    with tempfile.TemporaryDirectory(prefix="parallax-screens-") as tmp:
        runs = sorted(demo(Path(tmp)))
        try:
            with launch() as browser:
                for run_dir in runs:
                    report_views(browser, run_dir)
                    history_view(browser, run_dir.parent)
        except BrowserMissing as missing:
            print(f"no screenshots: {missing}", file=sys.stderr)
            return 1
    print(f"wrote {4 * len(runs)} screenshots to {os.environ['PARALLAX_ARTIFACTS']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
