"""The task stamp: code graders turn one admitted reply into miss codes and a task_score.

Graders are plain functions `(text, expect) -> list[str]`, never a model: a judge saturates just
like the suite it grades. Grading is a pure function of (case, reply, graders) so that `replay`
reproduces outcomes byte for byte; nothing here reads the network or global state after the
grader modules are loaded.

A grade never depends on how fast the machine is: patterns and schema checks are bounded by
work (`checks`), so the same reply gets the same misses live, in a replay and on a loaded
machine. Only a custom grader, code
parallax cannot count, is bounded by the clock (`GraderSet.seconds`): one that runs past it is
unscored (`grader_error:timeout`), never a task miss.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.machinery
import importlib.util
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from runner.errors import ConfigError, FixtureError
from runner.files import Outside, Unreadable, inside, outside_reason, read_regular
from runner.grading import tools as toolgrade
from runner.grading.checks import Work, json_equal, schema_violations, search
from runner.jsontext import copy_json
from runner.model import Case, Grade, Miss, Reply

__all__ = [
    "BUILTIN_KEYS",
    "DEFAULT_MAX_CHARS",
    "Grader",
    "GraderSet",
    "check_case",
    "grade",
    "load_graders",
]

Grader = Callable[[str, Mapping[str, Any]], list[str]]

# The built-in text and JSON expectation keys and what each expects (the docs' fixture
# reference is built from this table), in the order their misses appear, so a miss list reads
# the same way on every run.
BUILTIN_KEYS: dict[str, str] = {
    "must_include": "a list of strings the reply must each include, compared case-insensitively",
    "must_not_include": "a list of strings the reply must not include (case-insensitively)",
    "max_chars": "the most characters the reply may have: a positive integer, 1200 when unset "
    "(a check every case has)",
    "max_sentences": "the most sentences (text between `.`, `!` and `?`) the reply may have",
    "regex": "a pattern, or a list of them, each to be found in the reply (RE2: no "
    "backreference or lookaround; `\\d`, `\\w`, `\\b` are ASCII, `\\pL` is any letter)",
    "not_regex": "a pattern, or a list of them, none to be found in the reply",
    "json_fields": "an object of fields the JSON answer must hold, each JSON-equal (`1` is "
    "`1.0`, `true` is not `1`); one check per field",
    "json_schema": "a JSON Schema the JSON answer must fit; its `$ref`s resolve inside it only",
}
DEFAULT_MAX_CHARS = 1200

_SENTENCE_END = re.compile(r"[.!?]")
GRADER_SECONDS = 30.0  # a custom grader's default time limit (a suite's grader_timeout_seconds)
GRADER_TIMEOUT = Miss.GRADER_ERROR.of("timeout")  # the miss of a custom grader that ran past it


class _GraderTimeout(BaseException):
    """A custom grader ran past its time limit (a BaseException: its own `except Exception`
    does not swallow it)."""


@dataclass(frozen=True, slots=True)
class GraderSet:
    """A suite's custom graders, plus where `case.grader` references are resolved from.

    Modules named by `module:function` on a case are loaded once and cached here, so grading
    thousands of rows does not re-execute a grader file.
    """

    base_dir: Path
    module: ModuleType | None = None
    config_path: str = "<config>"
    key: str = "graders"
    # the folder a grader file a fixture row names must lead into; None: base_dir
    root: Path | None = None
    seconds: float = GRADER_SECONDS  # how long one call of a custom grader may run
    _extra: dict[str, ModuleType] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def empty(cls, base_dir: Path | None = None) -> GraderSet:
        """For suites without a graders module; `module:function` refs still resolve."""
        return cls(base_dir=base_dir if base_dir is not None else Path())

    def resolve(self, case: Case) -> Grader | None:
        """Find the custom grader of a case: explicit `grader` first, then `GRADERS[id]`.

        Raises ConfigError when the case names a grader that does not exist, because a
        silently skipped grader would make a failing case look like a passing one.
        """
        where = f"{case.path}:{case.line}"
        if case.grader is not None and ":" in case.grader:
            source, _, name = case.grader.rpartition(":")
            module = self._extra.get(source)
            if module is None:
                root = self.root if self.root is not None else self.base_dir
                module = _import(source, self.base_dir, config_path=where, key="grader", root=root)
                self._extra[source] = module
            return _function(module, name, where, f"in {source}")
        if case.grader is not None:
            if self.module is None:
                raise ConfigError(
                    where,
                    "grader",
                    f"case {case.id!r} names grader {case.grader!r} "
                    "but the suite has no graders module",
                )
            return _function(self.module, case.grader, where, "in the suite's graders module")
        if self.module is not None:
            return _registry(self.module, self.config_path, self.key).get(case.id)
        return None


def load_graders(
    spec: str | None,
    base_dir: Path,
    *,
    config_path: str,
    key: str,
    root: Path | None = None,
    seconds: float = GRADER_SECONDS,
) -> GraderSet:
    """Load a suite's graders from a Python file (relative to base_dir) or a module name;
    `seconds` bounds each call of one.

    Any failure while importing becomes a one-line ConfigError naming the file, so a typo in a
    grader module exits 78 before a single request is sent. With `root` (a config's input
    root) the file, and every grader file a fixture row names, must lead into it.
    """
    if spec is None or not spec.strip():
        return GraderSet(
            base_dir=base_dir, config_path=config_path, key=key, root=root, seconds=seconds
        )
    module = _import(spec.strip(), base_dir, config_path=config_path, key=key, root=root)
    _registry(module, config_path, key)  # reject a malformed GRADERS now, not mid-run
    return GraderSet(
        base_dir=base_dir,
        module=module,
        config_path=config_path,
        key=key,
        root=root,
        seconds=seconds,
    )


def check_case(case: Case, graders: GraderSet) -> None:
    """Refuse expectation keys that nothing would grade, before any call is made.

    An unknown key without a custom grader is almost always a typo (`must_includes`), and
    ignoring it would turn a strict case into one that always passes.
    """
    if graders.resolve(case) is not None:
        return
    unknown = [key for key in case.expect if not _graded_here(key)]
    if unknown:
        raise FixtureError(
            case.path,
            f"unknown expect key {unknown[0]!r} and no custom grader for case {case.id!r}",
            line=case.line,
        )


def grade(case: Case, reply: Reply, graders: GraderSet) -> Grade:
    """Grade one admitted reply: built-in checks first, then its tool calls, then the case's
    custom grader.

    Text keys read the reply's content, "" for a reply that only called tools: such a reply is
    no `empty_completion` (it answered with a call), but a `must_include` still misses on it.
    The tool checks (`runner.grading.tools`) count toward the same task_score. A custom grader
    that raises or returns garbage yields `grader_error:<Class>` instead of crashing the run:
    one broken grader must not cost the whole night's ledger. One that runs past its time
    limit yields `grader_error:timeout`, and the reply is unscored (`Grade.unscored`): how fast
    the machine was says nothing of the reply. Expectation keys that are neither built-in nor
    handled by a grader are ignored here; `check_case` refuses them at load time.
    """
    tally = _Tally()
    text = reply.text
    expect = case.expect
    tally.check(bool(text.strip()) or bool(reply.tool_calls), Miss.EMPTY_COMPLETION.of())
    folded = text.casefold()
    for needle in expect.get("must_include", ()):
        tally.check(needle.casefold() in folded, Miss.MISSING.of(needle))
    for needle in expect.get("must_not_include", ()):
        tally.check(needle.casefold() not in folded, Miss.FORBIDDEN.of(needle))
    max_chars = expect.get("max_chars", DEFAULT_MAX_CHARS)
    tally.check(len(text) <= max_chars, Miss.OVER_BUDGET.of(f"{len(text)}>{max_chars}"))
    if "max_sentences" in expect:
        limit = expect["max_sentences"]
        count = sum(1 for piece in _SENTENCE_END.split(text) if piece.strip())
        tally.check(count <= limit, Miss.TOO_VERBOSE.of(f"{count}>{limit}"))
    for pattern in _patterns(expect.get("regex")):
        tally.check(search(pattern, text), Miss.REGEX_MISMATCH.of(pattern))
    for pattern in _patterns(expect.get("not_regex")):
        tally.check(not search(pattern, text), Miss.REGEX_FORBIDDEN.of(pattern))
    if "json_fields" in expect:
        _grade_fields(tally, reply.answer, expect["json_fields"])
    work = Work()  # one reply's schema checks share one bound
    if "json_schema" in expect:
        tally.checks += 1
        violations = schema_violations(reply.answer, expect["json_schema"], work)
        tally.misses.extend(violations)
        tally.passed += not violations
    tools = toolgrade.grade_tools(reply.tool_calls, expect, case.tools, work)
    tally.misses.extend(tools.misses)
    tally.checks += tools.checks
    tally.passed += tools.passed_checks

    grader = graders.resolve(case)
    timed_out = False
    if grader is not None:
        custom = _run_custom(grader, text, expect, graders.seconds)
        timed_out = custom == [GRADER_TIMEOUT]
        checks = max(1, sum(1 for key in expect if not _graded_here(key)))
        tally.checks += checks
        tally.passed += checks - min(len(custom), checks)
        tally.misses.extend(custom)
    return Grade(
        misses=tuple(tally.misses),
        checks=tally.checks,
        passed_checks=tally.passed,
        unscored=timed_out,
    )


def _graded_here(key: str) -> bool:
    """Whether grading reads `key` itself; any other is a custom grader's (or a typo)."""
    return key in BUILTIN_KEYS or key in toolgrade.TOOL_KEYS


@dataclass(slots=True)
class _Tally:
    """Counts checks as they run, so the score and the miss list cannot disagree."""

    misses: list[str] = field(default_factory=list)
    checks: int = 0
    passed: int = 0

    def check(self, ok: bool, miss: str) -> None:
        self.checks += 1
        if ok:
            self.passed += 1
        else:
            self.misses.append(miss)


def _grade_fields(tally: _Tally, answer: Any, fields: Mapping[str, Any]) -> None:
    """One check per expected field, as in seed 004; extra fields in the answer earn nothing."""
    for name in sorted(fields):
        if not isinstance(answer, dict) or name not in answer:
            tally.check(False, Miss.FIELD_MISSING.of(name))
        else:
            tally.check(json_equal(answer[name], fields[name]), Miss.FIELD_MISMATCH.of(name))


def _patterns(value: Any) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def _run_custom(grader: Grader, text: str, expect: Mapping[str, Any], seconds: float) -> list[str]:
    """Call a user grader on a private copy of expect, so it cannot change later grades; one
    that runs past `seconds` is GRADER_TIMEOUT."""
    try:
        with _time_limit(seconds):
            result = grader(text, copy_json(dict(expect)))
    except _GraderTimeout:
        return [GRADER_TIMEOUT]
    except KeyboardInterrupt:  # the user's Ctrl-C, not the grader's failure
        raise
    except BaseException as exc:  # sys.exit(), GeneratorExit, a grader's own BaseException
        return [Miss.GRADER_ERROR.of(type(exc).__name__)]
    if not isinstance(result, list) or not all(isinstance(miss, str) for miss in result):
        return [Miss.GRADER_ERROR.of("TypeError")]
    return list(result)


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Raise _GraderTimeout in the block once it has run `seconds` (SIGALRM's timer).

    A custom grader is arbitrary code: only the clock can bound it. The timer is the main
    thread's (where a run, a replay's workers and `grade` grade); elsewhere the block runs
    unbounded rather than not at all.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    armed = True

    def expired(signum: int, frame: Any) -> None:
        if armed:
            raise _GraderTimeout

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _import(
    source: str, base_dir: Path, *, config_path: str, key: str, root: Path | None = None
) -> ModuleType:
    """Import a graders file under a name derived from its path, or an importable module.

    The derived name keeps two suites' `graders.py` files from shadowing each other in
    `sys.modules`, while reloading the same file stays idempotent. With `root` the file must
    lead into it, and the source imported is the one read there (`files.read_regular`), never
    the path opened again.
    """
    if source.endswith(".py") or "/" in source or "\\" in source:
        named = Path(os.path.normpath(base_dir / source))
        try:
            path = inside(named, root) if root is not None else named.resolve()
            code = read_regular(path, root=root)
        except Outside as exc:
            raise ConfigError(config_path, key, outside_reason(source, exc)) from None
        except Unreadable as exc:
            reason = "not found" if exc.reason == "no such file" else exc.reason
            raise ConfigError(config_path, key, f"grader file {named} {reason}") from None
        digest = hashlib.sha256(str(path).encode("utf-8")).hexdigest()[:12]
        name = f"_parallax_graders_{path.stem}_{digest}"
        spec = importlib.util.spec_from_file_location(name, path, loader=_Read(name, path, code))
        if spec is None or spec.loader is None:
            raise ConfigError(config_path, key, f"cannot import {path}: not a Python file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except (Exception, SystemExit) as exc:
            sys.modules.pop(name, None)
            raise ConfigError(config_path, key, f"cannot import {path}: {_one_line(exc)}") from None
        return module
    try:
        return importlib.import_module(source)
    except (Exception, SystemExit) as exc:
        raise ConfigError(config_path, key, f"cannot import {source}: {_one_line(exc)}") from None


class _Read(importlib.machinery.SourceFileLoader):
    """A grader file's loader that imports the bytes already read, and writes no bytecode."""

    def __init__(self, name: str, path: Path, source: bytes) -> None:
        super().__init__(name, str(path))
        self._source = source

    def get_data(self, path: str) -> bytes:
        if path == self.path:
            return self._source
        raise OSError(f"{path}: not read (only the grader file is)")  # its bytecode cache

    def set_data(self, path: str, data: object, *, _mode: int = 0o666) -> None:
        """No bytecode is cached: it would be read back instead of the file next time."""


def _one_line(exc: BaseException) -> str:
    detail = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__


def _registry(module: ModuleType, config_path: str, key: str) -> dict[str, Grader]:
    registry = getattr(module, "GRADERS", None)
    if registry is None:
        return {}
    if not isinstance(registry, dict) or not all(
        isinstance(case_id, str) and callable(fn) for case_id, fn in registry.items()
    ):
        origin = getattr(module, "__file__", None) or module.__name__
        raise ConfigError(config_path, key, f"GRADERS in {origin} must map case ids to functions")
    return registry


def _function(module: ModuleType, name: str, where: str, place: str) -> Grader:
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ConfigError(where, "grader", f"no grader function {name!r} {place}")
    grader: Grader = fn
    return grader
