"""What an importer produces, and how it is written: a config, a fixture file, notes.

Every importer fills one `Imported`: endpoints, suites, case rows, the extra files they name
(prompt templates, a graders module) and `Notes`, the list of what could not be mapped and of
each mapping that is close but not exact. `write_suite` writes all of it into a fresh folder
beside the output and checks it there as `validate` would (config, fixtures, graders, every
template rendered for every case) before the folder takes the output's name in one rename: a
failed import leaves nothing behind, and an output folder that holds anything is never
written into.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.errors import DataError, FixtureError, ParallaxError, UsageError
from runner.files import Outside, Unreadable, inside
from runner.invocation import command, shown_path

CONFIG_FILE = "parallax.toml"
CASES_FILE = "cases.jsonl"
NOTES_FILE = "IMPORT-NOTES.md"
_SLUG = re.compile(r"[^a-z0-9]+")


@dataclass
class Endpoint:
    """One `[endpoints.NAME]` table, with a comment saying where it came from."""

    name: str
    kind: str
    base_url: str
    model: str
    api_key_env: str | None
    comment: str
    temperature: float | None = None
    max_tokens: int | None = None
    params: dict[str, Any] = field(default_factory=dict)
    system_file: str | None = None
    user_template_file: str | None = None


@dataclass(frozen=True)
class SuiteSpec:
    """One `[suites.NAME]` table; every suite reads the one fixture file."""

    name: str
    reference: str
    candidate: str
    graders: str | None = None
    comment: str = ""


class Notes:
    """What an import left out and where a mapping is close but not exact, in the order
    found; a difference said of many cases is kept once, with how many it was said of."""

    def __init__(self) -> None:
        self.mapped: list[str] = []  # how each kind of check became a parallax expectation
        self.differences: dict[str, int] = {}
        self._not_mapped: dict[str, int] = {}

    def mapping(self, text: str) -> None:
        if text not in self.mapped:
            self.mapped.append(text)

    def differs(self, text: str) -> None:
        self.differences[text] = self.differences.get(text, 0) + 1

    def unmapped(self, text: str) -> None:
        self._not_mapped[text] = self._not_mapped.get(text, 0) + 1

    @property
    def not_mapped(self) -> list[str]:
        """Each thing left out, once, with how many cases it was left out of when several."""
        return [
            text + (f" (in {count} cases)" if count > 1 else "")
            for text, count in self._not_mapped.items()
        ]


@dataclass
class Imported:
    """A suite brought over from another tool, ready to be written."""

    tool: str  # the source tool, as its users name it
    source: Path
    summary: str  # one line: how many cases from how many of the source's
    endpoints: list[Endpoint]
    suites: list[SuiteSpec]
    cases: list[dict[str, Any]]
    notes: Notes
    files: dict[str, str] = field(default_factory=dict)  # more files, by relative path


class Ids:
    """Case ids that stay what a reader would call the case, made unique in file order."""

    def __init__(self) -> None:
        self._taken: set[str] = set()

    def take(self, wanted: str) -> str:
        base = wanted or "case"
        found, n = base, 1
        while found in self._taken:
            n += 1
            found = f"{base}-{n}"
        self._taken.add(found)
        return found


def slug(text: str, limit: int = 48) -> str:
    """`text` as a name: lower-case letters and digits joined by '-', at most `limit` long."""
    return _SLUG.sub("-", text.lower()).strip("-")[:limit].rstrip("-")


def js_text(value: Any) -> str | None:
    """A scalar as JavaScript's String() prints it (true, 3, 0.5), which is what the source
    tools insert into a prompt or compare with; None for a null, a list or an object."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return str(int(value)) if value.is_integer() and abs(value) < 1e21 else repr(value)
    return value if isinstance(value, str) else None


def row_problem(row: Mapping[str, Any], line: int) -> str | None:
    """Why parallax's fixture loader would refuse `row`, or None: an importer leaves such a
    case out and lists it instead of writing a file that fails to load."""
    from runner.fixtures.check import to_case
    from runner.fixtures.parse import Row
    from runner.request.casekeys import ToolFiles

    try:
        json.dumps(row, allow_nan=False)
    except ValueError:
        return "it holds a number JSON cannot carry (inf or nan)"
    try:
        to_case(CASES_FILE, Row(dict(row), line), ToolFiles(Path(CASES_FILE)))
    except FixtureError as exc:
        return exc.reason
    return None


def source_file(base: Path, name: str) -> Path:
    """A file a source config names (`file://...`, relative to its folder). A config is a
    stranger's: one that names a file outside its own folder (`../../.ssh/id_rsa`, an
    absolute path, a symlink out) would copy it into the cases and send it to a provider, so
    such a name is a DataError, read by nobody."""
    path = base / name.removeprefix("file://")
    try:
        return inside(path, base)
    except Outside:
        raise DataError(path, "outside the config's folder: not read") from None
    except Unreadable as exc:
        raise DataError(path, exc.reason) from None


def tomlable(value: Any) -> bool:
    """Whether a config value can be written to TOML and read back as JSON sends it: text,
    finite numbers, booleans, and lists and tables of them (TOML has no null)."""
    if isinstance(value, bool | int | str):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(tomlable(v) for v in value)
    if isinstance(value, Mapping):
        return all(tomlable(v) for v in value.values())
    return False


def _toml(value: Any) -> str:
    """A TOML value for a string, number, boolean, list or table (inline)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):  # JSON's escapes are TOML's, bar DEL, which TOML wants escaped
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{_toml(str(k))} = {_toml(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML value for {type(value).__name__}")


def _key(name: str) -> str:
    """A table name as a TOML key: bare when it can be, quoted when it holds a '.'."""
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else _toml(name)


def config_text(imported: Imported) -> str:
    """The config: a header pointing at the notes, every endpoint, every suite."""
    out = [
        f"# Imported from {imported.tool} ({imported.source.name}) by `parallax import`.",
        f"# What could not be mapped, and each mapping that differs, is in {NOTES_FILE}.",
        "# Paths are relative to this file's folder.",
        'runs_dir = "runs"',
        'snapshots_dir = "snapshots"',
    ]
    for ep in imported.endpoints:
        out += [
            "",
            f"[endpoints.{_key(ep.name)}]",
            *(f"# {line}" for line in ep.comment.splitlines()),
        ]
        settings: dict[str, Any] = {
            "kind": ep.kind,
            "base_url": ep.base_url,
            "model": ep.model,
            "api_key_env": ep.api_key_env,
            "temperature": ep.temperature,
            "max_tokens": ep.max_tokens,
            "params": ep.params or None,
            "system_file": ep.system_file,
            "user_template_file": ep.user_template_file,
        }
        out += [f"{key} = {_toml(value)}" for key, value in settings.items() if value is not None]
    for suite in imported.suites:
        out += [
            "",
            f"[suites.{_key(suite.name)}]",
            *(f"# {line}" for line in suite.comment.splitlines()),
        ]
        out += [f"fixtures = {_toml(CASES_FILE)}"]
        if suite.graders is not None:
            out.append(f"graders = {_toml(suite.graders)}")
        out += [f"reference = {_toml(suite.reference)}", f"candidate = {_toml(suite.candidate)}"]
    return "\n".join(out) + "\n"


def notes_text(imported: Imported) -> str:
    """IMPORT-NOTES.md: what was mapped to what, where it differs, and what was not mapped."""
    notes = imported.notes
    out = [
        "# Import notes",
        "",
        f"Imported from {imported.tool}: `{imported.source.name}`. {imported.summary}.",
        "",
        "## How each check was mapped",
        "",
        *(f"- {line}" for line in notes.mapped),
        "",
        "## Where the mapping is close, not exact",
        "",
        *(
            f"- {text}" + (f" ({count} times)" if count > 1 else "")
            for text, count in notes.differences.items()
        ),
        "",
        "## Not mapped",
        "",
        *(f"- {line}" for line in notes.not_mapped or ["nothing: every case and check was mapped"]),
    ]
    return "\n".join(out) + "\n"


def write_suite(imported: Imported, out: Path) -> list[Path]:
    """Write the imported suite as the folder `out`, which must not exist or be empty, and
    return the files written. It is checked as `validate` checks a suite before it takes the
    name; a suite that fails the check (an importer's own mistake) is a DataError naming the
    source, and nothing is left behind."""
    _refuse_taken(out)
    if not imported.cases:
        raise DataError(imported.source, "nothing to import: no case could be mapped")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.import-", dir=out.parent))
    except OSError as exc:
        raise UsageError(f"{out}: cannot write: {exc.strerror or exc}") from None
    try:
        files = {
            CONFIG_FILE: config_text(imported),
            CASES_FILE: "".join(
                json.dumps(row, ensure_ascii=False) + "\n" for row in imported.cases
            ),
            **imported.files,
            NOTES_FILE: notes_text(imported),
        }
        for relative, text in files.items():
            path = staging / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8", newline="\n")
        _check(staging, imported)
        try:
            staging.rename(out)  # onto an empty folder too; never onto one that holds files
        except OSError:
            raise UsageError(f"{out}: exists and is not empty; nothing written") from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return [out / relative for relative in files]


def _refuse_taken(out: Path) -> None:
    if out.is_dir():
        if any(out.iterdir()):
            raise UsageError(f"{out}: exists and is not empty; nothing written")
    elif out.exists() or out.is_symlink():
        raise UsageError(f"{out}: exists and is not a folder; nothing written")


def _check(staging: Path, imported: Imported) -> None:
    """The written suite, loaded and rendered as `validate` does."""
    from runner.config import check_files, load_config
    from runner.suite import prepare_suite

    try:
        loaded = load_config(staging / CONFIG_FILE)
        check_files(loaded)
        for name in loaded.suite_names():
            prepare_suite(loaded, name).fixtures.close()
    except ParallaxError as exc:
        reason = str(exc).replace(str(staging) + os.sep, "")
        raise DataError(
            imported.source, f"the imported suite does not validate: {reason}"
        ) from None


def lines(imported: Imported, written: list[Path]) -> list[str]:
    """What `parallax import` prints: the files, what was not mapped, the next commands."""
    out = [f"wrote {shown_path(path)}" for path in written]
    notes = next(path for path in written if path.name == NOTES_FILE)
    unmapped = imported.notes.not_mapped
    out.append(
        f"{imported.summary}; "
        + (
            f"{len(unmapped)} not mapped, listed in {shown_path(notes)}:"
            if unmapped
            else f"everything mapped (how: {shown_path(notes)})"
        )
    )
    out += [f"  not mapped: {line}" for line in unmapped]
    config = next(path for path in written if path.name == CONFIG_FILE)
    keys = sorted({ep.api_key_env for ep in imported.endpoints if ep.api_key_env})
    before = f"export {' and '.join(keys)} before `run` (validate needs no key)" if keys else ""
    out += [
        f"next{': ' + before if before else ''}:",
        f"  {command('validate', '--config', config)}",
        f"  {command('run', '--config', config)}",
    ]
    return out
