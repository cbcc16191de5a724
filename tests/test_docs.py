"""The docs site builds, its reference holds everything the code declares, and the tutorial
does what it says.

The reference pages are generated from the code (docs/hooks/reference.py), so these tests read
the *built* site: a key, flag, event or miss code that exists in the code but that the
generator skipped, or a page that lost its generated table, fails here by name.
"""

from __future__ import annotations

import argparse
import ast
import html
import re
import subprocess
import sys
import typing
from pathlib import Path
from types import ModuleType

import pytest
from llmockkit import LlmockServer, Protocol
from pydantic import BaseModel
from relkit import RUN_TIMEOUT, run_parallax

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as `make docs` builds it: strict, so any warning (a broken link) fails."""
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(out)],
        cwd=ROOT,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return out


def page(site: Path, name: str) -> str:
    """A built page's text, entities decoded, tags kept (a code span is `<code>x</code>`)."""
    return html.unescape((site / f"{name}.html").read_text("utf-8"))


def _defining(name: str) -> list[ModuleType]:
    """The runner modules that hold `name` at their top, wherever they sit: modules move
    between packages, what they declare stays."""
    import importlib
    import pkgutil

    import runner

    found = []
    for info in pkgutil.walk_packages(runner.__path__, "runner."):
        if not info.name.endswith("__main__"):
            module = importlib.import_module(info.name)
            if name in vars(module):
                found.append(module)
    return found


def _models(model: type[BaseModel]) -> list[type[BaseModel]]:
    found = [model]
    for field in model.model_fields.values():
        for arg in (field.annotation, *typing.get_args(field.annotation)):
            for inner in (arg, *typing.get_args(arg)):
                if isinstance(inner, type) and issubclass(inner, BaseModel):
                    found += [m for m in _models(inner) if m not in found]
    return found


def test_every_config_key_has_a_description_and_is_in_the_reference(site: Path) -> None:
    """Each key of each config table (the models under `Config`) is described in its model and
    listed in the built config reference."""
    from runner.config import Config

    text = page(site, "reference/config")
    keys = [(m.__name__, k, f) for m in _models(Config) for k, f in m.model_fields.items()]
    assert [(m, k) for m, k, f in keys if not f.description] == []
    assert [(m, k) for m, k, _ in keys if f"<code>{k}</code>" not in text] == []


def _parsers(
    parser: argparse.ArgumentParser, name: str = "parallax"
) -> list[tuple[str, argparse.ArgumentParser]]:
    found = [(name, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child, sub in action.choices.items():
                found += _parsers(sub, f"{name} {child}")
    return found


def test_every_command_and_flag_is_in_the_cli_reference(site: Path) -> None:
    """Every command (`import`'s own ones too), each of its options, and its exit codes are in
    the built command-line reference."""
    from runner.arguments import build_parser

    text = page(site, "reference/cli")
    missing = []
    for name, parser in _parsers(build_parser()):
        if f"<code>{name}</code>" not in text:
            missing.append(name)
        for action in parser._actions:
            missing += [f"{name} {flag}" for flag in action.option_strings if flag not in text]
        if parser.epilog and parser.epilog.strip() not in text:
            missing.append(f"{name}: exit codes")
    assert missing == []


def test_every_exit_code_any_help_names_is_in_the_exit_code_table(site: Path) -> None:
    """The codes every `--help` lists (the verdicts, 64-78, the signals, 141) each have a row
    in the exit-code reference's table."""
    from runner.arguments import build_parser

    named = set()
    for _, parser in _parsers(build_parser()):
        for line in (parser.epilog or "").splitlines():
            named |= {int(c) for c in re.findall(r"(?:^|\s{2}|/ )(\d{1,3})(?=\s)", line)}
    rows = set(map(int, re.findall(r"<tr>\s*<td>(\d+)</td>", page(site, "reference/exit-codes"))))
    assert named - rows == set()
    assert {0, 1, 2, 3, 64, 65, 70, 74, 78, 130, 141, 143} <= named


def test_every_log_event_is_declared_once_and_in_the_reference(site: Path) -> None:
    """Every event constant in runner.logs is declared with its doc (a plain string constant
    would be an event nobody documented), and each is in the built log reference."""
    from runner import logs

    constants = {
        value
        for name, value in vars(logs).items()
        if name.isupper() and isinstance(value, str) and re.fullmatch(r"[a-z_]+\.[a-z_]+", value)
    }
    assert constants - set(logs.EVENTS) == set()
    text = page(site, "reference/log-events")
    assert [e for e in logs.EVENTS if f"<code>{e}</code>" not in text] == []


def test_every_miss_code_is_in_the_reference_and_graded_from_the_one_list(site: Path) -> None:
    """Each built-in miss code is in the built miss reference and the expectation table, and no
    grader spells a miss code outside `runner.model.Miss`."""
    import inspect

    from runner.model import Miss

    misses, fixtures = page(site, "reference/misses"), page(site, "reference/fixtures")
    assert [m.form for m in Miss if f"<code>{m.form}</code>" not in misses] == []
    assert [m.form for m in Miss if f"<code>{m.form}</code>" not in fixtures] == []
    for module in {*_defining("BUILTIN_KEYS"), *_defining("TOOL_KEYS")}:
        source = inspect.getsource(module)
        quote, end = "[\"']", {True: ":", False: "[\"']"}
        spelled = [m for m in Miss if re.search(quote + m.code + end[bool(m.argument)], source)]
        assert spelled == []


def test_the_gate_classes_stamps_and_file_fields_are_documented(site: Path) -> None:
    """The gate classes, both stamps' values, every outcome row field and every cassette key
    are on their pages (these tables are written by hand beside the code's lists)."""
    import dataclasses

    from runner.model import Outcome, Schema, Transport

    classes = page(site, "concepts/gate-classes")
    (gate_classes,) = {
        id(m.GATE_CLASSES): m.GATE_CLASSES for m in _defining("GATE_CLASSES")
    }.values()
    assert [c for c in gate_classes if f"<code>{c}</code>" not in classes] == []
    stamps = page(site, "concepts/stamps")
    assert [s for s in (*Transport, *Schema) if f"<code>{s}</code>" not in stamps] == []
    formats = page(site, "reference/file-formats")
    fields = [f.name for f in dataclasses.fields(Outcome)]
    assert [f for f in fields if f not in formats] == []
    cassette = formats.split('id="cassette"')[1]
    (recorded,) = [m for m in _defining("_KEYS") if hasattr(m, "CASSETTE_SIDES")]
    assert [k for k in sorted(recorded._KEYS) if f"<code>{k}</code>" not in cassette] == []


def test_the_changelog_is_included_not_copied(site: Path) -> None:
    """The changelog page is CHANGELOG.md itself, included at build time."""
    assert (ROOT / "docs" / "changelog.md").read_text("utf-8").strip().startswith("--8<--")
    first = (ROOT / "CHANGELOG.md").read_text("utf-8").split("\n- ", 2)[1].split("`")[0]
    assert html.escape(first.strip(), quote=False) in (site / "changelog.html").read_text()


def test_the_architecture_page_lists_every_module_with_its_docstring(site: Path) -> None:
    """One line per module, taken from its docstring: a module added, moved or reworded shows
    on the page at the next build, so the page cannot drift from the layout."""
    text = page(site, "architecture")
    for path in sorted((ROOT / "runner").rglob("*.py")):
        if path.name in ("__init__.py", "__main__.py") or "__pycache__" in path.parts:
            continue
        first = (ast.get_docstring(ast.parse(path.read_text("utf-8"))) or "").split("\n")[0]
        package = ".".join(path.parent.relative_to(ROOT).parts)
        assert f"<code>{package}</code>" in text, package
        assert f"<code>{path.stem}</code>" in text, path
        assert html.unescape(first.split("`")[0]).strip()[:40] in html.unescape(text), path


def test_the_readme_stays_short() -> None:
    """The README points into the docs; the manual lives there."""
    assert len((ROOT / "README.md").read_text("utf-8").splitlines()) <= 150


@pytest.mark.slow
@pytest.mark.timeout(RUN_TIMEOUT)  # a dozen commands one after another: a hung run's bound
def test_the_tutorial_runs_as_written(
    tmp_path: Path, llmock: LlmockServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tutorial's steps against llmock: init, validate, a first run of new cases, promote,
    a second run all unchanged, then a candidate system prompt that moves four cases."""
    monkeypatch.setenv("OPENAI_BASE_URL", llmock.base_url(Protocol.OPENAI))
    tutorial = (ROOT / "docs" / "tutorial.md").read_text("utf-8")
    config = "nightly/parallax.toml"

    def parallax(*args: str) -> subprocess.CompletedProcess[str]:
        return run_parallax(*args, cwd=tmp_path)

    assert parallax("init", "nightly", "--provider", "openai-compatible").returncode == 0
    checked = parallax("validate", "--config", config)
    assert (checked.returncode, checked.stdout.strip()) == (
        0,
        f"{config}: ok (1 suite(s), 7 case(s))",
    )
    assert checked.stdout.strip() in tutorial
    first = parallax("run", "--config", config)
    assert first.returncode == 1
    shown = [line for line in first.stderr.splitlines() if "cases 7" in line or "strata" in line]
    assert [line for line in shown if line not in tutorial] == []
    (run_dir,) = [d for d in (tmp_path / "nightly" / "runs" / "starter").iterdir() if d.is_dir()]
    assert parallax("promote", str(run_dir)).returncode == 0
    second = parallax("run", "--config", config)
    assert "cases 7 · admitted 7 · unadmitted 0 · unchanged 7" in second.stderr
    toml = tmp_path / config
    text = toml.read_text("utf-8").replace(
        'model = "${CAND_MODEL:-candidate}"\n',
        'model = "${CAND_MODEL:-candidate}"\nsystem = "Answer in one short sentence."\n',
    )
    toml.write_text(text, "utf-8")
    third = parallax("run", "--config", config)
    assert third.returncode == 1
    moved = [line for line in third.stderr.splitlines() if "disagreement_changed" in line]
    moved += [
        line
        for line in third.stderr.splitlines()
        if line.startswith(("  review:", "  request changed"))
    ]
    assert len(moved) == 3
    assert [line for line in moved if line not in tutorial] == []
