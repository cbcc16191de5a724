"""How the config's values are typed: strictly, as TOML writes them, and headers as sent.

A value is of its key's type as written, never coerced (`stream = "yes"` or `stream = 1` is no
boolean, `budget_usd = true` no amount), so a typo is refused at its key instead of read as
something its author did not write (`config._Strict` validates strictly). A `${VAR}` is the
one string a number or boolean key takes: the loader marks each string that held one
(`from_env`), and such a key reads the variable's value as the TOML scalar it spells
(`budget_usd = "${PARALLAX_BUDGET:-5}"` is 5), while a text key keeps it as text (`typed`).

Every value sent as a request header (each of `headers`, `anthropic_version`) is checked at
load (`HeaderName`, `HeaderValue`), so `validate` refuses one no client sends as written.
"""

from __future__ import annotations

import json
import re
import tomllib
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel

__all__ = ["HeaderName", "HeaderValue", "from_env", "header_value", "typed", "written"]

HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]*\Z")  # "" too: served_model_header's
# RFC 9110's field-value as every client sends it unchanged: visible ASCII, inner spaces and
# tabs. A line break would split the request; a NUL, a control or a byte past ASCII is refused
# or rewritten by some client mid-run; spaces at an end are stripped by the server.
_HEADER_VALUE = re.compile(r"^(?:[!-~](?:[ \t!-~]*[!-~])?)?\Z")
# pydantic's strict type errors, in the words a config's author reads
TYPE_WORDS = {
    "bool_type": "true or false",
    "int_type": "a whole number",
    "float_type": "a number",
    "string_type": "a string",
    "dict_type": "a table",
    "model_type": "a table",
    "list_type": "an array",
}


def _header_name(name: str) -> str:
    if not name or not HEADER_NAME.match(name):
        raise ValueError(f"{name!r} is no header name (letters, digits, '-', no spaces)")
    return name


def header_value(value: str) -> str:
    """(The value is never part of the message: a header may carry a secret.)"""
    if not _HEADER_VALUE.match(value):
        raise ValueError(
            "is no header value: printable ASCII only (no line break, control or non-ASCII "
            "character, no space at either end)"
        )
    return value


HeaderName = Annotated[str, AfterValidator(_header_name)]
HeaderValue = Annotated[str, AfterValidator(header_value)]


class _FromEnv(str):
    """A config string that held a `${VAR}` in the file."""

    __slots__ = ()


def from_env(written_value: Any, read: Any, var: re.Pattern[str]) -> Any:
    """`read` (the interpolated config) with each string that held a `var` in the file
    (`written_value`) marked as one."""
    if isinstance(written_value, str) and isinstance(read, str):
        return _FromEnv(read) if var.search(written_value) else read
    if isinstance(written_value, Mapping) and isinstance(read, Mapping):
        return {k: from_env(written_value.get(k), v, var) for k, v in read.items()}
    same_list = isinstance(written_value, list) and isinstance(read, list)
    if same_list and len(written_value) == len(read):
        return [from_env(w, r, var) for w, r in zip(written_value, read, strict=True)]
    return read


def typed(value: Any, annotation: Any) -> Any:
    """A value as a field of type `annotation` reads it: a marked string as the scalar it
    spells where the field is no text; every other mark dropped, except inside config tables,
    whose own fields read them."""
    if isinstance(value, _FromEnv) and not _takes_text(annotation):
        return _scalar(value)
    return value if _holds_tables(annotation) else _plain(value)


def written(value: Any) -> str:
    """A refused value as TOML writes it, short (a table or an array by its kind only)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return json.dumps(value)[:60]
    if isinstance(value, int | float):
        return repr(value)[:60]
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


def _takes_text(annotation: Any) -> bool:
    """Whether a field accepts a string as written: text, a choice of names, or either."""
    if annotation is str:
        return True
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _takes_text(typing.get_args(annotation)[0])
    if origin is Literal:
        return all(isinstance(choice, str) for choice in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return any(_takes_text(arm) for arm in typing.get_args(annotation))
    return False


def _holds_tables(annotation: Any) -> bool:
    """Whether a field's value is (or holds) config tables, which type their own strings."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return True
    return any(_holds_tables(arm) for arm in typing.get_args(annotation))


def _plain(value: Any) -> Any:
    """`value` with every mark inside it dropped (a table or array field keeps its strings as
    strings: a header or a param read from a variable is still text)."""
    if isinstance(value, _FromEnv):
        return str(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _scalar(text: str) -> Any:
    """A variable's text as the TOML scalar it spells (`5`, `0.5`, `true`, `inf`), else the
    text itself, which the field then refuses as it would refuse a string in the file."""
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except (tomllib.TOMLDecodeError, ValueError, RecursionError):
        return text
    return value if isinstance(value, int | float) else text  # a bool is an int
