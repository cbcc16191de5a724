"""Does the paired test find a real regression, and stay quiet when there is none?

Simulates nights of a 200-case suite through the real pipeline, offline: each night writes a
cassette for a `recorded` reference and candidate, runs `parallax run` in-process, and reads
the paired test from summary.json. The candidate's true pass rate is `--drop` lower (it fails
cases the reference passes), and every sample of both sides flips pass/fail with probability
`--flip`. Prints the rate at which `significant_regression` was flagged with and without a
true difference. With `--margin`, also how often the candidate was called non-inferior at that
margin with no true difference (the claim's power) and when it is truly worse by exactly the
margin (a wrong claim: at most about `--alpha`).

    python sim/power.py --nights 200            # the README's figures
    python sim/power.py --nights 200 --margin 0.05
    python sim/power.py --nights 3 --cases 60   # a smoke run
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

from simkit import print_figures, run_night, write_cassette, write_recorded_suite

STRATA = ("easy", "medium", "stretch")
BASE_PASS = {"easy": 0.95, "medium": 0.8, "stretch": 0.4}


def write_suite(root: Path, cases: int, samples: int, alpha: float, margin: float | None) -> None:
    rows = [
        {
            "id": f"c{i:04d}",
            "stratum": STRATA[i % 3],
            "prompt": f"question {i}",
            "expect": {"must_include": ["correct"]},
        }
        for i in range(cases)
    ]
    write_recorded_suite(
        root,
        rows,
        f'samples = {samples}\nalpha = {alpha}\nfail_on = ["significant_regression"]\n',
        "" if margin is None else f"[suites.sim.thresholds]\nnon_inferiority_margin = {margin}\n",
    )


def truth(cases: int, drop: float, rng: random.Random) -> tuple[list[bool], list[bool]]:
    """True pass per case: the candidate loses exactly `drop` x cases the reference passes."""
    ref = [rng.random() < BASE_PASS[STRATA[i % 3]] for i in range(cases)]
    cand = list(ref)
    losers = rng.sample([i for i, p in enumerate(ref) if p], round(drop * cases))
    for i in losers:
        cand[i] = False
    return ref, cand


def write_night(
    root: Path, ref: list[bool], cand: list[bool], samples: int, flip: float, rng: random.Random
) -> None:
    rows = []
    for side, passes in (("reference", ref), ("candidate", cand)):
        for i, passed in enumerate(passes):
            for sample in range(samples):
                ok = passed != (rng.random() < flip)
                reply = "the correct answer" if ok else "a wrong answer"
                rows.append(
                    {"case_id": f"c{i:04d}", "side": side, "sample": sample, "completion": reply}
                )
    write_cassette(root, rows)


def flagged_rate(args: argparse.Namespace, drop: float, seed: int) -> tuple[float, float]:
    """The rates of nights flagged as a significant regression and claimed non-inferior."""
    rng = random.Random(seed)
    flagged = claimed = 0
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_suite(root, args.cases, args.samples, args.alpha, args.margin)
        for _ in range(args.nights):
            ref, cand = truth(args.cases, drop, rng)
            write_night(root, ref, cand, args.samples, args.flip, rng)
            _, summary = run_night(root)
            flagged += bool(summary["significant_regression"])
            claim = summary["paired"]["overall"]["non_inferiority"] or {}
            claimed += claim.get("claim") == "non_inferior"
    return flagged / args.nights, claimed / args.nights


def figures(args: argparse.Namespace) -> dict[str, Any]:
    """Power at `--drop` and false alarms with no true difference; with `--margin`, how often
    non-inferiority was claimed with no true difference and at exactly the margin."""
    power, _ = flagged_rate(args, args.drop, args.seed)
    false_alarms, claim_power = flagged_rate(args, 0.0, args.seed + 1)
    result: dict[str, Any] = {
        "nights": args.nights,
        "cases": args.cases,
        "samples": args.samples,
        "flip": args.flip,
        "drop": args.drop,
        "alpha": args.alpha,
        "power": power,
        "false_alarm_rate": false_alarms,
    }
    if args.margin is not None:
        # truly worse by exactly the margin: every claim of non-inferiority is a wrong one
        result |= {
            "margin": args.margin,
            "non_inferior_at_no_difference": claim_power,
            "non_inferior_at_margin": flagged_rate(args, args.margin, args.seed + 2)[1],
        }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", type=int, default=200)
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--flip", type=float, default=0.05)
    parser.add_argument("--drop", type=float, default=0.10)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--margin", type=float, default=None)
    args = parser.parse_args(argv)
    return print_figures(lambda: figures(args))


if __name__ == "__main__":
    sys.exit(main())
