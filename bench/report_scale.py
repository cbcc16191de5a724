"""report.html at scale: its size, how long a run's reports take to write, how long the page
takes to open and to answer in headless Chromium, and how fast `parallax replay` runs.

    .venv/bin/python bench/report_scale.py                            # N = 2,000 and 20,000
    .venv/bin/python bench/report_scale.py --n 200 --loads 1          # a quick look
    .venv/bin/python bench/report_scale.py --results bench/RESULTS.md # also write the table there

For each N it builds a project with recorded endpoints (no network, no latency) and goes through
the real pipeline with the console script: a first run, `parallax promote`, then fixtures and
cassettes changed so that the second run has every gate class a nightly can show (changed
disagreements on either side or both, new, moved and retired cases, transport and schema misses,
an alias swap), and that second run's report is measured:

* the size of report.html, and `parallax report RUN_DIR` (a child process: wall time, start-up
  included, and peak RSS);
* every report a finished run writes, timed in a child process of this file (`reports`
  mode): report.html and report.md, the suite's history page, and JUnit XML, wall and CPU
  seconds (its worker processes' CPU included), once as `parallax report` writes them (reading
  the config and validating the fixture file again) and once as `run` does (with the config
  and suite it already holds, made before the clock starts), beside the bare read: the same
  process reading disagreement.json and parsing raw.jsonl's rows and nothing else, the least
  any report that shows every reply must do;
* `parallax replay RUN_DIR` of the run (it regrades every row and writes its reports), in
  rows of raw.jsonl a second, wall time, start-up included;
* headless Chromium (Debian's, driven by Playwright through `executable_path`; nothing is
  downloaded), a fresh browser context per load, median of `--loads`: navigation start to
  DOMContentLoaded, to load, to first contentful paint and to the moment report.js had set up
  the filters (its `parallax:filters-ready` performance mark), and to the moment its search
  index was built in the page's idle moments after that (its `parallax:search-ready` mark,
  "search ready"; a search typed sooner indexes the rest itself); then, as a reader would, the
  first filter (a gate class), clearing it, the first search, a second search, sorting by score
  delta and opening a case, each timed from the control's change to the frame after it was
  applied.
  "Loaded" is the filters-ready mark: the table is drawn from the case data and usable.

Figures are printed (and written with --json/--results), never asserted: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from run import PARALLAX, PY, run_child

STRATA = ("easy", "medium", "stretch")
CITIES = ("Oslo", "Bergen", "Paris", "Lyon", "Porto", "Turin", "Ghent")
MARK_BEGIN = "<!-- report_scale: begin (written by bench/report_scale.py) -->"
MARK_END = "<!-- report_scale: end -->"
FIGURES = "report_scale figures: "  # the `reports` mode's line among its logs

# what a reader does once the page has loaded, timed in the page: each step changes a control
# as a person would, then waits for the frame after the change was applied
ACTIONS = """async () => {
  const frame = () => new Promise((done) => requestAnimationFrame(() => setTimeout(done, 0)));
  const form = document.getElementById("filters");
  if (!form) return { error: "no #filters form" };
  const f = form.elements;
  const change = (el) => el.dispatchEvent(new Event("change", { bubbles: true }));
  const timed = async (step) => {
    const t0 = performance.now();
    step();
    await frame();
    return performance.now() - t0;
  };
  const gates = Array.from(f.gate.options, (o) => o.value).filter(Boolean);
  const gate = gates.includes("disagreement_changed") ? "disagreement_changed" : gates[0] || "";
  const out = {};
  out.filter_ms = await timed(() => { f.gate.value = gate; change(f.gate); });
  out.shown = document.getElementById("shown").textContent;
  out.unfilter_ms = await timed(() => { f.gate.value = ""; change(f.gate); });
  out.search_first_ms = await timed(() => { f.q.value = "oslo 0001"; change(f.q); });
  out.search_ms = await timed(() => { f.q.value = "bergen"; change(f.q); });
  out.search_clear_ms = await timed(() => { f.q.value = ""; change(f.q); });
  out.sort_ms = await timed(() => { f.sort.value = "delta"; change(f.sort); });
  out.open_ms = await timed(() => document.querySelector("tr.case:not([hidden]) a.open").click());
  out.nodes = document.getElementsByTagName("*").length;
  const indexed = performance.getEntriesByName("parallax:search-ready")[0];
  out.search_ready_ms = indexed ? indexed.startTime : NaN;  // NaN: still indexing by then
  return out;
}"""

READY = "() => performance.getEntriesByName('parallax:filters-ready').length > 0"
INDEXED = "() => performance.getEntriesByName('parallax:search-ready').length > 0"
NAVIGATION = """() => {
  const nav = performance.getEntriesByType("navigation")[0];
  const paint = performance.getEntriesByName("first-contentful-paint")[0];
  const ready = performance.getEntriesByName("parallax:filters-ready")[0];
  return {
    script_ready_ms: ready ? ready.startTime : NaN,
    dcl_ms: nav.domContentLoadedEventEnd,
    load_ms: nav.loadEventEnd,
    fcp_ms: paint ? paint.startTime : NaN,
  };
}"""


# -- the project ----------------------------------------------------------------------------


def _case(i: int) -> dict[str, Any]:
    city = CITIES[i % len(CITIES)]
    return {
        "id": f"case-{i:06d}",
        "stratum": STRATA[i % 3],
        "system": "You are the shipping desk. Answer in one short sentence, naming the city.",
        "prompt": f"Order {i} left the warehouse this morning. Which city is it shipped to? "
        f"The label reads {city}, depot {i % 13}.",
        "expect": {"must_include": [city], "max_chars": 300},
    }


def _reply(i: int, ok: bool = True) -> str:
    city = CITIES[i % len(CITIES)] if ok else "an unknown depot"
    return f"Order {i} ships to {city}; it should arrive within three working days."


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")


def build_project(root: Path, n: int) -> Path:
    """A first run promoted, then a second run with every gate class; returns its run dir."""
    shutil.rmtree(root, ignore_errors=True)
    (root / "snapshots").mkdir(parents=True)
    (root / "parallax.toml").write_text(
        'runs_dir = "runs"\nsnapshots_dir = "snapshots"\n'
        '[endpoints.ref]\nkind = "recorded"\nmodel = "ref-1"\ncassette = "ref.jsonl"\n'
        '[endpoints.cand]\nkind = "recorded"\nmodel = "cand-1"\ncassette = "cand.jsonl"\n'
        '[suites.scale]\nfixtures = "cases.jsonl"\nreference = "ref"\ncandidate = "cand"\n',
        encoding="utf-8",
    )
    new = set(range(n - n // 100, n))  # 1 % added after the promotion: new_case
    retired = set(range(0, n, 211))  # in the snapshot, gone from the fixtures: retired_case
    first = [_case(i) for i in range(n) if i not in new]
    _write_jsonl(root / "cases.jsonl", first)
    for name, model in (("ref.jsonl", "ref-1"), ("cand.jsonl", "cand-1")):
        rows = [
            {"case_id": c["id"], "completion": _reply(i), "model": model}
            for i, c in enumerate(first)
        ]
        _write_jsonl(root / name, rows)
    run1 = _run(root)
    promoted = run_child([PARALLAX, "promote", "--allow-partial", str(run1)], cwd=root)
    if promoted.code != 0:
        raise SystemExit(f"parallax promote exited {promoted.code}: {promoted.stdout[-2000:]}")

    cases = []
    for i in range(n):
        if i in retired:
            continue
        case = _case(i)
        if i % 197 == 5:  # fixture_move: the expectation changed since the snapshot
            case["expect"] = {"must_include": [CITIES[i % len(CITIES)]], "max_chars": 280}
        cases.append(case)
    _write_jsonl(root / "cases.jsonl", cases)
    ref, cand = [], []
    for case in cases:
        i = int(case["id"].split("-")[1])
        r: dict[str, Any] = {"completion": _reply(i, ok=i % 100 not in (1, 2)), "model": "ref-1"}
        c: dict[str, Any] = {"completion": _reply(i, ok=i % 20 != 3 and i % 100 != 2)}
        c["model"] = "cand-1"
        if i % 200 == 7:
            c = {"fault": "timeout"}
        elif i % 200 == 9:
            c = {"status": 200, "body": "<html>upstream error page</html>"}
        elif i % 331 == 11:
            c["model"] = "cand-2-preview"
        ref.append({"case_id": case["id"], **r})
        cand.append({"case_id": case["id"], **c})
    _write_jsonl(root / "ref.jsonl", ref)
    _write_jsonl(root / "cand.jsonl", cand)
    return _run(root)


def _run(root: Path) -> Path:
    before = set((root / "runs" / "scale").glob("*-*"))
    child = run_child([PARALLAX, "run", "--config", str(root / "parallax.toml")], cwd=root)
    if child.code not in (0, 1, 2, 3):
        raise SystemExit(f"parallax run exited {child.code}: {child.stdout[-3000:]}")
    made = set((root / "runs" / "scale").glob("*-*")) - before
    if len(made) != 1:
        raise SystemExit(f"expected one new run dir under {root / 'runs'}, found {len(made)}")
    return made.pop()


# -- measuring ------------------------------------------------------------------------------


def render_figures(run_dir: Path, runs: int) -> dict[str, Any]:
    """`parallax report RUN_DIR` as a child process (wall seconds and peak RSS), and every
    report a run writes timed in a child of this file (`reports_main`), medians."""
    walls, rss, timed = [], [], []
    for _ in range(runs):
        child = run_child([PARALLAX, "report", str(run_dir)], cwd=run_dir.parents[2])
        if not (run_dir / "report.html").exists():
            raise SystemExit(f"parallax report wrote no report.html: {child.stdout[-2000:]}")
        walls.append(child.wall)
        rss.append(child.rss_mb)
        stage = run_child([PY, __file__, "reports", str(run_dir)], cwd=run_dir.parents[2])
        if stage.code != 0:
            raise SystemExit(f"bench reports exited {stage.code}: {stage.stdout[-2000:]}")
        [line] = [x for x in stage.stdout.splitlines() if x.startswith(FIGURES)]
        timed.append(json.loads(line.removeprefix(FIGURES)))
    html = run_dir / "report.html"
    text = html.read_text(encoding="utf-8")
    return {
        "html_bytes": html.stat().st_size,
        "rows": sum(int(n) for n in re.findall(r'class="case-data" data-cases="(\d+)"', text)),
        "render_s": statistics.median(walls),
        "render_rss_mb": statistics.median(rss),
        **{key: statistics.median(t[key] for t in timed) for key in timed[0]},
    }


def reports_main(run_dir: Path) -> int:
    """Every report a finished run writes, timed in this process as `run` writes them (after
    the gate: report.html, report.md and the history page, `after_run`), with JUnit XML as
    `--junit` adds it; and the bare read, for comparison. Prints one JSON line."""
    import resource

    from runner import logs
    from runner.jsontext import loads
    from runner.junit import write_junit
    from runner.ledger import read_json_map
    from runner.reports.write import after_run

    def cpu() -> float:
        own = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)  # the workers, once reaped
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

    from runner.config import load_config
    from runner.reports.runinputs import Given
    from runner.suite import prepare_suite

    logs.configure()
    t0 = time.perf_counter()
    for _ in read_json_map(run_dir / "disagreement.json", "cases"):
        pass
    with (run_dir / "raw.jsonl").open("rb") as handle:
        for line in handle:
            loads(line)
    t1, c1 = time.perf_counter(), cpu()
    after_run(run_dir, retire_after=7, log=logs.get_logger())
    t2, c2 = time.perf_counter(), cpu()
    write_junit([run_dir], run_dir.parent / "junit.xml")
    t3, c3 = time.perf_counter(), cpu()
    # as `run` writes them: with the config and the suite it already holds (not timed)
    loaded = load_config(run_dir.parents[2] / "parallax.toml")
    given = Given(loaded, prepare_suite(loaded, run_dir.parent.name))
    t4, c4 = time.perf_counter(), cpu()
    after_run(run_dir, retire_after=7, log=logs.get_logger(), given=given)
    t5, c5 = time.perf_counter(), cpu()
    figures = {
        "bare_read_s": t1 - t0,
        "reports_s": t3 - t1,  # html, md, history page and junit, as `parallax report` reads
        "reports_cpu_s": c3 - c1,
        "junit_s": t3 - t2,
        "history_bytes": (run_dir.parent / "index.html").stat().st_size,
        "given_reports_s": t5 - t4 + t3 - t2,  # as `run` writes them, junit included
        "given_reports_cpu_s": c5 - c4 + c3 - c2,
    }
    print(FIGURES + json.dumps({**figures, "after_run_s": t2 - t1, "after_run_cpu_s": c2 - c1}))
    return 0


def replay_figures(run_dir: Path, runs: int) -> dict[str, Any]:
    """`parallax replay RUN_DIR` as a child process, start-up and reports included: rows of
    raw.jsonl regraded a second, median. Each replay is a run of the suite of its own."""
    rows = sum(1 for _ in (run_dir / "raw.jsonl").open("rb"))
    walls = []
    for _ in range(runs):
        child = run_child([PARALLAX, "replay", str(run_dir)], cwd=run_dir.parents[2])
        if child.code not in (0, 1, 2, 3):
            raise SystemExit(f"parallax replay exited {child.code}: {child.stdout[-2000:]}")
        walls.append(child.wall)
    wall = statistics.median(walls)
    return {"replay_rows": rows, "replay_s": wall, "replay_rows_per_s": rows / wall}


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


def browser_figures(report: Path, loads: int) -> dict[str, Any]:
    """Median over `loads` fresh loads of the page; {"skipped": why} without a browser."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return {"skipped": "playwright is not installed (pip install -r requirements-dev.lock)"}
    binary = _chromium()
    if binary is None:
        return {"skipped": "chromium is not installed (Debian: apt-get install -y chromium)"}
    found: list[dict[str, Any]] = []
    problems: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=binary, args=["--no-sandbox"])
        try:
            for _ in range(loads):
                context = browser.new_context(viewport={"width": 1280, "height": 900})
                page = context.new_page()
                page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}"))
                page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
                page.goto(report.as_uri(), wait_until="load", timeout=180_000)
                page.wait_for_function(READY, timeout=180_000)  # the cases read, the table drawn
                # a reader looks at the verdict before a control: the search index is built
                # in the page's idle moments by then ("search ready")
                page.wait_for_function(INDEXED, timeout=180_000)
                figures = {**page.evaluate(NAVIGATION), **page.evaluate(ACTIONS)}
                if "error" in figures:
                    return {"skipped": figures["error"]}
                found.append(figures)
                context.close()
        finally:
            browser.close()
    out: dict[str, Any] = {
        key: statistics.median(f[key] for f in found)
        for key, value in found[0].items()
        if isinstance(value, int | float)
    }
    out["shown"] = found[0]["shown"]
    out["loads"] = loads
    out["problems"] = sorted(set(problems))
    return out


# -- output ---------------------------------------------------------------------------------

COLUMNS = (
    ("cases", "{n:,}"),
    ("report.html MB", "{html_mb:.2f}"),
    ("all reports s", "{reports_s:.2f}"),
    ("their CPU s", "{reports_cpu_s:.2f}"),
    ("as `run` writes them s (CPU s)", "{given_reports_s:.2f} ({given_reports_cpu_s:.2f})"),
    ("bare read s", "{bare_read_s:.2f}"),
    ("`parallax report` s", "{render_s:.2f}"),
    ("its peak RSS MB", "{render_rss_mb:.0f}"),
    ("replay rows/s", "{replay_rows_per_s:,.0f}"),
    ("DOM nodes", "{nodes:,.0f}"),
    ("first paint s", "{fcp_s:.2f}"),
    ("loaded s", "{script_ready_s:.2f}"),
    ("first filter ms", "{filter_ms:.0f}"),
    ("unfilter ms", "{unfilter_ms:.0f}"),
    ("search ready s", "{search_ready_s:.2f}"),
    ("first search ms", "{search_first_ms:.0f}"),
    ("search ms", "{search_ms:.0f}"),
    ("sort ms", "{sort_ms:.0f}"),
    ("open case ms", "{open_ms:.0f}"),
)


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| " + " | ".join(name for name, _ in COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    for row in rows:
        values = {
            **row,
            "html_mb": row["html_bytes"] / 1e6,
            **{
                f"{k}_s": row.get(f"{k}_ms", float("nan")) / 1000
                for k in ("dcl", "load", "fcp", "script_ready", "search_ready")
            },
        }
        cells = []
        for _, fmt in COLUMNS:
            try:
                cells.append(fmt.format(**values))
            except KeyError:  # no browser figures
                cells.append("-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def results_section(rows: list[dict[str, Any]], info: dict[str, str]) -> str:
    loads = next((r["loads"] for r in rows if "loads" in r), 0)
    skipped = sorted({r["skipped"] for r in rows if "skipped" in r})
    problems = sorted({p for r in rows for p in r.get("problems", ())})
    text = [
        MARK_BEGIN,
        "## report.html at scale",
        "",
        f"`bench/report_scale.py` on {info['date']}, commit {info.get('commit', '?')} (load "
        f"average at start {info['load']}, {info['chromium']}); browser figures are the median "
        f"of {loads} fresh loads.",
        "",
        table(rows),
        "",
    ]
    if skipped:
        text += [f"Browser figures skipped: {'; '.join(skipped)}.", ""]
    if problems:
        text += ["Reported by the page: " + "; ".join(problems), ""]
    return "\n".join([*text, MARK_END])


def write_results(path: Path, section: str) -> None:
    """Replace the section between the markers, or append it."""
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    if MARK_BEGIN in old and MARK_END in old:
        head, rest = old.split(MARK_BEGIN, 1)
        tail = rest.split(MARK_END, 1)[1]
        new = head + section + tail
    else:
        new = old.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(new, encoding="utf-8")


def commit() -> str:
    """The commit measured (and whether the tree had changes beside it)."""
    here = Path(__file__).resolve().parent
    sha = run_child(["git", "-C", str(here), "rev-parse", "--short", "HEAD"]).stdout.strip()
    dirty = run_child(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"])
    return sha + (" (with changes)" if dirty.stdout.strip() else "")


def chromium_version() -> str:
    binary = _chromium()
    if binary is None:
        return "no chromium"
    child = run_child([binary, "--version"])
    return child.stdout.strip().splitlines()[-1] if child.stdout.strip() else "chromium"


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["reports"]:  # internal: time a finished run's reports in this process
        return reports_main(Path(argv[1]).resolve())
    parser = argparse.ArgumentParser(description="report.html size and load time at scale")
    parser.add_argument("--n", type=int, nargs="+", default=[2000, 20000], help="cases")
    parser.add_argument("--loads", type=int, default=3, help="browser loads per size (median)")
    parser.add_argument("--renders", type=int, default=3, help="parallax report runs (median)")
    parser.add_argument("--replays", type=int, default=1, help="parallax replay runs (median)")
    parser.add_argument("--workdir", type=Path, help="keep the projects and runs here")
    parser.add_argument("--json", type=Path, help="write all figures here as JSON")
    parser.add_argument("--results", type=Path, help="write the table into this Markdown file")
    args = parser.parse_args(argv)

    info = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "chromium": chromium_version(),
        "commit": commit(),
    }
    print("report scale benchmark:", json.dumps(info))
    work = args.workdir or Path(tempfile.mkdtemp(prefix="parallax-report-scale-"))
    rows = []
    try:
        for n in args.n:
            run_dir = build_project(work / f"n{n}", n)
            row: dict[str, Any] = {"n": n, **render_figures(run_dir, args.renders)}
            row.update(browser_figures(run_dir / "report.html", args.loads))
            if args.replays:  # last: each replay adds a run to the suite's history
                row.update(replay_figures(run_dir, args.replays))
            rows.append(row)
            print(json.dumps(row, default=str))
            sys.stdout.flush()
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    print()
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps({"info": info, "rows": rows}, indent=2) + "\n")
    if args.results:
        write_results(args.results, results_section(rows, info))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
