"""Benchmark `parallax run` against a local fake OpenAI server, next to a bare aiohttp loop.

    .venv/bin/python bench/run.py                          # N=2,000 at c=64 and c=256, 3 runs
    .venv/bin/python bench/run.py --n 50 --runs 1 --quick  # the CI smoke (asserts no timing)
    .venv/bin/python bench/run.py --memory-n 20000         # plus the N=20,000 memory run

Every measured client is a child process: `parallax run` through the console script, and this
file's own `bare` mode (an aiohttp loop with one session per side, making the same calls with
the same bodies). CPU time and peak RSS come from the kernel's rusage of that child (wait4), so
they include everything the process did; "start-up removed" subtracts the same client's CPU on
a one-case suite, so the per-call figure is (cpu(N) - cpu(1)) / (calls(N) - calls(1)).

Three request shapes (`--configs`), each with a bare loop sending the same bodies: `plain`
(the case's system prompt and prompt), `templates` (a system prompt file and a user template
over each case's vars, and five tools on every case) and `stream` (plain, streamed: the bare
loop reads the same SSE replies line by line). parallax is run twice per measurement: as a
nightly runs it (the reports written), and with its reports off (`noreports`, this file's own
mode: the console script's `main` with the run's report step replaced by nothing), so the
call path's own cost and the reports' share are both printed.

Request phase: for parallax, from the first attempt's start to the last attempt's end as
recorded in raw.jsonl (started_at + elapsed_ms); for the bare loop, the same span timed inside
the loop. Ideal = cases x latency / concurrency (each side has its own `concurrency`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PY = sys.executable
PARALLAX = str(Path(PY).with_name("parallax"))
TICK = os.sysconf("SC_CLK_TCK")


# -- child processes ------------------------------------------------------------------------


@dataclass
class Child:
    """What the kernel says about one finished child process."""

    code: int
    wall: float
    cpu: float  # user + system seconds
    rss_mb: float  # peak resident set size
    stdout: str


def run_child(argv: list[str], *, cwd: Path | None = None, timeout: float = 900) -> Child:
    """Run a command to completion; rusage comes from wait4 on exactly that process."""
    (child,) = run_children([argv], cwd=cwd, timeout=timeout)
    return child


def run_children(
    argvs: list[list[str]],
    *,
    cwd: Path | None = None,
    timeout: float = 900,
    env: dict[str, str] | None = None,
) -> list[Child]:
    """Run commands at once, each to completion (the shards of `bench/shards.py`); each one's
    wall time ends when it exits, and its rusage comes from wait4 on exactly that process."""
    with contextlib.ExitStack() as stack:
        outs = [stack.enter_context(tempfile.TemporaryFile()) for _ in argvs]
        t0 = time.perf_counter()
        procs = [
            subprocess.Popen(argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env)
            for argv, out in zip(argvs, outs, strict=True)
        ]
        done: dict[int, tuple[int, float, Any]] = {}
        deadline = t0 + timeout
        while len(done) < len(procs):
            for i, proc in enumerate(procs):
                if i in done:
                    continue
                if time.perf_counter() > deadline:
                    proc.kill()
                    pid, status, usage = os.wait4(proc.pid, 0)
                else:
                    pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    done[i] = (status, time.perf_counter() - t0, usage)
            time.sleep(0.002)
        children = []
        for i, (proc, out) in enumerate(zip(procs, outs, strict=True)):
            status, wall, usage = done[i]
            proc.returncode = os.waitstatus_to_exitcode(status)
            out.seek(0)
            children.append(
                Child(
                    code=proc.returncode,
                    wall=wall,
                    cpu=usage.ru_utime + usage.ru_stime,
                    rss_mb=usage.ru_maxrss / 1024,
                    stdout=out.read().decode("utf-8", "replace"),
                )
            )
    return children


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) a running process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


class FakeServer:
    """bench/fakeserver.py in its own process; `cpu()` reads its CPU time so far."""

    def __init__(self, latency: float) -> None:
        self.proc = subprocess.Popen(
            [PY, str(HERE / "fakeserver.py"), "--port", "0", "--latency", str(latency)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        if len(line) != 2 or line[0] != "PORT":
            self.proc.kill()
            raise SystemExit(f"fake server did not start: {line}")
        self.port = int(line[1])
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def cpu(self) -> float:
        return proc_cpu(self.proc.pid)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# -- suites ---------------------------------------------------------------------------------


class Shape(StrEnum):
    """What every request of a configuration carries beyond the case's prompt."""

    PLAIN = "plain"  # the case's system prompt and prompt
    TEMPLATES = "templates"  # a system prompt file, a user template, five tools
    STREAM = "stream"  # plain, streamed as SSE


# The templates configuration's prompts, as Python format strings (what the bare loop sends)
# and as the Jinja2 templates parallax renders: `jinja` turns one into the other.
SYSTEM_TEXT = (
    "You are the order desk of ACME Supplies. You answer customers about their orders,\n"
    "shipments and returns, in one short sentence, and call a tool when the answer needs\n"
    "live data. The customer is {customer}, on the {tier} plan; never reveal another\n"
    "customer's orders, never invent an order number, and name SKUs exactly as written.\n"
)
USER_TEXT = "Customer {customer} ({tier}) writes:\n{prompt}\nAnswer with the SKU."
TIERS = ("free", "team", "enterprise")


def jinja(text: str) -> str:
    """A format string above as the Jinja2 template that renders the same text."""
    return (
        text.replace("{customer}", "{{ vars.customer }}")
        .replace("{tier}", "{{ vars.tier }}")
        .replace("{prompt}", "{{ prompt }}")
    )


def _tool(name: str, what: str, fields: dict[str, str]) -> dict[str, Any]:
    properties = {key: {"type": "string", "description": text} for key, text in fields.items()}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": what,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": sorted(fields),
                "additionalProperties": False,
            },
        },
    }


TOOLS = [
    _tool("lookup_order", "Look an order up by its number.", {"order_id": "The order number."}),
    _tool(
        "track_shipment",
        "Where a shipment is now, and when it arrives.",
        {"order_id": "The order number.", "carrier": "The carrier's name, if known."},
    ),
    _tool(
        "start_return",
        "Open a return for one line of an order.",
        {"order_id": "The order number.", "sku": "The SKU to return.", "reason": "Why."},
    ),
    _tool("check_stock", "How many of a SKU are in stock.", {"sku": "The SKU."}),
    _tool(
        "escalate",
        "Hand the conversation to a person.",
        {"summary": "What the customer needs, in a sentence.", "urgency": "low or high."},
    ),
]


def case_row(i: int, shape: Shape) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": f"case-{i:06d}",
        "stratum": ("easy", "medium", "stretch")[i % 3],
        "prompt": f"Name the SKU that ships for order {i}: SKU-{i % 97}.",
        "system": "Answer in one short sentence.",
        "expect": {"must_include": [f"SKU-{i % 97}"], "max_chars": 400},
    }
    if shape is Shape.TEMPLATES:
        row["vars"] = {"customer": f"customer-{i % 1009}", "tier": TIERS[i % 3]}
        row["tools"] = TOOLS
    return row


def bare_body(case: dict[str, Any], name: str, shape: Shape) -> dict[str, Any]:
    """The body parallax sends for this case and side, built by hand as a bare client would."""
    system, prompt = case["system"], case["prompt"]
    if shape is Shape.TEMPLATES:
        system = SYSTEM_TEXT.format(**case["vars"])
        prompt = USER_TEXT.format(prompt=prompt, **case["vars"])
    body: dict[str, Any] = {
        "model": f"{name}-model",
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": prompt}],
        "temperature": 0.0,
        "max_tokens": 512,
    }
    if shape is Shape.TEMPLATES:
        body["tools"] = case["tools"]
    if shape is Shape.STREAM:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def write_suite(root: Path, n: int, url: str, concurrency: int, shape: Shape) -> Path:
    """N cases the fake server's echo passes, and a config with both sides on the server."""
    root.mkdir(parents=True, exist_ok=True)
    with (root / "cases.jsonl").open("w") as handle:
        for i in range(n):
            handle.write(json.dumps(case_row(i, shape)) + "\n")
    extra = ""
    if shape is Shape.TEMPLATES:
        (root / "system.txt").write_text(jinja(SYSTEM_TEXT))
        extra = f'system_file = "system.txt"\nuser_template = {json.dumps(jinja(USER_TEXT))}\n'
    elif shape is Shape.STREAM:
        extra = "stream = true\n"
    endpoint = """
[endpoints.{name}]
kind = "openai-chat"
base_url = "{url}"
model = "{name}-model"
concurrency = {c}
timeout = {{ connect = 10.0, read = 30.0, write = 10.0, pool = 60.0 }}
deadline = 60.0
"""
    text = 'runs_dir = "runs"\nsnapshots_dir = "snapshots"\n'
    text += endpoint.format(name="ref", url=url, c=concurrency) + extra
    text += endpoint.format(name="cand", url=url, c=concurrency) + extra
    text += '\n[suites.bench]\nfixtures = "cases.jsonl"\nreference = "ref"\ncandidate = "cand"\n'
    (root / "parallax.toml").write_text(text)
    return root / "parallax.toml"


def check_bodies(run_dir: Path, cases: Path, shape: Shape) -> None:
    """The bare loop must send what parallax sent: the first rows' bodies, compared."""
    by_id = {}
    with cases.open() as handle:
        for line, _ in zip(handle, range(50), strict=False):
            row = json.loads(line)
            by_id[row["id"]] = row
    with (run_dir / "raw.jsonl").open() as handle:
        for line in handle:
            row = json.loads(line)
            case = by_id.get(row["case_id"])
            if case is None:
                continue
            name = "ref" if row["side"] == "reference" else "cand"
            if row["request"]["body"] != bare_body(case, name, shape):
                raise SystemExit(f"bench: the bare loop's body differs for {row['case_id']}")


def latest_run(root: Path) -> Path:
    runs = sorted((root / "runs" / "bench").glob("*-*"), key=lambda p: p.stat().st_mtime)
    return runs[-1]


def request_phase(run_dir: Path) -> tuple[float, int, int]:
    """(seconds from first attempt start to last attempt end, rows, rows not ok)."""
    first, last, rows, bad = float("inf"), float("-inf"), 0, 0
    with (run_dir / "raw.jsonl").open("rb") as handle:
        for line in handle:
            row = json.loads(line)
            start = datetime.fromisoformat(row["started_at"]).timestamp()
            first = min(first, start)
            last = max(last, start + row["elapsed_ms"] / 1000)
            rows += 1
            bad += row["transport"] != "ok"
    return last - first, rows, bad


# -- the bare loop (a child process of its own) -------------------------------------------


def bare_main(args: argparse.Namespace) -> int:
    """The floor: aiohttp, one session and `concurrency` workers per side, the same bodies,
    each reply's JSON parsed (a stream's events read line by line, each chunk's JSON parsed
    and its content joined, until `[DONE]`). Workers (not a task per call) keep its memory
    flat in N."""
    import asyncio

    import aiohttp

    shape = Shape(args.shape)
    cases = [json.loads(line) for line in Path(args.cases).read_text().splitlines()]

    async def side(name: str, spans: list[float]) -> int:
        connector = aiohttp.TCPConnector(limit=args.concurrency)
        ok = 0
        async with aiohttp.ClientSession(connector=connector) as session:
            url = args.url + "/chat/completions"
            todo = iter(cases)

            async def worker() -> None:
                for case in todo:
                    await one(case)

            async def streamed(resp: aiohttp.ClientResponse) -> bool:
                """Whether the stream said `[DONE]` after content; read to its end, so the
                connection goes back to the pool as parallax's does."""
                content: list[str] = []
                done = False
                async for line in resp.content:
                    if done or not line.startswith(b"data: "):
                        continue
                    data = line[6:].strip()
                    if data == b"[DONE]":
                        done = bool(content)
                        continue
                    for choice in json.loads(data)["choices"]:
                        content.append(choice["delta"].get("content") or "")
                return done

            async def one(case: dict[str, Any]) -> None:
                nonlocal ok
                body = bare_body(case, name, shape)
                t0 = time.time()
                async with session.post(url, data=json.dumps(body).encode()) as resp:
                    if shape is Shape.STREAM:
                        done, data = await streamed(resp), None
                    else:
                        data = await resp.read()
                spans[0] = min(spans[0], t0)
                spans[1] = time.time()
                if data is not None:
                    doc = json.loads(data)
                    done = isinstance(doc["choices"][0]["message"]["content"], str)
                ok += done  # after every await: `ok += await ...` would lose other workers' counts

            await asyncio.gather(*(worker() for _ in range(args.concurrency)))
        return ok

    async def both() -> tuple[int, float]:
        spans = [float("inf"), float("-inf")]  # first start, last end
        oks = await asyncio.gather(side("ref", spans), side("cand", spans))
        return sum(oks), max(0.0, spans[1] - spans[0])

    ok, phase = asyncio.run(both())
    print(json.dumps({"ok": ok, "phase": phase}))
    return 0


def noreports_main(args: argparse.Namespace) -> int:
    """`parallax run` as the console script runs it, but for the reports: the run's report
    step (`after_run`: report.html, report.md, JUnit, the history page) does nothing, so
    what is left is the call path and everything around it (config, fixtures, grading,
    ledgers, gate, summary)."""
    import runner.runs.run
    from runner.cli import main as parallax_main

    runner.runs.run.after_run = lambda *_args, **_kwargs: None
    return parallax_main(["run", "--config", args.config])


# -- measuring ------------------------------------------------------------------------------


def parallax_run(
    root: Path, config: Path, server: FakeServer, *, reports: bool = True
) -> dict[str, Any]:
    # a fresh runs/ each time: the report reads the suite's history, which would otherwise
    # grow with every repetition and make later runs of the median heavier than the first
    shutil.rmtree(root / "runs", ignore_errors=True)
    s0 = server.cpu()
    argv = (
        [PARALLAX, "run", "--config", str(config)]
        if reports
        else [PY, str(Path(__file__).resolve()), "noreports", "--config", str(config)]
    )
    child = run_child(argv, cwd=root)
    server_cpu = server.cpu() - s0
    if child.code not in (0, 1):  # 1 is a stratum alert (a 100% pass rate is a ceiling)
        sys.stderr.write(child.stdout[-3000:])
        raise SystemExit(f"parallax run exited {child.code}")
    run_dir = latest_run(root)
    phase, rows, bad = request_phase(run_dir)
    return {
        "wall": child.wall,
        "cpu": child.cpu,
        "rss_mb": child.rss_mb,
        "phase": phase,
        "rows": rows,
        "not_ok": bad,
        "server_cpu": server_cpu,
        "run_dir": str(run_dir),
    }


def bare_run(root: Path, n: int, c: int, server: FakeServer, shape: Shape) -> dict[str, Any]:
    s0 = server.cpu()
    child = run_child(
        [
            PY,
            str(Path(__file__).resolve()),
            "bare",
            "--cases",
            str(root / "cases.jsonl"),
            "--url",
            server.url,
            "--concurrency",
            str(c),
            "--shape",
            shape,
        ]
    )
    server_cpu = server.cpu() - s0
    if child.code != 0:
        sys.stderr.write(child.stdout[-3000:])
        raise SystemExit(f"bare loop exited {child.code}")
    result = json.loads(child.stdout.strip().splitlines()[-1])
    if result["ok"] != 2 * n:
        raise SystemExit(f"bare loop: {result['ok']} of {2 * n} calls ok")
    return {
        "wall": child.wall,
        "cpu": child.cpu,
        "rss_mb": child.rss_mb,
        "phase": result["phase"],
        "rows": 2 * n,
        "not_ok": 0,
        "server_cpu": server_cpu,
    }


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ("wall", "cpu", "rss_mb", "phase", "server_cpu")
    out = {k: statistics.median(r[k] for r in runs) for k in keys}
    out["rows"] = runs[0]["rows"]
    out["not_ok"] = max(r["not_ok"] for r in runs)
    return out


CLIENTS = ("parallax", "noreports", "bare")


def measure(
    work: Path, n: int, c: int, runs: int, latency: float, server: FakeServer, shape: Shape
) -> dict[str, Any]:
    """Median of `runs` parallax runs (reports on and off) and bare loops at (n, c) for one
    request shape, and the one-case baselines."""
    root = work / f"{shape}-n{n}-c{c}"
    base = work / f"{shape}-n1-c{c}"
    config = write_suite(root, n, server.url, c, shape)
    base_config = write_suite(base, 1, server.url, c, shape)
    big: dict[str, list[dict[str, Any]]] = {label: [] for label in CLIENTS}
    small: dict[str, list[dict[str, Any]]] = {label: [] for label in CLIENTS}
    for _ in range(runs):  # interleaved, so drifting machine load hits all alike
        # reports off first: every parallax run starts from an empty runs/, and the last
        # run with its reports is the one the replay figures read
        for label in ("noreports", "parallax", "bare"):
            if label == "bare":
                small[label].append(bare_run(base, 1, c, server, shape))
                big[label].append(bare_run(root, n, c, server, shape))
            else:
                reports = label == "parallax"
                small[label].append(parallax_run(base, base_config, server, reports=reports))
                big[label].append(parallax_run(root, config, server, reports=reports))
                if label == "parallax":
                    check_bodies(Path(big[label][-1]["run_dir"]), root / "cases.jsonl", shape)
    result: dict[str, Any] = {
        "config": str(shape),
        "n": n,
        "concurrency": c,
        "calls": 2 * n,
        "runs": runs,
    }
    ideal = n * latency / c
    for label in CLIENTS:
        m, m1 = median_of(big[label]), median_of(small[label])
        per_call = (m["cpu"] - m1["cpu"]) / (m["rows"] - m1["rows"]) * 1000
        result[label] = {
            **m,
            "startup_cpu": m1["cpu"],
            "cpu_ms_per_call": per_call,
            "ideal": ideal,
            "phase_over_ideal": m["phase"] / ideal,
            "server_cpu_ms_per_call": m["server_cpu"] / m["rows"] * 1000,
        }
    result["last_run_dir"] = big["parallax"][-1]["run_dir"]
    result["base_run_dir"] = small["parallax"][-1]["run_dir"]
    p, q, b = result["parallax"], result["noreports"], result["bare"]

    def ratio(top: dict[str, Any], key: str) -> float:  # at a tiny N a figure can be ~0
        return top[key] / b[key] if b[key] > 0 else float("nan")

    result["ratios"] = {
        "cpu_per_call": ratio(p, "cpu_ms_per_call"),
        "cpu_per_call_no_reports": ratio(q, "cpu_ms_per_call"),
        "phase": ratio(p, "phase"),
        "rss": ratio(p, "rss_mb"),
        "wall": ratio(p, "wall"),
    }
    # what the reports added per call: the run with them minus the run without
    result["reports_ms_per_call"] = p["cpu_ms_per_call"] - q["cpu_ms_per_call"]
    return result


def _replay_wall(run_dir: Path, runs: int) -> float:
    walls = []
    for _ in range(runs):
        child = run_child([PARALLAX, "replay", str(run_dir)], cwd=run_dir.parents[2])
        if child.code not in (0, 1):
            sys.stderr.write(child.stdout[-3000:])
            raise SystemExit(f"parallax replay exited {child.code}")
        walls.append(child.wall)
    return statistics.median(walls)


def replay_rate(run_dir: Path, base_dir: Path, runs: int) -> dict[str, Any]:
    """`parallax replay` of a finished run in rows (exchanges) regraded per second of wall
    time, as is and with start-up removed (minus the replay of a one-case run)."""
    rows = sum(1 for _ in (run_dir / "raw.jsonl").open("rb"))
    base_rows = sum(1 for _ in (base_dir / "raw.jsonl").open("rb"))
    wall = _replay_wall(run_dir, runs)
    base = _replay_wall(base_dir, runs)
    return {
        "rows": rows,
        "wall": wall,
        "startup_wall": base,
        "rows_per_s": rows / wall,
        "rows_per_s_startup_removed": (rows - base_rows) / max(1e-9, wall - base),
    }


def stages_main(args: argparse.Namespace) -> int:
    """The replay's two stages that grow with the ledger, timed in this process as `parallax
    replay` runs them (on every core, with a run's cycle-collector threshold): validating
    today's fixtures, and regrading raw.jsonl into outcome rows and folds. What the replay
    adds around them (start-up, the gate, disagreement.json, summary and reports) is the
    difference to its wall time."""
    import gc

    from runner.config import load_config
    from runner.gate import Folds
    from runner.regrade import heal
    from runner.suite import prepare_suite

    run_dir = Path(args.run_dir).resolve()
    root = run_dir.parents[2]
    gc.set_threshold(50_000, 20, 100)
    t0 = time.perf_counter()
    suite = prepare_suite(load_config(root / "parallax.toml"), "bench")
    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        shutil.copyfile(run_dir / "raw.jsonl", Path(tmp) / "raw.jsonl")
        t2 = time.perf_counter()
        rows = len(heal(Path(tmp), suite, Folds(suite.samples)))
        t3 = time.perf_counter()
    print(
        json.dumps(
            {"cases": len(suite.refs), "validate": t1 - t0, "rows": rows, "regrade": t3 - t2}
        )
    )
    return 0


def replay_stages(run_dir: Path, runs: int) -> dict[str, Any]:
    """Median seconds of the replay's validation and regrade stages, and their rates."""
    found = []
    for _ in range(runs):
        child = run_child([PY, __file__, "stages", str(run_dir)])
        if child.code != 0:
            sys.stderr.write(child.stdout[-3000:])
            raise SystemExit(f"bench stages exited {child.code}")
        found.append(json.loads(child.stdout.splitlines()[-1]))
    validate = statistics.median(f["validate"] for f in found)
    regrade = statistics.median(f["regrade"] for f in found)
    cases, rows = found[0]["cases"], found[0]["rows"]
    return {
        "cases": cases,
        "validate": validate,
        "regrade": regrade,
        "rows": rows,
        "regrade_rows_per_s": rows / regrade,
        "cases_per_s": cases / validate,
        "rows_per_s_both": rows / (validate + regrade),
    }


def help_time(runs: int) -> float:
    return statistics.median(run_child([PARALLAX, "--help"]).wall for _ in range(runs))


# -- report ---------------------------------------------------------------------------------


def versions() -> dict[str, str]:
    from importlib.metadata import version

    return {
        "python": platform.python_version(),
        "httpx": version("httpx"),
        "aiohttp": version("aiohttp"),
        "anyio": version("anyio"),
        "machine": f"{platform.machine()} {os.cpu_count()} cpu, {platform.platform()}",
        "load_at_start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def print_row(r: dict[str, Any]) -> None:
    print(
        f"\n{r['config']}: N={r['n']} c={r['concurrency']} calls={r['calls']} "
        f"(median of {r['runs']})"
    )
    head = (
        f"  {'client':<9}{'wall s':>8}{'phase s':>9}{'ideal s':>9}{'phase/ideal':>12}"
        f"{'cpu ms/call':>13}{'start-up s':>12}{'peak RSS MB':>13}{'server ms/call':>16}"
    )
    print(head)
    for label in CLIENTS:
        m = r[label]
        print(
            f"  {label:<9}{m['wall']:>8.2f}{m['phase']:>9.2f}{m['ideal']:>9.2f}"
            f"{m['phase_over_ideal']:>11.2f}x{m['cpu_ms_per_call']:>13.3f}"
            f"{m['startup_cpu']:>12.2f}{m['rss_mb']:>13.1f}{m['server_cpu_ms_per_call']:>16.3f}"
        )
    q = r["ratios"]
    print(
        f"  parallax / bare: cpu per call {q['cpu_per_call']:.2f}x "
        f"({q['cpu_per_call_no_reports']:.2f}x with the reports off; the reports "
        f"{r['reports_ms_per_call']:.3f} ms/call), phase {q['phase']:.2f}x, "
        f"wall {q['wall']:.2f}x, peak RSS {q['rss']:.2f}x"
    )
    if r["parallax"]["not_ok"]:
        print(f"  WARNING: {r['parallax']['not_ok']} parallax rows were not transport ok")


def byte_compile() -> None:
    """Measure parallax as installed: pip leaves a package byte-compiled, but an editable
    install under PYTHONDONTWRITEBYTECODE (set on CI machines and in the image's build) would
    compile every module again on every start, some 0.05 s of each start-up measured."""
    import compileall

    compileall.compile_dir(ROOT / "runner", quiet=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="parallax benchmark (see bench/README.md)")
    sub = parser.add_subparsers(dest="mode")
    bare = sub.add_parser("bare", help="internal: the bare aiohttp loop")
    bare.add_argument("--cases", required=True)
    bare.add_argument("--url", required=True)
    bare.add_argument("--concurrency", type=int, required=True)
    bare.add_argument("--shape", choices=list(Shape), default=Shape.PLAIN)
    noreports = sub.add_parser("noreports", help="internal: parallax run, its reports off")
    noreports.add_argument("--config", required=True)
    stages = sub.add_parser("stages", help="internal: time a replay's validation and regrade")
    stages.add_argument("run_dir")
    parser.add_argument("--n", type=int, default=2000, help="cases (calls = 2 x N)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (median)")
    parser.add_argument("--latency", type=float, default=0.05, help="server seconds per reply")
    parser.add_argument(
        "--configs",
        nargs="+",
        choices=list(Shape),
        default=list(Shape),
        help="request shapes to measure (the first also gets --memory-n and the replay)",
    )
    parser.add_argument(
        "--memory-n", type=int, default=0, help="also run N=this at c=first, first config"
    )
    parser.add_argument("--no-replay", action="store_true", help="skip the replay figures")
    parser.add_argument("--json", type=Path, help="write all figures here as JSON")
    parser.add_argument("--workdir", type=Path, help="keep suites and runs here")
    args = parser.parse_args(argv)
    if args.mode == "bare":
        return bare_main(args)
    if args.mode == "stages":
        return stages_main(args)
    if args.mode == "noreports":
        return noreports_main(args)

    byte_compile()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="parallax-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    info = versions()
    print("parallax benchmark:", json.dumps(info))
    server = FakeServer(args.latency)
    results: dict[str, Any] = {"versions": info, "latency": args.latency, "rows": []}
    try:
        first = Shape(args.configs[0])
        for shape in map(Shape, args.configs):
            for c in args.concurrency:
                row = measure(work, args.n, c, args.runs, args.latency, server, shape)
                results["rows"].append(row)
                print_row(row)
        if args.memory_n:
            c = args.concurrency[0]
            row = measure(work, args.memory_n, c, args.runs, args.latency, server, first)
            results["rows"].append(row)
            print_row(row)
            ratio = row["parallax"]["rss_mb"] / results["rows"][0]["parallax"]["rss_mb"]
            results["rss_ratio"] = ratio
            print(f"  peak RSS N={args.memory_n} / N={args.n}: {ratio:.2f}x")
        if not args.no_replay:
            replay_figures(results, first, args.runs)
        results["help_s"] = help_time(max(3, args.runs))
        print(f"parallax --help: {results['help_s']:.3f} s wall (median)")
    finally:
        server.stop()
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        for row in results["rows"]:
            row.pop("last_run_dir", None)
            row.pop("base_run_dir", None)
        args.json.write_text(json.dumps(results, indent=2, default=str) + "\n")
    return 0


def replay_figures(results: dict[str, Any], shape: Shape, runs: int) -> None:
    """The replay of the largest run of `shape`, and its stages timed on their own."""
    biggest = max((r for r in results["rows"] if r["config"] == shape), key=lambda r: r["n"])
    run_dir, base_dir = Path(biggest["last_run_dir"]), Path(biggest["base_run_dir"])
    replay = results["replay"] = replay_rate(run_dir, base_dir, runs)
    print(
        f"\nreplay ({shape}): {replay['rows']} rows in {replay['wall']:.2f} s wall "
        f"= {replay['rows_per_s']:.0f} rows/s; start-up ({replay['startup_wall']:.2f} s) "
        f"removed: {replay['rows_per_s_startup_removed']:.0f} rows/s"
    )
    stage = results["replay_stages"] = replay_stages(run_dir, runs)
    print(
        f"  its stages: validating {stage['cases']} fixtures {stage['validate']:.2f} s "
        f"({stage['cases_per_s']:.0f} cases/s), regrading {stage['rows']} rows "
        f"{stage['regrade']:.2f} s ({stage['regrade_rows_per_s']:.0f} rows/s), both "
        f"{stage['rows_per_s_both']:.0f} rows/s; the rest (start-up, gate, reports) "
        f"{replay['wall'] - stage['validate'] - stage['regrade']:.2f} s"
    )


if __name__ == "__main__":
    raise SystemExit(main())
