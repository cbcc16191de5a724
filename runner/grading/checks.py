"""Checks bounded by work, not by the clock: JSON Schema and RE2 patterns over a reply.

A grade never depends on how fast the machine is, so what a hostile reply could make endless is
bounded by work: patterns are searched with RE2, whose time is linear in the text (no pattern
backtracks without end), and one answer's schema check counts its keyword checks
(`SCHEMA_STEPS`) and how deeply they nest (`SCHEMA_DEPTH`, with the stack made deep enough for
that nesting wherever the check starts, so no RecursionError comes first). Both the text
graders (`graders`) and the tool checks (`tools`) count their work here, one `Work` per reply.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from runner.model import Miss

__all__ = [
    "SCHEMA_DEPTH",
    "SCHEMA_STEPS",
    "TEXT_PER_STEP",
    "OverBudget",
    "Work",
    "json_equal",
    "pattern_problem",
    "schema_problem",
    "schema_violations",
    "search",
]

# One reply's schema checks, its `json_schema` and every tool call's arguments together: a
# reply picks how many keys a pattern is searched on and how deep a branching `$ref` recurses
# (2**40 checks of a few hundred bytes), so the check counts its work. A hundred thousand
# keyword checks is some 20,000 array items of a few keys each: under a second of CPU.
SCHEMA_STEPS = 100_000
TEXT_PER_STEP = 1024  # a pattern search costs a step per this many characters it reads, too
# How deeply keyword checks may nest: a recursive schema over an answer nested MAX_DEPTH (128)
# levels takes two or three a level. Each takes at most `_FRAMES_PER_LEVEL` Python frames.
SCHEMA_DEPTH = 512
_FRAMES_PER_LEVEL = 8
_work: ContextVar[Work | None] = ContextVar("schema_work", default=None)
# instances any schema can be tried on at load: a `$ref` that loops or names no anchor fails
# on them, so it is a fixture error instead of a traceback in a run
_TRIAL_ANSWERS: tuple[Any, ...] = ({}, [], "", 0, None, True)


class OverBudget(Exception):
    """An answer's schema check took more work than its bound (`miss` says which)."""

    def __init__(self, miss: str) -> None:
        super().__init__(miss)
        self.miss = miss


@dataclass(slots=True)
class Work:
    """The work one reply's schema checks did so far: keyword checks and their nesting."""

    steps: int = 0
    depth: int = 0

    def charge(self, steps: int) -> None:
        self.steps += steps
        if self.steps > SCHEMA_STEPS:
            raise OverBudget(Miss.SCHEMA_TOO_COMPLEX.of())


def json_equal(left: Any, right: Any) -> bool:
    """JSON equality: unlike Python's `==`, `true` is not `1` and `1.0` is `1`."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(json_equal(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(json_equal, left, right))
    if isinstance(left, int | float) and isinstance(right, int | float):
        return left == right
    return type(left) is type(right) and bool(left == right)


def schema_violations(
    answer: Any, schema: Mapping[str, Any], work: Work | None = None
) -> list[str]:
    """One miss per failing location, sorted so the list is stable across jsonschema versions.

    Several errors at one path (two missing required keys both sit at `$`) collapse into one
    code: the code names where the answer is wrong, and repeating it would add nothing. A
    check past its work bound is `schema_too_complex` (more than SCHEMA_STEPS keyword checks,
    counted across the reply's checks in `work`) or `schema_too_deep` (nested past
    SCHEMA_DEPTH: a `$ref` that loops for this answer), whatever the machine.
    """
    from jsonschema.validators import validator_for  # imported by the few suites that use it

    validator = _bounded(validator_for(schema))(schema, registry=_nowhere())
    work = work if work is not None else Work()
    token = _work.set(work)
    try:
        with stack_for(SCHEMA_DEPTH * _FRAMES_PER_LEVEL):
            paths = {error.json_path for error in validator.iter_errors(answer)}
    except OverBudget as over:
        return [over.miss]
    except Exception as exc:  # a dangling anchor only this answer reaches
        return [Miss.SCHEMA_ERROR.of(type(exc).__name__.lstrip("_"))]
    finally:
        work.depth = 0
        _work.reset(token)
    return [Miss.SCHEMA_VIOLATION.of(path) for path in sorted(paths)]


@contextlib.contextmanager
def stack_for(frames: int) -> Iterator[None]:
    """Room for `frames` more Python frames than the caller already has, for the block.

    The recursion limit counts frames from the bottom of the stack, which is deeper in a live
    run than in a replay or a test: without this, the same deep check could fail with a
    RecursionError in one and pass in another.
    """
    depth, frame = 0, sys._getframe().f_back
    while frame is not None:
        depth, frame = depth + 1, frame.f_back
    old = sys.getrecursionlimit()
    if depth + frames + 100 > old:
        sys.setrecursionlimit(depth + frames + 100)
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def schema_problem(schema: Mapping[str, Any]) -> str | None:
    """Why a valid schema still cannot check answers, or None: a pattern RE2 cannot search
    (a backreference, a lookaround), or, tried on a few answers, a `$ref` that loops back on
    itself or a `$dynamicRef` that names no anchor (each fails at once)."""
    for pattern in _schema_patterns(schema):
        if (why := pattern_problem(pattern)) is not None:
            return f"has a pattern {pattern!r} that cannot be searched: {why}"
    for answer in _TRIAL_ANSWERS:
        misses = schema_violations(answer, schema)
        if misses and not misses[0].startswith(Miss.SCHEMA_VIOLATION.of("")):
            found = misses[0].partition(":")[2] or misses[0]
            return f"cannot check an answer ({found}: a $ref that loops, or one that names nothing)"
    return None


def _schema_patterns(schema: Any) -> Iterator[str]:
    """Every regular expression a schema holds: `pattern` values, `patternProperties` keys."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                yield node["pattern"]
            if isinstance(node.get("patternProperties"), dict):
                yield from (key for key in node["patternProperties"] if isinstance(key, str))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


@functools.cache
def _nowhere() -> Any:
    """The registry every schema is checked with: itself only. jsonschema's default fetches
    a `$ref` or `$dynamicRef` it cannot resolve in the schema, a `file://` one included, so a
    fixture's schema could read `/proc/self/environ` or call any URL while grading."""
    from referencing import Registry

    return Registry()


@functools.cache
def _bounded(cls: Any) -> Any:
    """`cls` with its work counted, and its regular-expression keywords searched with RE2.

    Every keyword check is a step of the reply's work and a level of nesting while it runs
    (`Work`); jsonschema runs `pattern`, `patternProperties` and `additionalProperties`
    through `re`, which backtracks without end on some patterns, so those search as `regex`
    does. (`unevaluatedProperties` searches patterns too, deep inside jsonschema: a schema that
    pairs it with `patternProperties` is refused when the fixture loads.)
    """
    from jsonschema import ValidationError
    from jsonschema.validators import extend

    def counted(keyword: Callable[..., Any]) -> Callable[..., Any]:
        def check(validator: Any, value: Any, instance: Any, schema: Any) -> Iterator[Any]:
            work = _work.get()
            if work is None:  # a validator used outside `schema_violations`: not counted
                yield from keyword(validator, value, instance, schema) or ()
                return
            work.charge(1)
            if work.depth >= SCHEMA_DEPTH:
                raise OverBudget(Miss.SCHEMA_TOO_DEEP.of())
            work.depth += 1
            try:
                yield from keyword(validator, value, instance, schema) or ()
            finally:
                work.depth -= 1

        return check

    def pattern(validator: Any, wanted: str, instance: Any, schema: Any) -> Iterator[Any]:
        if validator.is_type(instance, "string") and not search(wanted, instance):
            yield ValidationError(f"{instance!r:.80} does not match {wanted!r}")

    def pattern_properties(
        validator: Any, patterns: dict[str, Any], instance: Any, schema: Any
    ) -> Iterator[Any]:
        if validator.is_type(instance, "object"):
            for wanted, subschema in patterns.items():
                for key, value in instance.items():
                    if search(wanted, key):
                        yield from validator.descend(value, subschema, path=key, schema_path=wanted)

    def additional_properties(
        validator: Any, allowed: Any, instance: Any, schema: Any
    ) -> Iterator[Any]:
        if not validator.is_type(instance, "object"):
            return
        named, patterns = schema.get("properties", {}), list(schema.get("patternProperties", {}))
        extras = sorted(
            key
            for key in instance
            if key not in named and not any(search(p, key) for p in patterns)
        )
        if validator.is_type(allowed, "object"):
            for extra in extras:
                yield from validator.descend(instance[extra], allowed, path=extra)
        elif not allowed and extras:
            yield ValidationError(f"additional properties are not allowed: {extras!r:.200}")

    keywords = {
        **cls.VALIDATORS,
        "pattern": pattern,
        "patternProperties": pattern_properties,
        "additionalProperties": additional_properties,
    }
    return extend(  # type: ignore[no-untyped-call]  # jsonschema's stubs leave it untyped
        cls, {name: counted(keyword) for name, keyword in keywords.items()}
    )


def pattern_problem(pattern: str) -> str | None:
    """Why RE2 cannot search `pattern` (its own words), or None."""
    import re2

    try:
        compiled(pattern)
    except (re2.error, ValueError) as exc:  # ValueError: text RE2 cannot take (a surrogate)
        message = exc.args[0] if exc.args else exc
        return message.decode("utf-8", "replace") if isinstance(message, bytes) else str(message)
    return None


def search(pattern: str, text: str) -> bool:
    """Whether `pattern` occurs in `text`, searched with RE2 in time linear in the text (`re`
    backtracks for hours on `(a|aa)+$` over a run of a's); inside a schema check, a step of
    its work per TEXT_PER_STEP characters read."""
    work = _work.get()
    if work is not None:
        work.charge(1 + len(text) // TEXT_PER_STEP)
    return compiled(pattern).search(text) is not None


@functools.lru_cache(maxsize=4096)
def compiled(pattern: str) -> Any:
    import re2  # only suites with patterns pay for the import

    options = re2.Options()
    options.log_errors = False  # a refusal is reported once, as the fixture's error
    return re2.compile(pattern, options=options)
