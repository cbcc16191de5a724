"""`parallax init`: a starter suite that validates with no key, runs end to end against a real
OpenAI-compatible server (llmock) and promotes with the commands it prints, and that a second
`init` leaves exactly as it was."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from llmockkit import LlmockServer, Protocol

from runner.arguments import INIT_PROVIDERS
from runner.scaffold import CONFIG_NAME, Provider

PARALLAX = [sys.executable, "-m", "runner"]
KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "REF_MODEL", "CAND_MODEL")
STARTER = ("parallax.toml", "cases.jsonl", "graders.py", "snapshots/.gitkeep", ".gitignore")


def env_without_keys(**extra: str) -> dict[str, str]:
    """The caller's environment with no provider key, base URL or model set, and none of the
    session's PARALLAX_ variables; loopback kept off any proxy."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARALLAX_") and k not in KEYS}
    env["NO_PROXY"] = "127.0.0.1"
    return {**env, **extra}


def parallax(
    *args: str | Path, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PARALLAX, *map(str, args)],
        cwd=cwd,
        env=env or env_without_keys(),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def shell(line: str, *, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A printed command line pasted into a POSIX shell, as a user does."""
    return subprocess.run(
        ["/bin/sh", "-c", line],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def next_commands(stdout: str) -> list[str]:
    """The three command lines `init` prints after `next:`."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("next:"))
    return [line.strip() for line in lines[start + 1 : start + 4]]


def run_dirs(suite_dir: Path) -> list[Path]:
    """A suite's run directories, oldest first (a lock file is no run)."""
    return sorted(p for p in suite_dir.iterdir() if p.is_dir())


def tree(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under `root` with its bytes and modification time."""
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_the_providers_in_help_are_the_scaffold_providers() -> None:
    """`init --help` names the providers without importing the scaffold: the same closed set."""
    assert tuple(p.value for p in Provider) == INIT_PROVIDERS


@pytest.mark.parametrize("provider", [p.value for p in Provider])
def test_init_writes_a_starter_that_validates_with_no_key_set(
    tmp_path: Path, provider: str
) -> None:
    """The starter holds two cases in every stratum, one tool case with its tools, one
    structured-output case checked by its schema and fields, and one case graded by the
    suite's custom grader; `validate` passes it with no key in the environment and says, as a
    note, which key a run will need."""
    proc = parallax("init", "suite", "--provider", provider, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    root = tmp_path / "suite"
    assert sorted(tree(root)) == sorted(STARTER)
    assert [f"wrote suite/{name}" for name in STARTER] == proc.stdout.splitlines()[: len(STARTER)]
    rows = [json.loads(line) for line in (root / "cases.jsonl").read_text().splitlines()]
    assert min(Counter(row["stratum"] for row in rows).values()) >= 2
    assert set(Counter(row["stratum"] for row in rows)) == {"easy", "medium", "stretch"}
    [tool] = [row for row in rows if "tools" in row]
    assert tool["expect"]["tool_calls"][0]["name"] == tool["tools"][0]["function"]["name"]
    [structured] = [row for row in rows if "response_format" in row]
    assert structured["response_format"]["type"] == "json_schema"
    assert {"json_schema", "json_fields"} <= set(structured["expect"])
    [graded] = [row for row in rows if "grader" in row]
    assert f"def {graded['grader']}(" in (root / "graders.py").read_text()
    assert "runs/" in (root / ".gitignore").read_text().splitlines()

    checked = parallax("validate", "--config", f"suite/{CONFIG_NAME}", cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.strip() == f"suite/{CONFIG_NAME}: ok (1 suite(s), {len(rows)} case(s))"
    if provider == "openai-compatible":  # a local server wants no key
        assert checked.stderr == ""
    else:
        variable = f"{provider.upper()}_API_KEY"
        [note] = checked.stderr.splitlines()  # one note: both endpoints read one variable
        assert note == (
            f"parallax: note: suite/{CONFIG_NAME}: endpoints.reference.api_key_env: "
            f"environment variable {variable} is not set: validate needs no key, a run does"
        )


@pytest.mark.slow
def test_the_printed_commands_run_the_starter_end_to_end_against_a_local_server(
    tmp_path: Path, llmock: LlmockServer
) -> None:
    """Pointed at a real OpenAI-compatible server by OPENAI_BASE_URL, the three commands init
    prints work as printed from where the user stands: validate, a first run in which every
    call is scored (its tool call and JSON answer too) and every case is new, and a promote;
    the next run is gated against that snapshot."""
    env = env_without_keys(OPENAI_BASE_URL=llmock.base_url(Protocol.OPENAI))
    proc = parallax("init", "nightly", "--provider", "openai-compatible", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    validate, run, promote = next_commands(proc.stdout)

    assert shell(validate, cwd=tmp_path, env=env).returncode == 0
    first = shell(run, cwd=tmp_path, env=env)
    assert first.returncode in (0, 1), first.stderr  # 1: llmock's answers miss the strata
    [run_dir] = run_dirs(tmp_path / "nightly" / "runs" / "starter")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["admitted"], summary["unadmitted"]) == (7, 0)
    assert summary["gate_counts"]["new_case"] == 7
    rows = (run_dir / "outcomes.jsonl").read_text().splitlines()
    kinds = {row["case_id"]: row for row in map(json.loads, rows)}
    assert kinds["medium-weather-tool"]["schema"] == "ok"
    assert kinds["medium-order-json"]["schema"] == "ok"

    promoted = shell(promote, cwd=tmp_path, env=env)
    assert promoted.returncode == 0, promoted.stderr
    assert len(json.loads(promoted.stdout)["added"]) == 7
    snapshot = json.loads((tmp_path / "nightly" / "snapshots" / "starter.json").read_text())
    assert len(snapshot["cases"]) == 7

    second = shell(run, cwd=tmp_path, env=env)
    assert second.returncode in (0, 1), second.stderr
    # named to the second, the two runs may share one: the second is the dir that is new
    [latest] = set(run_dirs(tmp_path / "nightly" / "runs" / "starter")) - {run_dir}
    gated = json.loads((latest / "summary.json").read_text())["gate_counts"]
    assert gated["new_case"] == 0 and sum(gated.values()) == 7


def test_a_second_init_changes_nothing_and_lists_each_file_it_left_alone(tmp_path: Path) -> None:
    """Run twice, init writes nothing the second time and exits 0, naming every file it left
    alone; an edited file and a foreign .gitignore are kept as they are, and said to differ."""
    assert parallax("init", "--provider", "openai", cwd=tmp_path).returncode == 0
    before = tree(tmp_path)
    again = parallax("init", "--provider", "openai", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert tree(tmp_path) == before
    listed = again.stdout.splitlines()[: len(STARTER) + 1]
    assert listed == [
        *(f"left alone {name} (already as init writes it)" for name in STARTER),
        "nothing to write: every file of the starter is there already",
    ]

    (tmp_path / "cases.jsonl").write_text('{"id": "mine", "prompt": "hi"}\n')
    (tmp_path / ".gitignore").write_text("*.pyc\n")
    (tmp_path / "graders.py").unlink()
    third = parallax("init", "--provider", "anthropic", cwd=tmp_path)
    assert third.returncode == 0, third.stderr
    assert (tmp_path / "cases.jsonl").read_text() == '{"id": "mine", "prompt": "hi"}\n'
    assert (tmp_path / ".gitignore").read_text() == "*.pyc\n"
    assert (tmp_path / "graders.py").read_bytes() == before["graders.py"][0]
    lines = third.stdout.splitlines()
    assert "wrote graders.py" in lines
    assert (
        "left alone parallax.toml (it exists and differs from the starter's; remove it to "
        "get that one)" in lines
    )
    assert "left alone .gitignore (it differs and does not ignore runs/: add a line `runs/`)" in (
        lines
    )


def test_init_into_a_path_that_is_a_file_is_one_line_and_exit_64(tmp_path: Path) -> None:
    """A DIR that is a file cannot hold the starter: one line naming the path, exit 64."""
    (tmp_path / "taken").write_text("")
    proc = parallax("init", "taken", "--provider", "openai", cwd=tmp_path)
    assert proc.returncode == 64, proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith("parallax: taken/parallax.toml: cannot write:"), line
    assert proc.stdout == ""


def test_init_without_a_provider_is_a_usage_error(tmp_path: Path) -> None:
    """The provider decides where calls go and who is billed: init never guesses it."""
    proc = parallax("init", cwd=tmp_path)
    assert proc.returncode == 64
    assert "--provider" in proc.stderr
    assert not list(tmp_path.iterdir())
