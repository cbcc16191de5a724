"""The reference pages' tables, generated from the code at every build, so they cannot drift.

A page asks for a table with a marker line, `<!-- generated: NAME -->`, which this MkDocs hook
replaces with Markdown built from what the code declares: the config keys from the pydantic
models (each field's description is its attribute docstring), the fixture row and
expectation keys from the tables the loader and the graders check against, the miss codes
from `runner.model.Miss`, the commands from the argparse parser (`runner.arguments`), the log
events from their one list (`runner.logs`), the stamps from their enums. An unknown marker, or
a key with no description, fails the build (`mkdocs build --strict` runs in `make test`).

A hook rather than a plugin such as mkdocs-gen-files: the pages stay ordinary Markdown files
with their prose beside each table, and the generator is this one file, with no dependency
beyond MkDocs itself. Objects whose module may move between packages (the graders, the case
keys) are found by name among runner's modules (`_find`), not by a path.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import pkgutil
import re
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo

import runner
from runner import arguments, config, logs, model

_MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.MULTILINE)


class GeneratedError(Exception):
    """What the code declares cannot be documented as it is (a key without a description)."""


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs hook: each marker line becomes the table it names."""

    def table(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise GeneratedError(f"{page.file.src_path}: no generated table named {name!r}")
        return GENERATORS[name]()

    return _MARKER.sub(table, markdown)


def _find(name: str) -> Any:
    """The one object named `name` at the top of a runner module, wherever that module sits
    (the packages are being regrouped; a table is found by what it is called)."""
    found: dict[int, Any] = {}
    for info in pkgutil.walk_packages(runner.__path__, "runner."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        if name in vars(module):
            found[id(vars(module)[name])] = vars(module)[name]
    if len(found) != 1:
        raise GeneratedError(f"{name}: {len(found)} definitions in runner, one expected")
    return next(iter(found.values()))


def _cell(text: object) -> str:
    """A Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _rows(header: tuple[str, ...], rows: Iterator[tuple[object, ...]] | list[Any]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


# --- config keys ------------------------------------------------------------------------------


def _unwrap(annotation: Any) -> tuple[Any, bool]:
    """The annotation without `Annotated` and `| None`, and whether None was allowed."""
    optional = False
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            optional = optional or len(args) < len(typing.get_args(annotation))
            if len(args) != 1:
                return annotation, optional
            annotation = args[0]
        else:
            return annotation, optional


def _model_of(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The model a field holds, and whether it holds one per name (`dict[str, Model]`)."""
    inner, _ = _unwrap(annotation)
    if isinstance(inner, type) and issubclass(inner, BaseModel):
        return inner, False
    if typing.get_origin(inner) is dict:
        value, _ = _unwrap(typing.get_args(inner)[1])
        if isinstance(value, type) and issubclass(value, BaseModel):
            return value, True
    return None, False


_TYPE_NAMES = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _type(annotation: Any) -> str:
    inner, _ = _unwrap(annotation)
    origin = typing.get_origin(inner)
    if origin is typing.Literal:
        return " or ".join(f'`"{value}"`' for value in typing.get_args(inner))
    if origin is list:
        return f"list of {_type(typing.get_args(inner)[0])}"
    if origin is dict:
        value = _type(typing.get_args(inner)[1])
        return "table" if value == "any" else f"table of {value}s"
    if isinstance(inner, type) and issubclass(inner, BaseModel):
        return "table"
    return _TYPE_NAMES.get(inner, "any")


def _constraints(field: FieldInfo) -> str:
    signs = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<"}
    return ", ".join(
        f"{sign} {_number(getattr(item, bound))}"
        for item in field.metadata
        for bound, sign in signs.items()
        if isinstance(item, annotated_types.BaseMetadata) and hasattr(item, bound)
    )


def _number(value: object) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        value = int(value)
    return f"{value:,}" if isinstance(value, int) and abs(value) >= 10_000 else str(value)


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    factory = field.default_factory
    value = factory() if factory is not None else field.default  # type: ignore[call-arg]
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, BaseModel):
        return "see below"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, int | float):
        return f"`{_number(value)}`"
    return f"`{value}`"


def _description(owner: type[BaseModel], name: str, field: FieldInfo) -> str:
    if not field.description:
        raise GeneratedError(
            f"{owner.__module__}.{owner.__name__}.{name} has no description: give it an "
            "attribute docstring"
        )
    return field.description


def config_tables(root: type[BaseModel] = config.Config, table: str = "") -> Iterator[str]:
    """One Markdown table per TOML table, the top level first, each nested model after it."""
    rows, nested = [], []
    for name, field in root.model_fields.items():
        held, per_name = _model_of(field.annotation)
        kind = _type(field.annotation)
        if held is not None:
            key = f"{table}.{name}" if table else name
            nested.append((f"{key}.NAME" if per_name else key, held))
            kind = f"a table per name, `[{key}.NAME]`" if per_name else kind
        limits = _constraints(field)
        rows.append(
            (
                f"`{name}`",
                f"{kind}, {limits}" if limits else kind,
                _default(field),
                _description(root, name, field),
            )
        )
    title = f"`[{table}]`" if table else "Top level"
    doc = (root.__doc__ or "").strip().split("\n\n")[0]
    yield f"### {title}\n\n{' '.join(doc.split())}\n\n"
    yield _rows(("key", "type", "default", "what it is"), rows)
    for key, held in nested:
        yield "\n"
        yield from config_tables(held, key)


def _config() -> str:
    return "".join(config_tables())


# --- fixtures, expectations, misses -----------------------------------------------------------


def _row_keys() -> str:
    keys: Mapping[str, str] = _find("ROW_KEYS")
    return _rows(("key", "what it holds"), [(f"`{k}`", v) for k, v in keys.items()])


def _key(key: str) -> str:
    """An expectation key in code type; `(always)` and the like as they are."""
    return key if key.startswith("(") else f"`{key}`"


def _misses_of(key: str) -> str:
    return ", ".join(f"`{m.form}`" for m in model.Miss if key in m.keys) or "—"


def _expect_keys() -> str:
    keys: dict[str, str] = {**_find("BUILTIN_KEYS"), **_find("TOOL_KEYS")}
    rows = [(f"`{k}`", v, _misses_of(k)) for k, v in keys.items()]
    always = sorted({k for m in model.Miss for k in m.keys if k.startswith("(")})
    rows += [(k, "checked without a key", _misses_of(k)) for k in always]
    return _rows(("key", "what it expects", "misses"), rows)


def _misses() -> str:
    rows = [(f"`{m.form}`", ", ".join(map(_key, m.keys)), m.meaning) for m in model.Miss]
    return _rows(("miss", "checked by", "what it means"), rows)


def _stamps() -> str:
    transport = ", ".join(f"`{t}`" for t in model.Transport)
    schema = ", ".join(f"`{s}`" for s in model.Schema)
    return f"- transport: {transport}\n- schema: {schema}\n"


# --- the command line ---------------------------------------------------------------------------


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _flag(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    flags = ", ".join(action.option_strings)
    if action.nargs == 0:
        return f"`{flags}`"
    metavar = action.metavar or action.dest.upper()
    return f"`{flags} [{metavar}]`" if action.nargs == "?" else f"`{flags} {metavar}`"


def _flag_help(action: argparse.Action) -> str:
    text = action.help or ""
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        text += " (one of " + ", ".join(f"`{c}`" for c in action.choices) + ")"
    if action.required and action.option_strings:
        text += " (required)"
    return text


def _command(name: str, parser: argparse.ArgumentParser) -> Iterator[str]:
    children = _subcommands(parser)
    yield f"### `parallax {name}`\n\n{' '.join((parser.description or '').split())}\n\n"
    yield f"```text\n{parser.format_usage().strip()}\n```\n\n"
    actions = [
        a
        for a in parser._actions
        if not isinstance(a, argparse._HelpAction | argparse._SubParsersAction)
    ]
    if actions:
        yield _rows(("argument", "what it does"), [(_flag(a), _flag_help(a)) for a in actions])
        yield "\n"
    if children:
        for child, sub in children.items():
            yield from _command(f"{name} {child}", sub)
        return
    if parser.epilog:
        yield f"```text\n{parser.epilog.strip()}\n```\n\n"


def _cli() -> str:
    parser = arguments.build_parser()
    head = f"```text\n{parser.format_help().strip()}\n```\n\n"
    return head + "".join(
        part for name, sub in _subcommands(parser).items() for part in _command(name, sub)
    )


def _exit_codes() -> str:
    return f"```text\n{arguments.EXIT_CODES.strip()}\n```\n"


# --- log events -----------------------------------------------------------------------------------


def _events() -> str:
    rows = [
        (f"`{e.name}`", e.level, ", ".join(_field(f) for f in _split(e.fields)), e.meaning)
        for e in logs.event_docs()
    ]
    return _rows(("event", "level", "fields", "when"), rows)


def _field(text: str) -> str:
    """A field name in code type; a note about fields (`reason (running: ...)`) as it is."""
    name, sep, rest = text.partition(" ")
    return f"`{name}`{sep}{rest}"


def _split(fields: str) -> list[str]:
    """`a, b (note: c)` into `a`, `b (note: c)`: a parenthesis keeps its commas."""
    parts, depth, current = [], 0, ""
    for char in fields:
        depth += (char == "(") - (char == ")")
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    return [*parts, current.strip()] if current.strip() else parts


# --- the results database ------------------------------------------------------------------------


def _results_tables() -> str:
    """One table per results-database table: its columns, their SQL types and meaning."""
    parts = []
    for table in _find("TABLES"):
        key = ", ".join(f"`{k}`" for k in table.key)
        parts.append(f"### `{table.name}`\n\n{table.doc.capitalize()}; key {key}.\n\n")
        rows = [(f"`{c.name}`", c.type.removesuffix(" NOT NULL"), c.doc) for c in table.columns]
        parts.append(_rows(("column", "type", "what it holds"), rows) + "\n")
    return "".join(parts)


# --- modules --------------------------------------------------------------------------------------


def _summary(path: Path) -> str:
    """A module's docstring up to its first blank line: the sentence that says why it exists.
    Read with `ast`, not imported, so a page lists a module whatever it would do on import."""
    doc = ast.get_docstring(ast.parse(path.read_text("utf-8"))) or ""
    return doc.split("\n\n", 1)[0]


def _modules() -> str:
    """One table per package, in the order a run flows through them (`_STAGES`); a package
    the list does not name still gets its table, last, so a new one is never left out."""
    root = Path(runner.__path__[0])
    packages = sorted(
        (p.parent for p in root.rglob("__init__.py") if "__pycache__" not in p.parts),
        key=lambda p: (_STAGES.index(p.name) if p.name in _STAGES else len(_STAGES), p.name),
    )
    parts = []
    for package in packages:
        name = ".".join(package.relative_to(root.parent).parts)
        parts.append(f"### `{name}`\n\n{_summary(package / '__init__.py')}\n\n")
        rows = [
            (f"`{path.stem}`", _summary(path))
            for path in sorted(package.glob("*.py"))
            if path.name not in ("__init__.py", "__main__.py")
        ]
        parts.append(_rows(("module", "why it exists"), rows) + "\n")
    return "".join(parts)


# the packages in the order a run flows through them; runner itself (the CLI, config and the
# top-level stages) first
_STAGES = (
    "runner",
    "fixtures",
    "request",
    "runs",
    "client",
    "protocols",
    "recorded",
    "grading",
    "cost",
    "reports",
    "results",
    "scheduler",
    "importers",
)


GENERATORS: dict[str, Callable[[], str]] = {
    "config": _config,
    "row-keys": _row_keys,
    "expect-keys": _expect_keys,
    "misses": _misses,
    "stamps": _stamps,
    "cli": _cli,
    "exit-codes": _exit_codes,
    "events": _events,
    "results-tables": _results_tables,
    "modules": _modules,
}
