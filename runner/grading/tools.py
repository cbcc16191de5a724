"""The task stamp's tool checks: a reply's tool calls against the case's tool expectations.

A pure function of (the reply's parsed calls, the case's `expect`, the tools the case offered),
as the rest of grading is, so a replay grades a call exactly as the run did. Its result is a
`Grade` part that grading adds to its own tally.

The number of checks depends on the case alone, never on the reply, as every built-in key's
does: both sides of a case are scored out of the same number, and a reply cannot dilute its
misses by making more calls.

- `tool_calls: [{"name", "arguments"}]`: one check per expected call and one per expected
  argument field; `tool_missing:<name>`, `tool_arg_missing:<name>.<key>`,
  `tool_arg_mismatch:<name>.<key>`.
- `no_tool_calls = true`: one check; `tool_unexpected:<name>` once per name called.
- (whenever the case offers tools) one check, "only offered tools were called";
  `tool_unknown:<name>` once per name.
- `tool_args_schema = true`: one check, "every call to an offered tool fits its
  `parameters`"; `tool_args_schema:<name>:<json path>` once per tool and location.

Names and keys appear in miss codes verbatim: they are data, like a `must_include` needle.

Matching `tool_calls`: an expected call is matched by a call of the same name; an argument field
passes when the call's arguments hold that key with a JSON-equal value (`1` is `1.0`, `true`
is not `1`; an object or list must equal as a whole), as `json_fields` compares. Each call
matches at most one expected call. When several calls share a name, the pairing is the one
that passes the most checks; among pairings that pass as many, the first expected call gets
the earliest call, then the second, and so on. So the score does not depend on the order the
model happened to make its calls in, and a reply that satisfies every expectation always
passes (a greedy "best call for each expected call in turn" can take the call a later
expectation needed). An expected call left without a call fails all its checks under the one
code `tool_missing:<name>`. Calls nothing expected cost nothing here; `no_tool_calls` and
`tool_unknown` are the keys that forbid calls.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from runner.grading.checks import Work, json_equal, schema_violations
from runner.model import Grade, Miss

__all__ = ["TOOL_KEYS", "ToolCallLike", "grade_tools", "offered_tools", "tool_expect_problem"]

# The tool expectation keys and what each expects (the docs' fixture reference reads them).
TOOL_KEYS: dict[str, str] = {
    "tool_calls": 'a list of `{"name", "arguments"}`: each must be matched by a call of that '
    "name whose arguments hold those fields, JSON-equal; one check per call and per field",
    "no_tool_calls": "`true`: the reply must call no tool",
    "tool_args_schema": "`true`: every call's arguments must fit its offered tool's `parameters`",
}
_CALL_KEYS = frozenset({"name", "arguments"})


class ToolCallLike(Protocol):
    """What grading reads of one parsed tool call (the protocols' ToolCall record is one)."""

    @property
    def name(self) -> str: ...

    @property
    def arguments(self) -> Mapping[str, Any]: ...


def grade_tools(
    calls: Sequence[ToolCallLike],
    expect: Mapping[str, Any],
    tools: Sequence[Mapping[str, Any]],
    work: Work | None = None,
) -> Grade:
    """The tool checks of one admitted reply, in the order the module docstring lists them.
    `work` is the reply's schema work so far (grading's; None: a bound of its own).

    `tools` are the ones the case offered, OpenAI-style and already checked by the fixture
    loader; none offered means no `tool_unknown` check. `expect` passed `tool_expect_problem`.
    """
    misses: list[str] = []
    checks = passed = 0
    offered = offered_tools(tools)
    for want, got in _pairs(expect.get("tool_calls") or (), calls):
        name, fields = want["name"], want.get("arguments", {})
        checks += 1 + len(fields)
        if got is None:
            misses.append(Miss.TOOL_MISSING.of(name))
            continue
        passed += 1
        for key in sorted(fields):
            if key not in got.arguments:
                misses.append(Miss.TOOL_ARG_MISSING.of(f"{name}.{key}"))
            elif not json_equal(got.arguments[key], fields[key]):
                misses.append(Miss.TOOL_ARG_MISMATCH.of(f"{name}.{key}"))
            else:
                passed += 1
    if expect.get("no_tool_calls") is True:
        found = [Miss.TOOL_UNEXPECTED.of(name) for name in _names(calls)]
        checks, passed = checks + 1, passed + (not found)
        misses.extend(found)
    if offered:
        found = [Miss.TOOL_UNKNOWN.of(name) for name in _names(calls) if name not in offered]
        checks, passed = checks + 1, passed + (not found)
        misses.extend(found)
    if expect.get("tool_args_schema") is True:
        found = _schema_misses(calls, offered, work)
        checks, passed = checks + 1, passed + (not found)
        misses.extend(found)
    return Grade(misses=tuple(misses), checks=checks, passed_checks=passed)


def tool_expect_problem(
    expect: Mapping[str, Any], tools: Sequence[Mapping[str, Any]]
) -> str | None:
    """Why a case's tool expectation keys cannot be graded, or None; for the fixture loader.

    Besides the shapes, an expectation no reply could meet is refused here, as a typo in a key
    is: an expected call to a tool the case does not offer, `tool_args_schema` with no tools
    to check against, and `tool_calls` beside `no_tool_calls = true`.
    """
    for key in ("no_tool_calls", "tool_args_schema"):
        if key in expect and not isinstance(expect[key], bool):
            return f"{key!r} must be true or false"
    offered = offered_tools(tools)
    if expect.get("tool_args_schema") is True and not offered:
        return "'tool_args_schema' needs the case to offer tools"
    if "tool_calls" not in expect:
        return None
    wanted = expect["tool_calls"]
    if not isinstance(wanted, list):
        return "'tool_calls' must be a list of {name, arguments} objects"
    if not wanted:
        return "'tool_calls' is empty: for a reply that must call no tool, set 'no_tool_calls'"
    if expect.get("no_tool_calls") is True:
        return "'tool_calls' and 'no_tool_calls' contradict each other"
    for at, want in enumerate(wanted):
        where = f"'tool_calls'[{at}]"
        if not isinstance(want, dict):
            return f"{where} must be a {{name, arguments}} object"
        unknown = sorted(set(want) - _CALL_KEYS)
        if unknown:
            return f"{where} has an unknown key {unknown[0]!r} (known: name, arguments)"
        name = want.get("name")
        if not isinstance(name, str) or not name:
            return f"{where}.name must be a non-empty string"
        if not isinstance(want.get("arguments", {}), dict):
            return f"{where}.arguments must be an object"
        if name not in offered:
            return f"{where} expects a call to {name!r}, a tool the case does not offer"
    return None


def offered_tools(tools: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any] | None]:
    """Each offered tool's name and its `parameters` schema (None: it declares none)."""
    return {tool["function"]["name"]: tool["function"].get("parameters") for tool in tools}


def _names(calls: Iterable[ToolCallLike]) -> list[str]:
    """The names called, each once, in the order first called."""
    return list(dict.fromkeys(call.name for call in calls))


def _schema_misses(
    calls: Sequence[ToolCallLike],
    offered: Mapping[str, Mapping[str, Any] | None],
    work: Work | None,
) -> list[str]:
    """Every call's arguments against its tool's `parameters`, each (tool, location) once.

    A call to a tool not offered has no schema (it is `tool_unknown`), nor has one that
    declares no parameters. Grading bounds one reply's schema checks by their work (`work`,
    shared with its `json_schema` check); a reply of many calls gets that bound once, not once
    a call: past it, that call's check is `schema_too_complex` and the rest go unchecked, as a
    hostile answer's own check would end.
    """
    found: list[str] = []
    work = work if work is not None else Work()
    violation = Miss.SCHEMA_VIOLATION.of("")
    for call in calls:
        schema = offered.get(call.name)
        if schema is None:
            continue
        misses = schema_violations(dict(call.arguments), schema, work)
        # a location, or schema_too_complex / schema_too_deep / schema_error:<Class>
        found.extend(
            Miss.TOOL_ARGS_SCHEMA.of(f"{call.name}:{m.removeprefix(violation)}") for m in misses
        )
        if Miss.SCHEMA_TOO_COMPLEX.of() in misses:
            break
    return list(dict.fromkeys(found))


def _pairs(
    wanted: Sequence[Mapping[str, Any]], calls: Sequence[ToolCallLike]
) -> list[tuple[Mapping[str, Any], ToolCallLike | None]]:
    """Each expected call, in order, with the call it is matched to (None: no call left)."""
    matched: list[ToolCallLike | None] = [None] * len(wanted)
    for name in dict.fromkeys(want["name"] for want in wanted):
        rows = [at for at, want in enumerate(wanted) if want["name"] == name]
        named = [call for call in calls if call.name == name]
        scores = [[_score(wanted[at], call) for call in named] for at in rows]
        for row, col in zip(rows, _assign(scores), strict=True):
            matched[row] = named[col] if col is not None else None
    return list(zip(wanted, matched, strict=True))


def _score(want: Mapping[str, Any], call: ToolCallLike) -> int:
    """The checks `call` would pass for `want`: its name, and each field it holds equal."""
    fields = want.get("arguments", {})
    args = call.arguments
    return 1 + sum(1 for key in fields if key in args and json_equal(args[key], fields[key]))


def _assign(scores: Sequence[Sequence[int]]) -> list[int | None]:
    """The column each row takes in the pairing of rows (expected calls) with columns (calls)
    that scores most, ties to the earliest column row by row, as the module docstring says;
    None for a row left without one.

    Only a row's `len(rows)` best columns can be in that pairing (if a row held a worse one, one
    of its best would be free to take instead), so a reply of thousands of calls to one tool
    costs no more than a few; the rest is the Hungarian method, exact over the integers: the
    tie-break is folded into each weight as lower-order digits in base `columns + 1`, below
    the score's own.
    """
    n = len(scores)
    keep = sorted(
        {c for row in scores for c in sorted(range(len(row)), key=lambda c: (-row[c], c))[:n]}
    )
    base = len(keep) + 1
    top = base**n
    # weights to maximise; columns past `keep` are "no call" (weight 0) so every row has one
    weight = [
        [scores[r][c] * top + (len(keep) - k) * base ** (n - 1 - r) for k, c in enumerate(keep)]
        + [0] * n
        for r in range(n)
    ]
    taken = _hungarian(weight)
    return [keep[col] if col < len(keep) else None for col in taken]


def _hungarian(weight: Sequence[Sequence[int]]) -> list[int]:
    """The column of each row in the assignment of greatest total weight (rows <= columns):
    the O(rows^2 * columns) shortest augmenting path form, costs negated weights."""
    n, m = len(weight), len(weight[0])
    u, v = [0] * (n + 1), [0] * (m + 1)
    owner, way = [0] * (m + 1), [0] * (m + 1)  # 1-based; owner[col] = row, 0 = none
    for row in range(1, n + 1):
        owner[0], col0 = row, 0
        least: list[int | None] = [None] * (m + 1)
        used = [False] * (m + 1)
        while True:
            used[col0] = True
            r0, delta, col1 = owner[col0], None, 0
            for col in range(1, m + 1):
                if used[col]:
                    continue
                cur = -weight[r0 - 1][col - 1] - u[r0] - v[col]
                best = least[col]
                if best is None or cur < best:
                    least[col], way[col], best = cur, col0, cur
                if delta is None or best < delta:
                    delta, col1 = best, col
            assert delta is not None  # rows <= columns: a free column is always left
            for col in range(m + 1):
                if used[col]:
                    u[owner[col]] += delta
                    v[col] -= delta
                else:
                    slack = least[col]
                    least[col] = None if slack is None else slack - delta
            col0 = col1
            if owner[col0] == 0:
                break
        while col0:
            col1 = way[col0]
            owner[col0] = owner[col1]
            col0 = col1
    taken = [0] * n
    for col in range(1, m + 1):
        if owner[col]:
            taken[owner[col] - 1] = col - 1
    return taken
