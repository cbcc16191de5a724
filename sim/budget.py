"""Does the budget hold under concurrency? Worst overshoot over budget_usd, in call estimates.

Runs trials of a suite through the real pipeline (`parallax run` in-process: the scheduler, the
live openai-chat client with its retries, the ledgers) against a local fake server, both
endpoints at concurrency 64. The server draws each reply at random: latency (log-normal,
median 20 ms), prompt tokens between a sixth of the request's bytes and all of them, completion
tokens up to the request's max_tokens, and faults: 5% answered 500, 5% 429, 3% too slow for the
deadline (the client times out, the model ran), 5% a reply without usage. It bills each request
as it arrives: the planned tokens when a model runs for it (a slow or usage-less reply too),
nothing for a 500 or a 429. Each trial's budget is a random fraction of what the suite would
cost, so most trials are cut and a few are not.

Prints, in units of the suite's largest single-call estimate: the worst overshoot of the spend
the budget counted over the limit, and of what the server billed (both must be at most 1; the
budget is built for 0, as long as no reply uses more than its estimate); and over the trials
the budget cut, the most it left unspent, in units of the largest case's estimate (both sides:
the budget reserves a case whole, so a cut run may stop with up to that much left).

    python sim/budget.py --trials 200           # the README's figures
    python sim/budget.py --trials 3 --cases 60  # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import socket
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from aiohttp import web
from simkit import print_figures, run_night

CONCURRENCY = 64
PRICES = {"sim-ref": (0.5, 1.5), "sim-cand": (3.0, 15.0)}  # $/Mtok: input, output
MAX_TOKENS = {"sim-ref": 128, "sim-cand": 256}
DEADLINE = 0.5  # seconds an attempt may take; a slow reply takes longer
WORDS = ("budget", "näive", "café", "数据", "token", "reply", "cost", "—", "limit", "call")


class FakeServer:
    """An OpenAI chat server on 127.0.0.1, in a thread with its own event loop, that bills
    every request it gets (`billed`, picodollars per trial)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.billed = 0
        self.port = 0
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._seq = 0

    def __enter__(self) -> FakeServer:
        threading.Thread(target=self._serve, name="fake-server", daemon=True).start()
        if not self._ready.wait(30):
            raise RuntimeError("the fake server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None:  # replies still sleeping are cancelled, then the loop ends
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(30)
            self._loop.call_soon_threadsafe(self._loop.stop)

    async def _stop(self) -> None:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _serve(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        loop.run_until_complete(self._start())
        self._ready.set()
        loop.run_forever()

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        await web.SockSite(runner, sock).start()

    def _bill(self, model: str, prompt: int, completion: int) -> None:
        rate_in, rate_out = PRICES[model]
        self.billed += round((prompt * rate_in + completion * rate_out) * 1e6)

    async def _handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        doc = json.loads(raw)
        model, rng = doc["model"], self.rng
        prompt = rng.randint(len(raw) // 6, len(raw))
        completion = rng.randint(1, doc["max_tokens"])
        fault = rng.random()
        await asyncio.sleep(min(rng.lognormvariate(math.log(0.02), 0.8), 0.3))
        if fault < 0.05:
            return web.json_response({"error": {"message": "busy"}}, status=500)
        if fault < 0.10:
            return web.json_response(
                {"error": {"message": "slow down"}}, status=429, headers={"Retry-After": "0"}
            )
        self._bill(model, prompt, completion)  # from here on a model ran for it
        if fault < 0.13:
            await asyncio.sleep(DEADLINE + 0.3)  # the client gave up; the tokens are paid
        self._seq += 1
        reply: dict[str, Any] = {
            "id": f"sim-{self._seq}",
            "object": "chat.completion",
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "ok " * 3},
                    "finish_reason": "stop",
                }
            ],
        }
        if fault >= 0.18:
            reply["usage"] = {"prompt_tokens": prompt, "completion_tokens": completion}
        return web.json_response(reply)


def write_suite(root: Path, cases: int, port: int, rng: random.Random) -> None:
    rows = [
        {
            "id": f"c{i:04d}",
            "prompt": " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 80))),
            "must_include": ["ok"],
        }
        for i in range(cases)
    ]
    (root / "cases.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    endpoints = "".join(
        f"""
[endpoints.{side}]
kind = "openai-chat"
base_url = "http://127.0.0.1:{port}/v1"
model = "{model}"
concurrency = {CONCURRENCY}
max_tokens = {MAX_TOKENS[model]}
deadline = {DEADLINE}
retry = {{ attempts = 3, backoff_base = 0.01, backoff_max = 0.02 }}
price = {{ input_per_mtok = {PRICES[model][0]}, output_per_mtok = {PRICES[model][1]} }}
"""
        for side, model in (("ref", "sim-ref"), ("cand", "sim-cand"))
    )
    (root / "parallax.toml").write_text(
        'runs_dir = "runs"\nsnapshots_dir = "snapshots"\nbudget_usd = 1\n'
        + endpoints
        + '\n[suites.sim]\nfixtures = "cases.jsonl"\nreference = "ref"\ncandidate = "cand"\n',
        "utf-8",
    )


def set_budget(root: Path, budget_usd: float) -> None:
    path = root / "parallax.toml"
    lines = path.read_text("utf-8").splitlines()
    lines[2] = f"budget_usd = {budget_usd!r}"
    path.write_text("\n".join(lines) + "\n", "utf-8")


def estimates(loaded: Any) -> tuple[int, int, int]:
    """The suite's largest single-call estimate, its largest case's (both sides: what the
    budget reserves at once) and the sum of all, in picodollars."""
    from runner.cost.budget import Budget, meter_for
    from runner.suite import prepare_suite

    suite = prepare_suite(loaded, "sim")
    meters = [
        meter_for(Budget(1.0), loaded.endpoint(name), loaded.shape(name))
        for name in ("ref", "cand")
    ]
    cases = [[m.estimate_case(suite.fixtures.load(ref)) for m in meters] for ref in suite.refs]
    suite.fixtures.close()
    return max(max(c) for c in cases), max(sum(c) for c in cases), sum(sum(c) for c in cases)


def trials(args: argparse.Namespace) -> dict[str, Any]:
    from runner.config import load_config
    from runner.cost.budget import PICO

    rng = random.Random(args.seed)
    worst = worst_billed = -math.inf
    unspent = 0.0
    cut = 0
    with FakeServer(args.seed) as server, tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_suite(root, args.cases, server.port, rng)
        largest, largest_case, total = estimates(load_config(root / "parallax.toml"))
        for _ in range(args.trials):
            # the suite's spend comes to some 70% of its estimates (retried attempts keep
            # theirs): most trials are cut, a few are not
            limit = rng.uniform(0.02, 0.9) * total
            set_budget(root, limit / PICO)
            server.billed = 0
            _, summary = run_night(root)
            block = summary["budget"]
            spent = block["spent_usd"] * PICO
            worst = max(worst, (spent - block["limit_usd"] * PICO) / largest)
            worst_billed = max(worst_billed, (server.billed - block["limit_usd"] * PICO) / largest)
            if block["exhausted"]:
                cut += 1
                unspent = max(unspent, (block["limit_usd"] * PICO - spent) / largest_case)
    return {
        "trials": args.trials,
        "cases": args.cases,
        "concurrency": CONCURRENCY,
        "worst_overshoot_estimates": round(worst, 4),
        "worst_billed_overshoot_estimates": round(worst_billed, 4),
        "cut_trials": cut,
        "most_unspent_case_estimates_when_cut": round(unspent, 4),
        "largest_estimate_usd": round(largest / PICO, 6),
        "largest_case_estimate_usd": round(largest_case / PICO, 6),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args(argv)
    return print_figures(lambda: trials(args))


if __name__ == "__main__":
    sys.exit(main())
