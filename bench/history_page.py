"""What rewriting the history page after each run costs: the longer history window a run's
report reads for it, and rendering the page.

    python bench/history_page.py [--runs 60] [--cases 20000]

Writes a suite of `--runs` run directories whose summaries list `--cases` quiet cases (what
finalize writes for a suite of that size), then times, best of five, reading the report's
window without the page (14 runs, `retire_after` 7) and with it (`PAGE_RUNS`), and building and
writing the page from the rows read. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from runner.gate import GATE_CLASSES
from runner.history import load_history
from runner.reports.history_page import PAGE_RUNS, write_page
from runner.reports.model import TREND_RUNS, history_window


def _suite(root: Path, runs: int, cases: int) -> Path:
    suite = root / "s"
    ids = [f"case-{i:06d}" for i in range(cases)]
    for night in range(runs):
        day, hour = divmod(night, 24)
        name = f"202603{day + 1:02d}T{hour:02d}0000Z-{night:06x}"
        run_dir = suite / name
        run_dir.mkdir(parents=True)
        summary = {
            "version": 1,
            "run_id": name,
            "mode": "run",
            "started_at": f"2026-03-{day + 1:02d}T{hour:02d}:00:00+00:00",
            "exit_code": 0,
            "verdict": "clean",
            "gate_counts": {g: (cases if g == "unchanged" else 0) for g in GATE_CLASSES},
            "strata": {
                side: {s: {"n": cases // 3, "pass_rate": 0.9} for s in ("easy", "medium")}
                for side in ("reference", "candidate")
            },
            "served_models": {"reference": ["ref-1"], "candidate": [f"cand-{night // 10}"]},
            "quiet_cases": ids,
        }
        (run_dir / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    return suite


def _best(action: Callable[[], object], times: int = 5) -> float:
    best = float("inf")
    for _ in range(times):
        start = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--cases", type=int, default=20_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        suite = _suite(Path(tmp), args.runs, args.cases)
        before = history_window(TREND_RUNS, 7)
        after = history_window(TREND_RUNS, 7, PAGE_RUNS)
        rows = load_history(suite, last=after).rows
        page = suite / "index.html"
        figures = {
            f"read {before} runs (report only) s": _best(lambda: load_history(suite, last=before)),
            f"read {after} runs (report and page) s": _best(
                lambda: load_history(suite, last=after)
            ),
            "build and write the page s": _best(
                lambda: write_page("s", rows[-PAGE_RUNS:], page, retire_after=7)
            ),
            "page KB": page.stat().st_size / 1024,
        }
    print(f"history page, {args.runs} runs of {args.cases} cases")
    for name, value in figures.items():
        print(f"  {name:<40} {value:8.3f}")


if __name__ == "__main__":
    main()
