"""The next command parallax prints works when pasted, as printed, where the user stands."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = Path(sys.executable).parent / "parallax"  # this venv's console script
HINT = re.compile(r"then `([^`]+)`")


def path_without_parallax() -> str:
    """The caller's PATH less every directory that holds a `parallax`: a fresh clone's shell."""
    dirs = os.environ.get("PATH", "").split(os.pathsep)
    return os.pathsep.join(d for d in dirs if d and not (Path(d) / "parallax").exists())


def shell(line: str, *, cwd: Path, path: str) -> subprocess.CompletedProcess[str]:
    """`line` exactly as printed, run by a shell."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARALLAX_")}
    return subprocess.run(
        ["bash", "-c", line],
        cwd=cwd,
        env={**env, "PATH": path},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def promote_hint(stderr: str) -> str:
    (hint,) = [m.group(1) for m in map(HINT.search, stderr.splitlines()) if m and "promote" in m[1]]
    return hint


def copy_demo(root: Path) -> Path:
    for name in ("config", "fixtures", "snapshots"):
        shutil.copytree(REPO / name, root / name)
    return root


@pytest.mark.parametrize("started", ["module", "script", "on-path"])
def test_the_promote_hint_runs_as_printed(tmp_path: Path, started: str) -> None:
    """Started as `python -m runner`, as a console script PATH does not find, or as the
    `parallax` PATH finds, the printed promote command runs from the same shell and place."""
    root = copy_demo(tmp_path)
    path = path_without_parallax()
    if started == "on-path":
        path = f"{SCRIPT.parent}{os.pathsep}{path}"
    program = {
        "module": f"{sys.executable} -m runner",
        "script": str(SCRIPT),
        "on-path": "parallax",
    }[started]
    run = shell(f"{program} run --config config/demo.toml --suite cities", cwd=root, path=path)
    assert run.returncode == 1, run.stderr
    hint = promote_hint(run.stderr)
    assert hint.startswith(f"{program} promote runs/cities/")
    promoted = shell(hint, cwd=root, path=path)
    assert promoted.returncode == 0, (hint, promoted.stderr)
    assert '"city-' in promoted.stdout  # the snapshot changes it wrote


def test_a_program_under_the_working_directory_is_named_relative_to_it(tmp_path: Path) -> None:
    """`.venv/bin/parallax run ...` (as `make demo` runs it) gets `.venv/bin/parallax promote
    runs/...` back, symlinked venv and all, not a name the shell cannot find."""
    root = copy_demo(tmp_path)
    (root / ".venv").symlink_to(Path(sys.executable).parent.parent)
    path = path_without_parallax()
    run = shell(
        ".venv/bin/parallax run --config config/demo.toml --suite cities", cwd=root, path=path
    )
    hint = promote_hint(run.stderr)
    assert hint.startswith(".venv/bin/parallax promote runs/cities/"), hint
    assert shell(hint, cwd=root, path=path).returncode == 0


def test_the_retry_hint_of_a_refused_promote_runs_as_printed(tmp_path: Path) -> None:
    """`promote` of a run with unscored cases names the `--retry-unscored` command to run, in
    a form that runs from here."""
    root = copy_demo(tmp_path)
    path = path_without_parallax()
    run = shell(f"{SCRIPT} run --config config/demo.toml --suite ceiling", cwd=root, path=path)
    assert run.returncode in {2, 3}, run.stderr
    (run_dir,) = [p for p in (root / "runs" / "ceiling").iterdir() if p.is_dir()]
    refused = shell(f"{SCRIPT} promote runs/ceiling/{run_dir.name}", cwd=root, path=path)
    assert refused.returncode == 2
    (hint,) = re.findall(r"rerun them \(`([^`]+)`\)", refused.stderr)
    assert hint == f"{SCRIPT} run --retry-unscored runs/ceiling/{run_dir.name}"
    retried = shell(hint, cwd=root, path=path)
    assert retried.returncode in {0, 1, 2, 3}, retried.stderr
    assert len([p for p in (root / "runs" / "ceiling").iterdir() if p.is_dir()]) == 2


SUGGESTED = re.compile(r"`([^`]*\b(?:run|promote|replay|report) [^`]*)`")


def suggestions(stderr: str) -> list[str]:
    """Every command line between backticks the output suggests running."""
    return SUGGESTED.findall(stderr)


def ran_as_printed(line: str, root: Path) -> subprocess.CompletedProcess[str]:
    """`line` run from `root` by a shell: it must do its work, not refuse (0 to 3)."""
    done = shell(line, cwd=root, path=path_without_parallax())
    assert "Traceback" not in done.stderr, (line, done.stderr)
    assert done.returncode in {0, 1, 2, 3}, (line, done.returncode, done.stderr)
    return done


def test_every_command_the_demo_s_summaries_suggest_runs_as_printed(tmp_path: Path) -> None:
    """Each command a run's summary names (a retry of the unscored cases, a promote, with
    --allow-partial or not) does its work when pasted: none is refused."""
    root = copy_demo(tmp_path)
    run = shell(f"{SCRIPT} run --config config/demo.toml", cwd=root, path=path_without_parallax())
    assert run.returncode == 3, run.stderr
    found = suggestions(run.stderr)
    assert {line.split()[1] for line in found} == {"run", "promote"}, found
    for line in found:
        ran_as_printed(line, root)


def _killed(root: Path) -> Path:
    """A cities run made to read as killed before its end: no verdict, its last call missing."""
    shell(f"{SCRIPT} run --config config/demo.toml --suite cities", cwd=root, path=os.defpath)
    (run_dir,) = [p for p in (root / "runs" / "cities").iterdir() if p.is_dir()]
    for name in ("summary.json", "disagreement.json", "report.md", "report.html"):
        (run_dir / name).unlink()
    for name in ("raw.jsonl", "outcomes.jsonl"):
        lines = (run_dir / name).read_text(encoding="utf-8").splitlines(keepends=True)
        (run_dir / name).write_text("".join(lines[:-1]), encoding="utf-8")
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    (run_dir / "manifest.json").write_text(json.dumps({**manifest, "finished_at": None}))
    return run_dir


def test_a_replay_of_a_killed_run_suggests_commands_that_work(tmp_path: Path) -> None:
    """The replay of a killed run reads the call its parent never made as unscored and says
    `run --retry-unscored REPLAY` calls it: run as printed, it did ("every row was scored;
    nothing to retry", exit 64), and now calls it and scores every case. `--resume` of the
    replay is refused (64, as the README says; it exited with the replay's verdict) and
    names the command that replays again, which runs as printed."""
    root = copy_demo(tmp_path)
    killed = _killed(root)
    replay = shell(f"{SCRIPT} replay {killed}", cwd=root, path=path_without_parallax())
    assert replay.returncode in {2, 3}, replay.stderr
    [retry] = [line for line in suggestions(replay.stderr) if "--retry-unscored" in line]
    before = {p for p in (root / "runs" / "cities").iterdir() if p.is_dir()}
    ran_as_printed(retry, root)
    # run dirs are named to the second: the retry may share the replay's second, so it is
    # found as the one new dir, not as the greatest name
    (newest,) = {p for p in (root / "runs" / "cities").iterdir() if p.is_dir()} - before
    summary = json.loads((newest / "summary.json").read_text(encoding="utf-8"))
    assert (summary["mode"], summary["unadmitted"]) == ("retry", 0)
    replayed = retry.split()[-1]
    resume = shell(f"{SCRIPT} run --resume {replayed}", cwd=root, path=path_without_parallax())
    assert (resume.returncode, len(resume.stderr.splitlines())) == (64, 1), resume.stderr
    assert "a replay calls nothing, so there is nothing to resume" in resume.stderr
    [again] = suggestions(resume.stderr)
    assert again.split()[1:] == ["replay", f"runs/cities/{killed.name}"]
    ran_as_printed(again, root)


def git(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


@pytest.mark.slow
def test_make_demo_twice_leaves_the_clone_clean_and_its_hint_promotes(tmp_path: Path) -> None:
    """`make demo` in a clone, twice: nothing tracked changes (run never writes snapshots/ or
    fixtures/); the promote command it printed runs as printed, and only then does the
    committed snapshot change."""
    if shutil.which("make") is None or shutil.which("git") is None:
        pytest.skip("needs make and git")
    if not (REPO / ".git").exists():
        pytest.skip("needs the repo as a git checkout: its tracked files make the clone")
    clone = tmp_path / "clone"
    tracked = git("ls-files", "-z", cwd=REPO).split("\0")
    for name in filter(None, tracked):
        # tests/ stays out: its deliberate test keys would trip the session's secrets check
        if (REPO / name).is_file() and not name.startswith("tests/"):
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, clone / name)
    git("init", "-q", cwd=clone)
    git("add", "-A", cwd=clone)
    git("commit", "-q", "-m", "clone", cwd=clone)
    # this test's venv stands in for the one `make` would build (-o: never rebuilt here)
    (clone / ".venv").mkdir()
    (clone / ".venv" / "bin").symlink_to(SCRIPT.parent)
    path = path_without_parallax()
    hints = []
    for _ in range(2):
        demo = shell("make -s -o .venv/.runtime demo", cwd=clone, path=path)
        assert demo.returncode == 0, demo.stderr[-2000:]
        assert "demo finished" in demo.stdout
        assert git("status", "--porcelain", cwd=clone) == ""
        hints.append(promote_hint(demo.stderr))
    promoted = shell(hints[-1], cwd=clone, path=path)
    assert promoted.returncode == 0, (hints[-1], promoted.stderr)
    assert git("status", "--porcelain", cwd=clone) == " M snapshots/cities.json\n"
