"""Retention's costs: compressing a finished run's ledgers, and reading a compressed run back.

    .venv/bin/python bench/retention.py                              # N = 2,000 and 20,000
    .venv/bin/python bench/retention.py --n 200 --runs 1             # a quick look
    .venv/bin/python bench/retention.py --results bench/RESULTS.md   # also write the table there

For each N it builds report_scale.py's project (recorded endpoints, a promoted first run, then a
second run with every gate class) and measures on the second run, median of `--runs`:

* pack: `ledger.pack` of raw.jsonl and outcomes.jsonl in this process (compress at zlib level
  6, write to a temporary name, fsync, rename, read back and check the CRC, remove the plain
  file), seconds and plain MB/s, and the bytes before and after; beside it the bare tool,
  `gzip -6 -c FILE > /dev/null` on the same files (the same zlib level, nothing written back);
* reading every row of raw.jsonl with `ledger.read_jsonl`, plain and compressed (rows/s);
* the report's index of raw.jsonl (`reports/ledgerindex.py`) built in this process, plain and
  compressed: a compressed raw.jsonl is decompressed into a temporary file first;
* `parallax replay RUN_DIR` and `parallax report RUN_DIR` as child processes (start-up included),
  wall seconds and peak RSS, of the run dir plain and of a copy compressed: what a compressed
  run costs the commands that read it (a report decompresses raw.jsonl once into a temporary
  file, `reports/ledgerindex.py`).

Figures are printed (and written with --json/--results), never asserted: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from report_scale import build_project
from run import PARALLAX, run_child

from runner.ledger import pack, read_jsonl
from runner.reports.ledgerindex import LedgerIndex

LEDGERS = ("raw.jsonl", "outcomes.jsonl")
MARK_BEGIN = "<!-- retention: begin (written by bench/retention.py) -->"
MARK_END = "<!-- retention: end -->"


def _median(values: list[float]) -> float:
    return statistics.median(values)


def pack_figures(run_dir: Path, runs: int) -> dict[str, Any]:
    """`pack` of both ledgers on fresh copies, beside `gzip -6` on the same bytes."""
    plain = sum((run_dir / n).stat().st_size for n in LEDGERS)
    packs, bare, packed = [], [], 0
    for _ in range(runs):
        with tempfile.TemporaryDirectory(dir=run_dir.parent) as scratch:
            copies = [Path(shutil.copy(run_dir / n, Path(scratch) / n)) for n in LEDGERS]
            t0 = time.perf_counter()
            packed = sum(pack(copy)[1] for copy in copies)
            packs.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for name in LEDGERS:
            subprocess.run(
                ["gzip", "-6", "-c", str(run_dir / name)],
                stdout=subprocess.DEVNULL,
                check=True,
            )
        bare.append(time.perf_counter() - t0)
    return {
        "plain_bytes": plain,
        "packed_bytes": packed,
        "ratio": plain / packed if packed else None,
        "pack_s": _median(packs),
        "pack_mb_s": plain / 1e6 / _median(packs),
        "gzip_s": _median(bare),
    }


def read_figures(plain_dir: Path, packed_dir: Path, runs: int) -> dict[str, Any]:
    """Every row of raw.jsonl read back, plain and compressed, taking turns."""
    walls: dict[str, list[float]] = {"plain": [], "packed": []}
    rows = 0
    for _ in range(runs):
        for label, run_dir in (("plain", plain_dir), ("packed", packed_dir)):
            t0 = time.perf_counter()
            rows = sum(1 for _ in read_jsonl(run_dir / "raw.jsonl"))
            walls[label].append(time.perf_counter() - t0)
    return {f"read_{label}_rows_s": rows / _median(w) for label, w in walls.items()}


def index_figures(plain_dir: Path, packed_dir: Path, runs: int) -> dict[str, Any]:
    """The report's index of raw.jsonl (`reports/ledgerindex.py`) built, plain and compressed
    (decompressed into a temporary file first), taking turns: what a report of a compressed
    run pays on top, without the rest of the report around it."""
    walls: dict[str, list[float]] = {"plain": [], "packed": []}
    for _ in range(runs):
        for label, run_dir in (("plain", plain_dir), ("packed", packed_dir)):
            t0 = time.perf_counter()
            LedgerIndex(run_dir / "raw.jsonl").close()
            walls[label].append(time.perf_counter() - t0)
    return {f"index_{label}_s": _median(w) for label, w in walls.items()}


def command_figures(plain_dir: Path, packed_dir: Path, runs: int) -> dict[str, Any]:
    """`parallax replay` and `parallax report` of the plain run and of its compressed copy,
    taking turns so that a change in the machine's load falls on both alike."""
    out: dict[str, Any] = {}
    root = plain_dir.parents[2]
    for command in ("replay", "report"):
        walls: dict[str, list[float]] = {"plain": [], "packed": []}
        rss: dict[str, list[float]] = {"plain": [], "packed": []}
        for _ in range(runs):
            for label, run_dir in (("plain", plain_dir), ("packed", packed_dir)):
                child = run_child([PARALLAX, command, str(run_dir)], cwd=root)
                if child.code not in (0, 1, 2, 3):
                    raise SystemExit(f"parallax {command} exited {child.code}: {child.stdout}")
                walls[label].append(child.wall)
                rss[label].append(child.rss_mb)
        for label, seconds in walls.items():
            out[f"{command}_{label}_s"] = _median(seconds)
            out[f"{command}_{label}_rss_mb"] = _median(rss[label])
    return out


def measure(n: int, runs: int, workdir: Path) -> dict[str, Any]:
    root = workdir / f"n{n}"
    print(f"building N={n} ...", file=sys.stderr, flush=True)
    run_dir = build_project(root, n)
    packed_dir = run_dir.with_name(run_dir.name.partition("-")[0] + "-packed")
    shutil.copytree(run_dir, packed_dir)
    row: dict[str, Any] = {"n": n, **pack_figures(run_dir, runs)}
    for name in LEDGERS:
        pack(packed_dir / name)
    row |= read_figures(run_dir, packed_dir, runs)
    row |= index_figures(run_dir, packed_dir, runs)
    row |= command_figures(run_dir, packed_dir, runs)
    return row


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| N | ledgers MB | .gz MB | ratio | pack s (MB/s) | gzip -6 s | read rows/s plain / .gz "
        "| report index s plain / .gz | replay s plain / .gz | report s plain / .gz "
        "| report RSS MB plain / .gz |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['n']:,} | {r['plain_bytes'] / 1e6:.1f} | {r['packed_bytes'] / 1e6:.2f} "
            f"| {r['ratio']:.1f}x | {r['pack_s']:.2f} ({r['pack_mb_s']:.0f}) | {r['gzip_s']:.2f} "
            f"| {r['read_plain_rows_s']:,.0f} / {r['read_packed_rows_s']:,.0f} "
            f"| {r['index_plain_s']:.2f} / {r['index_packed_s']:.2f} "
            f"| {r['replay_plain_s']:.2f} / {r['replay_packed_s']:.2f} "
            f"| {r['report_plain_s']:.2f} / {r['report_packed_s']:.2f} "
            f"| {r['report_plain_rss_mb']:.0f} / {r['report_packed_rss_mb']:.0f} |"
        )
    return "\n".join(lines)


def results_section(rows: list[dict[str, Any]], runs: int, load: tuple[float, ...]) -> str:
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return "\n".join(
        [
            MARK_BEGIN,
            "## Retention: compressed ledgers",
            "",
            f"`bench/retention.py`, {when}, median of {runs}, load average at the start "
            f"{load[0]:.2f}. report_scale.py's project (recorded endpoints: raw.jsonl holds "
            "no request bodies, which a live run's repeat from case to case). `pack` compresses "
            "both ledgers at zlib level 6, fsyncs, reads the file back and checks its CRC "
            "before it removes the plain file; `gzip -6` compresses the same bytes to "
            "/dev/null. replay and report run as child processes, start-up included, on the "
            "run dir and on a compressed copy of it.",
            "",
            table(rows),
            MARK_END,
        ]
    )


def write_results(path: Path, section: str) -> None:
    text = path.read_text(encoding="utf-8")
    if MARK_BEGIN in text:
        head, _, rest = text.partition(MARK_BEGIN)
        _, _, tail = rest.partition(MARK_END)
        text = head + section + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[2000, 20000])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--results", type=Path)
    args = parser.parse_args(argv)
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as scratch:
        workdir = args.workdir or Path(scratch)
        rows = [measure(n, args.runs, workdir) for n in args.n]
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    if args.results:
        write_results(args.results, results_section(rows, args.runs, load))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
