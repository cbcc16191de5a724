"""End-to-end specification of the `parallax` command line, run as a real subprocess.

Every test copies config/, fixtures/ and snapshots/ into a temporary directory, so run
directories land there and the repository is never written. Commands go through
`python -m runner`, and the installed `parallax` console script is exercised too.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from runner import history

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
SCRIPT = Path(sys.executable).parent / "parallax"
SUITES = ("ceiling", "support", "cities", "tools")
SUBCOMMANDS = (
    *("run", "replay", "promote", "pin", "diff", "grade", "validate", "init", "import"),
    *("serve", "health", "report", "history", "prune", "merge", "index"),
)
READS_NO_CONFIG = ("init", "import")  # commands whose --help has no 78 to list
RUN_FILES = ("manifest.json", "raw.jsonl", "outcomes.jsonl", "disagreement.json", "summary.json")
OUTCOME_FIELDS = frozenset(
    {
        # seed 004's fields
        *("case_id", "fixture_sha", "model_alias", "response_id", "transport", "schema"),
        *("task_score", "detail", "elapsed_ms"),
        # parallax's own
        *("side", "stratum", "misses", "response_model", "system_fingerprint", "http_status"),
        *("attempts", "usage", "sample"),
    }
)
LOG_FIELDS = ("timestamp", "level", "event", "run_id", "suite")
KNOWN_EVENTS = frozenset(
    {
        "run.started",
        "run.finished",
        "run.resumed",
        "alert.disagreement_changed",
        "alert.transport",
        "alert.schema",
        "alert.alias_drift",
        "alert.reference_moved",
        "alert.stratum",
        "alert.ceiling_candidates",
    }
)
CASE_ALERTS = ("alert.disagreement_changed", "alert.transport", "alert.schema")


def no_run_dirs(root: Path) -> bool:
    """True when no run directory exists under runs/<suite>/ (a lock file is not a run)."""
    return not [p for p in root.glob("runs/*/*") if p.is_dir()]


def cli_env() -> dict[str, str]:
    """The caller's environment without anything that could point parallax elsewhere."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARALLAX_")}
    # Any attempt at the network would fail fast instead of silently reaching out.
    env.update(HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9", NO_PROXY="")
    return env


def parallax(
    *args: str | Path, cwd: Path, script: bool = False, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the CLI as a user would, through `python -m runner` or the console script (with
    `env` added to `cli_env()`)."""
    prefix = [str(SCRIPT)] if script else [sys.executable, "-m", "runner"]
    return subprocess.run(
        [*prefix, *map(str, args)],
        cwd=cwd,
        env={**cli_env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def no_traceback(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stdout, proc.stdout


def make_demo(root: Path) -> Path:
    """A private copy of the offline demo: config, fixtures and snapshots side by side."""
    for name in ("config", "fixtures", "snapshots"):
        shutil.copytree(REPO / name, root / name)
    return root


def snapshot_bytes(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((root / "snapshots").iterdir())}


def run_dirs(root: Path, suite: str) -> list[Path]:
    """Oldest first, in the product's order: two runs can start within one second, and the
    random suffix after the second would then order them by chance."""
    return history.run_dirs(root / "runs" / suite)


def only_run_dir(root: Path, suite: str) -> Path:
    dirs = run_dirs(root, suite)
    assert len(dirs) == 1, dirs
    return dirs[0]


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def log_lines(stdout: str) -> list[dict[str, Any]]:
    """Every stdout line must be one JSON object (the alerting contract)."""
    events = []
    for line in stdout.splitlines():
        value = json.loads(line)
        assert isinstance(value, dict), line
        events.append(value)
    return events


def gates(run_dir: Path) -> dict[str, str]:
    return {cid: v["gate"] for cid, v in load(run_dir / "disagreement.json")["cases"].items()}


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, dict[str, bytes]]:
    """One full demo run shared by the read-only tests: (root, process, snapshots before)."""
    root = make_demo(tmp_path_factory.mktemp("demo"))
    before = snapshot_bytes(root)
    proc = parallax("run", "--config", "config/demo.toml", cwd=root)
    return root, proc, before


# --- help and usage ---------------------------------------------------------------------------


@pytest.mark.parametrize("script", [False, True], ids=["python-m", "console-script"])
def test_top_level_help_exits_zero(tmp_path: Path, script: bool) -> None:
    """`parallax --help` prints usage naming every subcommand and exits 0."""
    proc = parallax("--help", cwd=tmp_path, script=script)
    assert proc.returncode == 0, proc.stderr
    for name in SUBCOMMANDS:
        assert name in proc.stdout
    assert "64" in proc.stdout and "78" in proc.stdout


def test_console_script_sits_next_to_the_interpreter() -> None:
    """The `parallax` console script is installed beside sys.executable."""
    assert SCRIPT.is_file() and os.access(SCRIPT, os.X_OK)


_IMPORTS = """
import json, sys
import runner.cli
try:
    runner.cli.main(["--help"])
except SystemExit:
    pass
help_loads = sorted(m for m in sys.modules if m.split(".")[0] in ("runner", "structlog", "rich"))
import runner.runs.run
run_loads = sorted(m for m in ("rich", "jsonschema", "structlog") if m in sys.modules)
import io, rich.progress, structlog
line = structlog.dev.ConsoleRenderer(colors=False)(None, "info", {"event": "run.started"})
print(json.dumps({"help": help_loads, "run": run_loads, "rich": rich.progress.__name__,
                  "line": line}))
"""


def test_start_up_loads_only_what_the_command_needs() -> None:
    """Start-up time is import time: `--help` loads no stage and no logging, and the stages
    load neither rich (structlog would, for a traceback renderer parallax never uses) nor
    jsonschema. rich still imports afterwards, for the progress bar, and the console renderer
    still renders."""
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORTS], capture_output=True, text=True, timeout=60, check=True
    )
    found = json.loads(proc.stdout.splitlines()[-1])
    assert found["help"] == ["runner", "runner.arguments", "runner.cli", "runner.errors"]
    assert found["run"] == ["structlog"]
    assert found["rich"] == "rich.progress"
    assert "run.started" in found["line"]


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_subcommand_help_exits_zero(tmp_path: Path, command: str) -> None:
    """Each subcommand's --help prints its own usage on stdout and exits 0."""
    proc = parallax(command, "--help", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"parallax {command}" in proc.stdout
    assert proc.stderr == ""


def test_each_help_lists_the_exit_codes_its_command_returns() -> None:
    """`health --help` says what 1 means for health, not for a run; every command lists the
    error codes, and only commands that gate list the review and incomplete codes; every
    command the parser knows has a body to run."""
    from runner.arguments import build_parser
    from runner.cli import COMMANDS

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {command: child.format_help() for command, child in sub.choices.items()}
    assert set(helps) == set(SUBCOMMANDS) == set(COMMANDS)
    for command, text in helps.items():
        assert "64  usage error" in text, command
        assert ("78  bad config" in text) == (command not in READS_NO_CONFIG), command
        assert "70  a bug in parallax" in text, command  # every command can meet one
        gates = "review needed" in text
        assert gates == (command in ("run", "replay")), command
    assert "1   it does not" in helps["health"]
    assert "70  also: the scheduler itself crashed" in helps["serve"]
    assert "1   a stratum alert" in helps["grade"]


@pytest.mark.parametrize(
    "args",
    [
        ["frobnicate"],
        ["run", "--bogus"],
        ["grade", "--stretch-high", "high", "x.jsonl"],
        ["grade", "--easy-floor", "5", "x.jsonl"],
        ["grade", "--medium-floor", "nan", "x.jsonl"],
        ["health", "--max-age", "nan"],
        ["diff", "only-one.jsonl"],
        [],
    ],
    ids=[
        *("unknown-subcommand", "bad-flag", "bad-flag-value", "rate-above-one", "rate-nan"),
        "max-age-nan",
        *("missing-argument", "no-command"),
    ],
)
def test_usage_errors_exit_64(tmp_path: Path, args: list[str]) -> None:
    """Usage errors exit 64 (not argparse's 2, which means incomplete here), no traceback;
    stdout stays empty but for `run`'s one run.failed log line."""
    proc = parallax(*args, cwd=tmp_path)
    assert proc.returncode == 64, (proc.stdout, proc.stderr)
    logged = [json.loads(line)["event"] for line in proc.stdout.splitlines()]
    assert logged == (["run.failed"] if args[:1] == ["run"] else [])
    assert proc.stderr.strip()
    no_traceback(proc)
    if args:  # a mistake is one line pointing at --help; no command at all prints the help
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].endswith("--help`)"), lines


def test_usage_error_via_console_script_exits_64(tmp_path: Path) -> None:
    """The installed script maps an unknown subcommand to 64 just like `python -m runner`."""
    proc = parallax("frobnicate", cwd=tmp_path, script=True)
    assert proc.returncode == 64
    assert "frobnicate" in proc.stderr.splitlines()[-1]
    no_traceback(proc)


# --- run ----------------------------------------------------------------------------------------


def test_demo_run_exits_3(demo_run: tuple[Path, Any, dict[str, bytes]]) -> None:
    """The offline demo needs review and is incomplete at once, so `run` exits 3."""
    _, proc, _ = demo_run
    assert proc.returncode == 3, proc.stderr
    no_traceback(proc)


def test_manifest_records_the_installed_library_versions(
    demo_run: tuple[Path, Any, dict[str, bytes]],
) -> None:
    """Every library a run's bytes pass through is named with its installed version (anyio,
    which has no __version__, was recorded as null)."""
    from importlib.metadata import version

    root, _, _ = demo_run
    versions = load(only_run_dir(root, "cities") / "manifest.json")["versions"]
    for name in ("httpx", "aiohttp", "anyio", "structlog", "orjson"):
        assert versions[name] == version(name), name


def test_demo_run_writes_every_file_of_each_run_dir(
    demo_run: tuple[Path, Any, dict[str, bytes]],
) -> None:
    """Each suite gets one run dir holding manifest, both ledgers, disagreement and summary."""
    root, _, _ = demo_run
    assert sorted(p.name for p in (root / "runs").iterdir() if p.is_dir()) == sorted(SUITES)
    for suite in SUITES:
        run_dir = only_run_dir(root, suite)
        for name in RUN_FILES:
            assert (run_dir / name).is_file(), f"{suite}: {name} missing"
        assert load(run_dir / "summary.json")["suite"] == suite
        assert load(run_dir / "manifest.json")["run_id"] == run_dir.name
        assert not (REPO / "runs" / suite / run_dir.name).exists()


# summary.json's keys as the docs' "A run directory" lists them (samples' noise_floor and an
# unstratified suite's strata_note come only with what asks for them)
SUMMARY_KEYS = frozenset(
    {
        *("version", "run_id", "suite", "mode", "partial", "parent", "parent_finished"),
        "started_at",
        *("finished_at", "exit_code", "verdict", "cases", "samples", "admitted", "unadmitted"),
        *("gate_counts", "review", "flaky", "grader_errors", "incomplete", "retired"),
        *("stratified", "strata", "stratum_alerts", "served_models", "alias_drift"),
        *("request_changed", "unscored", "paired", "significant_regression", "not_non_inferior"),
        *("regressions", "latency_regression", "cost_regression", "quiet_cases", "fail_on"),
        *("usage", "budget", "batch"),
    }
)


def test_demo_run_summaries_hold_every_documented_key(
    demo_run: tuple[Path, Any, dict[str, bytes]],
) -> None:
    """Each suite's summary.json holds every key the README documents, and no other."""
    root, _, _ = demo_run
    for suite in SUITES:
        keys = set(load(only_run_dir(root, suite) / "summary.json"))
        assert keys - {"noise_floor", "strata_note"} == SUMMARY_KEYS, suite


def test_demo_run_covers_the_gate_classes(demo_run: tuple[Path, Any, dict[str, bytes]]) -> None:
    """Across the three suites the demo yields every gate class the contract names."""
    root, _, _ = demo_run
    seen: Counter[str] = Counter()
    for suite in SUITES:
        run_dir = only_run_dir(root, suite)
        suite_gates = gates(run_dir)
        seen.update(suite_gates.values())
        summary = load(run_dir / "summary.json")
        counted = {k: v for k, v in summary["gate_counts"].items() if v and k != "retired_case"}
        assert counted == dict(Counter(suite_gates.values())), suite
        assert summary["cases"] == len(suite_gates)
    for gate in (
        "unchanged",
        "disagreement_changed",
        "transport_miss",
        "schema_miss",
        "fixture_move",
        "new_case",
        "alias_swap",
    ):
        assert seen[gate] >= 1, (gate, seen)


def test_demo_run_gates_the_known_cases(demo_run: tuple[Path, Any, dict[str, bytes]]) -> None:
    """The demo's deliberate faults land in the gate class designed for them."""
    root, _, _ = demo_run
    assert gates(only_run_dir(root, "ceiling"))["medium-sku-contract"] == "transport_miss"
    assert gates(only_run_dir(root, "ceiling"))["easy-no-apology-loop"] == "disagreement_changed"
    support = gates(only_run_dir(root, "support"))
    assert support == {
        "refund.policy.v3": "schema_miss",
        "tool.tracking.missing_carrier": "alias_swap",
    }
    assert gates(only_run_dir(root, "cities")) == {
        "city-07": "fixture_move",
        "city-09": "disagreement_changed",
        "city-11": "new_case",
    }
    assert gates(only_run_dir(root, "tools")) == {
        "tool.order.status": "disagreement_changed",
        "tool.policy.no_call": "unchanged",
        "tool.quote.unknown_tool": "disagreement_changed",
        "tool.order.answered": "unchanged",
    }
    exits = {s: load(only_run_dir(root, s) / "summary.json")["exit_code"] for s in SUITES}
    assert exits == {"ceiling": 3, "support": 3, "cities": 1, "tools": 1}


def test_the_demo_s_tool_suite_grades_tool_calls_and_shows_them(
    demo_run: tuple[Path, Any, dict[str, bytes]],
) -> None:
    """The tools suite: a streamed Anthropic-shaped candidate calls a tool with a wrong
    argument and another that was never offered; its calls and misses are in outcomes.jsonl
    and both reports show each side's calls."""
    root, _, _ = demo_run
    run_dir = only_run_dir(root, "tools")
    rows = {(r["case_id"], r["side"]): r for r in jsonl(run_dir / "outcomes.jsonl")}
    seen = {
        key: (r["tool_calls"], r["misses"], r["finish_reason"], r["ttft_ms"])
        for key, r in rows.items()
    }
    assert seen == {
        ("tool.order.status", "reference"): (["get_order_status"], [], "tool_calls", None),
        ("tool.order.status", "candidate"): (
            ["get_order_status"],
            ["tool_arg_mismatch:get_order_status.order_id"],
            "tool_use",
            0,
        ),
        ("tool.policy.no_call", "reference"): ([], [], "stop", None),
        ("tool.policy.no_call", "candidate"): ([], [], "end_turn", 0),
        ("tool.quote.unknown_tool", "reference"): (["get_shipping_quote"], [], "tool_calls", None),
        ("tool.quote.unknown_tool", "candidate"): (
            ["calculate_shipping"],
            ["tool_missing:get_shipping_quote", "tool_unknown:calculate_shipping"],
            "tool_use",
            0,
        ),
        ("tool.order.answered", "reference"): ([], [], "stop", None),
        ("tool.order.answered", "candidate"): ([], [], "end_turn", 0),
    }
    raw = jsonl(run_dir / "raw.jsonl")
    adapters = {(r["side"], r["adapter"], r["response"]["headers"]["content-type"]) for r in raw}
    assert adapters == {
        ("reference", "openai-chat", "application/json"),
        ("candidate", "anthropic-messages", "text/event-stream"),
    }
    report_md = (run_dir / "report.md").read_text(encoding="utf-8")
    assert 'calls: get\\_order\\_status({"order\\_id": "\\#1842"})' in report_md
    report_html = (run_dir / "report.html").read_text(encoding="utf-8")
    assert 'calculate_shipping({"kg": 2, "to": "Denver"})' in html.unescape(report_html)


def test_demo_run_logs_one_json_object_per_line(
    demo_run: tuple[Path, Any, dict[str, bytes]],
) -> None:
    """Every stdout line is JSON with timestamp (UTC), level, event, run_id and suite."""
    root, proc, _ = demo_run
    events = log_lines(proc.stdout)
    assert events
    run_ids = {s: only_run_dir(root, s).name for s in SUITES}
    for event in events:
        for field in LOG_FIELDS:
            assert field in event, (field, event)
        assert event["event"] in KNOWN_EVENTS, event
        assert event["run_id"] == run_ids[event["suite"]]
        stamp = datetime.fromisoformat(event["timestamp"])
        assert stamp.utcoffset() == timedelta(0), event["timestamp"]


def test_run_dir_is_absolute_in_the_log_for_a_run_a_retry_a_replay_and_a_resume(
    tmp_path: Path,
) -> None:
    """`run.started` named a run's dir relative to where it was started (a relative config
    path) and a retry's or a replay's absolute: the field is the dir's absolute path, for
    every mode, so a log reader can open it from anywhere."""
    root = make_demo(tmp_path)
    first = parallax("run", "--config", "config/demo.toml", "--suite", "ceiling", cwd=root)
    run_dir = only_run_dir(root, "ceiling").relative_to(root)
    found = {"run": first}
    found["retry"] = parallax("run", "--retry-unscored", run_dir, cwd=root)
    found["replay"] = parallax("replay", run_dir, cwd=root)
    manifest = load(root / run_dir / "manifest.json")  # now as if killed before its verdict
    (root / run_dir / "manifest.json").write_text(json.dumps({**manifest, "finished_at": None}))
    found["resume"] = parallax("run", "--resume", run_dir, cwd=root)
    shown = {
        mode: [
            e["run_dir"]
            for e in log_lines(proc.stdout)
            if e["event"] in ("run.started", "run.resumed")
        ]
        for mode, proc in found.items()
    }
    assert shown["run"] == shown["resume"] == [str(root / run_dir)]
    for mode, dirs in shown.items():
        assert [(Path(d).is_absolute(), Path(d).is_dir()) for d in dirs] == [(True, True)], mode


def test_demo_run_emits_lifecycle_and_alert_events(
    demo_run: tuple[Path, Any, dict[str, bytes]],
) -> None:
    """Each suite logs run.started first and run.finished last; the demo's faults raise alerts."""
    _, proc, _ = demo_run
    events = log_lines(proc.stdout)
    for suite in SUITES:
        names = [e["event"] for e in events if e["suite"] == suite]
        assert names[0] == "run.started" and names[-1] == "run.finished", names
        assert names.count("run.started") == names.count("run.finished") == 1
    by_name = {e["event"]: e for e in events}
    for name in (*CASE_ALERTS, "alert.alias_drift", "alert.stratum"):
        assert name in by_name, name
    assert by_name["alert.transport"]["case_ids"] == ["medium-sku-contract"]
    assert by_name["alert.schema"]["case_ids"] == ["refund.policy.v3"]
    assert by_name["alert.alias_drift"]["case_ids"] == ["tool.tracking.missing_carrier"]
    finished = {e["suite"]: e for e in events if e["event"] == "run.finished"}
    assert {s: e["exit_code"] for s, e in finished.items()} == {
        "ceiling": 3,
        "support": 3,
        "cities": 1,
        "tools": 1,
    }


def test_case_alerts_carry_case_ids_and_counts(
    demo_run: tuple[Path, Any, dict[str, bytes]],
) -> None:
    """Aggregated case alerts carry the case ids they are about and a matching count."""
    _, proc, _ = demo_run
    for event in log_lines(proc.stdout):
        if event["event"] in CASE_ALERTS:
            assert event["count"] == len(event["case_ids"]) >= 1, event


def test_alias_drift_alert_carries_a_count(demo_run: tuple[Path, Any, dict[str, bytes]]) -> None:
    """DESIGN: alerts carry the case ids and counts they are about, alias drift included."""
    _, proc, _ = demo_run
    drift = [e for e in log_lines(proc.stdout) if e["event"] == "alert.alias_drift"]
    assert drift
    for event in drift:
        assert event["count"] == len(event["case_ids"])


def test_outcome_rows_carry_every_design_field(
    demo_run: tuple[Path, Any, dict[str, bytes]],
) -> None:
    """outcomes.jsonl rows have seed 004's fields plus parallax's, one per case, side and sample."""
    root, _, _ = demo_run
    for suite in SUITES:
        rows = jsonl(only_run_dir(root, suite) / "outcomes.jsonl")
        cases = load(only_run_dir(root, suite) / "disagreement.json")["cases"]
        assert len(rows) == 2 * len(cases)
        keys = [(r["case_id"], r["side"], r["sample"]) for r in rows]
        assert len(set(keys)) == len(keys)
        for row in rows:
            missing = OUTCOME_FIELDS - set(row)
            assert not missing, (suite, row["case_id"], sorted(missing))
            assert row["side"] in ("reference", "candidate")


def test_unadmitted_rows_have_no_numeric_task_score(
    demo_run: tuple[Path, Any, dict[str, bytes]],
) -> None:
    """A row with a transport or schema miss has task_score null, never 0; admitted rows score."""
    root, _, _ = demo_run
    unadmitted = 0
    for suite in SUITES:
        for row in jsonl(only_run_dir(root, suite) / "outcomes.jsonl"):
            if row["transport"] != "ok" or row["schema"] != "ok":
                unadmitted += 1
                assert row["task_score"] is None, row
            else:
                assert isinstance(row["task_score"], int | float), row
                assert 0.0 <= row["task_score"] <= 1.0
    assert unadmitted >= 2


def test_run_never_writes_snapshots(demo_run: tuple[Path, Any, dict[str, bytes]]) -> None:
    """`run` leaves every byte under snapshots/ as it found it, and adds no file there."""
    root, _, before = demo_run
    assert snapshot_bytes(root) == before


def test_run_one_suite(tmp_path: Path) -> None:
    """`run --suite cities` runs that suite alone and exits with its own code."""
    root = make_demo(tmp_path)
    proc = parallax("run", "--config", "config/demo.toml", "--suite", "cities", cwd=root)
    assert proc.returncode == 1, proc.stderr
    assert [p.name for p in (root / "runs").iterdir() if p.is_dir()] == ["cities"]
    assert {e["suite"] for e in log_lines(proc.stdout)} == {"cities"}


def test_unscored_new_case_pages_as_a_transport_alert(tmp_path: Path) -> None:
    """A timeout pages through alert.transport even when the case's gate class is new_case:
    the alert follows the stamp, as the incomplete exit bit does, not the gate class."""
    root = make_demo(tmp_path)
    cassette = root / "fixtures" / "cassettes" / "reference.jsonl"
    rows = [json.loads(line) for line in cassette.read_text(encoding="utf-8").splitlines()]
    for row in rows:
        if row["case_id"] == "city-11":
            row.pop("completion")
            row["fault"] = "timeout"
    cassette.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    proc = parallax("run", "--config", "config/demo.toml", "--suite", "cities", cwd=root)
    assert proc.returncode == 3, proc.stderr
    assert gates(only_run_dir(root, "cities"))["city-11"] == "new_case"
    alerts = [e for e in log_lines(proc.stdout) if e["event"] == "alert.transport"]
    assert len(alerts) == 1, alerts
    assert alerts[0]["case_ids"] == ["city-11"] and alerts[0]["count"] == 1
    assert alerts[0]["details"]["city-11"].startswith("reference: timeout")


def test_run_unknown_suite_exits_78(tmp_path: Path) -> None:
    """An unknown --suite is a config error: one line naming it, exit 78, no run dir."""
    root = make_demo(tmp_path)
    proc = parallax("run", "--config", "config/demo.toml", "--suite", "nope", cwd=root)
    assert proc.returncode == 78
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "nope" in lines[0], proc.stderr
    assert no_run_dirs(root)
    no_traceback(proc)


def test_validate_demo_config(tmp_path: Path) -> None:
    """`validate --config config/demo.toml` finds nothing wrong and exits 0."""
    root = make_demo(tmp_path)
    proc = parallax("validate", "--config", "config/demo.toml", cwd=root)
    assert proc.returncode == 0, proc.stderr
    assert "ok" in proc.stdout
    assert no_run_dirs(root)


LIVE = """[endpoints.ref]
kind = "openai-chat"
base_url = "http://127.0.0.1:9/v1"
model = "m"
api_key_env = "VALIDATE_TEST_KEY"

[suites.s]
fixtures = "cases.jsonl"
reference = "ref"
candidate = "ref"
"""


@pytest.mark.parametrize(
    ("value", "note"),
    [(None, "is not set"), ("", "is empty"), ("sk-live-abcd1234", None)],
    ids=["unset", "empty", "set"],
)
def test_validate_notes_a_key_that_is_not_in_the_environment(
    tmp_path: Path, value: str | None, note: str | None
) -> None:
    """validate calls nothing, so a key not in the environment does not fail it: it passes
    (exit 0) and says, once per variable, that a run will need it; a key that is there says
    nothing."""
    (tmp_path / "parallax.toml").write_text(LIVE)
    (tmp_path / "cases.jsonl").write_text('{"id": "a", "prompt": "hi"}\n')
    env = None if value is None else {"VALIDATE_TEST_KEY": value}
    proc = parallax("validate", "--config", "parallax.toml", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    expected = (
        []
        if note is None
        else [
            "parallax: note: parallax.toml: endpoints.ref.api_key_env: environment variable "
            f"VALIDATE_TEST_KEY {note}: validate needs no key, a run does"
        ]
    )
    assert proc.stderr.splitlines() == expected


def test_validate_refuses_a_key_a_run_could_not_send(tmp_path: Path) -> None:
    """Only a missing key is a note: one that is set but unusable as a header (a newline read
    from a secret file) fails validate as it would fail the run, exit 78, without the key."""
    (tmp_path / "parallax.toml").write_text(LIVE)
    (tmp_path / "cases.jsonl").write_text('{"id": "a", "prompt": "hi"}\n')
    env = {"VALIDATE_TEST_KEY": "sk-paralleak-abcd1234\n"}
    proc = parallax("validate", "--config", "parallax.toml", cwd=tmp_path, env=env)
    assert proc.returncode == 78, proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith("parallax: parallax.toml: endpoints.ref.api_key_env: environment"), line
    assert "paralleak" not in proc.stderr + proc.stdout


@pytest.mark.parametrize(
    ("setting", "key", "reason"),
    [
        ('schedule = "bogus cron"', "suites.cities.schedule", "bad cron"),
        ('schedule = "0 3 * * *"\ntimezone = "Mars/Base"', "suites.cities.timezone", "time zone"),
        ('schedule = "0 25 * * *"', "suites.cities.schedule", "bad cron"),
        ('schedule = "0 0 30 2 *"', "suites.cities.schedule", "names no date"),
        ("serve_misfire_grace_seconds = 0", "serve_misfire_grace_seconds", "greater than or"),
        ("serve_heartbeat_seconds = 1e-9", "serve_heartbeat_seconds", "greater than or"),
    ],
    ids=["fields", "timezone", "hour", "never-fires", "misfire-grace-zero", "heartbeat-spin"],
)
def test_validate_refuses_a_schedule_serve_would_refuse(
    tmp_path: Path, setting: str, key: str, reason: str
) -> None:
    """`validate` reads each suite's schedule as `serve` does: one line naming the key, 78."""
    root = make_demo(tmp_path)
    config = root / "config" / "demo.toml"
    text = config.read_text(encoding="utf-8")
    if setting.startswith("serve_"):  # a daemon key: top level, beside a suite that is served
        text = f"{setting}\n" + text.replace(
            "[suites.cities]\n", '[suites.cities]\nschedule = "0 3 * * *"\n'
        )
    else:
        text = text.replace("[suites.cities]\n", f"[suites.cities]\n{setting}\n")
    config.write_text(text, "utf-8")
    proc = parallax("validate", "--config", "config/demo.toml", cwd=root)
    assert proc.returncode == 78, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and key in lines[0] and reason in lines[0], proc.stderr
    no_traceback(proc)


def _with_template(root: Path, line: str) -> None:
    """The demo config with `line` added to its candidate endpoint."""
    config = root / "config" / "demo.toml"
    text = config.read_text(encoding="utf-8")
    config.write_text(text.replace("[endpoints.candidate]\n", f"[endpoints.candidate]\n{line}\n"))


@pytest.mark.parametrize("command", ["validate", "run"])
def test_an_undefined_template_name_is_found_before_any_call(tmp_path: Path, command: str) -> None:
    """`validate` renders every template for every case of every suite, and `run` does before
    its first call: a name a case does not have is one line per case naming the fixture
    file:line, the case, the name and the template's key (exit 65), and no run directory is
    made."""
    from runner.config import load_config
    from runner.fixtures.load import load_cases

    root = make_demo(tmp_path)
    _with_template(root, 'user_template = "{{ prompt }} (for {{ vars.customer }})"')
    proc = parallax(command, "--config", "config/demo.toml", cwd=root)
    assert proc.returncode == 65, proc.stderr
    lines = proc.stderr.strip().splitlines()
    first = (root / "fixtures" / "ceiling.jsonl").read_text().splitlines()[0]
    expected = (
        f"fixtures/ceiling.jsonl:1: case {json.loads(first)['id']!r}: "
        "undefined name 'vars.customer' (in endpoints.candidate.user_template)"
    )
    assert lines[0].endswith(expected), lines
    loaded = load_config(root / "config" / "demo.toml")
    shaped = [s for s in loaded.config.suites.values() if s.candidate == "candidate"]
    cases = sum(len(load_cases(loaded.resolve(s.fixtures))) for s in shaped)
    assert len(lines) == cases, lines  # every case of every suite the candidate serves
    assert all("undefined name 'vars.customer'" in line for line in lines), lines
    assert no_run_dirs(root)
    no_traceback(proc)


def test_validate_renders_templates_that_fit_every_case(tmp_path: Path) -> None:
    """Templates every case can fill (a null system prompt tested, not printed) pass."""
    root = make_demo(tmp_path)
    _with_template(root, 'system = "Be brief.{% if system %} {{ system }}{% endif %}"')
    proc = parallax("validate", "--config", "config/demo.toml", cwd=root)
    assert proc.returncode == 0, proc.stderr


def test_validate_renders_a_conversation_as_a_run_sends_it(tmp_path: Path) -> None:
    """A `messages` case's system template sees its leading system turn as `system`, as the
    request a run sends does: validate passes it, and names a conversation with none."""
    rows = [
        {
            "id": "chat-1",
            "messages": [
                {"role": "system", "content": "Be kind."},
                {"role": "user", "content": "Hi"},
            ],
            "expect": {},
        },
        {"id": "chat-2", "messages": [{"role": "user", "content": "Hi"}], "expect": {}},
    ]
    (tmp_path / "chats.jsonl").write_text(json.dumps(rows[0]) + "\n")
    (tmp_path / "parallax.toml").write_text(
        '[endpoints.ref]\nkind = "recorded"\nsystem = "{{ system }} Answer in French."\n'
        '[suites.chats]\nfixtures = "chats.jsonl"\nreference = "ref"\ncandidate = "ref"\n'
    )
    proc = parallax("validate", "--config", "parallax.toml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (tmp_path / "chats.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = parallax("validate", "--config", "parallax.toml", cwd=tmp_path)
    assert proc.returncode == 65, proc.stderr
    assert "chats.jsonl:2: case 'chat-2': 'system' is null for this case" in proc.stderr


def test_the_nightly_prompt_change_example_validates(tmp_path: Path) -> None:
    """config/nightly.toml's commented "prompt v1 vs v2" example, uncommented, is a config
    that validates: its template files exist and render for every case of its suite."""
    root = make_demo(tmp_path)
    config = root / "config" / "nightly.toml"
    text = config.read_text(encoding="utf-8")
    head, _, example = text.partition("# --- Testing a prompt change")
    block = example.splitlines()
    commented = block[block.index("#") + 1 :]  # the example proper starts after a bare "#"
    lines = [x.removeprefix("#").removeprefix(" ") for x in commented]
    config.write_text(head + "\n".join(lines) + "\n", encoding="utf-8")
    env = dict.fromkeys(("REF_BASE_URL", "CAND_BASE_URL"), "http://127.0.0.1:9/v1")
    env |= dict.fromkeys(("REF_MODEL", "CAND_MODEL"), "some-model")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "runner",
            "validate",
            "--config",
            config,
            "--suite",
            "support-prompt",
        ],
        cwd=root,
        env={**cli_env(), **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "1 suite(s)" in proc.stdout


def test_run_reads_config_from_environment(tmp_path: Path) -> None:
    """Without --config, run reads $PARALLAX_CONFIG."""
    root = make_demo(tmp_path)
    env = {**cli_env(), "PARALLAX_CONFIG": "config/demo.toml"}
    proc = subprocess.run(
        [sys.executable, "-m", "runner", "validate"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


# --- promote ------------------------------------------------------------------------------------


def test_promote_refuses_a_run_with_unadmitted_rows(tmp_path: Path) -> None:
    """promote exits 2 and names how many cases were unscored; the snapshot stays as it was."""
    root = make_demo(tmp_path)
    parallax("run", "--config", "config/demo.toml", "--suite", "ceiling", cwd=root)
    before = snapshot_bytes(root)
    proc = parallax("promote", only_run_dir(root, "ceiling"), cwd=root)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "1 case" in lines[0] and "medium-sku-contract" in lines[0]
    assert "--allow-partial" in lines[0]
    assert proc.stdout == ""
    assert snapshot_bytes(root) == before


def test_promote_allow_partial_writes_the_snapshot(tmp_path: Path) -> None:
    """--allow-partial writes snapshots/<suite>.json and prints added/changed/removed as JSON."""
    root = make_demo(tmp_path)
    parallax("run", "--config", "config/demo.toml", "--suite", "ceiling", cwd=root)
    run_dir = only_run_dir(root, "ceiling")
    old = load(root / "snapshots" / "ceiling.json")
    proc = parallax("promote", "--allow-partial", run_dir, cwd=root)
    assert proc.returncode == 0, proc.stderr
    changes = json.loads(proc.stdout)
    assert changes["added"] == [] and changes["removed"] == []
    assert changes["changed"] == ["easy-no-apology-loop"]
    new = load(root / "snapshots" / "ceiling.json")
    assert new["promoted_from"] == run_dir.name
    assert new["cases"]["easy-no-apology-loop"]["disagreement"] == ["forbidden:cannot"]
    # the unscored case keeps its previously accepted entry
    assert new["cases"]["medium-sku-contract"] == old["cases"]["medium-sku-contract"]
    leftovers = [p.name for p in (root / "snapshots").iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []


def test_rerun_after_promote_is_unchanged(tmp_path: Path) -> None:
    """After promoting a clean run, the next run of that suite gates every case unchanged."""
    root = make_demo(tmp_path)
    first = parallax("run", "--config", "config/demo.toml", "--suite", "cities", cwd=root)
    assert first.returncode == 1
    promoted = parallax("promote", only_run_dir(root, "cities"), cwd=root)
    assert promoted.returncode == 0, promoted.stderr
    changes = json.loads(promoted.stdout)
    assert changes["added"] == ["city-11"]
    assert sorted(changes["changed"]) == ["city-07", "city-09"]
    assert changes["removed"] == []
    again = parallax("run", "--config", "config/demo.toml", "--suite", "cities", cwd=root)
    assert again.returncode == 0, again.stderr
    latest = run_dirs(root, "cities")[-1]
    assert set(gates(latest).values()) == {"unchanged"}


def test_rerun_after_partial_promote(tmp_path: Path) -> None:
    """After a partial promote, admitted cases are unchanged and the timeout stays a miss."""
    root = make_demo(tmp_path)
    parallax("run", "--config", "config/demo.toml", "--suite", "ceiling", cwd=root)
    promoted = parallax("promote", "--allow-partial", only_run_dir(root, "ceiling"), cwd=root)
    assert promoted.returncode == 0, promoted.stderr
    again = parallax("run", "--config", "config/demo.toml", "--suite", "ceiling", cwd=root)
    # still incomplete (the recorded timeout) and still a stratum alert on the candidate
    assert again.returncode == 3, again.stderr
    result = gates(run_dirs(root, "ceiling")[-1])
    assert result.pop("medium-sku-contract") == "transport_miss"
    assert set(result.values()) == {"unchanged"}


def test_promote_refuses_an_older_run_naming_what_would_roll_back(tmp_path: Path) -> None:
    """Promoting last night's run over the snapshot of tonight's is one line naming the cases
    it would roll back, exit 64, and the snapshot keeps its bytes; --force promotes it."""
    root = make_demo(tmp_path)
    for _ in range(2):
        parallax("run", "--config", "config/demo.toml", "--suite", "cities", cwd=root)
    older, newer = run_dirs(root, "cities")
    manifest = load(older / "manifest.json")  # it ran the night before
    started = datetime.fromisoformat(manifest["started_at"]) - timedelta(days=1)
    manifest["started_at"] = started.isoformat()
    (older / "manifest.json").write_text(json.dumps(manifest))
    assert parallax("promote", newer, cwd=root).returncode == 0
    before = snapshot_bytes(root)

    refused = parallax("promote", older, cwd=root)

    assert (refused.returncode, refused.stdout) == (64, ""), refused.stderr
    (line,) = refused.stderr.splitlines()
    assert f"{older}: refused: its calls ({started.isoformat()}) are older" in line, line
    assert newer.name in line and "--force" in line
    assert snapshot_bytes(root) == before
    forced = parallax("promote", "--force", older, cwd=root)
    assert forced.returncode == 0, forced.stderr
    assert load(root / "snapshots" / "cities.json")["promoted_from"] == older.name


def test_promote_refuses_a_run_of_fixtures_edited_since(tmp_path: Path) -> None:
    """A run made before a case was edited would accept the old fixture_sha, and the next run
    would read the case as fixture_move: promote names the case, the run's sha and today's,
    and exits 64; --force promotes it and lists the case as rolled back."""
    root = make_demo(tmp_path)
    parallax("run", "--config", "config/demo.toml", "--suite", "cities", cwd=root)
    run_dir = only_run_dir(root, "cities")
    shas = {k: v["fixture_sha"] for k, v in load(run_dir / "disagreement.json")["cases"].items()}
    cases = root / "fixtures" / "cities.jsonl"
    cases.write_text(cases.read_text().replace("capital of France", "capital city of France"))
    today = json.loads(parallax("pin", cases, cwd=root).stdout.splitlines()[0])["fixture_sha"]
    before = snapshot_bytes(root)

    refused = parallax("promote", run_dir, cwd=root)

    assert refused.returncode == 64, refused.stderr
    (line,) = refused.stderr.splitlines()
    assert "1 case(s) were run on fixtures that are not today's" in line, line
    assert f"city-07 {shas['city-07']} (run) -> {today} (today)" in line, line
    assert snapshot_bytes(root) == before
    forced = parallax("promote", "--force", run_dir, cwd=root)
    assert forced.returncode == 0, forced.stderr
    assert json.loads(forced.stdout)["rolled_back"] == ["city-07"]


# --- replay -------------------------------------------------------------------------------------


@pytest.mark.parametrize("suite", SUITES)
def test_replay_is_byte_identical_and_offline(tmp_path: Path, suite: str) -> None:
    """replay writes a new run dir whose outcomes and disagreement match the source's bytes."""
    root = make_demo(tmp_path)
    first = parallax("run", "--config", "config/demo.toml", "--suite", suite, cwd=root)
    source = only_run_dir(root, suite)
    # without its cassettes no recorded endpoint could answer: replay must not call anything
    shutil.rmtree(root / "fixtures" / "cassettes")
    before = snapshot_bytes(root)
    proc = parallax("replay", source, cwd=root)
    assert proc.returncode == first.returncode, proc.stderr
    no_traceback(proc)
    dirs = run_dirs(root, suite)
    assert len(dirs) == 2
    replayed = next(d for d in dirs if d != source)
    for name in ("outcomes.jsonl", "disagreement.json"):
        assert (replayed / name).read_bytes() == (source / name).read_bytes(), name
    manifest = load(replayed / "manifest.json")
    assert manifest["mode"] == "replay" and manifest["parent"] == source.name
    assert snapshot_bytes(root) == before


# --- resume -------------------------------------------------------------------------------------


def tear(path: Path, keep: int) -> None:
    """Keep the first `keep` lines and half of the next, as a killed writer would leave them."""
    lines = path.read_bytes().splitlines(keepends=True)
    assert len(lines) > keep
    path.write_bytes(b"".join(lines[:keep]) + lines[keep][: len(lines[keep]) // 2])


@pytest.mark.parametrize(("raw_keep", "outcomes_keep"), [(7, 4), (5, 5), (0, 0)])
def test_resume_finishes_a_torn_run(tmp_path: Path, raw_keep: int, outcomes_keep: int) -> None:
    """resume heals torn ledgers and ends with exactly the uninterrupted run's outcome rows."""
    root = make_demo(tmp_path)
    first = parallax("run", "--config", "config/demo.toml", "--suite", "ceiling", cwd=root)
    run_dir = only_run_dir(root, "ceiling")
    complete = (run_dir / "outcomes.jsonl").read_text(encoding="utf-8").splitlines()
    complete_raw = jsonl(run_dir / "raw.jsonl")
    tear(run_dir / "raw.jsonl", raw_keep)
    tear(run_dir / "outcomes.jsonl", outcomes_keep)
    (run_dir / "disagreement.json").unlink()
    (run_dir / "summary.json").unlink()

    proc = parallax("run", "--resume", run_dir, cwd=root)
    assert proc.returncode == first.returncode, proc.stderr
    no_traceback(proc)
    assert run_dirs(root, "ceiling") == [run_dir]
    resumed = (run_dir / "outcomes.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(resumed) == len(complete)
    assert set(resumed) == set(complete)
    raw = jsonl(run_dir / "raw.jsonl")
    keys = [(e["case_id"], e["side"], e["sample"]) for e in raw]
    assert len(keys) == len(set(keys)) == len(complete_raw)
    for name in ("disagreement.json", "summary.json"):
        assert (run_dir / name).is_file()
    events = [e["event"] for e in log_lines(proc.stdout)]
    assert events[0] == "run.resumed" and events[-1] == "run.finished"


def test_resume_of_a_finished_run_changes_nothing(tmp_path: Path) -> None:
    """Resuming a run that already finished calls nothing and keeps its ledgers as they were."""
    root = make_demo(tmp_path)
    first = parallax("run", "--config", "config/demo.toml", "--suite", "cities", cwd=root)
    run_dir = only_run_dir(root, "cities")
    ledgers = {n: (run_dir / n).read_bytes() for n in ("raw.jsonl", "outcomes.jsonl")}
    disagreement = (run_dir / "disagreement.json").read_bytes()
    proc = parallax("run", "--resume", run_dir, cwd=root)
    assert proc.returncode == first.returncode, proc.stderr
    assert {n: (run_dir / n).read_bytes() for n in ledgers} == ledgers
    assert (run_dir / "disagreement.json").read_bytes() == disagreement


def test_resume_of_a_run_killed_in_its_reports_writes_them(tmp_path: Path) -> None:
    """Killed after its verdict was recorded but before its reports were written, a run is
    finished: a resume writes the missing reports and exits with the recorded code."""
    root = make_demo(tmp_path)
    first = parallax("run", "--config", "config/demo.toml", "--suite", "cities", cwd=root)
    run_dir = only_run_dir(root, "cities")
    report = (run_dir / "report.md").read_bytes()
    recorded = {n: (run_dir / n).read_bytes() for n in ("summary.json", "manifest.json")}
    for name in ("report.md", "report.html"):
        (run_dir / name).unlink()
    proc = parallax("run", "--resume", run_dir, cwd=root)
    assert proc.returncode == first.returncode, proc.stderr
    assert {n: (run_dir / n).read_bytes() for n in recorded} == recorded  # not regraded
    assert (run_dir / "report.md").read_bytes() == report
    assert (run_dir / "report.html").is_file()


def test_retry_unscored_starts_a_child_run(tmp_path: Path) -> None:
    """--retry-unscored writes a new run that keeps the scored rows and re-calls the rest."""
    root = make_demo(tmp_path)
    first = parallax("run", "--config", "config/demo.toml", "--suite", "ceiling", cwd=root)
    parent = only_run_dir(root, "ceiling")
    proc = parallax("run", "--retry-unscored", parent, cwd=root)
    # the recorded timeout is still a timeout on the second try
    assert proc.returncode == first.returncode == 3, proc.stderr
    child = next(d for d in run_dirs(root, "ceiling") if d != parent)
    assert load(child / "manifest.json")["parent"] == parent.name
    rows = set((child / "outcomes.jsonl").read_text(encoding="utf-8").splitlines())
    assert rows == set((parent / "outcomes.jsonl").read_text(encoding="utf-8").splitlines())


def test_samples_are_keyed_in_the_ledgers(tmp_path: Path) -> None:
    """With samples = 2 each case and side gets two rows keyed by sample, and replay matches."""
    root = make_demo(tmp_path)
    config = root / "config" / "demo.toml"
    text = config.read_text(encoding="utf-8")
    line = 'fixtures = "../fixtures/cities.jsonl"\n'
    config.write_text(text.replace(line, line + "samples = 2\n"), encoding="utf-8")
    ran = parallax("run", "--config", config, "--suite", "cities", cwd=root)
    assert ran.returncode == 1, ran.stderr
    run_dir = only_run_dir(root, "cities")
    keys = sorted((r["case_id"], r["side"], r["sample"]) for r in jsonl(run_dir / "outcomes.jsonl"))
    expected = sorted(
        (c, s, n)
        for c in ("city-07", "city-09", "city-11")
        for s in ("reference", "candidate")
        for n in (0, 1)
    )
    assert keys == expected
    assert load(run_dir / "summary.json")["samples"] == 2
    replay = parallax("replay", run_dir, cwd=root)
    assert replay.returncode == 1, replay.stderr
    replayed = next(d for d in run_dirs(root, "cities") if d != run_dir)
    assert (replayed / "outcomes.jsonl").read_bytes() == (run_dir / "outcomes.jsonl").read_bytes()


# --- pin, grade, diff ---------------------------------------------------------------------------


@pytest.mark.parametrize("script", [False, True], ids=["python-m", "console-script"])
def test_pin_prints_seed_004_hashes(tmp_path: Path, script: bool) -> None:
    """pin prints each cities row with its fixture_sha, keys sorted, matching seed 004's rule."""
    proc = parallax("pin", REPO / "fixtures" / "cities.jsonl", cwd=tmp_path, script=script)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    rows = [json.loads(line) for line in lines]
    assert len(rows) == 3
    assert [r["fixture_sha"] for r in rows[:2]] == ["6c4336d172e6e214", "d8c8b2f09aaad00d"]
    assert [r["case_id"] for r in rows] == ["city-07", "city-09", "city-11"]
    for line, row in zip(lines, rows, strict=True):
        assert list(row) == sorted(row)
        assert line == json.dumps(row, sort_keys=True)


def test_grade_ceiling_fixture(tmp_path: Path) -> None:
    """grade on seed 000's rows reports n 6, rates 1/1/0, no alerts, ok, two failures; exit 0."""
    proc = parallax("grade", REPO / "fixtures" / "ceiling.jsonl", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["n"] == 6
    rates = {k: v["pass_rate"] for k, v in report["rates"].items()}
    assert rates == {"easy": 1.0, "medium": 1.0, "stretch": 0.0}
    assert {k: v["n"] for k, v in report["rates"].items()} == {
        "easy": 2,
        "medium": 2,
        "stretch": 2,
    }
    assert report["alerts"] == []
    assert report["ok"] is True
    assert [f["case_id"] for f in report["failures"]] == [
        "stretch-policy-cite",
        "stretch-missing-field",
    ]
    assert all(f["stratum"] == "stretch" and f["reasons"] for f in report["failures"])


def test_grade_threshold_defaults_are_the_configs() -> None:
    """`grade --help` names its defaults without importing the config models; they must be
    the defaults a suite's [thresholds] has."""
    from runner.arguments import GRADE_THRESHOLDS
    from runner.config import Thresholds

    assert {key: Thresholds().model_dump()[key] for key in GRADE_THRESHOLDS} == GRADE_THRESHOLDS


def test_grade_stretch_heavy_file_alerts(tmp_path: Path) -> None:
    """A file whose stretch cases all pass raises ceiling alerts and exits 1."""
    proc = parallax("grade", DATA / "stretch_heavy.jsonl", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert report["alerts"] == ["ceiling", "stretch_too_easy"]
    assert report["ok"] is False
    assert report["failures"] == []


def test_grade_stretch_high_zero_alerts(tmp_path: Path) -> None:
    """--stretch-high 0.0 makes even a failing stretch band too easy: alerts and exit 1."""
    proc = parallax(
        "grade", "--stretch-high", "0.0", REPO / "fixtures" / "ceiling.jsonl", cwd=tmp_path
    )
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert "stretch_too_easy" in report["alerts"]
    assert report["ok"] is False


def test_grade_reads_a_recorded_json_answer_as_a_run_does(tmp_path: Path) -> None:
    """`grade` parses a recorded completion the way a run's adapter does: a fenced JSON answer
    is JSON, and one nested past the bound is no answer (a miss), never a traceback."""
    deep = "[" * 5000 + "]" * 5000
    rows = [
        {
            "id": "fenced",
            "prompt": "p",
            "completion": '```json\n{"sku": "A-1"}\n```',
            "expect": {"json_fields": {"sku": "A-1"}},
        },
        {
            "id": "deep",
            "prompt": "p",
            "completion": deep,
            "expect": {"json_fields": {"a": 1}, "max_chars": 20000},
        },
    ]
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = parallax("grade", path, cwd=tmp_path)
    no_traceback(proc)
    report = json.loads(proc.stdout)
    assert [(f["case_id"], f["reasons"]) for f in report["failures"]] == [
        ("deep", ["answer_not_json"])
    ]
    assert (proc.returncode, report["unscored"]) == (2, 1)


def test_grade_grades_recorded_tool_calls_and_shows_them(tmp_path: Path) -> None:
    """A row's recorded `tool_calls` are graded beside its `completion`: a reply that only
    calls the right tool passes, and a failing case's entry lists its calls with the tool
    misses among its reasons."""
    weather = {
        "type": "function",
        "function": {"name": "get_weather", "parameters": {"type": "object"}},
    }
    wanted = {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}
    rows = [
        {
            "id": "calls-right",
            "prompt": "Weather in Paris?",
            "tools": [weather],
            "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}],
            "expect": wanted,
        },
        {
            "id": "calls-wrong",
            "prompt": "Weather in Paris?",
            "tools": [weather],
            "tool_calls": [
                {"name": "get_weather", "arguments": {"city": "Lyon"}},
                {"name": "drop_tables", "arguments": {}},
            ],
            "expect": wanted,
        },
        {
            "id": "answers-instead",
            "prompt": "Weather in Paris?",
            "tools": [weather],
            "completion": "Sunny.",
            "expect": wanted,
        },
    ]
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = parallax("grade", path, cwd=tmp_path)
    no_traceback(proc)
    report = json.loads(proc.stdout)
    expected = [
        (
            "calls-wrong",
            ["tool_arg_mismatch:get_weather.city", "tool_unknown:drop_tables"],
            [
                {"name": "get_weather", "arguments": {"city": "Lyon"}},
                {"name": "drop_tables", "arguments": {}},
            ],
        ),
        ("answers-instead", ["tool_missing:get_weather"], []),
    ]
    assert expected == [(f["case_id"], f["reasons"], f["tool_calls"]) for f in report["failures"]]
    assert (proc.returncode, report["n"], report["unscored"]) == (0, 3, 0)


PARIS = '{"city": "Paris"}'
# a recorded reply to a case expecting {"city": "Paris"} -> (scored, misses), as both read it
ANSWERS: dict[str, tuple[str, bool, list[str]]] = {
    "bare": (PARIS, True, []),
    "bare-with-whitespace": (f"\n  {PARIS}  \n", True, []),
    "fenced": (f"```json\n{PARIS}\n```", True, []),
    "fenced-untagged": (f"```\n{PARIS}\n```", True, []),
    "fenced-upper-tag-and-space": (f" \n```JSON \n{PARIS}\n```\n", True, []),
    "fence-on-one-line": (f"```{PARIS}```", True, []),
    "array": (f"[{PARIS}]", True, ["field_missing:city"]),
    "wrong-value": ('{"city": "Lyon"}', True, ["field_mismatch:city"]),
    "prose-then-fence": (f"Here it is:\n```json\n{PARIS}\n```", False, ["answer_not_json"]),
    "fence-then-prose": (f"```json\n{PARIS}\n```\nHope this helps!", False, ["answer_not_json"]),
    "two-fences": (f"```json\n{PARIS}\n```\n```json\n{PARIS}\n```", False, ["answer_not_json"]),
    "prose-as-fence-tag": (f"```Here is the JSON:\n{PARIS}\n```", False, ["answer_not_json"]),
    "json-then-prose": (f"{PARIS} as asked", False, ["answer_not_json"]),
    "scalar": ('"Paris"', False, ["answer_not_json"]),
    "empty": ("", False, ["answer_not_json"]),
    "too-deep": ("[" * 200 + "]" * 200, False, ["answer_not_json"]),
}


def test_grade_and_run_read_every_answer_alike(tmp_path: Path) -> None:
    """One rule for what a JSON answer is: for each recorded reply in the table, `grade` and a
    run over the same cases agree on whether it is scored and on its misses (a run stamps an
    unscored one schema `fail` with `answer_not_json`; `grade` lists it unscored, exit 2)."""
    rows = [
        {
            "id": name,
            "prompt": "Which city? Answer as JSON.",
            "completion": reply,
            "expect": {"json_fields": {"city": "Paris"}},
        }
        for name, (reply, _, _) in ANSWERS.items()
    ]
    (tmp_path / "cases.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "parallax.toml").write_text(
        '[endpoints.rec]\nkind = "recorded"\n'
        '[suites.s]\nfixtures = "cases.jsonl"\nreference = "rec"\ncandidate = "rec"\n'
    )
    graded = parallax("grade", "cases.jsonl", cwd=tmp_path)
    ran = parallax("run", "--config", "parallax.toml", cwd=tmp_path)
    no_traceback(graded)
    no_traceback(ran)

    failures = {f["case_id"]: f for f in json.loads(graded.stdout)["failures"]}
    by_grade = {name: (True, []) for name in ANSWERS}
    by_grade.update((n, (f.get("scored", True), f["reasons"])) for n, f in failures.items())
    (run_dir,) = (tmp_path / "runs" / "s").glob("2*")
    outcomes = [json.loads(line) for line in (run_dir / "outcomes.jsonl").read_text().splitlines()]
    by_run = {
        o["case_id"]: (o["schema"] == "ok", o["misses"] if o["schema"] == "ok" else [o["detail"]])
        for o in outcomes
        if o["side"] == "candidate"
    }
    expected = {name: (scored, misses) for name, (_, scored, misses) in ANSWERS.items()}
    assert expected == by_run
    assert expected == by_grade
    assert graded.returncode == 2, graded.stderr


def test_diff_seed_004_ledgers(tmp_path: Path) -> None:
    """diff on seed 004's example ledgers prints its exact counts and exits 3."""
    proc = parallax(
        "diff", DATA / "seed004_accepted.jsonl", DATA / "seed004_shadow.jsonl", cwd=tmp_path
    )
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == (
        '{"other": 1, "schema_miss": 0, "silent_regression": 1, "transport_miss": 1}\n'
    )


def test_diff_of_a_ledger_with_itself_is_clean(tmp_path: Path) -> None:
    """A ledger compared with itself has no misses and no regression: exit 0."""
    ledger = DATA / "seed004_accepted.jsonl"
    proc = parallax("diff", ledger, ledger, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {
        "other": 3,
        "schema_miss": 0,
        "silent_regression": 0,
        "transport_miss": 0,
    }


def test_diff_two_demo_runs(tmp_path: Path) -> None:
    """diff reads parallax's own outcome ledgers: two runs of the same recordings match."""
    root = make_demo(tmp_path)
    parallax("run", "--config", "config/demo.toml", "--suite", "cities", cwd=root)
    parallax("run", "--config", "config/demo.toml", "--suite", "cities", cwd=root)
    first, second = run_dirs(root, "cities")
    proc = parallax("diff", first / "outcomes.jsonl", second / "outcomes.jsonl", cwd=root)
    assert proc.returncode == 0, proc.stderr
    counts = json.loads(proc.stdout)
    assert counts["transport_miss"] == counts["schema_miss"] == counts["silent_regression"] == 0
    by_dirs = parallax("diff", first, second, cwd=root)  # the run dirs name their ledgers
    assert (by_dirs.returncode, json.loads(by_dirs.stdout)) == (0, counts), by_dirs.stderr


# --- several suites and the suite lock ----------------------------------------------------------


def test_a_busy_suite_refuses_the_whole_command_before_any_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A suite another process is running refuses `run` over several suites before the first
    suite is called (exit 64): before, the first suites ran, then the refusal threw their
    verdicts and the JUnit file away."""
    from runner.cli import main
    from runner.lock import suite_lock

    root = make_demo(tmp_path)
    monkeypatch.chdir(root)
    with suite_lock(root / "runs", "cities"):
        code = main(["run", "--config", "config/demo.toml", "--junit", "j.xml"])
    err = capsys.readouterr().err
    assert code == 64 and "'cities' is already running" in err, err
    assert [run_dirs(root, s) for s in SUITES] == [[], [], [], []]


def test_a_suite_taken_mid_command_leaves_the_others_verdicts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A suite taken by another process after the check (a daemon's fire) is refused with
    exit 64 at the end, while the suites that ran keep their summaries and JUnit cases."""
    from runner import lock
    from runner.cli import main

    root = make_demo(tmp_path)
    monkeypatch.chdir(root)
    # the check misses it
    monkeypatch.setattr(lock, "is_locked", lambda runs_dir, suite, part=None: None)
    with lock.suite_lock(root / "runs", "support"):
        code = main(["run", "--config", "config/demo.toml", "--junit", "j.xml"])
    err = capsys.readouterr().err
    assert code == 64 and err.rstrip().splitlines()[-1].endswith("not starting a second run")
    assert [len(run_dirs(root, s)) for s in SUITES] == [1, 0, 1, 1]
    junit = (root / "j.xml").read_text(encoding="utf-8")
    assert 'name="parallax.ceiling"' in junit and 'name="parallax.cities"' in junit
    assert "parallax · ceiling" in err and "parallax · cities" in err


def test_the_printed_summary_says_what_the_exit_code_stands_on(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each reason behind the verdict is on stderr: the cases to review, the flaky ones, how
    many more than are named, the paired test (and whether it gates), the unstratified note,
    and how new cases become gated."""
    from runner.runs.summary import print_summary

    ids = [f"c{i:02d}" for i in range(11)]
    summary = {
        "suite": "s",
        "verdict": "review",
        "exit_code": 1,
        "cases": 14,
        "admitted": 14,
        "unadmitted": 0,
        "gate_counts": {"new_case": 2, "disagreement_changed": 11, "flaky": 1},
        "review": ids,
        "flaky": ["f1"],
        "incomplete": [],
        "retired": ["gone-1"],
        "stratum_alerts": {"reference": [], "candidate": []},
        "strata_note": "unstratified suite: no case names a stratum, detector skipped",
        "paired": {"overall": {"text": "candidate worse overall: -30 points [-50, -10]"}},
        "fail_on": ["significant_regression"],
    }
    print_summary(summary, Path("runs/s/r1"))
    lines = capsys.readouterr().err.splitlines()
    assert "  review: c00, c01, c02, c03, c04, c05, c06, c07 (+3 more)" in lines
    assert "  flaky: f1" in lines
    assert "  retired: gone-1" in lines
    assert "  unstratified suite: no case names a stratum, detector skipped" in lines
    assert "  paired: candidate worse overall: -30 points [-50, -10] (gates: fail_on)" in lines
    assert any("2 new case(s)" in line and "parallax promote runs/s/r1" in line for line in lines)


def test_the_printed_summary_shows_hidden_characters_as_escapes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A case id with a right-to-left override, a zero-width space, a NUL or a newline cannot
    disguise itself or forge a line of the summary: each shows as its escape, on the line that
    names it."""
    from runner.runs.summary import print_summary

    summary = {
        "suite": "s\u202e",
        "verdict": "review",
        "exit_code": 1,
        "cases": 3,
        "admitted": 3,
        "unadmitted": 0,
        "gate_counts": {"disagreement_changed": 3},
        "review": ["invoice\u202egpj.exe", "nul\x00id", "two\n  run dir: /etc", "ref\u200bund"],
    }
    print_summary(summary, Path("runs/s/r1"))
    err = capsys.readouterr().err
    assert "\u202e" not in err and "\x00" not in err and "\u200b" not in err
    lines = err.splitlines()
    assert lines[0] == "parallax · s\\u202e: REVIEW (exit 1)"
    review = "  review: invoice\\u202egpj.exe, nul\\x00id, two\\n  run dir: /etc, ref\\u200bund"
    assert review in lines
    assert [line for line in lines if line.startswith("  run dir:")] == ["  run dir: runs/s/r1"]


def test_history_text_shows_hidden_characters_as_escapes(tmp_path: Path) -> None:
    """`history` prints served models (what an endpoint says) and case ids: a bidi control
    or a control character in one shows as its escape."""
    from runner.history import format_text

    report = {
        "suite": "s",
        "suite_dir": "runs/s",
        "runs": [],
        "ceiling_candidates": [{"case_id": "invoice\u202egpj.exe\nforged", "quiet_runs": 3}],
        "retire_after": 2,
        "nights": 3,
        "model_changes": [
            {"at": "2026-11-30T02:00:00", "side": "candidate", "from": ["a"], "to": ["b\x1b[2J"]}
        ],
    }
    text = format_text(report)
    assert "    invoice\\u202egpj.exe\\nforged  (3 runs)" in text.splitlines()
    assert "candidate: a -> b\\x1b[2J" in text


def test_a_replay_prints_its_run_dir_as_the_user_can_type_it(tmp_path: Path) -> None:
    """A replay's run dir comes from the absolute config path its parent recorded; printed,
    it is relative to where the user stands, as `run` prints it."""
    root = make_demo(tmp_path)
    parallax("run", "--config", "config/demo.toml", "--suite", "cities", cwd=root)
    proc = parallax("replay", only_run_dir(root, "cities"), cwd=root)
    [shown] = [line for line in proc.stderr.splitlines() if line.startswith("  run dir: ")]
    assert shown.startswith("  run dir: runs/cities/"), proc.stderr


def test_a_grader_that_raises_on_both_sides_is_named(tmp_path: Path) -> None:
    """A custom grader that raises gives both sides the same `grader_error` miss, so no gate
    class sees it: the summary names the case apart (summary.json and stderr)."""
    root = make_demo(tmp_path)
    graders = root / "fixtures" / "graders" / "support.py"
    text = graders.read_text(encoding="utf-8")
    graders.write_text(
        text.replace(
            "def grade_tracking(text: str, expect: Mapping[str, Any]) -> list[str]:\n",
            "def grade_tracking(text: str, expect: Mapping[str, Any]) -> list[str]:\n"
            '    raise ValueError("a broken grader")\n',
        ),
        encoding="utf-8",
    )
    proc = parallax("run", "--config", "config/demo.toml", "--suite", "support", cwd=root)
    summary = json.loads((only_run_dir(root, "support") / "summary.json").read_text())
    assert summary["grader_errors"] == ["tool.tracking.missing_carrier"], proc.stderr
    assert "  grader errors: tool.tracking.missing_carrier" in proc.stderr.splitlines()


@pytest.mark.parametrize(("suite", "verdict", "code"), [("cities", 1, 0), (None, 3, 2)])
def test_exit_zero_on_review_clears_only_the_review_bit(
    tmp_path: Path, suite: str | None, verdict: int, code: int
) -> None:
    """With --exit-zero-on-review a review run exits 0 and review+incomplete exits 2, while
    summary.json and run.finished keep the verdict's own code for alerting."""
    root = make_demo(tmp_path)
    only = ("--suite", suite) if suite else ()
    plain = parallax("run", "--config", "config/demo.toml", *only, cwd=root)
    assert plain.returncode == verdict
    proc = parallax("run", "--config", "config/demo.toml", *only, "--exit-zero-on-review", cwd=root)
    assert proc.returncode == code, proc.stderr
    finished = [json.loads(line) for line in proc.stdout.splitlines()]
    codes = [e["exit_code"] for e in finished if e["event"] == "run.finished"]
    assert max(codes) == verdict
    summaries = [json.loads((d / "summary.json").read_text()) for d in run_dirs(root, "cities")]
    assert [s["exit_code"] for s in summaries] == [1, 1]


# --- a bug is exit 70, never 1 ------------------------------------------------------------


def test_a_bug_after_calls_began_exits_70_and_leaves_a_run_dir_that_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An exception no input explains, raised once replies arrive (as a 401-digit usage count
    once raised OverflowError in the cost math), exited 1 with a traceback, which a job reads
    as "review needed". It is one line and exit 70, one `run.failed` line carries the
    traceback and the run dir, and the run dir resumes to the run it would have been."""
    from runner.cli import main
    from runner.gate import Folds

    root = make_demo(tmp_path)
    monkeypatch.chdir(root)

    def broken(self: Folds, *args: Any) -> None:
        raise OverflowError("int too large to convert to float")

    with monkeypatch.context() as patched:
        patched.setattr(Folds, "add", broken)
        code = main(["run", "--config", "config/demo.toml", "--suite", "cities"])
    out, err = capsys.readouterr()
    run_dir = only_run_dir(root, "cities")
    assert code == 70
    (line,) = err.splitlines()  # one line on stderr, no traceback there
    assert line.startswith(
        "parallax: internal error (a bug in parallax), OverflowError: int too large to "
        "convert to float; finish the run with `"
    )
    assert line.endswith(f"run --resume {run_dir.relative_to(root)}`")
    (failed,) = [row for row in log_lines(out) if row["event"] == "run.failed"]
    assert (failed["exit_code"], failed["error"], failed["run_dir"]) == (
        70,
        "InternalError",
        str(run_dir.relative_to(root)),
    )
    assert "OverflowError" in failed["traceback"] and "in broken" in failed["traceback"]
    assert load(run_dir / "manifest.json")["finished_at"] is None
    assert jsonl(run_dir / "raw.jsonl")  # calls began: their exchanges are kept

    code = main(["run", "--config", "config/demo.toml", "--resume", str(run_dir)])
    capsys.readouterr()
    assert code in (0, 1, 2, 3)
    fresh = main(["run", "--config", "config/demo.toml", "--suite", "cities"])
    capsys.readouterr()
    (other,) = (d for d in run_dirs(root, "cities") if d != run_dir)
    assert (code, gates(run_dir)) == (fresh, gates(other))


def test_a_bugs_traceback_keeps_its_own_frame_whatever_else_its_task_group_carried() -> None:
    """The traceback a bug's log line carries is cut to a bound. Cut from the whole task
    group's text, a group of a few long errors (the streams the bug broke) pushed out the one
    frame a bug report needs, the bug's own. It is the first cause's trace, then one line
    naming the rest."""
    import traceback

    import anyio

    from runner.errors import InternalError, bug_trace

    def the_bug() -> None:
        raise OverflowError("int too large to convert to float")

    def a_broken_stream() -> None:  # a long trace, as each stream's error has in a run
        raise anyio.BrokenResourceError("x" * 1500)

    caught: list[Exception] = []
    for _ in range(4):  # one bug, then three broken streams
        try:
            a_broken_stream() if caught else the_bug()
        except Exception as exc:
            caught.append(exc)
    group = ExceptionGroup("unhandled errors in a TaskGroup", caught)
    assert "in the_bug" not in "".join(traceback.format_exception(group))[-4000:]  # the old cut

    found = bug_trace(InternalError(ExceptionGroup("outer", [group])))
    assert len(found) <= 4100
    assert "in the_bug" in found and "OverflowError: int too large" in found
    assert found.endswith(
        "(raised in a task group with 3 other errors: "
        "BrokenResourceError, BrokenResourceError, BrokenResourceError)\n"
    )
    assert bug_trace(caught[0]) == "".join(traceback.format_exception(caught[0]))


def test_a_bug_in_a_command_without_a_run_exits_70_with_its_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Whatever the command, a bug is exit 70; one whose stdout is data has no log line to
    carry the traceback, so it is on stderr, above the one line that names the bug."""
    from runner import diff
    from runner.cli import main

    root = make_demo(tmp_path)
    monkeypatch.chdir(root)
    (root / "a.jsonl").write_text("", "utf-8")

    def broken(*args: Any) -> None:
        raise KeyError("side")

    monkeypatch.setattr(diff, "compare", broken)
    code = main(["diff", "a.jsonl", "a.jsonl"])
    out, err = capsys.readouterr()
    assert (code, out) == (70, "")
    assert err.startswith("Traceback (most recent call last):") and "in broken" in err
    assert err.splitlines()[-1] == "parallax: internal error (a bug in parallax), KeyError: 'side'"
