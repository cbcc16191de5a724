"""Shards and their merge: `run --shard I/N` calls the cases a stable hash of their id gives
shard I, and `parallax merge` makes of the N shard dirs the run one unsharded run would have
made over the same exchanges: its outcomes, disagreement map, summary, exit code, alerts and
reports. Runs go through the command line against the loopback fault server
(tests/faultserver.py), whose replies are scripted per prompt, so every run sees the same ones.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from faultserver import FaultServer
from relkit import PARALLAX, RUN_TIMEOUT, run_parallax

from runner.arguments import SHARD_LIMITS
from runner.config import load_config
from runner.errors import UsageError
from runner.history import read_run
from runner.runs.shard import Limits, Shard, parse_shard, shard_config, shard_of

# a test here runs a dozen parallax processes one after another: bounded as a hung run is, not
# by the 60 s a test gets by default, which a loaded machine's start-ups can pass
pytestmark = pytest.mark.timeout(RUN_TIMEOUT)

N = 4
CASES = [
    {
        "id": f"case-{i:02d}",
        "stratum": ("easy", "medium", "stretch")[i % 3],
        "prompt": f"Say ok {i}.",
        "expect": {"must_include": ["ok"]},
    }
    for i in range(24)
]
# after the snapshot is promoted: what moves, case by case, on the candidate's prompt
CANDIDATE_FAULTS = {"case-05": "status:500", "case-06": "garbage"}
CANDIDATE_REPLIES = {"case-03": "nope", "case-04": "nope", "case-10": "nope"}
CANDIDATE_MODELS = {"case-08": "cand-2"}
LEDGERS = ("raw.jsonl", "outcomes.jsonl")
# what differs between two runs of the same replies: when, how long each call took, and the
# id the server numbers its replies with
TIMING = re.compile(r"(_ms|_at|latency.*|ttft.*|run_id|run_dir|timestamp|response_id)$")


def _config(server: FaultServer, limits: str = "") -> str:
    endpoints = "".join(
        f'[endpoints.{name}]\nkind = "openai-chat"\nbase_url = "{server.url("ok", name)}"\n'
        f'model = "{name}-1"\nretry = {{ attempts = 1 }}\nconcurrency = 8\nrpm = 6000\n{extra}'
        for name, extra in (("ref", ""), ("cand", 'user_template = "{{ prompt }} v2"\n'))
    )
    return (
        'runs_dir = "runs"\nsnapshots_dir = "snapshots"\n'
        f"[thresholds]\nretire_after = 2\n{limits}{endpoints}"
        '[suites.s]\nfixtures = "cases.jsonl"\nreference = "ref"\ncandidate = "cand"\n'
    )


def _project(root: Path, server: FaultServer, cases: Iterable[dict[str, Any]]) -> Path:
    (root / "snapshots").mkdir(parents=True)
    (root / "parallax.toml").write_text(_config(server), "utf-8")
    _fixtures(root, cases)
    return root


def _fixtures(root: Path, cases: Iterable[dict[str, Any]]) -> None:
    text = "".join(json.dumps(c) + "\n" for c in cases)
    (root / "cases.jsonl").write_text(text, "utf-8")


def _parallax(root: Path, *args: str | Path) -> tuple[int, list[dict[str, Any]]]:
    done = run_parallax(*args, cwd=root)
    assert done.returncode in (0, 1, 2, 3) or not done.stderr.startswith("Traceback"), done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done.returncode, events


def _run_dirs(root: Path) -> list[Path]:
    suite = root / "runs" / "s"
    return sorted(p for p in suite.iterdir() if p.is_dir()) if suite.is_dir() else []


def _new_dir(root: Path, before: list[Path]) -> Path:
    (made,) = set(_run_dirs(root)) - set(before)
    return made


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


def _untimed(value: Any) -> Any:
    """A value with the fields that say when and how long left out (they differ run to run)."""
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if not TIMING.search(k)}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


def _alerts(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [_untimed(e) for e in events if e["event"].startswith("alert.")]


def _report(run_dir: Path) -> str:
    """report.md with what names the run, says when, or times a call (a column in ms) taken
    out."""
    text = (run_dir / "report.md").read_text("utf-8").replace(run_dir.name, "RUN")
    text = re.sub(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d)?(\+00:00|Z| UTC)?", "WHEN", text)
    lines, timed = [], None
    for line in text.splitlines():
        cells = line.split(" | ")
        if " ms |" in line:
            timed = [i for i, cell in enumerate(cells) if cell.endswith("ms")]
        elif timed is not None and line.startswith("| ") and len(cells) > max(timed):
            cells = [("MS" if i in timed else c) for i, c in enumerate(cells)]
        elif not line.startswith("|"):
            timed = None
        lines.append(" | ".join(cells))
    return "\n".join(lines)


def _two_projects(tmp_path: Path, server: FaultServer) -> tuple[Path, Path]:
    """Two copies of one project with the same accepted snapshot: one runs whole, one as
    shards. The snapshot was promoted from a run whose candidate answered like the
    reference; since then a case was retired and one added."""
    whole = _project(tmp_path / "whole", server, CASES[:-1])
    code, _ = _parallax(whole, "run", "--config", "parallax.toml")
    assert code in (0, 1), code
    (first,) = _run_dirs(whole)
    done = run_parallax("promote", first, cwd=whole)
    assert done.returncode == 0, done.stderr
    shutil.rmtree(whole / "runs")
    today = [c for c in CASES if c["id"] != "case-00"]  # case-00 retired, case-23 new
    _fixtures(whole, today)
    sharded = tmp_path / "sharded"
    shutil.copytree(whole, sharded)
    return whole, sharded


def _run_shards(root: Path, *extra: str) -> list[Path]:
    dirs = []
    for index in range(N):
        before = _run_dirs(root)
        code, _ = _parallax(root, "run", "--config", "parallax.toml", "--shard", f"{index}/{N}")
        assert code in (0, 1, 2, 3), code
        dirs.append(_new_dir(root, before))
    return dirs


def test_four_shards_merged_equal_one_unsharded_run(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """The issue's proof: the same suite run whole and as 4 shards against the same server;
    the merge's outcomes (in fixture order), disagreement.json, summary.json, exit code,
    alerts and report.md are the unsharded run's, but for when and how long."""
    whole, sharded = _two_projects(tmp_path, fault_server)
    _script(fault_server)
    code_whole, events_whole = _parallax(whole, "run", "--config", "parallax.toml")
    (whole_dir,) = _run_dirs(whole)
    shards = _run_shards(sharded)
    for index, shard_dir in enumerate(shards):
        manifest = json.loads((shard_dir / "manifest.json").read_text())
        assert manifest["shard"] == {"index": index, "count": N, "limits": "divided"}
        assert manifest["snapshot"]["digest"] and manifest["config"]["digest"]
        ids = {r["case_id"] for r in _rows(shard_dir / "outcomes.jsonl")}
        assert ids and all(shard_of(i, N) == index for i in ids)
    code_merged, events_merged = _parallax(sharded, "merge", *shards)
    merged = _new_dir(sharded, shards)
    assert code_whole == code_merged == 3  # review and incomplete: every kind of case is there

    order = [c["id"] for c in CASES if c["id"] != "case-00"]
    merged_rows = _rows(merged / "outcomes.jsonl")
    assert [r["case_id"] for r in merged_rows] == [i for i in order for _ in ("ref", "cand")]
    assert [r["side"] for r in merged_rows[:2]] == ["reference", "candidate"]
    key = lambda r: (r["case_id"], r["side"], r["sample"])  # noqa: E731
    whole_rows = sorted(_rows(whole_dir / "outcomes.jsonl"), key=key)
    assert _untimed(whole_rows) == _untimed(sorted(merged_rows, key=key))
    assert json.loads((whole_dir / "disagreement.json").read_text()) == json.loads(
        (merged / "disagreement.json").read_text()
    )
    summary_whole = json.loads((whole_dir / "summary.json").read_text())
    summary_merged = json.loads((merged / "summary.json").read_text())
    assert summary_whole["gate_counts"]["retired_case"] == 1
    assert summary_whole["gate_counts"]["disagreement_changed"] >= 3
    assert _untimed(summary_whole) == _untimed(summary_merged)
    assert _alerts(events_whole) and _alerts(events_whole) == _alerts(events_merged)
    assert _report(whole_dir) == _report(merged)
    finished = [e for e in events_merged if e["event"] == "run.finished"]
    assert _untimed(finished) == _untimed([e for e in events_whole if e["event"] == "run.finished"])

    # replay, report and promote read the merged run as one
    before = _run_dirs(sharded)
    done = run_parallax("replay", merged, cwd=sharded)
    assert done.returncode == 3, done.stderr
    replayed = _new_dir(sharded, before)
    assert (replayed / "outcomes.jsonl").read_bytes() == (merged / "outcomes.jsonl").read_bytes()
    assert json.loads((replayed / "disagreement.json").read_text()) == json.loads(
        (merged / "disagreement.json").read_text()
    )
    (merged / "report.md").unlink()
    done = run_parallax("report", merged, cwd=sharded)
    assert done.returncode == 3, done.stderr
    assert (merged / "report.md").is_file()
    done = run_parallax("promote", "--allow-partial", merged, cwd=sharded)
    assert done.returncode == 0, done.stderr
    snapshot = json.loads((sharded / "snapshots" / "s.json").read_text())
    assert "case-23" in json.dumps(snapshot) and "case-00" not in json.dumps(snapshot)


def _script(server: FaultServer) -> None:
    for case in CASES:
        prompt = f"{case['prompt']} v2"
        cid = case["id"]
        if cid in CANDIDATE_FAULTS:
            server.prompt_modes[prompt] = CANDIDATE_FAULTS[cid]
        if cid in CANDIDATE_REPLIES:
            server.replies[prompt] = CANDIDATE_REPLIES[cid]
        if cid in CANDIDATE_MODELS:
            server.prompt_models[("cand-1", prompt)] = CANDIDATE_MODELS[cid]


def _pack(run_dir: Path) -> None:
    """What retention leaves of a finished run's ledgers: `<name>.gz` only."""
    for name in LEDGERS:
        plain = run_dir / name
        (run_dir / f"{name}.gz").write_bytes(gzip.compress(plain.read_bytes()))
        plain.unlink()


def test_a_merge_refuses_what_does_not_add_up_to_one_run_and_reads_compressed_shards(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """A shard missing, given twice, of another config or snapshot, unfinished, or a run that
    is no shard: one line, exit 64, no run dir made. Compressed shards merge as plain ones."""
    root = _project(tmp_path / "p", fault_server, CASES)
    shards = _run_shards(root)
    before = _run_dirs(root)

    def refused(*dirs: Path, says: str, flags: tuple[str, ...] = ()) -> None:
        done = run_parallax("merge", *flags, *dirs, cwd=root)
        assert done.returncode == 64, done.stderr
        assert says in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "Traceback" not in done.stderr
        assert _run_dirs(root) == before

    refused(*shards[:3], says="shard 3 of 4 missing")
    refused(*shards, shards[1], says="shard 1/4 given twice")
    code, _ = _parallax(root, "run", "--config", "parallax.toml")
    whole = _new_dir(root, before)
    before = _run_dirs(root)
    refused(*shards, whole, says="is no shard")

    manifest_path = shards[2] / "manifest.json"
    original = manifest_path.read_text()
    manifest = json.loads(original)
    manifest["snapshot"]["digest"] = "0" * 16
    manifest_path.write_text(json.dumps(manifest))
    refused(*shards, says="is of another snapshot")
    manifest["snapshot"] = json.loads(original)["snapshot"]
    manifest["config"]["digest"] = "0" * 16
    manifest_path.write_text(json.dumps(manifest))
    refused(*shards, says="is of another config")
    manifest["config"] = json.loads(original)["config"]
    manifest["finished_at"] = None
    manifest_path.write_text(json.dumps(manifest))
    refused(*shards, says="shard 2/4")
    manifest_path.write_text(original)

    (root / "snapshots" / "s.json").write_text(
        json.dumps({"version": 1, "suite": "s", "cases": {}})
    )
    refused(*shards, says="the snapshot changed since the shards ran")
    (root / "snapshots" / "s.json").unlink()

    for shard_dir in shards:
        _pack(shard_dir)
    code, events = _parallax(root, "merge", *shards)
    merged = _new_dir(root, before)
    summary = json.loads((merged / "summary.json").read_text())
    assert code == summary["exit_code"]
    assert summary["cases"] == len(CASES) and summary["gate_counts"]["new_case"] == len(CASES)
    assert [e["event"] for e in events][-1] == "run.finished"
    # history lists a shard but never counts it as a night: the merged run is the night
    assert [read_run(d)[0].counts_as_night for d in (*shards, merged)] == [False] * N + [True]


def test_a_killed_shard_merges_with_allow_partial_and_resumes_as_its_shard(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """An unfinished shard (its last rows never written) merges only with --allow-partial,
    the calls it never made unscored; `run --resume` of it calls only its own cases."""
    root = _project(tmp_path / "p", fault_server, CASES)
    shards = _run_shards(root)
    cut = shards[1]
    rows = _rows(cut / "outcomes.jsonl")
    ids = sorted({r["case_id"] for r in rows})
    for name in LEDGERS:  # as a kill leaves it: the last case's rows never written, and the
        # first case's exchanges written but not their outcome rows
        kept = [
            r
            for r in _rows(cut / name)
            if r["case_id"] != ids[-1] and (name == "raw.jsonl" or r["case_id"] != ids[0])
        ]
        (cut / name).write_text("".join(json.dumps(r) + "\n" for r in kept))
    for name in ("summary.json", "disagreement.json"):
        (cut / name).unlink()
    manifest = json.loads((cut / "manifest.json").read_text())
    (cut / "manifest.json").write_text(json.dumps(manifest | {"finished_at": None}))
    before = _run_dirs(root)
    code, _ = _parallax(root, "merge", "--allow-partial", *shards)
    assert code & 2
    partial = _new_dir(root, before)
    summary = json.loads((partial / "summary.json").read_text())
    assert ids[-1] in summary["incomplete"]
    order = [c["id"] for c in CASES]
    ids_in = [r["case_id"] for r in _rows(partial / "outcomes.jsonl")]
    assert ids_in == sorted(ids_in, key=order.index)  # the defined order, killed shard or not
    merged = json.loads((partial / "manifest.json").read_text())["merged"]
    assert [s["finished"] for s in merged["shards"]] == [True, False, True, True]

    calls = len(fault_server.requests)
    code, _ = _parallax(root, "run", "--resume", cut)
    assert code in (0, 1), code
    assert len(fault_server.requests) - calls == 2  # the one case it lacked, on both sides
    assert json.loads((cut / "summary.json").read_text())["shard"]["index"] == 1
    done = run_parallax("run", "--resume", cut, "--shard", "2/4", cwd=root)
    assert done.returncode == 64 and "is a run of shard 1/4, not --shard 2/4" in done.stderr
    calls = len(fault_server.requests)
    done = run_parallax(
        "run", "--config", "parallax.toml", "--shard", "0/4", "--case", "*", cwd=root
    )
    assert done.returncode == 64 and "use one or the other" in done.stderr, done.stderr
    assert len(fault_server.requests) == calls  # a shard of a partial run is refused, uncalled
    before = _run_dirs(root)
    code, _ = _parallax(root, "replay", shards[0])  # a shard replays as that shard
    replayed = _new_dir(root, before)
    assert json.loads((replayed / "summary.json").read_text())["shard"]["index"] == 0
    assert (replayed / "outcomes.jsonl").read_bytes() == (shards[0] / "outcomes.jsonl").read_bytes()


def test_shard_assignment_is_a_stable_hash_of_the_case_id() -> None:
    """Every case falls in one shard; the same id in the same shard whatever else the suite
    holds; a shard is read from I/N or from an Indexed Job's environment."""
    ids = [f"case-{i}" for i in range(2000)]
    shards = [shard_of(i, N) for i in ids]
    assert set(shards) == set(range(N))
    assert all(abs(shards.count(s) - 500) < 100 for s in range(N))
    # fixed by sha256 of the id, not by Python's per-process hash or the case's place
    assert [shard_of(i, 4) for i in ("a", "case-1", "é")] == [
        int.from_bytes(__import__("hashlib").sha256(i.encode()).digest()[:8], "big") % 4
        for i in ("a", "case-1", "é")
    ]
    assert parse_shard("2/4") == Shard(2, 4)
    env = {"JOB_COMPLETION_INDEX": "3", "PARALLAX_SHARDS": "4"}
    assert parse_shard("env", Limits.WHOLE, env) == Shard(3, 4, Limits.WHOLE)
    for bad, says in (
        ("4/4", "I must be below N"),
        ("1", "expected I/N"),
        ("-1/4", "whole number"),
        ("0/0", "N must be from 1"),
    ):
        with pytest.raises(UsageError, match=says):
            parse_shard(bad)
    with pytest.raises(UsageError, match="PARALLAX_SHARDS is not set"):
        parse_shard("env", environ={"JOB_COMPLETION_INDEX": "0"})
    assert tuple(m.value for m in Limits) == SHARD_LIMITS


def test_a_shard_takes_its_share_of_concurrency_rpm_and_budget_unless_told_whole(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """Divided by N by default (the quota and the money are shared), the whole with `whole`;
    the config digest stays the file's."""
    root = _project(tmp_path / "p", fault_server, CASES)
    text = (root / "parallax.toml").read_text()
    price = "max_tokens = 64\nprice = { input_per_mtok = 1, output_per_mtok = 1 }\n"
    for name in ("ref", "cand"):
        text = text.replace(f"[endpoints.{name}]\n", f"[endpoints.{name}]\n{price}")
    (root / "parallax.toml").write_text(
        text.replace("[thresholds]", "budget_usd = 2.0\n[thresholds]")
    )
    loaded = load_config(root / "parallax.toml")
    divided = shard_config(loaded, "s", Shard(1, 4))
    assert divided.digest == loaded.digest
    assert divided.endpoint("ref").concurrency == 2 and divided.endpoint("ref").rpm == 1500
    assert divided.budget_usd("s") == 0.5
    assert loaded.endpoint("ref").concurrency == 8 and loaded.budget_usd("s") == 2.0
    whole = shard_config(loaded, "s", Shard(1, 4, Limits.WHOLE))
    assert whole.endpoint("ref").concurrency == 8 and whole.budget_usd("s") == 2.0
    assert shard_config(loaded, "s", Shard(0, 16)).endpoint("cand").concurrency == 1
    _parallax(root, "run", "--config", "parallax.toml", "--shard", "0/4")
    (shard_dir,) = _run_dirs(root)
    assert json.loads((shard_dir / "summary.json").read_text())["budget"]["limit_usd"] == 0.5
    assert 0 < fault_server.max_inflight <= 4  # 2 a side: never 8


def test_shards_run_side_by_side_from_the_environment_as_the_indexed_job_runs_them(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """deploy/indexed-job.yaml's way: N processes at once, each `run --shard env` with its
    JOB_COMPLETION_INDEX, writing to one night's runs dir; then `merge` of that night's suite
    folder writes the suite's run into the main runs dir."""
    root = _project(tmp_path / "p", fault_server, CASES)
    config = root / "parallax.toml"
    config.write_text(
        config.read_text().replace('runs_dir = "runs"', 'runs_dir = "${PARALLAX_RUNS_DIR}"')
    )
    night = root / "runs" / "shards" / "night-1"
    base = {k: v for k, v in os.environ.items() if not k.startswith("PARALLAX_")}
    base |= {"NO_PROXY": "127.0.0.1", "PARALLAX_SHARDS": str(N)}
    pods = [
        subprocess.Popen(
            [*PARALLAX, "run", "--config", "parallax.toml", "--shard", "env"],
            cwd=root,
            env=base | {"JOB_COMPLETION_INDEX": str(i), "PARALLAX_RUNS_DIR": str(night)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(N)
    ]
    for pod in pods:
        _, err = pod.communicate(timeout=RUN_TIMEOUT)
        assert pod.returncode in (0, 1), err  # no suite lock refused a sibling shard
    shard_dirs = sorted((night / "s").iterdir())
    assert len([d for d in shard_dirs if d.is_dir()]) == N
    done = subprocess.run(
        [*PARALLAX, "merge", "--config", "parallax.toml", night / "s"],
        cwd=root,
        env=base | {"PARALLAX_RUNS_DIR": str(root / "runs")},
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    (merged,) = _run_dirs(root)
    summary = json.loads((merged / "summary.json").read_text())
    assert summary["cases"] == len(CASES) and summary["gate_counts"]["new_case"] == len(CASES)
    shards = json.loads((merged / "manifest.json").read_text())["merged"]["shards"]
    assert [s["index"] for s in shards] == list(range(N))


def test_a_retried_shard_stands_for_the_run_it_retried_in_a_folder_merge(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """A shard cut short (a case timed out) and then `--retry-unscored`: the folder of the
    night holds both runs of that shard, and the merge takes the retry for it, as history
    does, instead of refusing the shard as given twice."""
    root = _project(tmp_path / "p", fault_server, CASES)
    flaky = next(c for c in CASES if shard_of(c["id"], N) == 2)
    fault_server.prompt_modes[f"{flaky['prompt']} v2"] = "status:500"
    shards = _run_shards(root)
    del fault_server.prompt_modes[f"{flaky['prompt']} v2"]
    before = _run_dirs(root)
    code, _ = _parallax(root, "run", "--retry-unscored", shards[2])
    assert code in (0, 1), code
    retry = _new_dir(root, before)
    assert json.loads((retry / "manifest.json").read_text())["shard"]["index"] == 2
    before = _run_dirs(root)
    code, _ = _parallax(root, "merge", root / "runs" / "s")
    assert code in (0, 1), code
    merged = _new_dir(root, before)
    summary = json.loads((merged / "summary.json").read_text())
    assert summary["unadmitted"] == 0 and summary["cases"] == len(CASES)
    made_of = json.loads((merged / "manifest.json").read_text())["merged"]["shards"]
    assert made_of[2]["run_id"] == retry.name

    # history lists each shard's run as one, not as a night and not as a replay: the merge is
    # the night (the cut shard is the retry's, as any retried run is)
    done = run_parallax("history", "--json", cwd=root)
    assert done.returncode == 0, done.stderr
    (suite,) = json.loads(done.stdout)["suites"]
    shard_of_run = {run["run_id"]: run["shard"] for run in suite["runs"]}
    assert shard_of_run == {
        **{d.name: f"{i}/{N}" for i, d in enumerate(shards)},
        retry.name: f"2/{N}",
        merged.name: None,
    }
    assert suite["nights"] == 1
    done = run_parallax("history", cwd=root)
    assert done.returncode == 0, done.stderr
    said = done.stdout.count(": not a night, the merge of all shards stands for it")
    assert said == N + 1
    assert f"shard 3/{N}: not a night" in done.stdout
    done = run_parallax("history", "--html", cwd=root)
    assert done.returncode == 0, done.stderr
    page = (root / "runs" / "s" / "index.html").read_text("utf-8")
    assert "1 night(s) and 1 run(s) completed by a later retry" in page
    assert f"and {N} shard run(s), listed but not nights" in page
    assert "replay(s)" not in page
    assert page.count(", not a night</span>") == N + 1
    assert f'<span class="tag">shard 1/{N}, not a night</span>' in page

    # a shard run dir elsewhere (another pod's volume) is the results database's row: the same
    shutil.move(shards[0], tmp_path / "elsewhere")
    done = run_parallax("history", cwd=root)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count(": not a night, the merge of all shards stands for it") == N + 1
    _, away = done.stdout.split(f"from the results database: {shards[0]}", 1)
    assert away.lstrip().startswith(f"shard 0/{N}: not a night")
