"""A config's mistakes as its author reads them: each of pydantic's errors at its dotted key.

Every error of the file is reported at once, each one line naming the key, so one `validate`
lists all there is to fix. An unknown key or table is most often a typo of a known one at
that level (`concurreny`, `[suite.x]`), so it is answered with the closest name the model has
there: the field names are read from the models themselves, never kept in a second list. And
the rules between tables (a suite naming an endpoint, a budget's prices, the templates) are
still checked on what is left once the refused keys are set aside (`salvaged`), so a typo in
one table does not hide a mistake in another.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from runner.configtypes import TYPE_WORDS, written
from runner.errors import MAX_LISTED, ConfigError, did_you_mean

_SECRET_KEYS = ("api_key", "key", "token")  # a secret written into the file, not its variable
_ROUNDS = 4  # a table set aside can leave another refused (one that named it): a few rounds

M = TypeVar("M", bound=BaseModel)


def located(
    path: Path,
    exc: ValidationError,
    model: type[BaseModel],
    empties: Mapping[str, str],
    *,
    told: Collection[str] = (),
) -> list[ConfigError]:
    """Every error of `exc` (validating `model`) at its key, in pydantic's order, the first
    MAX_LISTED listed and the rest counted; none about a key in `told` (its value was refused
    before validation: an unset variable), a key inside it or a table holding it."""
    found: dict[str, ConfigError] = {}  # by message: a key refused twice is told once
    errors = exc.errors()
    # a required key missing where a misspelling of it was refused is told by that refusal
    meant = {
        ".".join(str(part) for part in (*error["loc"][:-1], close))
        for error in errors
        if error["type"] == "extra_forbidden" and (close := _closest(error["loc"], model))
    }
    for error in errors:
        key = ".".join(str(part) for part in error["loc"])
        if any(near(key, done) for done in told) or (error["type"] == "missing" and key in meant):
            continue
        refused = ConfigError(path, key or None, _reason(error, key, model, empties))
        found.setdefault(refused.message, refused)
    listed = list(found.values())
    if len(listed) > MAX_LISTED:
        more = f"and {len(listed) - MAX_LISTED} more errors (the first {MAX_LISTED} listed)"
        listed[MAX_LISTED:] = [ConfigError(path, None, more)]
    return listed


def near(key: str, other: str) -> bool:
    """Whether two dotted keys are one, or one is a table holding the other: an error about
    one may follow from the other."""
    return key == other or key.startswith(f"{other}.") or other.startswith(f"{key}.")


def _reason(
    error: ErrorDetails, key: str, model: type[BaseModel], empties: Mapping[str, str]
) -> str:
    kind, loc = error["type"], error["loc"]
    if kind == "string_too_short" and key in empties:
        return f"${{{empties[key]}}} is empty"
    if kind == "extra_forbidden":
        return _unknown(loc, error["input"], model)
    if kind == "missing":
        return "required key is missing"
    if kind == "finite_number":
        return f"must be a finite number, got {error['input']}"
    if kind == "string_too_short":
        return "must not be empty"
    if kind in TYPE_WORDS:  # strict: what TOML wrote is not of the key's type
        return f"must be {TYPE_WORDS[kind]}, got {written(error['input'])}"
    reason = str(error["msg"]).removeprefix("Value error, ")
    # a rule about a table whose value came out of an empty variable: say which one
    inside = [k for k in empties if k.startswith(f"{key}.")] if key else list(empties)
    if inside:
        where = inside[0].removeprefix(f"{key}.") if key else inside[0]
        reason += f" ({where}: ${{{empties[inside[0]]}}} is empty)"
    return reason


def _unknown(loc: tuple[int | str, ...], value: Any, model: type[BaseModel]) -> str:
    """`unknown key (did you mean 'concurrency'?)`, or for a table, as its header is written,
    `unknown table [suite.x] (did you mean [suites.x]?)`."""
    name = str(loc[-1]) if loc else ""
    if name in _SECRET_KEYS:
        return "unknown key; put the secret in an environment variable and name it in api_key_env"
    known = _known(model, loc)
    if not isinstance(value, Mapping):
        return f"unknown key{did_you_mean(name, known)}"
    parent = ".".join(str(part) for part in loc[:-1])
    # `[suite.x]` is a table of tables: its header names the first of them
    child = next(iter(value), None)
    tables = child is not None and all(isinstance(v, Mapping) for v in value.values())
    below = f".{child}" if tables else ""

    def header(word: str) -> str:
        return f"[{parent + '.' if parent else ''}{word}{below}]"

    return f"unknown table {header(name)}{did_you_mean(name, known, shown=header)}"


def _known(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The keys the table holding `loc` has."""
    table = _model_at(model, loc[:-1])
    return sorted(table.model_fields) if table is not None else []


def _closest(loc: tuple[int | str, ...], model: type[BaseModel]) -> str | None:
    """The known key an unknown one at `loc` is closest to, if any is close: what
    `did_you_mean` suggests."""
    close = difflib.get_close_matches(str(loc[-1]), _known(model, loc), n=1) if loc else []
    return close[0] if close else None


def _model_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The config table (model) at `loc`, walking fields, a dict's values and a list's items."""
    annotation: Any = model
    for part in loc:
        annotation = _bare(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            field = annotation.model_fields.get(str(part))
            if field is None:
                return None
            annotation = field.annotation
        elif typing.get_origin(annotation) is dict:
            annotation = typing.get_args(annotation)[1]
        elif typing.get_origin(annotation) is list:
            annotation = typing.get_args(annotation)[0]
        else:
            return None
    annotation = _bare(annotation)
    is_model = isinstance(annotation, type) and issubclass(annotation, BaseModel)
    return annotation if is_model else None


def _bare(annotation: Any) -> Any:
    """`annotation` without Annotated's metadata, and an optional one without its None."""
    while typing.get_origin(annotation) is Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        arms = [arm for arm in typing.get_args(annotation) if arm is not type(None)]
        if len(arms) == 1:
            return _bare(arms[0])
    return annotation


def salvaged(model: type[M], data: Mapping[str, Any], exc: ValidationError) -> M | None:
    """`data` validated without what `exc` refused: each refused key set aside (a list, whole;
    a table missing a key or refused as a whole, whole), so the rest can still be checked.
    None when nothing is left to check (the file as a whole was refused)."""
    kept = _copied(data)
    for _ in range(_ROUNDS):
        for error in exc.errors():
            loc = error["loc"][:-1] if error["type"] == "missing" else error["loc"]
            cut = next((i for i, part in enumerate(loc) if isinstance(part, int)), len(loc))
            if not _drop(kept, [str(part) for part in loc[:cut]]):
                return None
        try:
            return model.model_validate(kept)
        except ValidationError as again:
            exc = again
    return None


def _drop(data: dict[str, Any], keys: list[str]) -> bool:
    """Remove the value at `keys` (there or not); False when `keys` names the whole file."""
    if not keys:
        return False
    node: Any = data
    for key in keys[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(keys[-1], None)
    return True


def _copied(value: Any) -> Any:
    """The tables and arrays of a config copied, its values shared (strings, numbers)."""
    if isinstance(value, Mapping):
        return {key: _copied(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copied(item) for item in value]
    return value
