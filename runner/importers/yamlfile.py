"""A YAML file read as the JavaScript tools that write them read it: YAML 1.2's core schema.

promptfoo reads its configs with js-yaml, whose default schema is YAML 1.2's: `yes`, `no`,
`on` and `off` are strings, `012` is twelve and `1:20` is text. PyYAML implements YAML 1.1,
where the first four are booleans, `012` is ten and `1:20` is eighty, so a test whose var is
`answer: no` would be imported as `answer: "false"`. The loader here is PyYAML's safe loader
with the 1.2 core resolvers for booleans, integers and floats, and no timestamps (a date stays
the text it was written as).

What comes back is plain JSON data. A file is a stranger's: it is read only when it is a
regular file under a size bound, and its aliases are expanded under a budget of nodes, so a
"billion laughs" document or an alias that contains itself is one error, not a hung import.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from runner.errors import DataError
from runner.files import Unreadable, read_regular
from runner.jsontext import MAX_DEPTH

MAX_BYTES = 16 << 20
MAX_NODES = 1_000_000  # values in the document once its aliases are expanded

_BOOL = "tag:yaml.org,2002:bool"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_REPLACED = (_BOOL, _INT, _FLOAT, "tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:value")


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2 core scalars."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in _REPLACED]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    _BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_Loader.add_implicit_resolver(
    _INT, re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789")
)
_Loader.add_implicit_resolver(
    _FLOAT,
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)


def _int(loader: _Loader, node: yaml.ScalarNode) -> int:
    text = str(loader.construct_scalar(node))
    if text.startswith(("0o", "0x")):
        return int(text, 0)
    return int(text, 10)  # 012 is twelve in YAML 1.2


_Loader.add_constructor(_INT, _int)


def load_yaml(path: Path) -> Any:
    """The document in `path` as plain JSON data; a DataError naming the file (and the line,
    where YAML says) when it cannot be read."""
    try:
        text = read_regular(path, limit=MAX_BYTES).decode("utf-8-sig")
    except Unreadable as exc:
        raise DataError(path, exc.reason) from None
    except UnicodeDecodeError as exc:
        raise DataError(path, f"not UTF-8 at byte {exc.start}") from None
    return parse_yaml(text, path)


def parse_yaml(text: str, path: Path) -> Any:
    """YAML text (from `path`, named in errors) as plain JSON data."""
    try:
        document = yaml.load(text, Loader=_Loader)  # noqa: S506 - a safe loader, see above
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark is not None else None
        raise DataError(path, f"invalid YAML: {exc.problem or exc}", line=line) from None
    except (yaml.YAMLError, RecursionError, ValueError) as exc:
        raise DataError(path, f"invalid YAML: {type(exc).__name__}") from None
    return _plain(document, path)


def _plain(document: Any, path: Path) -> Any:
    """`document` as JSON data: keys as text, nested at most MAX_DEPTH deep, no more than
    MAX_NODES values once shared (aliased) parts are counted each time they appear."""
    budget = [MAX_NODES]

    def walk(value: Any, depth: int) -> Any:
        budget[0] -= 1
        if budget[0] < 0:
            raise DataError(path, f"more than {MAX_NODES} values once its aliases are expanded")
        if depth > MAX_DEPTH:
            raise DataError(path, f"nested deeper than {MAX_DEPTH} levels (an alias in itself?)")
        if isinstance(value, dict):
            return {_key(k): walk(v, depth + 1) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, depth + 1) for v in value]
        if isinstance(value, bytes):  # !!binary
            raise DataError(path, "a !!binary value has no JSON form")
        return value

    return walk(document, 0)


def _key(key: Any) -> str:
    """A mapping key as JavaScript would name it: `true`, `1`, `null`."""
    if key is None:
        return "null"
    if isinstance(key, bool):
        return "true" if key else "false"
    return str(key)
