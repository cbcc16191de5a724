"""Every file a config or a fixture row names stays inside the config's input root.

A config and the files it names come from a stranger's pull request: a prompt file turned
into a symlink to `/proc/self/environ` would send the whole environment to the endpoint as
the prompt and store it in raw.jsonl. Each test names a file by an absolute path, a `../`
escape, or a symlink to either, and checks that it is refused naming its key (or the row's
file:line) and that nothing outside the root is ever opened, let alone read or imported.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from relkit import record

from runner import files
from runner.config import check_files, load_config
from runner.errors import ConfigError, DataError
from runner.suite import prepare_suite

ROW = {"id": "a", "prompt": "p", "expect": {"must_include": ["p"]}}
# what each config key names, and a line naming it
KEYS = {
    "system_file": ("endpoints.e.system_file", 'system_file = "{name}"\n'),
    "user_template_file": ("endpoints.e.user_template_file", 'user_template_file = "{name}"\n'),
    "cassette": ("endpoints.e.cassette", 'cassette = "{name}"\n'),
    "fixtures": ("suites.s.fixtures", None),
    "graders": ("suites.s.graders", 'graders = "{name}"\n'),
}
# a grader file that leaves a mark when it is imported: it must never be
GRADER = "import pathlib\npathlib.Path(__file__).with_name('imported').write_text('x')\n"


def _config(conf: Path, key: str, name: str, *, top: str = "") -> Path:
    """conf/p.toml: a recorded endpoint `e` and a suite `s`, with `key` naming `name`."""
    endpoint = '[endpoints.e]\nkind = "recorded"\nmodel = "m"\n'
    suite = '[suites.s]\nreference = "e"\ncandidate = "e"\n'
    line = KEYS[key][1]
    if key in ("system_file", "user_template_file", "cassette"):
        endpoint += line.format(name=name)  # type: ignore[union-attr]
    if key != "cassette":
        endpoint += 'cassette = "tape.jsonl"\n'
    suite += f'fixtures = "{name if key == "fixtures" else "cases.jsonl"}"\n'
    if key == "graders":
        suite += line.format(name=name)  # type: ignore[union-attr]
    path = conf / "p.toml"
    path.write_text(f"{top}{endpoint}{suite}")
    return path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """tmp/conf holds a config's good inputs; tmp/ itself, outside it, holds a file of each
    kind with the same contents, and a grader that marks its import."""
    conf = tmp_path / "conf"
    conf.mkdir()
    for folder in (conf, tmp_path):
        (folder / "cases.jsonl").write_text(json.dumps(ROW) + "\n")
        (folder / "tape.jsonl").write_text('{"case_id": "a", "completion": "p"}\n')
        (folder / "tools.json").write_text('[{"type": "function", "function": {"name": "f"}}]')
        (folder / "prompt.j2").write_text("{{ prompt }}")
    (tmp_path / "graders.py").write_text(GRADER)
    return conf


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every path opened in this process while the test runs, its symlinks followed."""
    seen: list[Path] = []
    real_open, real_io_open = os.open, io.open

    def os_open(path: Any, *args: Any, **kwargs: Any) -> int:
        seen.append(Path(os.path.realpath(path)))
        return real_open(path, *args, **kwargs)

    def io_open(path: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(path, str | os.PathLike):
            seen.append(Path(os.path.realpath(path)))
        return real_io_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(io, "open", io_open)
    return seen


def _outside(conf: Path, seen: list[Path]) -> list[Path]:
    root = Path(os.path.realpath(conf))
    return [p for p in seen if not p.is_relative_to(root) and p.name != "p.toml"]


ATTACKS: dict[str, Callable[[Path, str], str]] = {
    "environ": lambda conf, kind: "/proc/self/environ",
    "dotdot": lambda conf, kind: f"../{kind}",
    "symlink-to-environ": lambda conf, kind: _link(conf, "/proc/self/environ", like=kind),
    "symlink-out": lambda conf, kind: _link(conf, f"../{kind}", like=kind),
    "symlinked-folder": lambda conf, kind: _link(conf, "..", name="up") + f"/{kind}",
}
FILE_OF = {
    "system_file": "prompt.j2",
    "user_template_file": "prompt.j2",
    "cassette": "tape.jsonl",
    "fixtures": "cases.jsonl",
    "graders": "graders.py",
}


def _link(conf: Path, target: str, *, name: str = "innocent", like: str = "") -> str:
    """An innocent-looking symlink in `conf` (named like the file `like` when given)."""
    name += Path(like).suffix
    (conf / name).symlink_to(target)
    return name


@pytest.mark.parametrize("attack", sorted(ATTACKS))
@pytest.mark.parametrize("key", sorted(KEYS))
def test_a_file_the_config_names_outside_its_folder_is_refused_unread(
    project: Path, opened: list[Path], key: str, attack: str
) -> None:
    """An absolute path, a `../` escape, a symlink to either or through a symlinked folder:
    refused at load with one line naming the key (exit 78), nothing outside ever opened."""
    name = ATTACKS[attack](project, FILE_OF[key])
    path = _config(project, key, name)
    if attack == "environ" and key == "graders":
        name = "/proc/self/environ"  # a file, not a module, since it has a slash

    with pytest.raises(ConfigError) as caught:
        loaded = load_config(path)
        check_files(loaded)
        prepare_suite(loaded, "s")

    assert caught.value.exit_code == 78
    assert caught.value.key == KEYS[key][0]
    assert caught.value.reason.startswith(f"{name} is outside {os.path.realpath(project)}")
    assert "input_root" in caught.value.reason
    assert not _outside(project, opened), _outside(project, opened)
    assert not (project.parent / "imported").exists()
    record("inputs", config_keys_refused=1, opened_outside=0)


@pytest.mark.parametrize("key", sorted(KEYS))
def test_input_root_names_the_folder_above_the_config(project: Path, key: str) -> None:
    """`input_root = ".."` is how a config in config/ reads ../fixtures: the same file that
    is refused without it is read, and still nothing outside the root it names."""
    path = _config(project, key, f"../{FILE_OF[key]}", top='input_root = ".."\n')
    loaded = load_config(path)
    check_files(loaded)
    suite = prepare_suite(loaded, "s")
    assert [r.id for r in suite.refs] == ["a"]
    suite.fixtures.close()
    assert loaded.input_root == Path(os.path.realpath(project.parent))


def test_an_input_root_that_is_no_folder_is_refused(project: Path) -> None:
    path = _config(project, "fixtures", "cases.jsonl", top='input_root = "nowhere"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == f"{path}: input_root: no such directory: nowhere"


def test_a_mounted_config_map_of_symlinks_is_inside_its_folder(tmp_path: Path) -> None:
    """A Kubernetes ConfigMap mounts each file as a symlink into a `..data` folder beside
    it: those symlinks stay inside the config's folder, and the config named through its own
    symlink is placed where it was named, so input_root = ".." still means the mount's parent."""
    work = tmp_path / "work"
    for mount, names in (("config", ["p.toml"]), ("fixtures", ["cases.jsonl", "tape.jsonl"])):
        data = work / mount / "..2026_01_01_00_00_00.1"
        data.mkdir(parents=True)
        (work / mount / "..data").symlink_to(data.name)
        for name in names:
            (work / mount / name).symlink_to(f"..data/{name}")
    (work / "fixtures" / "..data" / "cases.jsonl").write_text(json.dumps(ROW) + "\n")
    (work / "fixtures" / "..data" / "tape.jsonl").write_text('{"case_id": "a", "completion": "p"}')
    (work / "config" / "..data" / "p.toml").write_text(
        'input_root = ".."\n[endpoints.e]\nkind = "recorded"\ncassette = "../fixtures/tape.jsonl"\n'
        '[suites.s]\nfixtures = "../fixtures/cases.jsonl"\nreference = "e"\ncandidate = "e"\n'
    )
    loaded = load_config(work / "config" / "p.toml")
    check_files(loaded)
    suite = prepare_suite(loaded, "s")
    suite.fixtures.close()
    assert loaded.input_root == Path(os.path.realpath(work))


@pytest.mark.parametrize("attack", ["environ", "dotdot", "symlink-to-environ", "symlink-out"])
def test_a_tools_file_a_fixture_row_names_outside_the_root_is_refused_unread(
    project: Path, opened: list[Path], attack: str
) -> None:
    """A row's `tools` path is refused as its file:line (exit 65) before it is opened."""
    name = ATTACKS[attack](project, "tools.json")
    row = {**ROW, "tools": name}
    (project / "cases.jsonl").write_text(json.dumps(ROW | {"id": "b"}) + "\n" + json.dumps(row))
    loaded = load_config(_config(project, "fixtures", "cases.jsonl"))

    with pytest.raises(DataError) as caught:
        prepare_suite(loaded, "s")

    assert caught.value.exit_code == 65
    assert (caught.value.path, caught.value.line) == (str(project / "cases.jsonl"), 2)
    assert caught.value.reason.startswith(f"'tools' file {name} is outside ")
    assert not _outside(project, opened), _outside(project, opened)
    record("inputs", row_files_refused=1, opened_outside=0)


def test_a_grader_file_a_fixture_row_names_outside_the_root_is_never_imported(
    project: Path, opened: list[Path]
) -> None:
    """`"grader": "../graders.py:check"` would run a stranger's code: refused, never read."""
    row = {**ROW, "grader": "../graders.py:check"}
    (project / "cases.jsonl").write_text(json.dumps(row) + "\n")
    loaded = load_config(_config(project, "fixtures", "cases.jsonl"))

    with pytest.raises(ConfigError) as caught:
        prepare_suite(loaded, "s")

    assert caught.value.reason.startswith("../graders.py is outside ")
    assert not _outside(project, opened)
    assert not (project.parent / "imported").exists()


def test_the_command_line_says_one_line_and_exits_78(project: Path) -> None:
    """As a user sees it: `validate` of a config whose prompt file is a symlink to the
    environment prints one line naming the key, and nothing of the environment."""
    env = {**os.environ, "PARALLAX_PROBE": "value-that-must-not-show"}
    _config(project, "user_template_file", _link(project, "/proc/self/environ"))

    done = subprocess.run(
        [sys.executable, "-m", "runner", "validate", "--config", "p.toml"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 78, done.stderr
    assert done.stderr.startswith("parallax: p.toml: endpoints.e.user_template_file: innocent is ")
    assert len(done.stderr.splitlines()) == 1
    assert "value-that-must-not-show" not in done.stdout + done.stderr


def test_a_symlink_swapped_in_after_the_check_is_refused_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The path is checked, then the checked path opened: a folder swapped for a symlink out
    between the two (a race) leads the open elsewhere, and the open file is refused."""
    root = tmp_path / "root"
    (root / "prompts").mkdir(parents=True)
    (root / "prompts" / "p.j2").write_text("inside")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "p.j2").write_text("outside")
    checked = files.inside

    def check_then_swap(path: Path, where: Path) -> Path:
        resolved = checked(path, where)
        (root / "prompts").rename(tmp_path / "moved")
        (root / "prompts").symlink_to(tmp_path / "elsewhere")
        return resolved

    monkeypatch.setattr(files, "inside", check_then_swap)
    with pytest.raises(files.Outside) as caught:
        files.read_regular(root / "prompts" / "p.j2", root=root)
    assert caught.value.real == tmp_path / "elsewhere" / "p.j2"


def test_a_symlink_put_in_place_of_the_file_after_the_check_is_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "p.j2").write_text("inside")
    checked = files.inside

    def check_then_swap(path: Path, where: Path) -> Path:
        resolved = checked(path, where)
        (tmp_path / "p.j2").unlink()
        (tmp_path / "p.j2").symlink_to("/proc/self/environ")
        return resolved

    monkeypatch.setattr(files, "inside", check_then_swap)
    with pytest.raises(files.Unreadable) as caught:
        files.read_regular(tmp_path / "p.j2", root=tmp_path)
    assert caught.value.reason == "cannot read: Too many levels of symbolic links"


class _Counting(BaseHTTPRequestHandler):
    hits: list[str] = []  # noqa: RUF012 - one list per server class, read by the test

    def do_GET(self) -> None:
        self.hits.append(self.path)
        body = b'{"type": "string"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        """Quiet."""


@pytest.fixture
def schema_server() -> Iterator[tuple[str, list[str]]]:
    """A real HTTP server on 127.0.0.1 that serves a schema to anyone who asks, counting."""
    hits: list[str] = []
    handler = type("Handler", (_Counting,), {"hits": hits})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/schema.json", hits
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("where", ["top", "nested"])
@pytest.mark.parametrize("keyword", ["$ref", "$dynamicRef"])
@pytest.mark.parametrize("scheme", ["http", "file"])
def test_a_schema_never_fetches_a_ref_from_elsewhere(
    project: Path,
    opened: list[Path],
    schema_server: tuple[str, list[str]],
    where: str,
    keyword: str,
    scheme: str,
) -> None:
    """jsonschema would fetch a `$ref` or `$dynamicRef` it cannot resolve inside the schema
    (an URL, a `file://` path) while grading: a fixture's schema that names one is refused
    as its file:line at load, and neither the server nor the file is ever asked."""
    url, hits = schema_server
    outside = project.parent / "schema.json"
    outside.write_text('{"type": "string"}')
    ref = url if scheme == "http" else outside.as_uri()
    schema: dict[str, Any] = {keyword: ref}
    if where == "nested":
        schema = {"type": "object", "properties": {"a": schema}}
    row = {**ROW, "expect": {"json_schema": schema}}
    (project / "cases.jsonl").write_text(json.dumps(row) + "\n")
    loaded = load_config(_config(project, "fixtures", "cases.jsonl"))
    del opened[:]  # what the test itself wrote

    with pytest.raises(DataError) as caught:
        prepare_suite(loaded, "s")

    assert caught.value.line == 1
    assert f"names nothing in the schema: {ref!r}" in caught.value.reason
    assert hits == []
    assert outside not in opened
    record("inputs", schema_refs_refused=1, fetched=0)


def test_grading_never_fetches_a_ref_either(
    schema_server: tuple[str, list[str]], opened: list[Path], tmp_path: Path
) -> None:
    """Below the load check, the grader's own validator resolves refs in the schema only: an
    answer that reaches a ref to elsewhere is a schema error, the URL never asked."""
    from runner.grading.checks import schema_violations

    url, hits = schema_server
    (tmp_path / "schema.json").write_text('{"type": "string"}')
    del opened[:]  # what the test itself wrote
    for ref in (url, (tmp_path / "schema.json").as_uri()):
        for keyword in ("$ref", "$dynamicRef"):
            schema = {"properties": {"a": {keyword: ref}}}
            assert schema_violations({"a": 1}, schema) == ["schema_error:WrappedReferencingError"]
    assert hits == []
    assert tmp_path / "schema.json" not in opened
