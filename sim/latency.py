"""Does the latency gate catch a real slowdown, and stay quiet on noise and outliers?

Simulates nights of a suite through the real pipeline, offline: each night writes a cassette
for a `recorded` reference and candidate whose rows carry the calls' `elapsed_ms`, runs
`parallax run` in-process with `fail_on = ["latency_regression"]`, and reads the decision from
summary.json and the exit code. Latencies are data drawn from a heavy-tailed model, so nothing
depends on how fast this machine is:

    elapsed_ms = case_base x side_factor x LogNormal(0, --sigma) x outlier

where `case_base` is LogNormal(log 800 ms, --spread) per case (long prompts are slow on both
sides), `side_factor` is 1 for the reference and the true ratio for the candidate, and with
probability `--outliers` a call is stalled by a factor drawn log-uniformly from 3 to 30 (a
retry, a cold replica, a queue). Prints how often the gate fired at a true slowdown of
`--slowdown` (power), with no true difference (false alarms on pure noise) and with the
candidate truly exactly at `--limit` (false alarms at the boundary: about `--alpha`).

    python sim/latency.py --nights 200                  # the README's figures
    python sim/latency.py --nights 3 --cases 40 --slowdown 2.0   # a smoke run
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

from simkit import print_figures, run_night, write_cassette, write_recorded_suite

BASE_MS = 800.0
STALL = (3.0, 30.0)


def write_suite(root: Path, args: argparse.Namespace) -> None:
    rows = [
        {"id": f"c{i:04d}", "prompt": f"question {i}", "expect": {"must_include": ["correct"]}}
        for i in range(args.cases)
    ]
    write_recorded_suite(
        root,
        rows,
        f'samples = {args.samples}\nalpha = {args.alpha}\nfail_on = ["latency_regression"]\n',
        f"\n[thresholds]\nlatency_ratio_max = {args.limit}\n",
    )


def call_ms(base: float, factor: float, args: argparse.Namespace, rng: random.Random) -> int:
    """One call's latency: the case's base, the side's factor, noise, and maybe a stall."""
    ms = base * factor * math.exp(rng.gauss(0.0, args.sigma))
    if rng.random() < args.outliers:
        ms *= math.exp(rng.uniform(math.log(STALL[0]), math.log(STALL[1])))
    return max(1, round(ms))


def write_night(root: Path, ratio: float, args: argparse.Namespace, rng: random.Random) -> None:
    rows = []
    for i in range(args.cases):
        base = BASE_MS * math.exp(rng.gauss(0.0, args.spread))
        for side, factor in (("reference", 1.0), ("candidate", ratio)):
            for sample in range(args.samples):
                row = {
                    "case_id": f"c{i:04d}",
                    "side": side,
                    "sample": sample,
                    "completion": "the correct answer",
                    "elapsed_ms": call_ms(base, factor, args, rng),
                }
                rows.append(row)
    write_cassette(root, rows)


def fired_rate(args: argparse.Namespace, ratio: float, seed: int) -> dict[str, Any]:
    """How often the gate fired at a true candidate / reference ratio of `ratio`."""
    rng = random.Random(seed)
    fired = exit_1 = 0
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_suite(root, args)
        for _ in range(args.nights):
            write_night(root, ratio, args, rng)
            exit_code, summary = run_night(root)
            test = summary["regressions"]["latency"]
            fired += test["finding"] == "regression"
            exit_1 += exit_code == 1  # the gate's verdict: review needed
            ratios.append(test["ratio"])
    return {
        "true_ratio": ratio,
        "fired": fired / args.nights,
        "exit_1": exit_1 / args.nights,
        "median_estimate": sorted(ratios)[len(ratios) // 2],
    }


def figures(args: argparse.Namespace) -> dict[str, Any]:
    """The gate's power at `--slowdown`, and its false alarms on noise and at `--limit`."""
    slow = fired_rate(args, args.slowdown, args.seed)
    noise = fired_rate(args, 1.0, args.seed + 1)
    boundary = fired_rate(args, args.limit, args.seed + 2)
    return {
        "nights": args.nights,
        "cases": args.cases,
        "samples": args.samples,
        "limit": args.limit,
        "alpha": args.alpha,
        "sigma": args.sigma,
        "spread": args.spread,
        "outliers": args.outliers,
        "slowdown": slow,
        "no_difference": noise,
        "at_limit": boundary,
        "power": slow["fired"],
        "false_alarm_rate": noise["fired"],
        "false_alarm_rate_at_limit": boundary["fired"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", type=int, default=200)
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--samples", type=int, default=1)
    parser.add_argument("--slowdown", type=float, default=1.3)
    parser.add_argument("--limit", type=float, default=1.1)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--sigma", type=float, default=0.3)
    parser.add_argument("--spread", type=float, default=0.7)
    parser.add_argument("--outliers", type=float, default=0.03)
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args(argv)
    return print_figures(lambda: figures(args))


if __name__ == "__main__":
    sys.exit(main())
