"""Benchmark `parallax run` against a local fake OpenAI server, next to a bare aiohttp loop.

    .venv/bin/python bench/run.py                          # N=2,000 at c=64 and c=256, 3 runs
    .venv/bin/python bench/run.py --n 50 --runs 1 --quick  # the CI smoke (asserts no timing)
    .venv/bin/python bench/run.py --memory-n 20000         # plus the N=20,000 memory run

Every measured client is a child process: `parallax run` through the console script, and this
file's own `bare` mode (an aiohttp loop with one session per side, making the same calls with
the same bodies). CPU time and peak RSS come from the kernel's rusage of that child (wait4), so
they include everything the process did; "start-up removed" subtracts the same client's CPU on
a one-case suite, so the per-call figure is (cpu(N) - cpu(1)) / (calls(N) - calls(1)).

Request phase: for parallax, from the first attempt's start to the last attempt's end as
recorded in raw.jsonl (started_at + elapsed_ms); for the bare loop, the same span timed inside
the loop. Ideal = cases x latency / concurrency (each side has its own `concurrency`).
"""

from __future__ import annotations

import argparse
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
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        deadline = t0 + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.002)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
    return Child(
        code=proc.returncode,
        wall=wall,
        cpu=usage.ru_utime + usage.ru_stime,
        rss_mb=usage.ru_maxrss / 1024,
        stdout=text,
    )


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


def write_suite(root: Path, n: int, url: str, concurrency: int) -> Path:
    """N cases the fake server's echo passes, and a config with both sides on the server."""
    root.mkdir(parents=True, exist_ok=True)
    strata = ("easy", "medium", "stretch")
    with (root / "cases.jsonl").open("w") as handle:
        for i in range(n):
            row = {
                "id": f"case-{i:06d}",
                "stratum": strata[i % 3],
                "prompt": f"Name the SKU that ships for order {i}: SKU-{i % 97}.",
                "system": "Answer in one short sentence.",
                "expect": {"must_include": [f"SKU-{i % 97}"], "max_chars": 400},
            }
            handle.write(json.dumps(row) + "\n")
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
    text += endpoint.format(name="ref", url=url, c=concurrency)
    text += endpoint.format(name="cand", url=url, c=concurrency)
    text += '\n[suites.bench]\nfixtures = "cases.jsonl"\nreference = "ref"\ncandidate = "cand"\n'
    (root / "parallax.toml").write_text(text)
    return root / "parallax.toml"


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
    each reply's JSON parsed. Workers (not a task per call) keep its memory flat in N."""
    import asyncio

    import aiohttp

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

            async def one(case: dict[str, Any]) -> None:
                nonlocal ok
                body = {
                    "model": f"{name}-model",
                    "messages": [
                        {"role": "system", "content": case["system"]},
                        {"role": "user", "content": case["prompt"]},
                    ],
                    "temperature": 0.0,
                    "max_tokens": 512,
                }
                t0 = time.time()
                async with session.post(url, data=json.dumps(body).encode()) as resp:
                    data = await resp.read()
                spans[0] = min(spans[0], t0)
                spans[1] = time.time()
                doc = json.loads(data)
                ok += isinstance(doc["choices"][0]["message"]["content"], str)

            await asyncio.gather(*(worker() for _ in range(args.concurrency)))
        return ok

    async def both() -> tuple[int, float]:
        spans = [float("inf"), float("-inf")]  # first start, last end
        oks = await asyncio.gather(side("ref", spans), side("cand", spans))
        return sum(oks), max(0.0, spans[1] - spans[0])

    ok, phase = asyncio.run(both())
    print(json.dumps({"ok": ok, "phase": phase}))
    return 0


# -- measuring ------------------------------------------------------------------------------


def parallax_run(root: Path, config: Path, server: FakeServer) -> dict[str, Any]:
    # a fresh runs/ each time: the report reads the suite's history, which would otherwise
    # grow with every repetition and make later runs of the median heavier than the first
    shutil.rmtree(root / "runs", ignore_errors=True)
    s0 = server.cpu()
    child = run_child([PARALLAX, "run", "--config", str(config)], cwd=root)
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


def bare_run(root: Path, n: int, c: int, server: FakeServer) -> dict[str, Any]:
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


def measure(
    work: Path, n: int, c: int, runs: int, latency: float, server: FakeServer
) -> dict[str, Any]:
    """Median of `runs` parallax runs and bare loops at (n, c), and the one-case baselines."""
    root = work / f"n{n}-c{c}"
    base = work / f"n1-c{c}"
    config = write_suite(root, n, server.url, c)
    base_config = write_suite(base, 1, server.url, c)
    px, bare, px1, bare1 = [], [], [], []
    for _ in range(runs):  # interleaved, so drifting machine load hits both alike
        px1.append(parallax_run(base, base_config, server))
        px.append(parallax_run(root, config, server))
        bare1.append(bare_run(base, 1, c, server))
        bare.append(bare_run(root, n, c, server))
    result: dict[str, Any] = {"n": n, "concurrency": c, "calls": 2 * n, "runs": runs}
    ideal = n * latency / c
    for label, big, small in (("parallax", px, px1), ("bare", bare, bare1)):
        m, m1 = median_of(big), median_of(small)
        per_call = (m["cpu"] - m1["cpu"]) / (m["rows"] - m1["rows"]) * 1000
        result[label] = {
            **m,
            "startup_cpu": m1["cpu"],
            "cpu_ms_per_call": per_call,
            "ideal": ideal,
            "phase_over_ideal": m["phase"] / ideal,
            "server_cpu_ms_per_call": m["server_cpu"] / m["rows"] * 1000,
        }
    result["last_run_dir"] = px[-1]["run_dir"]
    result["base_run_dir"] = px1[-1]["run_dir"]
    p, b = result["parallax"], result["bare"]

    def ratio(key: str) -> float:  # at a tiny N a start-up-removed figure can be ~0
        return p[key] / b[key] if b[key] > 0 else float("nan")

    result["ratios"] = {
        "cpu_per_call": ratio("cpu_ms_per_call"),
        "phase": ratio("phase"),
        "rss": ratio("rss_mb"),
        "wall": ratio("wall"),
    }
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
    print(f"\nN={r['n']} c={r['concurrency']} calls={r['calls']} (median of {r['runs']})")
    head = (
        f"  {'client':<9}{'wall s':>8}{'phase s':>9}{'ideal s':>9}{'phase/ideal':>12}"
        f"{'cpu ms/call':>13}{'start-up s':>12}{'peak RSS MB':>13}{'server ms/call':>16}"
    )
    print(head)
    for label in ("parallax", "bare"):
        m = r[label]
        print(
            f"  {label:<9}{m['wall']:>8.2f}{m['phase']:>9.2f}{m['ideal']:>9.2f}"
            f"{m['phase_over_ideal']:>11.2f}x{m['cpu_ms_per_call']:>13.3f}"
            f"{m['startup_cpu']:>12.2f}{m['rss_mb']:>13.1f}{m['server_cpu_ms_per_call']:>16.3f}"
        )
    q = r["ratios"]
    print(
        f"  parallax / bare: cpu per call {q['cpu_per_call']:.2f}x, phase {q['phase']:.2f}x, "
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
    stages = sub.add_parser("stages", help="internal: time a replay's validation and regrade")
    stages.add_argument("run_dir")
    parser.add_argument("--n", type=int, default=2000, help="cases (calls = 2 x N)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (median)")
    parser.add_argument("--latency", type=float, default=0.05, help="server seconds per reply")
    parser.add_argument("--memory-n", type=int, default=0, help="also run N=this at c=first")
    parser.add_argument("--json", type=Path, help="write all figures here as JSON")
    parser.add_argument("--workdir", type=Path, help="keep suites and runs here")
    args = parser.parse_args(argv)
    if args.mode == "bare":
        return bare_main(args)
    if args.mode == "stages":
        return stages_main(args)

    byte_compile()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="parallax-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    info = versions()
    print("parallax benchmark:", json.dumps(info))
    server = FakeServer(args.latency)
    results: dict[str, Any] = {"versions": info, "latency": args.latency, "rows": []}
    try:
        for c in args.concurrency:
            row = measure(work, args.n, c, args.runs, args.latency, server)
            results["rows"].append(row)
            print_row(row)
        if args.memory_n:
            c = args.concurrency[0]
            row = measure(work, args.memory_n, c, 1, args.latency, server)
            results["rows"].append(row)
            print_row(row)
            ratio = row["parallax"]["rss_mb"] / results["rows"][0]["parallax"]["rss_mb"]
            results["rss_ratio"] = ratio
            print(f"  peak RSS N={args.memory_n} / N={args.n}: {ratio:.2f}x")
        biggest = max(results["rows"], key=lambda r: r["n"])
        replay = replay_rate(
            Path(biggest["last_run_dir"]), Path(biggest["base_run_dir"]), args.runs
        )
        results["replay"] = replay
        print(
            f"\nreplay: {replay['rows']} rows in {replay['wall']:.2f} s wall "
            f"= {replay['rows_per_s']:.0f} rows/s; start-up ({replay['startup_wall']:.2f} s) "
            f"removed: {replay['rows_per_s_startup_removed']:.0f} rows/s"
        )
        stage = replay_stages(Path(biggest["last_run_dir"]), args.runs)
        results["replay_stages"] = stage
        print(
            f"  its stages: validating {stage['cases']} fixtures {stage['validate']:.2f} s "
            f"({stage['cases_per_s']:.0f} cases/s), regrading {stage['rows']} rows "
            f"{stage['regrade']:.2f} s ({stage['regrade_rows_per_s']:.0f} rows/s), both "
            f"{stage['rows_per_s_both']:.0f} rows/s; the rest (start-up, gate, reports) "
            f"{replay['wall'] - stage['validate'] - stage['regrade']:.2f} s"
        )
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


if __name__ == "__main__":
    raise SystemExit(main())
