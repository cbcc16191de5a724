"""The log stream as people consume it: a reader that goes away, and a job that never started.

Every command runs as a real child process, but for the console renderer, checked in-process
for what a person at a terminal sees. A closed stdout is a real pipe whose read end is
closed, before the child starts or while it runs, so each write after that fails with EPIPE
exactly as under `parallax run | head -n 1`.
"""

from __future__ import annotations

import json
import math
import os
import select
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from faultserver import FaultServer
from relkit import PARALLAX, SECRET_PREFIX, endpoint_toml, write_cases, write_config

EXIT_CLOSED_PIPE = 141
EXIT_STDOUT_CLOSED = 74


def _recorded_suite(root: Path, n: int = 3) -> Path:
    """An offline suite whose every case passes on both sides: a clean run, exit 0."""
    rows = [
        {"id": f"c{i}", "prompt": f"q{i}", "expect": {"must_include": ["yes"]}, "completion": "yes"}
        for i in range(n)
    ]
    (root / "cases.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = root / "parallax.toml"
    config.write_text(
        'runs_dir = "runs"\nsnapshots_dir = "snapshots"\n'
        '[endpoints.ref]\nkind = "recorded"\nmodel = "ref"\n'
        '[endpoints.cand]\nkind = "recorded"\nmodel = "cand"\n'
        '[suites.s]\nfixtures = "cases.jsonl"\nreference = "ref"\ncandidate = "cand"\n'
    )
    return config


@contextmanager
def _closed_stdout() -> Iterator[int]:
    """The write end of a pipe nobody reads: its read end is closed already."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        yield write_end
    finally:
        os.close(write_end)


def _run_closed(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    with _closed_stdout() as stdout:
        return subprocess.run(
            [*PARALLAX, *map(str, args)],
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
            timeout=60,
            check=False,
        )


def _run(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PARALLAX, *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
        check=False,
    )


def _events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


# --- a reader that goes away -------------------------------------------------------------------


def test_a_run_whose_stdout_is_closed_finishes_with_its_verdict(tmp_path: Path) -> None:
    """`parallax run | head -n 0`: the run writes its whole run dir, exits with its verdict
    (0, not a traceback's 1) and still prints its human summary on stderr."""
    config = _recorded_suite(tmp_path)
    done = _run_closed("run", "--config", config, cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr
    assert "run dir: runs/s/" in done.stderr
    (run_dir,) = (p for p in (tmp_path / "runs" / "s").iterdir() if p.is_dir())
    for name in ("summary.json", "report.html", "report.md", "outcomes.jsonl"):
        assert (run_dir / name).is_file(), name
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["exit_code"], summary["verdict"]) == (0, "clean")


@pytest.mark.parametrize(
    "command",
    [["pin", "big.jsonl"], ["history", "--json"], ["history"], ["validate"]],
    ids=["pin", "history-json", "history", "validate"],
)
def test_a_data_command_whose_reader_went_away_stops_quietly(
    tmp_path: Path, command: list[str]
) -> None:
    """`pin | head` and friends: exit 141 (as a tool ended by SIGPIPE), nothing on stderr."""
    config = _recorded_suite(tmp_path)
    assert _run("run", "--config", config, cwd=tmp_path).returncode == 0
    rows = ({"id": f"r{i}", "prompt": "p" * 100} for i in range(20_000))
    (tmp_path / "big.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    env_config = [] if command[0] == "pin" else ["--config", str(config)]
    done = _run_closed(*command, *env_config, cwd=tmp_path)

    assert (done.returncode, done.stderr) == (EXIT_CLOSED_PIPE, "")


def _read_until(fd: int, found: Any, timeout: float = 30.0) -> None:
    """Read JSON lines from `fd` until one satisfies `found`; bounded."""
    deadline = time.monotonic() + timeout
    buf = b""
    while True:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        assert ready, "no such line in time"
        chunk = os.read(fd, 65536)
        assert chunk, "stdout closed first"
        *lines, buf = (buf + chunk).split(b"\n")
        if any(found(json.loads(line)) for line in lines):
            return


@pytest.mark.slow
def test_serve_stops_as_on_sigterm_when_its_stdout_is_closed(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """The log stream people alert on is gone: the daemon stops as on SIGTERM (the run in
    flight gets the grace, then stays resumable), says so in JSON on stderr, and exits 74 for
    its supervisor to restart it; never 1, never a traceback."""
    write_cases(tmp_path, 2)
    endpoints = endpoint_toml("ref", fault_server.url("ok", "ref"))
    endpoints += endpoint_toml("cand", fault_server.url("ok", "cand"))
    endpoints += endpoint_toml("held", fault_server.url("gate:held", "held"), deadline=60, read=60)
    suites = (
        '[suites.slow]\nfixtures = "cases.jsonl"\nreference = "ref"\ncandidate = "held"\n'
        'schedule = "0 3 * * *"\n'
        '[suites.tick]\nfixtures = "cases.jsonl"\nreference = "ref"\ncandidate = "cand"\n'
        'schedule = "* * * * * *"\n'  # a log line every second
    )
    config = write_config(
        tmp_path, endpoints, suites, top="serve_grace_seconds = 0.5\nserve_heartbeat_seconds = 0.2"
    )
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(
        [*PARALLAX, "serve", "--config", str(config), "--run-now"],
        stdout=write_end,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    os.close(write_end)
    try:
        _read_until(read_end, lambda e: e["event"] == "run.started" and e["suite"] == "slow")
        os.close(read_end)  # the reader goes away while slow's run waits for its candidate
        read_end = -1
        code = proc.wait(timeout=30)
        assert proc.stderr is not None
        stderr = proc.stderr.read()
    finally:
        if read_end >= 0:
            os.close(read_end)
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        if proc.stderr is not None:
            proc.stderr.close()

    assert code == EXIT_STDOUT_CLOSED, stderr
    assert "Traceback" not in stderr
    said = _events(stderr)
    assert said[-1]["event"] == "scheduler.stopped"
    assert said[-1]["reason"] == "stdout_closed"
    [stopping] = [e for e in said if e["event"] == "scheduler.stopping"]
    assert stopping["reason"] == "stdout_closed"
    # the per-second suite's run may be cut too if its calls are still out at the grace's end
    [cancelled] = [
        e for e in said if e["event"] == "scheduler.job_cancelled" and e["suite"] == "slow"
    ]
    assert cancelled["resumable"] is True
    manifest = json.loads((Path(cancelled["run_dir"]) / "manifest.json").read_text())
    assert manifest["finished_at"] is None


# --- a job that never started ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "code", "error", "says"),
    [
        (["run", "--config", "missing.toml"], 78, "ConfigError", "no such config file"),
        (["run", "--bogus"], 64, "UsageError", "unrecognized arguments: --bogus"),
        (["replay", "runs/s/none"], 64, "UsageError", "runs/s/none"),
        (["serve", "--config", "parallax.toml"], 78, "ConfigError", "no suite has a schedule"),
        (["run", "--config", "bad.toml"], 65, "FixtureError", "bad.jsonl:1"),
    ],
    ids=["run-config", "run-usage", "replay-usage", "serve-config", "run-fixture"],
)
def test_a_command_that_never_started_leaves_one_run_failed_line(
    tmp_path: Path, args: list[str], code: int, error: str, says: str
) -> None:
    """run, replay and serve refused at start write one `run.failed` JSON line on stdout for
    log-based alerting (exit_code, error, message), beside the one human line on stderr."""
    _recorded_suite(tmp_path)
    (tmp_path / "bad.jsonl").write_text('{"id": "x"}\n')
    (tmp_path / "bad.toml").write_text(
        (tmp_path / "parallax.toml").read_text().replace("cases.jsonl", "bad.jsonl")
    )
    done = _run(*args, cwd=tmp_path)

    assert done.returncode == code, done.stderr
    [line] = done.stdout.splitlines()
    failed = json.loads(line)
    assert (failed["event"], failed["level"], failed["command"]) == ("run.failed", "error", args[0])
    assert (failed["exit_code"], failed["error"]) == (code, error)
    assert says in failed["message"]
    [human] = done.stderr.splitlines()
    assert says in human and "Traceback" not in human


def test_run_failed_is_scrubbed_like_every_log_line(tmp_path: Path) -> None:
    """A bearer token in what failed (here, the config's path) is masked in run.failed as in
    the human line."""
    token = f"{SECRET_PREFIX}0123456789abcdef"
    where = tmp_path / f"Bearer {token}"
    where.mkdir()
    done = _run("run", "--config", where / "parallax.toml", cwd=tmp_path)

    assert done.returncode == 78
    assert token not in done.stdout and token not in done.stderr
    [failed] = _events(done.stdout)
    assert "Bearer ***" in failed["message"]


@pytest.mark.parametrize(
    "args",
    [["pin", "missing.jsonl"], ["diff", "a.jsonl", "b.jsonl"], ["history", "--config", "x.toml"]],
    ids=["pin", "diff", "history"],
)
def test_commands_whose_stdout_is_data_write_no_log_line(tmp_path: Path, args: list[str]) -> None:
    """pin, diff and history print data on stdout: a failure leaves it empty."""
    done = _run(*args, cwd=tmp_path)

    assert done.returncode in (64, 78), done.stderr
    assert done.stdout == ""


# --- a person at a terminal ------------------------------------------------------------------


def test_the_console_shows_hidden_characters_in_a_value_as_escapes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """On a terminal (the console renderer) a bidi control or a NUL in a plain value, such as a
    case id from a fixture, is shown as its escape, as the summary and the reports show it: it
    can neither reorder nor hide the rest of the line."""
    from runner import logs

    logs.configure(json=False)
    logs.get_logger().warning(logs.ALERT_SCHEMA, case="invoice\u202egpj.exe", model="a\x00b")
    line = capsys.readouterr().out

    assert "\u202e" not in line and "\x00" not in line
    assert "case=invoice\\u202egpj.exe" in line and "model=a\\x00b" in line


def test_a_log_line_never_holds_a_number_that_is_not_finite(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A log line is JSON a log shipper must parse: a figure that is not finite (from whatever
    a server sent) is written as null, never as the `Infinity` no JSON parser reads."""
    from runner import logs

    logs.configure(json=True)
    logs.get_logger().info(logs.RUN_FINISHED, cost_usd={"candidate": math.inf}, ratio=math.nan)
    line = json.loads(capsys.readouterr().out, parse_constant=pytest.fail)
    assert (line["cost_usd"], line["ratio"]) == ({"candidate": None}, None)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Bearer sk-abc.def", "Bearer ***"),
        ("auth: bEaReR tok_123/x=", "auth: bEaReR ***"),
        ("BEARER\tabc", "BEARER\t***"),
        ("no token here", "no token here"),
        ("bear er abc", "bear er abc"),
    ],
)
def test_a_bearer_token_is_masked_in_any_case(text: str, expected: str) -> None:
    """Text naming a bearer token in any letter case has it masked; text naming none is
    given back as it was."""
    from runner.logs import scrub_text

    assert scrub_text(text) == expected
