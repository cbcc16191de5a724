"""Specification of the tool checks: tool calls against a case's tool expectations."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.grading import checks
from runner.grading import tools as toolgrade
from runner.grading.tools import _assign, grade_tools, tool_expect_problem
from runner.model import Grade
from runner.protocols.message import ToolCall


def called(name: str, arguments: dict[str, Any] | None = None) -> ToolCall:
    """A parsed tool call, as the protocols hand it to grading."""
    return ToolCall(id=None, name=name, arguments=arguments if arguments is not None else {})


def tool(name: str, parameters: Mapping[str, Any] | None = None) -> dict[str, Any]:
    function: dict[str, Any] = {"name": name, "description": f"the {name} tool"}
    if parameters is not None:
        function["parameters"] = parameters
    return {"type": "function", "function": function}


WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
    "required": ["city"],
    "additionalProperties": False,
}
TOOLS = [tool("get_weather", WEATHER), tool("send_email"), tool("lookup.v2", {"type": "object"})]


def graded(
    calls: Sequence[ToolCall], expect: Mapping[str, Any], tools: Sequence[Mapping[str, Any]] = TOOLS
) -> Grade:
    assert tool_expect_problem(expect, tools) is None
    return grade_tools(calls, expect, tools)


def expected(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


# --- tool_calls --------------------------------------------------------------------------


def test_expected_call_made_with_the_right_arguments_passes() -> None:
    """A call of the expected name holding every expected field passes one check per call and
    field, plus the one that only offered tools were called."""
    grade = graded(
        [called("get_weather", {"city": "Paris", "unit": "c"})],
        {"tool_calls": [expected("get_weather", city="Paris", unit="c")]},
    )
    assert grade == Grade(misses=(), checks=4, passed_checks=4)


def test_extra_argument_fields_earn_nothing_and_cost_nothing() -> None:
    """Fields the expectation does not name are not checked, as in json_fields."""
    grade = graded(
        [called("get_weather", {"city": "Paris", "unit": "c"})],
        {"tool_calls": [expected("get_weather", city="Paris")]},
    )
    assert grade == Grade(misses=(), checks=3, passed_checks=3)


def test_name_only_expectation() -> None:
    """An expected call without `arguments` checks only that the tool was called."""
    grade = graded([called("send_email", {"to": "x"})], {"tool_calls": [{"name": "send_email"}]})
    assert grade == Grade(misses=(), checks=2, passed_checks=2)


def test_missing_call_fails_all_its_checks_under_one_code() -> None:
    """An expected call nobody made is `tool_missing:<name>`, and its field checks fail too."""
    grade = graded(
        [called("send_email")], {"tool_calls": [expected("get_weather", city="Paris", unit="c")]}
    )
    assert grade == Grade(misses=("tool_missing:get_weather",), checks=4, passed_checks=1)


def test_missing_and_mismatched_fields() -> None:
    """A field absent from the call is `tool_arg_missing`, a different value `tool_arg_mismatch`,
    in key order."""
    grade = graded(
        [called("get_weather", {"city": "Lyon"})],
        {"tool_calls": [expected("get_weather", unit="c", city="Paris")]},
    )
    assert grade.misses == (
        "tool_arg_mismatch:get_weather.city",
        "tool_arg_missing:get_weather.unit",
    )
    assert (grade.checks, grade.passed_checks) == (4, 2)


@pytest.mark.parametrize(
    ("got", "want", "equal"),
    [
        (1, 1.0, True),
        (2.5, 2.5, True),
        (True, 1, False),
        (0, False, False),
        ("1", 1, False),
        ({"a": [1, {"b": None}]}, {"a": [1.0, {"b": None}]}, True),
        ({"a": 1, "b": 2}, {"a": 1}, False),
        ([1, 2], [2, 1], False),
        (None, None, True),
    ],
)
def test_argument_values_compare_as_json(got: Any, want: Any, equal: bool) -> None:
    """Argument values compare as json_fields does: 1 is 1.0, true is not 1, objects whole."""
    grade = graded(
        [called("lookup.v2", {"q": got})], {"tool_calls": [expected("lookup.v2", q=want)]}
    )
    assert grade.misses == (() if equal else ("tool_arg_mismatch:lookup.v2.q",))
    assert checks.json_equal(got, want) is equal  # the one definition, imported


def test_names_and_keys_are_verbatim_in_misses() -> None:
    """Tool names and argument keys go into miss codes as written, dots and all."""
    grade = graded([], {"tool_calls": [expected("lookup.v2", **{"a.b": 1})]})
    assert grade.misses == ("tool_missing:lookup.v2",)
    grade = graded([called("lookup.v2", {})], {"tool_calls": [expected("lookup.v2", **{"a.b": 1})]})
    assert grade.misses == ("tool_arg_missing:lookup.v2.a.b",)


def test_each_call_matches_one_expected_call() -> None:
    """Two expected calls of one tool need two calls: one call cannot satisfy both."""
    want = {"tool_calls": [expected("get_weather", city="Paris")] * 2}
    grade = graded([called("get_weather", {"city": "Paris"})], want)
    assert grade == Grade(misses=("tool_missing:get_weather",), checks=5, passed_checks=3)
    grade = graded([called("get_weather", {"city": "Paris"})] * 2, want)
    assert grade == Grade(misses=(), checks=5, passed_checks=5)


def test_matching_is_not_greedy() -> None:
    """A reply that satisfies every expectation passes even when taking the first fitting
    call for the first expectation would have left the second without its call."""
    want = {
        "tool_calls": [
            expected("get_weather", city="Paris"),
            expected("get_weather", city="Paris", unit="c"),
        ]
    }
    calls = [
        called("get_weather", {"city": "Paris", "unit": "c"}),
        called("get_weather", {"city": "Paris"}),
    ]
    assert graded(calls, want) == Grade(misses=(), checks=6, passed_checks=6)


def test_matching_ignores_call_order_for_the_score() -> None:
    """The calls' order does not change what passes when a pairing satisfies everything."""
    want = {"tool_calls": [expected("get_weather", city=c) for c in ("Paris", "Rome", "Oslo")]}
    cities = ["Oslo", "Paris", "Rome"]
    for order in itertools.permutations(cities):
        calls = [called("get_weather", {"city": c}) for c in order]
        assert graded(calls, want).misses == ()


def test_ties_go_to_the_earliest_call() -> None:
    """When pairings pass equally, the first expected call takes the earliest call."""
    want = {"tool_calls": [expected("lookup.v2", x=1), expected("lookup.v2", y=1)]}
    calls = [called("lookup.v2", {"x": 0, "y": 0}), called("lookup.v2", {})]
    grade = graded(calls, want)
    assert grade.misses == ("tool_arg_mismatch:lookup.v2.x", "tool_arg_missing:lookup.v2.y")


def test_expected_calls_report_in_expectation_order() -> None:
    """Misses follow the expectations' order, whichever tool each names."""
    want = {
        "tool_calls": [
            expected("send_email", to="a"),
            expected("get_weather", city="Paris"),
            expected("send_email", to="b"),
        ]
    }
    grade = graded([called("send_email", {"to": "b"})], want)
    assert grade.misses == ("tool_missing:send_email", "tool_missing:get_weather")
    assert (grade.checks, grade.passed_checks) == (7, 3)


def test_many_calls_to_one_tool_cost_no_more_than_a_few(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reply of thousands of calls to one tool is paired over at most `n` best calls per
    expected call, so its cost does not grow with the reply."""
    widths: list[int] = []
    real = toolgrade._hungarian

    def counted(weight: Sequence[Sequence[int]]) -> list[int]:
        widths.append(len(weight[0]))
        return real(weight)

    monkeypatch.setattr(toolgrade, "_hungarian", counted)
    want = {"tool_calls": [expected("lookup.v2", i=i) for i in range(6)]}
    calls = [called("lookup.v2", {"i": i % 50}) for i in range(5000)]
    assert graded(calls, want).misses == ()
    # for each expected call its six best (the six earliest that fit it), and six "no call"
    assert widths == [6 * 6 + 6]


def brute_force(scores: list[list[int]]) -> list[int | None]:
    """The specification of `_assign`, by trying every pairing."""
    n, m = len(scores), len(scores[0]) if scores else 0
    columns: list[int | None] = [*range(m), *([None] * n)]
    best: tuple[int, list[int]] | None = None
    best_pairing: list[int | None] = []
    for pairing in itertools.permutations(columns, n):
        cols = [c for c in pairing if c is not None]
        if len(set(cols)) != len(cols):
            continue
        total = sum(scores[r][c] for r, c in enumerate(pairing) if c is not None)
        # ties: earliest column for row 0, then row 1...; "no call" sorts after every column
        order = [c if c is not None else m for c in pairing]
        key = (total, [-o for o in order])
        if best is None or key > best:
            best, best_pairing = key, list(pairing)
    return best_pairing


@settings(max_examples=150, deadline=None)
@given(
    st.integers(min_value=1, max_value=3).flatmap(
        lambda n: st.lists(
            st.lists(st.integers(min_value=1, max_value=3), min_size=n, max_size=n),
            min_size=1,
            max_size=3,
        ).map(lambda cols: [[col[r] for col in cols] for r in range(n)])
    )
)
def test_assignment_is_the_best_pairing_with_earliest_ties(scores: list[list[int]]) -> None:
    """The pairing is the one scoring most, ties to the earliest call row by row."""
    assert _assign(scores) == brute_force(scores)


def test_assignment_with_more_expected_than_calls() -> None:
    """Rows beyond the calls are left without one, the lowest-scoring first."""
    assert _assign([[1], [3], [2]]) == [None, 0, None]
    assert _assign([[], []]) == [None, None]


# --- no_tool_calls -----------------------------------------------------------------------


def test_no_tool_calls_passes_without_calls() -> None:
    """`no_tool_calls` with no call made is one passed check (plus the offered-tools one)."""
    assert graded([], {"no_tool_calls": True}) == Grade(misses=(), checks=2, passed_checks=2)


def test_no_tool_calls_names_each_tool_called_once() -> None:
    """Each tool called against `no_tool_calls` is `tool_unexpected:<name>`, once, first-called
    first, all under one failed check."""
    calls = [called("send_email"), called("get_weather", {"city": "x"}), called("send_email")]
    grade = graded(calls, {"no_tool_calls": True})
    assert grade.misses == ("tool_unexpected:send_email", "tool_unexpected:get_weather")
    assert (grade.checks, grade.passed_checks) == (2, 1)


def test_no_tool_calls_false_checks_nothing() -> None:
    """`no_tool_calls = false` is the same as leaving the key out."""
    assert graded([called("send_email")], {"no_tool_calls": False}) == graded(
        [called("send_email")], {}
    )


# --- tool_unknown ------------------------------------------------------------------------


def test_only_offered_tools_is_one_check_whenever_tools_are_offered() -> None:
    """With tools offered, "only offered tools were called" is one check even with no tool keys."""
    assert graded([called("send_email")], {}) == Grade(misses=(), checks=1, passed_checks=1)
    assert graded([], {}) == Grade(misses=(), checks=1, passed_checks=1)


def test_call_to_a_tool_not_offered_is_unknown() -> None:
    """A call to a tool the case did not offer is `tool_unknown:<name>`, once per name."""
    calls = [called("llmock_unknown_tool"), called("send_email"), called("llmock_unknown_tool")]
    grade = graded(calls, {})
    assert grade == Grade(misses=("tool_unknown:llmock_unknown_tool",), checks=1, passed_checks=0)


def test_no_tools_offered_no_unknown_check() -> None:
    """A case that offers no tools has no tool checks at all."""
    assert graded([called("anything")], {}, tools=[]) == Grade(misses=(), checks=0, passed_checks=0)


def test_unknown_call_can_also_be_unexpected() -> None:
    """Each key reports for itself: an unknown call under `no_tool_calls` is both."""
    grade = graded([called("nope")], {"no_tool_calls": True})
    assert grade == Grade(
        misses=("tool_unexpected:nope", "tool_unknown:nope"), checks=2, passed_checks=0
    )


# --- tool_args_schema --------------------------------------------------------------------


def test_arguments_that_fit_the_schema_pass() -> None:
    """`tool_args_schema` is one check over every call to an offered tool."""
    calls = [
        called("get_weather", {"city": "Paris"}),
        called("get_weather", {"city": "Oslo", "unit": "f"}),
    ]
    assert graded(calls, {"tool_args_schema": True}) == Grade(misses=(), checks=2, passed_checks=2)


def test_schema_violations_name_tool_and_path() -> None:
    """Each failing location is `tool_args_schema:<name>:<json path>`, once per tool and path."""
    calls = [
        called("get_weather", {"city": 7}),
        called("get_weather", {"unit": "k"}),
        called("get_weather", {"city": 8}),
    ]
    grade = graded(calls, {"tool_args_schema": True})
    assert grade.misses == (
        "tool_args_schema:get_weather:$.city",
        "tool_args_schema:get_weather:$",
        "tool_args_schema:get_weather:$.unit",
    )
    assert (grade.checks, grade.passed_checks) == (2, 1)


def test_schema_check_skips_unknown_tools_and_tools_without_parameters() -> None:
    """A call to a tool not offered (that is `tool_unknown`) or one declaring no parameters has
    no schema to fit."""
    calls = [called("nope", {"x": 1}), called("send_email", {"anything": [1]})]
    grade = graded(calls, {"tool_args_schema": True})
    assert grade == Grade(misses=("tool_unknown:nope",), checks=2, passed_checks=1)


def test_schema_check_uses_gradings_bounded_validator(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pattern that backtracks without end in `re` is searched with grading's RE2, and a
    reply of many calls gets grading's whole-reply work bound once: the call that crosses it
    is `schema_too_complex`, the calls past it go unchecked, and which call that is depends
    on the reply alone, never on the machine."""
    monkeypatch.setattr(checks, "SCHEMA_STEPS", 400)
    checked: list[Any] = []
    real = toolgrade.schema_violations

    def counted(answer: Any, schema: Mapping[str, Any], work: Any = None) -> list[str]:
        checked.append(answer)
        return real(answer, schema, work)

    monkeypatch.setattr(toolgrade, "schema_violations", counted)
    slow = tool("find", {"type": "object", "properties": {"q": {"pattern": "^(a|aa)+$"}}})
    calls = [called("find", {"q": "a" * 60 + "b"}) for _ in range(500)]
    grade = grade_tools(calls, {"tool_args_schema": True}, [slow])
    assert grade.misses == ("tool_args_schema:find:$.q", "tool_args_schema:find:schema_too_complex")
    assert len(checked) == 101  # each call is 4 steps of work: the 101st crosses 400
    assert (grade.checks, grade.passed_checks) == (2, 1)


# --- all together ------------------------------------------------------------------------


def test_keys_report_in_table_order() -> None:
    """Misses come in the order of DESIGN's table: expected calls, unexpected, unknown, schema."""
    calls = [called("get_weather", {"city": 1}), called("nope")]
    expect = {"tool_calls": [expected("get_weather", city="Paris")], "tool_args_schema": True}
    grade = graded(calls, expect)
    assert grade.misses == (
        "tool_arg_mismatch:get_weather.city",
        "tool_unknown:nope",
        "tool_args_schema:get_weather:$.city",
    )
    assert (grade.checks, grade.passed_checks) == (4, 1)


def test_check_count_depends_on_the_case_only() -> None:
    """However many calls a reply makes, the case is scored out of the same number of checks."""
    expect = {
        "tool_calls": [expected("get_weather", city="Paris", unit="c")],
        "tool_args_schema": True,
    }
    counts = {
        graded(calls, expect).checks
        for calls in (
            [],
            [called("get_weather", {"city": "Paris"})],
            [called("get_weather", {"city": "Paris", "unit": "c"})] * 9 + [called("x")] * 3,
        )
    }
    assert counts == {5}


# --- tool_expect_problem -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("expect", "problem"),
    [
        ({"tool_calls": {"name": "x"}}, "'tool_calls' must be a list of {name, arguments} objects"),
        (
            {"tool_calls": []},
            "'tool_calls' is empty: for a reply that must call no tool, set 'no_tool_calls'",
        ),
        ({"tool_calls": ["send_email"]}, "'tool_calls'[0] must be a {name, arguments} object"),
        ({"tool_calls": [{"arguments": {}}]}, "'tool_calls'[0].name must be a non-empty string"),
        ({"tool_calls": [{"name": ""}]}, "'tool_calls'[0].name must be a non-empty string"),
        ({"tool_calls": [{"name": 3}]}, "'tool_calls'[0].name must be a non-empty string"),
        (
            {"tool_calls": [{"name": "send_email"}, {"name": "send_email", "arguments": []}]},
            "'tool_calls'[1].arguments must be an object",
        ),
        (
            {"tool_calls": [{"name": "send_email", "args": {}}]},
            "'tool_calls'[0] has an unknown key 'args' (known: name, arguments)",
        ),
        (
            {"tool_calls": [{"name": "nope"}]},
            "'tool_calls'[0] expects a call to 'nope', a tool the case does not offer",
        ),
        (
            {"tool_calls": [{"name": "send_email"}], "no_tool_calls": True},
            "'tool_calls' and 'no_tool_calls' contradict each other",
        ),
        ({"no_tool_calls": "yes"}, "'no_tool_calls' must be true or false"),
        ({"tool_args_schema": 1}, "'tool_args_schema' must be true or false"),
    ],
)
def test_expectation_shapes_are_checked(expect: dict[str, Any], problem: str) -> None:
    """A malformed or unmeetable tool expectation is one sentence for the fixture loader."""
    assert tool_expect_problem(expect, TOOLS) == problem


def test_schema_and_calls_need_offered_tools() -> None:
    """`tool_args_schema` or an expected call need the case to offer tools."""
    assert tool_expect_problem({"tool_args_schema": True}, []) == (
        "'tool_args_schema' needs the case to offer tools"
    )
    assert tool_expect_problem({"tool_calls": [{"name": "a"}]}, []) == (
        "'tool_calls'[0] expects a call to 'a', a tool the case does not offer"
    )
    assert tool_expect_problem({"no_tool_calls": True, "tool_args_schema": False}, []) is None


def test_well_formed_expectations_pass() -> None:
    """The shapes DESIGN names are accepted, and a case without tool keys has no problem."""
    expect = {
        "tool_calls": [
            {"name": "get_weather", "arguments": {"city": "Paris", "opts": {"x": [1]}}},
            {"name": "send_email"},
        ],
        "tool_args_schema": True,
        "no_tool_calls": False,
        "must_include": ["x"],
    }
    assert tool_expect_problem(expect, TOOLS) is None
    assert tool_expect_problem({}, []) is None
