"""One suite as one run and as N shards at once plus `parallax merge`, against the fake server.

    .venv/bin/python bench/shards.py                      # N = 20,000 cases, 4 shards, c=64
    .venv/bin/python bench/shards.py --n 40 --base-n 8    # the CI smoke (asserts no timing)
    .venv/bin/python bench/shards.py --limits whole       # each shard the whole quota

It starts `bench/fakeserver.py` and writes `bench/run.py`'s plain suite (both sides on the
server), then, each in a project of its own so that no run reads another's history:

* `parallax run`: the suite unsharded, as one child process;
* `parallax run --shard I/N` for every I at once, as the Kubernetes Indexed Job's pods would
  run them (there on N machines, here on this one), each a child process timed on its own;
* `parallax merge` of the N shard dirs, a child process;
* the same shards and merge of a `--base-n` case suite, so that the merge's start-up is
  subtracted from its cost per case.

By default (`--limits divided`, as `parallax run` does) each shard takes 1/N of each endpoint's
concurrency, since the provider's quota is shared: the shards together keep as many calls in
flight as the one run. On a machine of fewer cores than shards the shards also share the CPU,
so the figures are the merge's overhead and the per-shard division, not a fleet's speedup.
Figures are printed (and written with --json), never asserted: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from run import PARALLAX, Child, FakeServer, Shape, byte_compile, run_child, run_children
from run import write_suite as write_plain_suite

SUITE = "bench"


def write_suite(root: Path, n: int, url: str, concurrency: int) -> Path:
    return write_plain_suite(root, n, url, concurrency, Shape.PLAIN)


def _checked(child: Child, what: str) -> Child:
    if child.code not in (0, 1):  # 1 is a stratum alert (a 100% pass rate is a ceiling)
        raise SystemExit(f"bench: {what} exited {child.code}:\n{child.stdout[-3000:]}")
    return child


def _run_dirs(root: Path) -> set[Path]:
    suite = root / "runs" / SUITE
    return {p for p in suite.iterdir() if p.is_dir()} if suite.is_dir() else set()


def _ok_rows(run_dir: Path) -> tuple[int, int]:
    """(rows of outcomes.jsonl, those whose transport is not ok)."""
    rows = bad = 0
    with (run_dir / "outcomes.jsonl").open("rb") as handle:
        for line in handle:
            rows += 1
            bad += json.loads(line)["transport"] != "ok"
    return rows, bad


def whole(root: Path, n: int, url: str, concurrency: int) -> dict[str, Any]:
    """The suite as one `parallax run`."""
    config = write_suite(root, n, url, concurrency)
    child = _checked(run_child([PARALLAX, "run", "--config", str(config)], cwd=root), "run")
    (run_dir,) = _run_dirs(root)
    rows, bad = _ok_rows(run_dir)
    return {
        "wall": child.wall,
        "cpu": child.cpu,
        "rss_mb": child.rss_mb,
        "rows": rows,
        "not_ok": bad,
    }


def sharded(
    root: Path, n: int, url: str, concurrency: int, shards: int, limits: str
) -> dict[str, Any]:
    """The suite as `shards` shard processes at once, then `parallax merge` of their dirs."""
    config = write_suite(root, n, url, concurrency)
    run = [PARALLAX, "run", "--config", str(config), "--shard-limits", limits]
    argvs = [[*run, "--shard", f"{i}/{shards}"] for i in range(shards)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARALLAX_")}
    pods = run_children(argvs, cwd=root, env=env)
    for i, pod in enumerate(pods):
        _checked(pod, f"shard {i}")
    shard_dirs = _run_dirs(root)
    if len(shard_dirs) != shards:
        raise SystemExit(f"bench: {len(shard_dirs)} shard dirs, expected {shards}")
    merge = run_child(
        [PARALLAX, "merge", "--config", str(config), *map(str, sorted(shard_dirs))], cwd=root
    )
    _checked(merge, "merge")
    (merged,) = _run_dirs(root) - shard_dirs
    rows, bad = _ok_rows(merged)
    slowest = max(p.wall for p in pods)
    return {
        "shard_wall": [p.wall for p in pods],
        "shard_cpu": [p.cpu for p in pods],
        "slowest_shard_wall": slowest,
        "shards_cpu": sum(p.cpu for p in pods),
        "merge_wall": merge.wall,
        "merge_cpu": merge.cpu,
        "merge_rss_mb": merge.rss_mb,
        "wall": slowest + merge.wall,
        "cpu": sum(p.cpu for p in pods) + merge.cpu,
        "rows": rows,
        "not_ok": bad,
    }


def _load() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="1 run vs N shards + merge (bench/README.md)")
    parser.add_argument("--n", type=int, default=20000, help="cases (calls = 2 x N)")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=64, help="per endpoint, unsharded")
    parser.add_argument("--latency", type=float, default=0.05, help="server seconds per reply")
    parser.add_argument(
        "--limits",
        choices=("divided", "whole"),
        default="divided",
        help="each shard's share of concurrency (`run --shard-limits`)",
    )
    parser.add_argument(
        "--base-n", type=int, default=40, help="cases of the small merge whose cost is subtracted"
    )
    parser.add_argument("--json", type=Path, help="write all figures here as JSON")
    parser.add_argument("--workdir", type=Path, help="keep the projects and runs here")
    args = parser.parse_args(argv)
    if args.base_n >= args.n:
        parser.error("--base-n must be fewer cases than --n")

    byte_compile()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="parallax-shards-"))
    work.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "n": args.n,
        "shards": args.shards,
        "concurrency": args.concurrency,
        "limits": args.limits,
        "latency": args.latency,
        "cpus": os.cpu_count(),
        "load_at_start": _load(),
    }
    print(f"parallax shards benchmark: {json.dumps(result)}")
    server = FakeServer(args.latency)
    try:
        one = result["whole"] = whole(work / "whole", args.n, server.url, args.concurrency)
        many = result["sharded"] = sharded(
            work / "sharded", args.n, server.url, args.concurrency, args.shards, args.limits
        )
        base = result["base"] = sharded(
            work / "base", args.base_n, server.url, args.concurrency, args.shards, args.limits
        )
    finally:
        server.stop()
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    result["load_at_end"] = _load()
    extra = args.n - args.base_n
    result["merge_us_per_case"] = many["merge_wall"] / args.n * 1e6
    result["merge_cpu_us_per_case_startup_removed"] = (
        (many["merge_cpu"] - base["merge_cpu"]) / extra * 1e6
    )
    result["merge_wall_us_per_case_startup_removed"] = (
        (many["merge_wall"] - base["merge_wall"]) / extra * 1e6
    )
    c = args.concurrency
    per = c if args.limits == "whole" else max(1, c // args.shards)
    print(f"\nN={args.n} cases ({2 * args.n} calls), latency {args.latency} s, c={c}")
    print(f"  1 run:      wall {one['wall']:.2f} s, cpu {one['cpu']:.2f} s, rows {one['rows']}")
    print(
        f"  {args.shards} shards (c={per} each, at once): slowest {many['slowest_shard_wall']:.2f}"
        f" s wall (each {', '.join(f'{w:.2f}' for w in many['shard_wall'])}), cpu "
        f"{many['shards_cpu']:.2f} s together"
    )
    print(
        f"  merge:      wall {many['merge_wall']:.2f} s, cpu {many['merge_cpu']:.2f} s, peak RSS "
        f"{many['merge_rss_mb']:.1f} MB, rows {many['rows']}"
    )
    print(
        f"  slowest shard + merge: {many['wall']:.2f} s wall ({many['wall'] / one['wall']:.2f}x "
        f"the 1 run), cpu {many['cpu']:.2f} s ({many['cpu'] / one['cpu']:.2f}x)"
    )
    print(
        f"  merge per case: {result['merge_us_per_case']:.0f} us wall; start-up removed (a "
        f"{args.base_n}-case merge, {base['merge_wall']:.2f} s wall, subtracted): "
        f"{result['merge_wall_us_per_case_startup_removed']:.0f} us wall, "
        f"{result['merge_cpu_us_per_case_startup_removed']:.0f} us cpu"
    )
    print(f"  load average: {result['load_at_start']} at start, {result['load_at_end']} at end")
    for label, figures in (("1 run", one), ("merged run", many)):
        if figures["not_ok"]:
            print(f"  WARNING: {figures['not_ok']} rows of the {label} were not transport ok")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
