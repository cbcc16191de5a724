"""End-to-end specification of bad input: one clear line on stderr, the documented exit code.

Bad fixture data exits 65, a bad config 78, a usage error 64, and none of them ever shows a
traceback. Each test builds its broken input in a temporary directory and runs the real CLI.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from runner.fixtures import validate

REPO = Path(__file__).resolve().parent.parent

GOOD_ROW = '{"id": "a", "stratum": "easy", "prompt": "Say hi.", "expect": {"must_include": ["hi"]}}'

CONFIG = """\
runs_dir = "runs"
snapshots_dir = "snapshots"

[endpoints.reference]
kind = "recorded"
model = "ref"

[endpoints.candidate]
kind = "recorded"
model = "cand"

[suites.bad]
fixtures = "cases.jsonl"
reference = "reference"
candidate = "candidate"
"""

# name -> (file bytes, line the error must name, words the reason must contain)
BAD_FIXTURES: dict[str, tuple[bytes, int, tuple[str, ...]]] = {
    "malformed-json": (
        f'{GOOD_ROW}\n{{"id": "b", "prompt": }}\n'.encode(),
        2,
        ("invalid json",),
    ),
    "torn-last-line": (
        f'{GOOD_ROW}\n{{"id": "b", "prompt": "Say h'.encode(),
        2,
        ("truncated",),
    ),
    "not-an-object": (
        f"{GOOD_ROW}\n[1, 2, 3]\n".encode(),
        2,
        ("not a json object",),
    ),
    "duplicate-id": (
        f"{GOOD_ROW}\n{GOOD_ROW}\n".encode(),
        2,
        ("duplicate", "'a'"),
    ),
    "unknown-stratum": (
        f'{GOOD_ROW}\n{{"id": "b", "stratum": "hard", "prompt": "p"}}\n'.encode(),
        2,
        ("stratum", "hard"),
    ),
    "wrong-value-type": (
        f'{GOOD_ROW}\n{{"id": "b", "prompt": "p", "expect": {{"max_chars": "ten"}}}}\n'.encode(),
        2,
        ("max_chars",),
    ),
    "unknown-expect-key": (
        f'{GOOD_ROW}\n{{"id": "b", "prompt": "p", "expect": {{"must_rhyme": true}}}}\n'.encode(),
        2,
        ("must_rhyme",),
    ),
    "lone-surrogate": (
        f'{GOOD_ROW}\n{{"id": "b\\ud800", "prompt": "p"}}\n'.encode(),
        2,
        ("surrogate",),
    ),
    "nested-too-deep": (
        f'{GOOD_ROW}\n{{"id": "b", "prompt": "p", "tags": {"[" * 200}{"]" * 200}}}\n'.encode(),
        2,
        ("nested deeper than 128 levels",),
    ),
    "far-too-deep-first-row": (  # deeper than the stdlib's recursion limit, on line 1
        f'{{"id": "a", "prompt": "p", "tags": {"[" * 5000}{"]" * 5000}}}\n{GOOD_ROW}\n'.encode(),
        1,
        ("nested deeper than 128 levels",),
    ),
    "document-nested-too-deep": (
        b'{"cases": [\n  {"id": "a", "prompt": "p"},\n  {"id": "b", "prompt": "p",\n'
        + b'   "tags": '
        + b"[" * 200
        + b"]" * 200
        + b"}\n]}\n",
        4,
        ("nested deeper than 128 levels",),
    ),
    "non-utf8": (
        GOOD_ROW.encode() + b'\n{"id": "b", "prompt": "caf\xe9"}\n',
        2,
        ("utf-8",),
    ),
}
# pin and grade read a file without a suite's graders: a custom expect key is legal there.
NEEDS_GRADERS = {"unknown-expect-key"}


def no_run_dirs(root: Path) -> bool:
    """True when no run directory exists under runs/<suite>/ (a lock file is not a run)."""
    return not [p for p in root.glob("runs/*/*") if p.is_dir()]


def cli_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARALLAX_")}
    env.pop("PARALLAX_TEST_NOPE", None)
    return env


def parallax(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run `python -m runner` as a user would."""
    return subprocess.run(
        [sys.executable, "-m", "runner", *map(str, args)],
        cwd=cwd,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def one_line_error(proc: subprocess.CompletedProcess[str], code: int) -> str:
    """Assert the contract for a failed command and return its single stderr line."""
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stdout, proc.stdout
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].strip(), proc.stderr
    return lines[0]


def project(tmp_path: Path, config: str = CONFIG, fixture: bytes | None = None) -> Path:
    """A config file and (optionally) its fixture file in a fresh directory."""
    (tmp_path / "parallax.toml").write_text(config, encoding="utf-8")
    if fixture is not None:
        (tmp_path / "cases.jsonl").write_bytes(fixture)
    return tmp_path / "parallax.toml"


# --- bad fixture data: 65 -----------------------------------------------------------------------


@pytest.mark.parametrize("command", ["validate", "run"])
@pytest.mark.parametrize("kind", sorted(BAD_FIXTURES))
def test_bad_fixture_through_config_exits_65(tmp_path: Path, kind: str, command: str) -> None:
    """validate and run reject a bad fixture row with one `file:line: reason` line and exit 65."""
    data, line, words = BAD_FIXTURES[kind]
    config = project(tmp_path, fixture=data)
    proc = parallax(command, "--config", config, cwd=tmp_path)
    message = one_line_error(proc, 65)
    assert f"cases.jsonl:{line}" in message
    for word in words:
        assert word in message.lower(), message
    assert no_run_dirs(tmp_path), "a bad fixture must be caught before a run starts"
    logged = [json.loads(line) for line in proc.stdout.splitlines()]  # run's log stream only
    assert [(e["event"], e["exit_code"]) for e in logged] == (
        [("run.failed", 65)] if command == "run" else []
    )


@pytest.mark.parametrize("command", ["validate", "run"])
@pytest.mark.parametrize("kind", ["malformed-json", "duplicate-id", "torn-last-line"])
def test_bad_row_deep_in_a_large_file_exits_65(tmp_path: Path, kind: str, command: str) -> None:
    """A file large enough to be validated in worker processes: the error crosses back from
    the worker whole and is still one line naming its line."""
    pad = "x" * 200
    good = "".join(
        f'{{"id": "p{n:05}", "prompt": "{pad}", "expect": {{"must_include": ["x"]}}}}\n'
        for n in range(6000)
    ).encode()
    assert len(good) > validate.PARALLEL_BYTES
    data, line, words = BAD_FIXTURES[kind]
    config = project(tmp_path, fixture=good + data)
    message = one_line_error(parallax(command, "--config", config, cwd=tmp_path), 65)
    assert f"cases.jsonl:{6000 + line}:" in message
    for word in words:
        assert word in message.lower(), message
    assert no_run_dirs(tmp_path)


def error_lines(proc: subprocess.CompletedProcess[str], code: int) -> list[str]:
    """Assert the contract for a failed command with several errors: each its own line on
    stderr, no traceback, the exit code; and for `run` one run.failed line carrying them all.
    Returns the stderr lines."""
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    lines = proc.stderr.splitlines()
    assert all(line.startswith("parallax: ") for line in lines), lines
    logged = [json.loads(line) for line in proc.stdout.splitlines()]
    if logged:
        (failed,) = logged
        assert (failed["event"], failed["exit_code"]) == ("run.failed", code)
        assert ["parallax: " + error for error in failed["errors"]] == lines
    return lines


@pytest.mark.parametrize("command", ["validate", "run"])
def test_every_bad_row_deep_in_a_large_file_is_its_own_line(tmp_path: Path, command: str) -> None:
    """Errors on lines 2, 7 and 9000 of a file validated in worker processes: three lines,
    in file order, exit 65, and no run dir."""
    pad = "x" * 200
    rows = [
        f'{{"id": "p{n:05}", "prompt": "{pad}", "expect": {{"must_include": ["x"]}}}}'
        for n in range(1, 9001)
    ]
    rows[1] = '{"id": "p00002", "prompt": '
    rows[6] = rows[6].replace("must_include", "must_includes")
    rows[8999] = rows[0]
    config = project(tmp_path, fixture="\n".join(rows).encode() + b"\n")
    assert (tmp_path / "cases.jsonl").stat().st_size > validate.PARALLEL_BYTES
    lines = error_lines(parallax(command, "--config", config, cwd=tmp_path), 65)
    assert [line.split(": ", 2)[1].rsplit(":", 1)[1] for line in lines] == ["2", "7", "9000"]
    assert "(did you mean 'must_include'?)" in lines[1]
    assert "duplicate id 'p00001' (first on line 1)" in lines[2]
    assert no_run_dirs(tmp_path)


@pytest.mark.parametrize("command", ["validate", "run"])
def test_every_mistake_of_a_config_is_its_own_line(tmp_path: Path, command: str) -> None:
    """An unknown key, a suite naming no endpoint and a template that does not compile: three
    lines naming the file and key, exit 78 (run: one run.failed line with all three)."""
    text = (
        CONFIG.replace('model = "ref"', 'model = "ref"\nconcurreny = 2')
        .replace('model = "cand"', 'model = "cand"\nuser_template = "{% if %}"')
        .replace('reference = "reference"', 'reference = "referense"')
    )
    config = project(tmp_path, config=text, fixture=f"{GOOD_ROW}\n".encode())
    lines = error_lines(parallax(command, "--config", config, cwd=tmp_path), 78)
    where = f"parallax: {config}: "
    assert lines == [
        f"{where}endpoints.reference.concurreny: unknown key (did you mean 'concurrency'?)",
        f"{where}suites.bad.reference: no endpoint named 'referense' (did you mean 'reference'?)",
        f"{where}endpoints.candidate.user_template: template line 1: Expected an expression, "
        "got 'end of statement block'",
    ]
    assert no_run_dirs(tmp_path)


def test_a_config_error_and_a_fixture_error_are_both_told_and_78_wins(tmp_path: Path) -> None:
    """One suite's graders file is missing (a config error), another suite's fixture file has
    a bad row: validate tells both, and exits 78, the config's code."""
    text = CONFIG + 'graders = "no_graders.py"\n\n[suites.other]\nfixtures = "other.jsonl"\n'
    text += 'reference = "reference"\ncandidate = "candidate"\n'
    config = project(tmp_path, config=text, fixture=f"{GOOD_ROW}\n".encode())
    (tmp_path / "other.jsonl").write_text(f"{GOOD_ROW}\n[1]\n", encoding="utf-8")
    lines = error_lines(parallax("validate", "--config", config, cwd=tmp_path), 78)
    assert len(lines) == 2, lines
    assert "suites.bad.graders: no such file: no_graders.py" in lines[0]
    assert lines[1].endswith("other.jsonl:2: row is not a JSON object (got array)")


@pytest.mark.parametrize("command", ["pin", "grade"])
@pytest.mark.parametrize("kind", sorted(set(BAD_FIXTURES) - NEEDS_GRADERS))
def test_bad_fixture_file_exits_65(tmp_path: Path, kind: str, command: str) -> None:
    """pin and grade reject a bad fixture file with one `file:line: reason` line and exit 65."""
    data, line, words = BAD_FIXTURES[kind]
    (tmp_path / "cases.jsonl").write_bytes(data)
    proc = parallax(command, "cases.jsonl", cwd=tmp_path)
    message = one_line_error(proc, 65)
    assert message.startswith("parallax: cases.jsonl:")
    assert f"cases.jsonl:{line}:" in message
    for word in words:
        assert word in message.lower(), message
    assert proc.stdout == "", "nothing may be printed before the whole file is validated"


def test_custom_expect_key_is_legal_for_pin(tmp_path: Path) -> None:
    """pin has no graders to consult, so it pins a row with a custom expect key (exit 0)."""
    data, _, _ = BAD_FIXTURES["unknown-expect-key"]
    (tmp_path / "cases.jsonl").write_bytes(data)
    proc = parallax("pin", "cases.jsonl", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 2


def test_bad_ledger_for_diff_exits_65(tmp_path: Path) -> None:
    """diff names the ledger file and line of a malformed row and exits 65."""
    good = tmp_path / "base.jsonl"
    good.write_text('{"case_id": "a", "task_score": 1.0}\n', encoding="utf-8")
    bad = tmp_path / "cand.jsonl"
    bad.write_text('{"case_id": "a", "task_score": 1.0}\n{"case_id": \n', encoding="utf-8")
    message = one_line_error(parallax("diff", good, bad, cwd=tmp_path), 65)
    assert "cand.jsonl:2" in message


# --- bad config: 78 -----------------------------------------------------------------------------


def _with(extra_endpoint_line: str = "", top: str = "", suite_line: str = "") -> str:
    text = top + CONFIG
    if extra_endpoint_line:
        text = text.replace('model = "ref"\n', f'model = "ref"\n{extra_endpoint_line}\n')
    if suite_line:
        text += suite_line + "\n"
    return text


BAD_CONFIGS: dict[str, tuple[str, tuple[str, ...]]] = {
    "missing-env-var": (
        CONFIG.replace('model = "ref"', 'model = "${PARALLAX_TEST_NOPE}"'),
        ("endpoints.reference.model", "PARALLAX_TEST_NOPE"),
    ),
    "invalid-toml": (CONFIG.replace('kind = "recorded"\nmodel = "ref"', "kind = recorded"), ()),
    "unknown-key": (_with(top='colour = "red"\n'), ("colour", "unknown key")),
    "nested-past-the-parser": (_with(top="x = " + "[" * 3000 + "]" * 3000 + "\n"), ("TOML",)),
    "nested-past-interpolation": (_with(top="x = " + "[" * 600 + "]" * 600 + "\n"), ("x",)),
    "api-key-in-file": (
        _with(extra_endpoint_line='api_key = "sk-live-1234567890"'),
        ("endpoints.reference.api_key", "api_key_env"),
    ),
    "missing-fixture-file": (
        CONFIG.replace('"cases.jsonl"', '"nowhere.jsonl"'),
        ("suites.bad.fixtures", "nowhere.jsonl"),
    ),
    "grader-import-fails": (
        _with(suite_line='graders = "graders.py"'),
        ("suites.bad.graders", "graders.py"),
    ),
    "grader-file-missing": (
        _with(suite_line='graders = "no_graders.py"'),
        ("suites.bad.graders", "no_graders.py"),
    ),
    "unknown-endpoint": (
        CONFIG.replace('candidate = "candidate"', 'candidate = "shadow"'),
        ("suites.bad.candidate", "shadow"),
    ),
    "infinite-timeout": (
        _with(extra_endpoint_line="timeout.connect = inf"),
        ("endpoints.reference.timeout.connect", "finite", "inf"),
    ),
    "nan-threshold": (
        _with(suite_line="alpha = nan"),
        ("suites.bad.alpha", "finite", "nan"),
    ),
}


@pytest.mark.parametrize("command", ["validate", "run"])
@pytest.mark.parametrize("kind", sorted(BAD_CONFIGS))
def test_bad_config_exits_78(tmp_path: Path, kind: str, command: str) -> None:
    """A broken config gets one line naming the file and key, exit 78, and no run dir."""
    text, words = BAD_CONFIGS[kind]
    config = project(tmp_path, config=text, fixture=f"{GOOD_ROW}\n".encode())
    (tmp_path / "graders.py").write_text(
        'raise RuntimeError("graders exploded at import")\n', encoding="utf-8"
    )
    proc = parallax(command, "--config", config, cwd=tmp_path)
    message = one_line_error(proc, 78)
    assert "parallax.toml" in message
    for word in words:
        assert word in message, message
    assert "sk-live-1234567890" not in proc.stderr + proc.stdout
    assert no_run_dirs(tmp_path)


def test_grader_with_syntax_error_exits_78(tmp_path: Path) -> None:
    """A graders file that does not even compile is a config error, named by key: exit 78."""
    config = project(
        tmp_path, config=_with(suite_line='graders = "graders.py"'), fixture=GOOD_ROW.encode()
    )
    (tmp_path / "graders.py").write_text("def broken(:\n", encoding="utf-8")
    message = one_line_error(parallax("validate", "--config", config, cwd=tmp_path), 78)
    assert "suites.bad.graders" in message


def test_missing_config_file_exits_78(tmp_path: Path) -> None:
    """A config path that does not exist is named in one line with exit 78."""
    message = one_line_error(parallax("validate", "--config", "absent.toml", cwd=tmp_path), 78)
    assert "absent.toml" in message


def _not_a_file(tmp_path: Path, kind: str) -> Path:
    """A path that names no regular file: a FIFO nobody writes to, a directory or a device."""
    if kind == "device":
        return Path("/dev/zero")
    path = tmp_path / f"{kind}.toml"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    return path


@pytest.mark.parametrize("command", ["validate", "run", "serve", "health", "history"])
@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_a_config_that_is_no_regular_file_exits_78(tmp_path: Path, kind: str, command: str) -> None:
    """--config naming a FIFO, a directory or /dev/zero is refused before it is read (a FIFO
    would block the command, /dev/zero fill memory): one line naming it, exit 78."""
    path = _not_a_file(tmp_path, kind)
    message = one_line_error(parallax(command, "--config", path, cwd=tmp_path), 78)
    assert f"{path}: " in message and ("not a regular file" in message or "directory" in message)


def test_a_config_larger_than_a_mebibyte_exits_78(tmp_path: Path) -> None:
    """A config is a page of TOML: a file past 1 MiB (here valid TOML, all comments) is the
    wrong file, refused without being parsed, exit 78."""
    config = project(tmp_path, config=CONFIG + "#" * (1 << 20), fixture=GOOD_ROW.encode())
    message = one_line_error(parallax("validate", "--config", config, cwd=tmp_path), 78)
    assert message.endswith("parallax.toml: larger than 1 MiB"), message


@pytest.mark.parametrize("command", ["validate", "run"])
@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_fixtures_that_are_no_regular_file_exit_78(tmp_path: Path, kind: str, command: str) -> None:
    """A suite's fixtures naming a FIFO, a directory or a device is a config error naming the
    key and what the path is, as for a missing file (exit 78)."""
    path = _not_a_file(tmp_path, kind)
    config = project(tmp_path, config=CONFIG.replace('"cases.jsonl"', f'"{path}"'))
    message = one_line_error(parallax(command, "--config", config, cwd=tmp_path), 78)
    assert "suites.bad.fixtures: " in message and str(path) in message, message


@pytest.mark.parametrize("command", ["pin", "grade"])
@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_a_fixture_file_argument_that_is_no_regular_file_exits_64(
    tmp_path: Path, kind: str, command: str
) -> None:
    """pin and grade refuse a FIFO, a directory or a device as their FILE, saying which: 64."""
    path = _not_a_file(tmp_path, kind)
    message = one_line_error(parallax(command, path, cwd=tmp_path), 64)
    assert f"{path}: " in message and ("not a regular file" in message or "directory" in message)


@pytest.mark.parametrize("command", ["run", "validate", "history"])
def test_default_config_missing_exits_78(tmp_path: Path, command: str) -> None:
    """Without --config or $PARALLAX_CONFIG, a missing ./parallax.toml is named, with where a
    config comes from (the README's first commands do not pass one): exit 78."""
    message = one_line_error(parallax(command, cwd=tmp_path), 78)
    assert "parallax.toml" in message and "--config" in message and "PARALLAX_CONFIG" in message


@pytest.mark.parametrize("command", ["replay", "promote"])
def test_a_run_naming_a_config_this_machine_lacks_says_so(tmp_path: Path, command: str) -> None:
    """A run dir copied out of CI names CI's config path in its manifest: the message says the
    path came from the manifest and how to give another (exit 78)."""
    root = demo(tmp_path)
    run_dir = _demo_run(root, "cities")
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    manifest["config"]["path"] = "/ci/work/parallax.toml"
    (run_dir / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    message = one_line_error(parallax(command, run_dir, cwd=root), 78)
    assert "/ci/work/parallax.toml" in message and "manifest.json" in message, message
    assert "--config" in message


# --- usage: 64 ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["promote", "no-such-run"],
        ["promote", "--allow-partial", "no-such-run"],
        ["replay", "no-such-run"],
        ["run", "--resume", "no-such-run"],
        ["pin", "no-such-file.jsonl"],
        ["grade", "no-such-file.jsonl"],
        ["diff", "no-such-base.jsonl", "no-such-cand.jsonl"],
    ],
    ids=lambda a: "-".join(a[:2]),
)
def test_missing_path_is_a_usage_error(tmp_path: Path, args: list[str]) -> None:
    """A run dir or file that does not exist is a usage error: one line naming it, exit 64."""
    message = one_line_error(parallax(*args, cwd=tmp_path), 64)
    assert "no-such-" in message


@pytest.mark.parametrize(
    "args",
    [("promote", "empty"), ("replay", "empty"), ("run", "--resume", "empty"), ("report", "empty")],
    ids=["promote", "replay", "resume", "report"],
)
def test_a_directory_that_is_not_a_run_is_a_usage_error(tmp_path: Path, args: tuple[str]) -> None:
    """A folder without a manifest (a suite's folder, `runs/s`) is the wrong argument, like a
    missing run directory: one line saying so, exit 64."""
    (tmp_path / "empty").mkdir()
    message = one_line_error(parallax(*args, cwd=tmp_path), 64)
    assert "empty: not a parallax run directory" in message


# --- broken snapshot: 65, file untouched --------------------------------------------------------


def demo(tmp_path: Path) -> Path:
    for name in ("config", "fixtures", "snapshots"):
        shutil.copytree(REPO / name, tmp_path / name)
    return tmp_path


def _demo_run(root: Path, suite: str) -> Path:
    """Run one demo suite and return its run dir, the only one there."""
    parallax("run", "--config", "config/demo.toml", "--suite", suite, cwd=root)
    (run_dir,) = [p for p in (root / "runs" / suite).iterdir() if p.is_dir()]
    return run_dir


def _break_second_line(path: Path) -> None:
    """Make a ledger's second line not JSON, as a corrupted copy would have it."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[1] = "{not json}\n"
    path.write_text("".join(lines), encoding="utf-8")


BROKEN_SNAPSHOTS = {
    "truncated-json": b'{\n  "version": 1,\n  "suite": "cities",\n  "cases": {\n    "city-07": {',
    "cases-not-an-object": b'{"version": 1, "suite": "cities", "cases": []}\n',
    "entry-without-sha": b'{"version": 1, "suite": "cities", "cases": {"city-07": {}}}\n',
    "not-utf8": b'{"version": 1, "suite": "cities", "cases": {"caf\xe9": {}}}\n',
    "lone-surrogate": b'{"version": 1, "suite": "cities", "cases": {"city-07": '
    b'{"fixture_sha": "0", "models": {"reference": "m\\udc00"}}}}\n',
    "deep-lone-surrogate": b'{"version": 1, "suite": "cities", "cases": {"city-07": '
    b'{"fixture_sha": "0", "note": ' + b"[" * 700 + b'"\\udc00"' + b"]" * 700 + b"}}}\n",
    "models-a-string": b'{"version": 1, "suite": "cities", "cases": {"city-07": '
    b'{"fixture_sha": "0", "models": "x"}}}\n',
    "misses-a-number": b'{"version": 1, "suite": "cities", "cases": {"city-07": '
    b'{"fixture_sha": "0", "candidate_misses": 5}}}\n',
    "far-too-deep": b'{"version": 1, "suite": "cities", "cases": {"city-07": '
    + b"[" * 5000
    + b"]" * 5000
    + b"}}\n",
}


@pytest.mark.parametrize("kind", sorted(BROKEN_SNAPSHOTS))
def test_run_with_broken_snapshot_exits_65(tmp_path: Path, kind: str) -> None:
    """run names the hand-broken snapshot in one line, exits 65 and leaves it byte for byte."""
    root = demo(tmp_path)
    path = root / "snapshots" / "cities.json"
    path.write_bytes(BROKEN_SNAPSHOTS[kind])
    proc = parallax("run", "--config", "config/demo.toml", "--suite", "cities", cwd=root)
    message = one_line_error(proc, 65)
    assert "cities.json" in message
    assert path.read_bytes() == BROKEN_SNAPSHOTS[kind]


@pytest.mark.parametrize("kind", ["directory", "symlink-loop", "under-a-file"])
def test_a_snapshot_path_that_is_no_file_is_one_line(tmp_path: Path, kind: str) -> None:
    """A snapshot that is a directory or a symlink loop, or a snapshots_dir naming a file, is
    one line naming the path and exit 65 from validate, run and promote (validate of every
    suite under a file: a line for each suite's snapshot); no traceback."""
    root = demo(tmp_path)
    ran = parallax("run", "--config", "config/demo.toml", "--suite", "cities", cwd=root)
    (run_dir,) = [p for p in (root / "runs" / "cities").iterdir() if p.is_dir()]
    path = root / "snapshots" / "cities.json"
    path.unlink()
    if kind == "directory":
        path.mkdir()
    elif kind == "symlink-loop":
        path.symlink_to("cities.json")
    else:
        shutil.rmtree(root / "snapshots")
        (root / "snapshots").write_text("not a folder", encoding="utf-8")
    assert ran.returncode == 1, ran.stderr
    for args in (
        ("validate", "--config", "config/demo.toml"),
        ("run", "--config", "config/demo.toml", "--suite", "cities"),
        ("promote", run_dir),
    ):
        proc = parallax(*args, cwd=root)
        if kind == "under-a-file" and args[0] == "validate":  # every suite's snapshot
            lines = error_lines(proc, 65)
            suites = tomllib.loads((root / "config" / "demo.toml").read_text())["suites"]
            assert len(lines) == len(suites), lines
            assert all("snapshots/" in line for line in lines), lines
            continue
        message = one_line_error(proc, 65)
        named = "snapshots/" if kind == "under-a-file" else "cities.json"
        assert named in message, (args, message)


def test_promote_onto_broken_snapshot_exits_65(tmp_path: Path) -> None:
    """promote refuses to overwrite a hand-broken snapshot: one line, exit 65, file untouched."""
    root = demo(tmp_path)
    ran = parallax("run", "--config", "config/demo.toml", "--suite", "cities", cwd=root)
    assert ran.returncode == 1, ran.stderr
    (run_dir,) = [p for p in (root / "runs" / "cities").iterdir() if p.is_dir()]
    path = root / "snapshots" / "cities.json"
    broken = BROKEN_SNAPSHOTS["truncated-json"]
    path.write_bytes(broken)
    message = one_line_error(parallax("promote", run_dir, cwd=root), 65)
    assert "cities.json" in message
    assert path.read_bytes() == broken
    assert sorted(p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")) == []


def test_promote_of_a_map_edited_to_name_another_suite_writes_nothing(tmp_path: Path) -> None:
    """disagreement.json edited to name another suite of the config cannot overwrite that
    suite's accepted snapshot: one line, exit 65, every snapshot byte for byte."""
    root = demo(tmp_path)
    run_dir = _demo_run(root, "ceiling")
    before = {p.name: p.read_bytes() for p in (root / "snapshots").iterdir()}
    path = run_dir / "disagreement.json"
    path.write_text(path.read_text(encoding="utf-8").replace('"ceiling"', '"cities"', 1), "utf-8")
    message = one_line_error(parallax("promote", run_dir, "--allow-partial", cwd=root), 65)
    assert "disagreement.json" in message and "'cities'" in message
    assert {p.name: p.read_bytes() for p in (root / "snapshots").iterdir()} == before


def test_validate_with_broken_snapshot_exits_65(tmp_path: Path) -> None:
    """validate checks the snapshots a run would read, so a broken one fails before the night."""
    root = demo(tmp_path)
    path = root / "snapshots" / "cities.json"
    path.write_bytes(BROKEN_SNAPSHOTS["truncated-json"])
    message = one_line_error(parallax("validate", "--config", "config/demo.toml", cwd=root), 65)
    assert "cities.json" in message


def test_replay_of_a_run_with_a_corrupt_ledger_exits_65(tmp_path: Path) -> None:
    """replay names raw.jsonl and the line of a corrupt exchange in the middle, exit 65."""
    root = demo(tmp_path)
    run_dir = _demo_run(root, "cities")
    raw = run_dir / "raw.jsonl"
    _break_second_line(raw)
    message = one_line_error(parallax("replay", run_dir, cwd=root), 65)
    assert "raw.jsonl:2" in message


def _unfinish(run_dir: Path) -> None:
    """Make a finished run read as one killed before its end (`finished_at` still null)."""
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    manifest["finished_at"] = None
    (run_dir / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")


def _rewrite_first_row(path: Path, key: str, value: Any) -> None:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    target = rows[0]["response"] if key == "body" else rows[0]
    if key == "message":  # a transport miss whose last attempt's message is not text
        rows[0]["transport"], target = "timeout", rows[0]["attempts"][-1]
    target[key] = value
    text = "".join(json.dumps(row) + "\n" for row in rows)
    path.write_text(text.replace('"INFINITY"', "1e400"), encoding="utf-8")


@pytest.mark.parametrize(
    ("command", "ledger", "key", "value", "where"),
    [
        ("replay", "raw.jsonl", "body", 5, "raw.jsonl:1: not an exchange"),
        ("replay", "raw.jsonl", "model_alias", ["m"], "raw.jsonl:1: not an exchange"),
        ("replay", "raw.jsonl", "elapsed_ms", "INFINITY", "raw.jsonl:1: not an exchange"),
        ("replay", "raw.jsonl", "message", ["x"], "raw.jsonl:1: not an exchange"),
        ("resume", "outcomes.jsonl", "sample", "INFINITY", "outcomes.jsonl:1: not an outcome"),
        ("resume", "outcomes.jsonl", "response_model", [1], "outcomes.jsonl:1: not an outcome"),
        ("resume", "outcomes.jsonl", "stratum", {"a": 1}, "outcomes.jsonl:1: not an outcome"),
        ("resume", "raw.jsonl", None, None, "raw.jsonl: a directory, not a file"),
    ],
    ids=[
        *("raw-body-number", "raw-alias-list", "raw-1e400", "raw-message-list"),
        *("outcome-sample-1e400", "outcome-model-list", "outcome-stratum", "raw-dir"),
    ],
)
def test_a_ledger_field_of_the_wrong_type_is_one_line(
    tmp_path: Path, command: str, ledger: str, key: str | None, value: Any, where: str
) -> None:
    """A field the gate hashes or a replay parses, of the wrong type, is found where the row is
    read: one line naming the ledger and line, exit 65, never a traceback."""
    root = demo(tmp_path)
    run_dir = _demo_run(root, "cities")
    path = run_dir / ledger
    if key is None:
        path.unlink()
        path.mkdir()
    else:
        _rewrite_first_row(path, key, value)
    if command == "resume":  # a run killed before it finished: what a resume is for
        _unfinish(run_dir)
    args = ("replay", run_dir) if command == "replay" else ("run", "--resume", run_dir)
    message = one_line_error(parallax(*args, cwd=root), 65)
    assert where in message, message
    assert [p for p in (root / "runs" / "cities").iterdir() if p.is_dir()] == [run_dir]


@pytest.mark.parametrize("command", ["replay", "retry"])
def test_a_child_run_of_a_corrupt_parent_names_the_parent_and_leaves_no_run(
    tmp_path: Path, command: str
) -> None:
    """A replay or retry of a run whose raw.jsonl is corrupt names the parent's file, where the
    user can mend it, and leaves no unfinished run directory behind (nothing was called). The
    ceiling suite has a row to retry (a timeout)."""
    root = demo(tmp_path)
    run_dir = _demo_run(root, "ceiling")
    raw = run_dir / "raw.jsonl"
    _break_second_line(raw)
    args = ("replay", run_dir) if command == "replay" else ("run", "--retry-unscored", run_dir)
    message = one_line_error(parallax(*args, cwd=root), 65)
    assert f"{raw}:2:" in message or f"{raw.relative_to(root)}:2:" in message, message
    assert [p for p in (root / "runs" / "ceiling").iterdir() if p.is_dir()] == [run_dir]


@pytest.mark.parametrize("content", ["", "\n  \n", '{"version": 1, "cases": []}\n'])
def test_a_fixture_file_without_cases_stops_the_run(tmp_path: Path, content: str) -> None:
    """An emptied or truncated fixture file would retire every accepted case and read clean:
    validate and run refuse it with one line naming the file (exit 65), before any call."""
    root = demo(tmp_path)
    (root / "fixtures" / "cities.jsonl").write_text(content, encoding="utf-8")
    for args in (
        ("validate", "--config", "config/demo.toml"),
        ("run", "--config", "config/demo.toml", "--suite", "cities"),
    ):
        message = one_line_error(parallax(*args, cwd=root), 65)
        assert "cities.jsonl: no cases" in message, message
    assert not (root / "runs" / "cities").exists() or not [
        p for p in (root / "runs" / "cities").iterdir() if p.is_dir()
    ]


def test_a_manifest_config_path_with_a_nul_is_one_line(tmp_path: Path) -> None:
    """A manifest whose config path holds a NUL is exit 65 naming the manifest for the
    commands that need its config, not a traceback from opening the path."""
    root = demo(tmp_path)
    run_dir = _demo_run(root, "cities")
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    manifest["config"]["path"] += "\u0000"
    (run_dir / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    for command in ("replay", "promote"):
        message = one_line_error(parallax(command, run_dir, cwd=root), 65)
        assert "manifest.json" in message, (command, message)
    # report renders a run whose config is out of reach (a copied CI artifact) as it is
    assert parallax("report", run_dir, cwd=root).returncode == 1


@pytest.mark.parametrize("name", ["report.html", "report.md"])
def test_report_where_a_report_name_is_a_directory_is_one_line(tmp_path: Path, name: str) -> None:
    """`report` into a run dir whose report.html or report.md is a directory says so in one
    line (exit 65, as `--resume` does for its ledgers) before it renders either report."""
    root = demo(tmp_path)
    run_dir = _demo_run(root, "cities")
    for report in ("report.html", "report.md"):
        (run_dir / report).unlink()
    (run_dir / name).mkdir()
    message = one_line_error(parallax("report", run_dir, cwd=root), 65)
    expected = f"parallax: {run_dir / name}: a directory, not a file; cannot write its reports here"
    assert expected == message
    assert not [p for p in run_dir.iterdir() if p.name.startswith(".report")], "no temp file left"
    assert not (run_dir / "report.md").is_file() and not (run_dir / "report.html").is_file()


def test_unreadable_manifest_exits_65(tmp_path: Path) -> None:
    """A run dir whose manifest is not JSON is bad data: one line naming it, exit 65."""
    run_dir = tmp_path / "runs" / "x" / "r1"
    run_dir.mkdir(parents=True)
    (run_dir / "manifest.json").write_text("{", encoding="utf-8")
    message = one_line_error(parallax("replay", run_dir, cwd=tmp_path), 65)
    assert "manifest.json" in message


def test_run_checks_the_snapshot_before_calling_anything(tmp_path: Path) -> None:
    """A broken snapshot stops run before any exchange is recorded, so no call is wasted."""
    root = demo(tmp_path)
    (root / "snapshots" / "cities.json").write_bytes(BROKEN_SNAPSHOTS["truncated-json"])
    proc = parallax("run", "--config", "config/demo.toml", "--suite", "cities", cwd=root)
    one_line_error(proc, 65)
    assert no_run_dirs(root)


def test_run_checks_every_suite_before_calling_anything(tmp_path: Path) -> None:
    """A bad fixture in the last suite stops run before the first suite makes a call."""
    root = demo(tmp_path)
    dup = '{"case_id":"x","prompt":"p","expect":{}}\n'
    (root / "fixtures" / "cities.jsonl").write_text(dup * 2, encoding="utf-8")
    proc = parallax("run", "--config", "config/demo.toml", cwd=root)
    message = one_line_error(proc, 65)
    assert "cities.jsonl:2" in message
    assert no_run_dirs(root)


def test_grade_rejects_unknown_expect_key(tmp_path: Path) -> None:
    """grade refuses an expectation key nothing would grade instead of passing the case."""
    row = '{"id": "a", "prompt": "p", "completion": "anything", "expect": {"must_rhyme": true}}'
    (tmp_path / "cases.jsonl").write_text(row + "\n", encoding="utf-8")
    message = one_line_error(parallax("grade", "cases.jsonl", cwd=tmp_path), 65)
    assert "cases.jsonl:1" in message and "must_rhyme" in message


LONG = "9" * 5000  # past CPython's digit limit for reading an integer (4300 by default)


@pytest.mark.parametrize(
    "where", ["fixture-row", "fixture-document", "config", "snapshot", "raw-ledger"]
)
def test_an_integer_past_the_digit_limit_is_told_in_the_authors_terms(
    tmp_path: Path, where: str
) -> None:
    """CPython refuses such a number with advice about an interpreter setting the author of
    the file cannot change (before, a config gave a traceback): one line naming the file and
    line, the documented exit code, and what is wrong in the file's own terms."""
    root = demo(tmp_path)
    args: tuple[str | Path, ...] = ("validate", "--config", "config/demo.toml")
    code, named = 65, "cities.jsonl:2:"
    cities = root / "fixtures" / "cities.jsonl"
    if where == "fixture-row":
        lines = cities.read_text(encoding="utf-8").splitlines(keepends=True)
        lines[1] = f'{{"id": "long", "prompt": "p", "expect": {{"max_chars": {LONG}}}}}\n'
        cities.write_text("".join(lines), encoding="utf-8")
    elif where == "fixture-document":
        document = f'{{"cases": [\n  {{"id": "a", "prompt": "p"}},\n  {{"id": "b", "n": {LONG}}}]}}'
        cities.write_text(document, encoding="utf-8")
        named = "cities.jsonl:3:"
    elif where == "config":
        path = root / "config" / "demo.toml"
        path.write_text(f"x = {LONG}\n" + path.read_text(encoding="utf-8"), encoding="utf-8")
        code, named = 78, "(line 1)"
    elif where == "snapshot":
        path = root / "snapshots" / "cities.json"
        path.write_text(f'{{"version": 1, "cases": {{}}, "n": {LONG}}}', encoding="utf-8")
        named = "cities.json:"
    else:
        run_dir = _demo_run(root, "cities")
        raw = run_dir / "raw.jsonl"
        lines = raw.read_text(encoding="utf-8").splitlines(keepends=True)
        lines[1] = lines[1].replace('"elapsed_ms":', f'"elapsed_ms":{LONG},"was":', 1)
        raw.write_text("".join(lines), encoding="utf-8")
        args, named = ("replay", run_dir), "raw.jsonl:2:"
    message = one_line_error(parallax(*args, cwd=root), code)
    assert named in message, message
    assert "an integer of more than 4300 digits" in message, message
    assert "sys." not in message, message


def test_resuming_a_finished_run_keeps_its_recorded_verdict(tmp_path: Path) -> None:
    """A finished run's verdict is a record: resuming it after a promote regraded it against
    the new snapshot and rewrote its summary, reports and history. Now it exits with the code
    it recorded and leaves every file as it was."""
    root = demo(tmp_path)
    first = parallax("run", "--config", "config/demo.toml", "--suite", "cities", cwd=root)
    (run_dir,) = [p for p in (root / "runs" / "cities").iterdir() if p.is_dir()]
    before = {p: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    promoted = parallax("promote", run_dir, "--allow-partial", cwd=root)
    assert promoted.returncode == 0, promoted.stderr
    resumed = parallax("run", "--resume", run_dir, cwd=root)
    assert resumed.returncode == first.returncode, resumed.stderr
    assert {p: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before
    assert [p for p in (root / "runs" / "cities").iterdir() if p.is_dir()] == [run_dir]
    # what a regrade against the promoted snapshot says instead: the record was worth keeping
    assert parallax("replay", run_dir, cwd=root).returncode != first.returncode


def test_a_broken_cassette_stops_run_before_a_run_dir_exists(tmp_path: Path) -> None:
    """A cassette with a duplicate row was found only after the run dir was made, which then
    sat unfinished (manifest only) for `serve` to resume and `history` to note, night after
    night. It is found first: 65 naming the cassette line, no run dir."""
    root = demo(tmp_path)
    config = (root / "config" / "demo.toml").read_text(encoding="utf-8")
    cassette = next(
        root / "config" / line.split('"')[1]
        for line in config.splitlines()
        if line.startswith("cassette")
    )
    rows = cassette.read_text(encoding="utf-8").splitlines(keepends=True)
    cassette.write_text("".join(rows) + rows[0], encoding="utf-8")  # the first row twice
    proc = parallax("run", "--config", "config/demo.toml", cwd=root)
    message = one_line_error(proc, 65)
    assert f"{cassette.name}:{len(rows) + 1}:" in message, message
    assert no_run_dirs(root)


def test_a_retry_with_nothing_to_retry_and_a_suite_that_is_not_the_runs_are_refused(
    tmp_path: Path,
) -> None:
    """`--retry-unscored` of a finished run whose every row was scored made an empty child run;
    `--suite` beside `--resume` was ignored. Both are the wrong request: 64, nothing made."""
    root = demo(tmp_path)
    run_dir = _demo_run(root, "cities")
    message = one_line_error(parallax("run", "--retry-unscored", run_dir, cwd=root), 64)
    assert "every row was scored; nothing to retry" in message
    args = ("run", "--resume", run_dir, "--suite", "ceiling")
    message = one_line_error(parallax(*args, cwd=root), 64)
    assert "is a run of suite 'cities', not 'ceiling'" in message
    assert [p for p in (root / "runs" / "cities").iterdir() if p.is_dir()] == [run_dir]


def test_grade_of_a_file_without_recorded_completions_is_refused(tmp_path: Path) -> None:
    """`grade` reads recorded completions; a fixture file with none graded every case as an
    empty reply and said ok. One line naming the file, exit 65."""
    (tmp_path / "cases.jsonl").write_text(f"{GOOD_ROW}\n", encoding="utf-8")
    message = one_line_error(parallax("grade", "cases.jsonl", cwd=tmp_path), 65)
    assert "cases.jsonl: no case has a recorded `completion` or `tool_calls` to grade" in message


@pytest.mark.parametrize(
    "edit",
    [{"gate_counts": None}, {"stratum_alerts": "x", "review": 5}, {"version": 99}],
    ids=["no-gate-counts", "wrong-types", "unknown-version"],
)
def test_resuming_a_finished_run_with_a_hand_edited_summary_is_no_crash(
    tmp_path: Path, edit: dict[str, Any]
) -> None:
    """The recorded summary of a finished run is printed as it can be read: an edited field
    crashed the resume with a traceback and exit 1 (read as "review" by CI)."""
    root = demo(tmp_path)
    first = parallax("run", "--config", "config/demo.toml", "--suite", "cities", cwd=root)
    (run_dir,) = [p for p in (root / "runs" / "cities").iterdir() if p.is_dir()]
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    summary.update(edit)
    (run_dir / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    resumed = parallax("run", "--resume", run_dir, cwd=root)
    assert "Traceback" not in resumed.stderr, resumed.stderr
    assert resumed.returncode == first.returncode, resumed.stderr


def _killed_copy(root: Path) -> Path:
    """A cities run made to read as killed before its end: no verdict, a call missing."""
    run_dir = _demo_run(root, "cities")
    for name in ("summary.json", "disagreement.json", "report.md", "report.html"):
        (run_dir / name).unlink()
    for name in ("raw.jsonl", "outcomes.jsonl"):
        lines = (run_dir / name).read_text(encoding="utf-8").splitlines(keepends=True)
        (run_dir / name).write_text("".join(lines[:-1]), encoding="utf-8")
    _unfinish(run_dir)
    return run_dir


@pytest.mark.parametrize("change", ["fixtures", "samples"])
def test_resume_refuses_a_run_whose_suite_changed_since(tmp_path: Path, change: str) -> None:
    """A run resumed after its fixtures (or samples) changed graded its old rows against new
    cases and read clean, with the old digest in its manifest: `serve` already refused that,
    and `run --resume` now does too (64), leaving the run as it was."""
    root = demo(tmp_path)
    run_dir = _killed_copy(root)
    if change == "fixtures":
        path = root / "fixtures" / "cities.jsonl"
        path.write_text(path.read_text(encoding="utf-8").replace("Tokyo", "Kyoto"), "utf-8")
    else:
        config = root / "config" / "demo.toml"
        text = config.read_text(encoding="utf-8")
        config.write_text(text.replace("[suites.cities]\n", "[suites.cities]\nsamples = 2\n"))
    before = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    message = one_line_error(parallax("run", "--resume", run_dir, cwd=root), 64)
    reason = {"fixtures": "the fixtures changed", "samples": "samples changed"}[change]
    assert f"cannot resume: {reason} since it started" in message, message
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == before


def test_resume_refuses_an_interrupted_replay(tmp_path: Path) -> None:
    """A replay calls nothing: resuming one would call the endpoints into it."""
    root = demo(tmp_path)
    parallax("run", "--config", "config/demo.toml", "--suite", "cities", cwd=root)
    (first,) = [p for p in (root / "runs" / "cities").iterdir() if p.is_dir()]
    parallax("replay", first, cwd=root)
    (replay,) = [p for p in (root / "runs" / "cities").iterdir() if p.is_dir() and p != first]
    _unfinish(replay)
    (replay / "summary.json").unlink()
    message = one_line_error(parallax("run", "--resume", replay, cwd=root), 64)
    assert "an interrupted replay calls nothing" in message, message


def test_a_control_character_in_an_error_stays_one_visible_line(tmp_path: Path) -> None:
    """A key or argument holding a newline or a NUL printed two lines, or a raw NUL byte: the
    one line a log reader trusts shows them as escapes."""
    root = demo(tmp_path)
    proc = parallax("run", "--config", "config/demo.toml", "--suite", "x\ny\x01z", cwd=root)
    message = one_line_error(proc, 78)
    assert "x\\ny\\x01z" in message, message


@pytest.mark.parametrize(
    ("base", "cand", "code", "words"),
    [
        ("one", "twice", 65, "a second row for case 'a', sample 0 (first on line 1)"),
        ("one", "other", 64, "share no (case, side, sample) row"),
        ("one", "empty", 64, "share no (case, side, sample) row"),
    ],
    ids=["duplicate-key", "nothing-shared", "empty"],
)
def test_diff_never_reads_clean_on_what_it_could_not_compare(
    tmp_path: Path, base: str, cand: str, code: int, words: str
) -> None:
    """A second row for a key hid the first (and a regression with it); ledgers with nothing
    in common, or an empty one, compared nothing and read clean (exit 0)."""
    row = {"case_id": "a", "transport": "ok", "schema": "ok", "task_score": 1}
    ledgers = {
        "one": [row],
        "twice": [{**row, "task_score": 0}, row],
        "other": [{**row, "case_id": "b"}],
        "empty": [],
    }
    for name, rows in ledgers.items():
        text = "".join(json.dumps(r) + "\n" for r in rows)
        (tmp_path / f"{name}.jsonl").write_text(text, encoding="utf-8")
    proc = parallax("diff", f"{base}.jsonl", f"{cand}.jsonl", cwd=tmp_path)
    assert words in one_line_error(proc, code)


def test_a_replay_of_a_run_that_never_finished_says_so(tmp_path: Path) -> None:
    """A parent killed mid-run never made some calls, which its replay shows as `cancelled`:
    the replay says so (stderr, summary.json and manifest.json), instead of nothing."""
    root = demo(tmp_path)
    run_dir = _killed_copy(root)
    proc = parallax("replay", run_dir, cwd=root)
    assert f"  parent {run_dir.name} never finished" in proc.stderr, proc.stderr
    (child,) = [p for p in (root / "runs" / "cities").iterdir() if p.is_dir() and p != run_dir]
    summary = json.loads((child / "summary.json").read_text(encoding="utf-8"))
    assert (summary["parent"], summary["parent_finished"]) == (run_dir.name, False)
    finished = parallax("replay", child, cwd=root)  # a finished parent: nothing to say
    assert "never finished" not in finished.stderr, finished.stderr
