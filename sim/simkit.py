"""What the simulations share: a suite `sim` of a recorded reference and candidate, a night run
through the real pipeline in-process, and the one JSON line of figures each prints.

The simulations run as scripts (`python sim/power.py`), so this folder is on sys.path and they
import this module by its bare name.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# both sides play the one cassette a night writes, told apart by its rows' `side`
RECORDED_PAIR = """
[endpoints.ref]
kind = "recorded"
model = "ref"
cassette = "cassette.jsonl"

[endpoints.cand]
kind = "recorded"
model = "cand"
cassette = "cassette.jsonl"
"""


def write_recorded_suite(root: Path, rows: list[dict[str, Any]], suite: str, extra: str) -> None:
    """cases.jsonl and a parallax.toml whose suite `sim` compares the recorded pair; `suite`
    is more keys of [suites.sim], `extra` more tables after it."""
    (root / "cases.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "parallax.toml").write_text(
        'runs_dir = "runs"\nsnapshots_dir = "snapshots"\n'
        + RECORDED_PAIR
        + '\n[suites.sim]\nfixtures = "cases.jsonl"\nreference = "ref"\ncandidate = "cand"\n'
        + suite
        + extra
    )


def write_cassette(root: Path, rows: list[dict[str, Any]]) -> None:
    """The night's recorded replies, for both sides."""
    (root / "cassette.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def run_night(root: Path) -> tuple[int, dict[str, Any]]:
    """`parallax run` of suite `sim` in-process: its exit code and summary.json. The run
    directory is removed after: each night stands alone, and the runs dir stays small."""
    from runner.config import load_config
    from runner.runs.run import run_suite

    run_dir, exit_code, summary = run_suite(load_config(root / "parallax.toml"), "sim")
    shutil.rmtree(run_dir)
    return exit_code, summary


def print_figures(measure: Callable[[], dict[str, Any]]) -> int:
    """Runs `measure` with the pipeline's log lines and prints swallowed, then prints its
    figures and the seconds it took as one JSON line (the exit code: 0)."""
    from runner import logs

    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        logs.configure(json=True)
        figures = measure()
    print(json.dumps({**figures, "seconds": round(time.perf_counter() - started, 1)}))
    return 0
