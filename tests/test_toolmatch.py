"""Specification of tool-argument matchers and `tool_order`: an expected argument may be a
`$regex`, `$contains`, `$any` or `$one_of` matcher, and the expected calls may have to come in
their order; the miss codes stay those of equality, and the report shows the matcher."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from runner.errors import FixtureError
from runner.fixtures.load import load_cases
from runner.grading.tools import grade_tools, matches, tool_expect_problem
from runner.model import Grade, Miss
from runner.protocols.message import ToolCall
from runner.reports.expected import explain


def called(name: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=None, name=name, arguments=arguments)


TOOLS = [
    {"type": "function", "function": {"name": name}}
    for name in ("search", "get_weather", "send_email")
]


def graded(calls: Sequence[ToolCall], expect: Mapping[str, Any]) -> Grade:
    assert tool_expect_problem(expect, TOOLS) is None
    return grade_tools(calls, expect, TOOLS)


def expecting(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


# --- each matcher ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("got", "want", "ok"),
    [
        ("Paris, France", {"$regex": "^Paris"}, True),
        ("Lyon", {"$regex": "^Paris"}, False),
        ("in PARIS", {"$regex": "(?i)paris"}, True),
        (42, {"$regex": "42"}, False),  # a pattern reads text only
        ("Paris, France", {"$contains": "France"}, True),
        ("Paris", {"$contains": "france"}, False),  # exact text, as a value is
        (["a", "b"], {"$contains": "b"}, True),
        ([1, 2.0], {"$contains": 2}, True),
        ([{"id": 7, "x": 1}], {"$contains": {"id": 7, "x": 1}}, True),
        (["Paris"], {"$contains": {"$regex": "^Pa"}}, True),
        ({"status": "open", "page": 2}, {"$contains": {"status": "open"}}, True),
        ({"status": "closed"}, {"$contains": {"status": "open"}}, False),
        ("7", {"$contains": 7}, False),
        (None, {"$any": True}, True),
        ({"deep": [1]}, {"$any": True}, True),
        ("celsius", {"$one_of": ["celsius", "fahrenheit"]}, True),
        ("kelvin", {"$one_of": ["celsius", "fahrenheit"]}, False),
        (3.0, {"$one_of": [3, 4]}, True),
        (True, {"$one_of": [1]}, False),  # true is not 1, as in equality
        ("Par", {"$one_of": [{"$regex": "^P"}, "x"]}, True),
        # a matcher inside an object or a list, the rest compared as JSON
        ({"city": "Paris", "n": 2}, {"city": {"$regex": "^Pa"}, "n": 2}, True),
        ({"city": "Paris", "n": 3}, {"city": {"$regex": "^Pa"}, "n": 2}, False),
        ({"city": "Paris"}, {"city": {"$any": True}, "n": {"$any": True}}, False),  # key absent
        ([1, "x"], [1, {"$any": True}], True),
        ([1], [1, {"$any": True}], False),
        # no matcher: equality as before
        ({"a": [1, {"b": True}]}, {"a": [1.0, {"b": True}]}, True),
        ({"a": 1}, {"a": 1, "b": 2}, False),
        ({"$regex": "x", "y": 1}, {"$regex": "x", "y": 1}, True),  # only a lone key is one
    ],
)
def test_a_matcher_accepts_what_it_says(got: Any, want: Any, ok: bool) -> None:
    assert matches(got, want) is ok


def test_a_matcher_passes_its_field_and_a_mismatch_keeps_its_code() -> None:
    """One check per field as before: a field a matcher accepts passes, one it refuses is
    `tool_arg_mismatch:<name>.<key>`, an absent one `tool_arg_missing`."""
    expect = expecting(
        "get_weather",
        city={"$regex": "^Par"},
        unit={"$one_of": ["c", "f"]},
        days={"$any": True},
        note={"$contains": "rain"},
    )
    ok = graded([called("get_weather", city="Paris", unit="c", days=3, note="rain later")], expect)
    assert (ok.misses, ok.checks, ok.passed_checks) == ((), 6, 6)
    bad = graded([called("get_weather", city="Lyon", unit="k", note="sun")], expect)
    assert bad.misses == (  # by key, as every field's miss is
        "tool_arg_mismatch:get_weather.city",
        "tool_arg_missing:get_weather.days",
        "tool_arg_mismatch:get_weather.note",
        "tool_arg_mismatch:get_weather.unit",
    )
    assert (bad.checks, bad.passed_checks) == (6, 2)


def test_matchers_choose_the_pairing_as_equality_does() -> None:
    """With two calls of one tool, each expected call takes the call its matchers accept."""
    expect = {
        "tool_calls": [
            {"name": "search", "arguments": {"q": {"$regex": "weather"}}},
            {"name": "search", "arguments": {"q": {"$contains": "news"}}},
        ]
    }
    grade = graded([called("search", q="today's news"), called("search", q="weather Oslo")], expect)
    assert grade.misses == ()


# --- tool_order -----------------------------------------------------------------------------


ORDERED = {
    "tool_calls": [
        {"name": "search", "arguments": {"q": {"$any": True}}},
        {"name": "get_weather"},
        {"name": "send_email"},
    ],
    "tool_order": True,
}


def test_calls_in_their_order_pass_the_order_check() -> None:
    """One more check; calls nobody expected may come anywhere between them."""
    calls = [called("search", q="x"), called("noise"), called("get_weather"), called("send_email")]
    grade = graded(calls, ORDERED)
    assert grade.misses == ("tool_unknown:noise",)
    # three calls and a field, the order, and "only offered tools were called"
    assert (grade.checks, grade.passed_checks) == (4 + 1 + 1, 5)


def test_calls_out_of_order_miss_it_naming_the_first_that_came_too_early() -> None:
    calls = [called("get_weather"), called("send_email"), called("search", q="x")]
    grade = graded(calls, ORDERED)
    assert grade.misses == ("tool_order:get_weather",)
    assert (grade.checks, grade.passed_checks) == (6, 5)
    without = graded(calls, {**ORDERED, "tool_order": False})
    assert (without.misses, without.checks) == ((), 5)


def test_the_order_miss_is_a_declared_miss_code() -> None:
    """`tool_order:<name>` is built from `runner.model.Miss`, so the miss reference lists it
    with the key that checks it."""
    calls = [called("get_weather"), called("send_email"), called("search", q="x")]
    (miss,) = graded(calls, ORDERED).misses
    declared = {m.code: m for m in Miss}
    code, _, name = miss.partition(":")
    assert code in declared and declared[code].of(name) == miss
    assert "tool_order" in declared[code].keys


def test_a_missing_call_is_missing_not_out_of_order() -> None:
    grade = graded([called("search", q="x"), called("send_email")], ORDERED)
    assert grade.misses == ("tool_missing:get_weather",)


def test_the_order_uses_the_pairing_that_ties_go_to_the_earliest_call() -> None:
    """Two expected calls of one tool that both calls fit: the first takes the earlier call,
    so the reply is in order."""
    expect = {
        "tool_calls": [
            {"name": "search", "arguments": {"q": {"$any": True}}},
            {"name": "search", "arguments": {"q": {"$any": True}}},
        ],
        "tool_order": True,
    }
    assert graded([called("search", q="b"), called("search", q="a")], expect).misses == ()


# --- what validate refuses ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"city": {"$regex": 3}}, ".city: $regex must be a pattern (a string)"),
        ({"city": {"$regex": "(a"}}, ".city: $regex is no RE2 pattern: missing ): (a"),
        ({"city": {"$regex": "(?=x)"}}, ".city: $regex is no RE2 pattern: "),
        ({"city": {"$any": False}}, ".city: $any must be true"),
        ({"city": {"$one_of": []}}, ".city: $one_of must be a non-empty list of values"),
        ({"city": {"$one_of": "a"}}, ".city: $one_of must be a non-empty list of values"),
        ({"city": {"$regx": "^P"}}, ".city: '$regx' is no matcher (known: "),
        ({"city": {"$regex": "^P", "flags": "i"}}, ".city: $regex must be the only key"),
        ({"f": {"inner": [{"$any": 1}]}}, ".f.inner[0]: $any must be true"),
        ({"f": {"$one_of": [{"$regex": "("}]}}, ".f.$one_of[0]: $regex is no RE2 pattern"),
        ({"f": {"$contains": {"$any": "yes"}}}, ".f.$contains: $any must be true"),
    ],
)
def test_a_malformed_matcher_is_refused_naming_where_it_is(
    arguments: dict[str, Any], problem: str
) -> None:
    found = tool_expect_problem({"tool_calls": [{"name": "search", "arguments": arguments}]}, TOOLS)
    assert found is not None and found.startswith("'tool_calls'[0].arguments" + problem), found


@pytest.mark.parametrize(
    ("expect", "problem"),
    [
        ({"tool_order": True}, "'tool_order' needs 'tool_calls' to put in order"),
        (
            {"tool_calls": [{"name": "search"}], "tool_order": "yes"},
            "'tool_order' must be true or false",
        ),
    ],
)
def test_tool_order_is_a_boolean_beside_tool_calls(expect: dict[str, Any], problem: str) -> None:
    assert tool_expect_problem(expect, TOOLS) == problem


def test_validate_names_the_file_and_line_of_a_malformed_matcher(tmp_path: Path) -> None:
    """The fixture loader refuses the row, naming its file and line (exit 65's error)."""
    good = '{"id": "a", "prompt": "p", "tools": TOOLS, "expect": {"tool_calls": [ARGS]}}'
    tools = '[{"type": "function", "function": {"name": "search"}}]'
    rows = [
        good.replace("TOOLS", tools).replace("ARGS", '{"name": "search"}'),
        good.replace("TOOLS", tools)
        .replace('"id": "a"', '"id": "b"')
        .replace("ARGS", '{"name": "search", "arguments": {"q": {"$regex": "(?<=x)"}}}'),
    ]
    path = tmp_path / "cases.jsonl"
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(FixtureError) as caught:
        load_cases(path)
    assert (caught.value.line, str(caught.value.path)) == (2, str(path))
    assert "expect.'tool_calls'[0].arguments.q: $regex is no RE2 pattern" in str(caught.value)


# --- the report shows the matcher beside the value received ---------------------------------


@pytest.mark.parametrize(
    ("want", "shown"),
    [
        ({"$regex": "^Par"}, "get_weather called with city matching /^Par/"),
        ({"$contains": "Par"}, 'get_weather called with city containing "Par"'),
        ({"$one_of": ["Paris", "Nice"]}, 'get_weather called with city = one of "Paris", "Nice"'),
        ("Paris", 'get_weather called with city = "Paris"'),
    ],
)
def test_a_mismatch_shows_the_matcher_beside_the_value_received(want: Any, shown: str) -> None:
    miss = explain(
        "tool_arg_mismatch:get_weather.city",
        expecting("get_weather", city=want),
        calls=[called("get_weather", city="Lyon")],
    )
    assert (miss.expected, miss.got) == (shown, 'city = "Lyon"')


def test_an_order_miss_shows_the_order_expected_and_the_calls_made() -> None:
    miss = explain(
        "tool_order:get_weather",
        ORDERED,
        calls=[called("get_weather"), called("send_email"), called("search", q="x")],
    )
    assert miss.expected == "calls in the order search, get_weather, send_email"
    assert miss.got == 'get_weather({}), send_email({}), search({"q": "x"})'


def test_the_docs_matcher_example_is_an_expectation_that_grades() -> None:
    """The Fixtures reference's matcher example loads and passes the calls it describes."""
    import json
    import re

    page = Path(__file__).resolve().parent.parent / "docs" / "reference" / "fixtures.md"
    text = page.read_text(encoding="utf-8")
    (block,) = [b for b in re.findall(r"```json\n(.*?)```", text, re.DOTALL) if "$regex" in b]
    expect = json.loads(block)
    tools = [{"type": "function", "function": {"name": n}} for n in ("search", "send_email")]
    assert tool_expect_problem(expect, tools) is None
    calls = [
        called("search", query="Refund policy", limit=5),
        called("send_email", to="oncall@example.com", body="..."),
    ]
    assert grade_tools(calls, expect, tools).misses == ()
    assert grade_tools(calls[::-1], expect, tools).misses == ("tool_order:send_email",)
