"""Nothing a fixture names is fetched from elsewhere: a JSON Schema's refs resolve inside it.

jsonschema on its own fetches a `$ref` or `$dynamicRef` it cannot resolve in the schema (a URL,
a `file://` path) while it grades: a fixture row from a stranger's pull request could make a
run read `/proc/self/environ` or call any server. Each test checks that such a ref is refused
and that neither the server nor the file is ever asked.
"""

from __future__ import annotations

import io
import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from relkit import record

from runner.config import load_config
from runner.errors import DataError
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
    from runner.grading import _schema_violations

    url, hits = schema_server
    (tmp_path / "schema.json").write_text('{"type": "string"}')
    del opened[:]  # what the test itself wrote
    for ref in (url, (tmp_path / "schema.json").as_uri()):
        for keyword in ("$ref", "$dynamicRef"):
            schema = {"properties": {"a": {keyword: ref}}}
            assert _schema_violations({"a": 1}, schema) == ["schema_error:WrappedReferencingError"]
    assert hits == []
    assert tmp_path / "schema.json" not in opened
