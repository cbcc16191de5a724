"""Specification of grading: built-in miss codes, task_score, and custom grader resolution."""

from __future__ import annotations

import functools
import json
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from runner.errors import ConfigError, FixtureError
from runner.fixtures.load import load_cases
from runner.grading import checks
from runner.grading import graders as grading
from runner.grading.graders import (
    BUILTIN_KEYS,
    GraderSet,
    check_case,
    grade,
    load_graders,
)
from runner.model import Case, Grade, Reply, ToolCall

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
NONE = GraderSet.empty()


def case(expect: Mapping[str, Any], *, case_id: str = "c1", grader: str | None = None) -> Case:
    return Case(
        id=case_id,
        prompt="p",
        expect=expect,
        fixture_sha="0" * 16,
        path="suite.jsonl",
        line=7,
        grader=grader,
    )


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}


def tool_case(expect: Mapping[str, Any], tools: tuple[Mapping[str, Any], ...] = (WEATHER,)) -> Case:
    return Case(
        id="t1",
        prompt="p",
        expect=expect,
        fixture_sha="0" * 16,
        path="suite.jsonl",
        line=3,
        tools=tools,
    )


def call(name: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=None, name=name, arguments=arguments)


def graded(expect: Mapping[str, Any], text: str, answer: Any = None) -> Grade:
    return grade(case(expect), Reply(text=text, answer=answer), NONE)


def write_module(tmp_path: Path, name: str, source: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return path


def load(tmp_path: Path, spec: str | None) -> GraderSet:
    return load_graders(spec, tmp_path, config_path="parallax.toml", key="suites.s.graders")


# --- built-in keys -----------------------------------------------------------------------


def test_builtin_keys_are_the_documented_table() -> None:
    """BUILTIN_KEYS lists the design's keys in the order their misses appear."""
    expected = (
        "must_include",
        "must_not_include",
        "max_chars",
        "max_sentences",
        "regex",
        "not_regex",
        "json_fields",
        "json_schema",
    )
    assert expected == tuple(BUILTIN_KEYS)


def test_a_clean_reply_passes_every_check() -> None:
    """With nothing expected, a non-empty reply passes its two standing checks."""
    expected = Grade(misses=(), checks=2, passed_checks=2)
    assert expected == graded({}, "Fine.")


def test_empty_completion_is_a_miss() -> None:
    """A blank reply misses `empty_completion` (one of two standing checks)."""
    result = graded({}, "  \n")
    expected = (("empty_completion",), 0.5)
    assert expected == (result.misses, result.task_score)


def test_must_include_is_case_insensitive_per_needle() -> None:
    """Each needle is one check; a needle found in any case passes."""
    result = graded({"must_include": ["SKU-9", "denver"]}, "sku-9 leaves Denver")
    assert not result.misses
    result = graded({"must_include": ["SKU-9", "Paris"]}, "SKU-9 leaves Denver")
    expected = (("missing:Paris",), 4, 3)
    assert expected == (result.misses, result.checks, result.passed_checks)


def test_must_not_include_is_case_insensitive() -> None:
    """A forbidden needle in any case is a `forbidden:` miss."""
    result = graded({"must_not_include": ["As an AI"]}, "as an ai, I cannot")
    expected = (("forbidden:As an AI",), 3, 2)
    assert expected == (result.misses, result.checks, result.passed_checks)


def test_max_chars_defaults_to_1200() -> None:
    """Without max_chars, a reply over 1200 characters is over budget."""
    expected = ("over_budget:1201>1200",)
    assert expected == graded({}, "x" * 1201).misses
    assert not graded({}, "x" * 1200).misses


def test_max_chars_names_length_and_budget() -> None:
    """max_chars reports the reply's length against the budget."""
    expected = ("over_budget:11>10",)
    assert expected == graded({"max_chars": 10}, "hello world").misses


def test_max_sentences_counts_non_blank_pieces() -> None:
    """Sentences are the non-blank pieces between `.`, `!` and `?`."""
    expected = ("too_verbose:3>2",)
    assert expected == graded({"max_sentences": 2}, "One. Two!  Three?  ").misses
    assert not graded({"max_sentences": 2}, "One... Two!").misses


def test_regex_and_not_regex_accept_a_string_or_a_list() -> None:
    """Each pattern is one check; regex must match and not_regex must not."""
    expect = {"regex": [r"SKU-\d+", r"^Order"], "not_regex": r"(?i)sorry"}
    result = graded(expect, "Sorry, SKU-9 ships")
    expected = (("regex_mismatch:^Order", "regex_forbidden:(?i)sorry"), 5, 3)
    assert expected == (result.misses, result.checks, result.passed_checks)


def test_json_fields_score_one_check_per_field() -> None:
    """Seed 004's rule: a wrong field and a missing field each cost one check."""
    expect = {"json_fields": {"city": "Paris", "country": "France", "iso": "FR"}}
    result = graded(expect, '{"city": "Lyon"}', {"city": "Lyon", "country": "France"})
    expected = (("field_mismatch:city", "field_missing:iso"), 5, 3)
    assert expected == (result.misses, result.checks, result.passed_checks)


def test_json_fields_of_a_non_object_answer_are_all_missing() -> None:
    """An answer that is not an object misses every expected field."""
    result = graded({"json_fields": {"city": "Paris", "country": "France"}}, "[]", [])
    expected = ("field_missing:city", "field_missing:country")
    assert expected == result.misses


def test_json_fields_compare_as_json_values() -> None:
    """`true` is not `1`, but `1.0` is `1`."""
    expect = {"json_fields": {"flag": 1, "n": 1}}
    expected = ("field_mismatch:flag",)
    assert expected == graded(expect, "{}", {"flag": True, "n": 1.0}).misses


def test_json_schema_names_each_failing_path_once() -> None:
    """A schema violation is reported per JSON path, as one check."""
    schema = {
        "type": "object",
        "required": ["city", "country"],
        "properties": {"city": {"type": "string"}, "pop": {"type": "integer"}},
    }
    result = graded({"json_schema": schema}, "{}", {"city": 5, "pop": "many"})
    expected = (("schema_violation:$", "schema_violation:$.city", "schema_violation:$.pop"), 3, 2)
    assert expected == (result.misses, result.checks, result.passed_checks)
    assert not graded({"json_schema": schema}, "{}", {"city": "Rome", "country": "IT"}).misses


def test_misses_follow_the_table_order() -> None:
    """Misses from several keys appear in table order, whatever the order of expect."""
    expect = {"max_chars": 5, "must_not_include": ["x"], "must_include": ["y"]}
    expected = ("missing:y", "forbidden:x", "over_budget:6>5")
    assert expected == graded(expect, "xxxxxx").misses


def test_ceiling_fixture_completions_grade_as_the_seed_intends() -> None:
    """Seed 000's recorded completions: easy and medium pass, stretch miss on purpose."""
    results = {
        c.id: grade(c, Reply(text=c.completion or ""), NONE).misses
        for c in load_cases(FIXTURES / "ceiling.jsonl")
    }
    expected = {
        "easy-empty-guard": (),
        "easy-no-apology-loop": (),
        "medium-sku-contract": (),
        "medium-budget": (),
        "stretch-policy-cite": ("missing:restock-window", "missing:weekday", "forbidden:probably"),
        "stretch-missing-field": ("missing:missing address", "forbidden:usual place"),
    }
    assert expected == results


# --- custom graders ----------------------------------------------------------------------

GRADER_MODULE = """
    def shout(text, expect):
        return [] if text.isupper() else ["not_shouting"]

    def by_id(text, expect):
        return ["by_id"] if expect.get("must_be_kind") else []

    def boom(text, expect):
        raise KeyError("oops")

    def not_a_list(text, expect):
        return "nope"

    GRADERS = {"c1": by_id, "exploding": boom, "bad-return": not_a_list}
"""


@pytest.fixture
def suite(tmp_path: Path) -> GraderSet:
    write_module(tmp_path, "graders.py", GRADER_MODULE)
    return load(tmp_path, "graders.py")


def test_custom_grader_resolves_by_case_id(suite: GraderSet) -> None:
    """A case id in GRADERS gets that grader, one check per custom key."""
    result = grade(case({"must_be_kind": True, "other": 1}), Reply(text="hi"), suite)
    expected = (("by_id",), 4, 3)
    assert expected == (result.misses, result.checks, result.passed_checks)


def test_custom_grader_resolves_by_bare_name(suite: GraderSet) -> None:
    """`grader: "shout"` names a function in the suite's module."""
    result = grade(case({}, case_id="other", grader="shout"), Reply(text="quiet"), suite)
    expected = (("not_shouting",), 3, 2)
    assert expected == (result.misses, result.checks, result.passed_checks)


def test_custom_grader_resolves_by_module_and_function(tmp_path: Path) -> None:
    """`grader: "file.py:function"` loads that file relative to the suite's base dir."""
    write_module(tmp_path, "extra.py", "def quiet(text, expect):\n    return ['loud']\n")
    graders = load(tmp_path, None)
    result = grade(case({}, grader="extra.py:quiet"), Reply(text="HI"), graders)
    expected = ("loud",)
    assert expected == result.misses


def test_custom_grader_resolves_by_importable_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module name, as the suite's graders or in `module:function`, is imported."""
    write_module(tmp_path, "parallax_test_graders.py", GRADER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "parallax_test_graders", raising=False)
    by_module = load(tmp_path, "parallax_test_graders")
    by_ref = load(tmp_path, None)
    expected = (("by_id",), ("not_shouting",))
    actual = (
        grade(case({"must_be_kind": True}), Reply(text="hi"), by_module).misses,
        grade(case({}, grader="parallax_test_graders:shout"), Reply(text="hi"), by_ref).misses,
    )
    assert expected == actual


def test_custom_grader_runs_with_the_builtin_keys(suite: GraderSet) -> None:
    """Built-in keys still grade when a custom grader handles the rest."""
    expect = {"must_be_kind": True, "max_sentences": 1}
    result = grade(case(expect), Reply(text="One. Two."), suite)
    expected = (("too_verbose:2>1", "by_id"), 4, 2)
    assert expected == (result.misses, result.checks, result.passed_checks)


def test_a_pattern_that_backtracks_in_re_is_searched_in_linear_time() -> None:
    """`(a|aa)+$` on a long run of a's backtracks for hours in `re`; RE2 searches it in time
    linear in the text, so the check is an ordinary answer, for `regex` and `not_regex`
    alike, on any machine: no timeout exists to reach."""
    pattern, text = "(a|aa)+$", "a" * 60 + "b"
    expect = {"regex": [pattern, "a+"], "not_regex": [pattern, "zz"]}
    result = grade(case(expect), Reply(text=text), GraderSet.empty())
    assert result.misses == (f"regex_mismatch:{pattern}",)
    assert (result.checks, result.passed_checks) == (6, 5)
    long = grade(case({"regex": pattern}), Reply(text="a" * 500_000 + "b"), NONE)
    assert long.misses == ("over_budget:500001>1200", f"regex_mismatch:{pattern}")


@pytest.mark.parametrize(
    ("schema", "misses"),
    [
        (
            {"type": "object", "properties": {"x": {"pattern": "^(a|aa)+$"}}},
            ("schema_violation:$.x",),
        ),
        (
            {"type": "object", "patternProperties": {"^(a|aa)+$": {"type": "integer"}}},
            ("schema_violation:$.aaaa",),
        ),
        (
            {
                "type": "object",
                "properties": {"x": {}},
                "patternProperties": {"^(a|aa)+$": {}},
                "additionalProperties": False,
            },
            ("schema_violation:$",),
        ),
    ],
    ids=["pattern", "patternProperties", "additionalProperties"],
)
def test_a_schema_pattern_that_backtracks_in_re_is_searched_as_regex_is(
    schema: dict[str, Any], misses: tuple[str, ...]
) -> None:
    """jsonschema searches patterns with `re`, which backtracks without end on `^(a|aa)+$`:
    each is searched with RE2 instead, and matches exactly as `re` would have: a hostile key
    or value does not match, `aaaa` does."""
    hostile = "a" * 50_000 + "!"
    answer = {"x": hostile, hostile: "any", "aaaa": "not an integer"}
    result = grade(case({"json_schema": schema}), Reply(text="{}", answer=answer), NONE)
    assert result.misses == misses


BRANCHING = {"properties": {"a": {"allOf": [{"$ref": "#"}, {"$ref": "#"}]}}}  # 2**depth checks
LOOP = {"properties": {"a": {"$ref": "#/properties/a"}}}  # loops only under key `a`
RECURSIVE = {"type": "object", "properties": {"a": {"$ref": "#"}}}  # a tree of `a`s: valid


def nested(depth: int) -> Any:
    return functools.reduce(lambda inner, _: {"a": inner}, range(depth), {})


def schema_misses(schema: Mapping[str, Any], answer: Any) -> tuple[str, ...]:
    return grade(case({"json_schema": schema}), Reply(text="{}", answer=answer), NONE).misses


def test_one_replys_schema_check_is_bounded_by_its_work() -> None:
    """Two `$ref`s back to the root at every level make 2**40 checks of a few hundred bytes:
    past SCHEMA_STEPS keyword checks the miss is `schema_too_complex`, wherever the check
    stood when it got there, so the same reply gets the same miss on every machine."""
    assert schema_misses(BRANCHING, nested(40)) == ("schema_too_complex",)
    assert schema_misses(BRANCHING, nested(3)) == ()  # 2**3 checks: well within


def test_a_ref_that_loops_for_one_answer_is_too_deep_not_a_recursion_error() -> None:
    """A `$ref` that loops only under key `a` passes the load-time trial; the answer that has
    `a` nests its checks without end. That was `schema_error:RecursionError` on an idle
    machine and `schema_timeout` on a loaded one; it is `schema_too_deep` on every one."""
    assert schema_misses(LOOP, {"a": 1}) == ("schema_too_deep",)


def _at_depth(frames: int, call: Any) -> Any:
    """`call()` from `frames` Python frames deeper than here: a live run grades deep inside
    its event loop, a replay or a test near the bottom of the stack."""
    if frames <= 0:
        return call()
    return _at_depth(frames - 1, call)


@pytest.mark.parametrize("frames", [0, 600, 5_000])
def test_a_deep_check_gets_the_same_answer_however_deep_the_stack_it_starts_on(
    frames: int,
) -> None:
    """The recursion limit counts frames from the bottom of the stack: a check that fitted in
    a replay could raise RecursionError in a live run, deeper in its event loop. A recursive
    schema over an answer nested 128 levels (the deepest answer parallax parses) passes, and
    a loop is `schema_too_deep`, from any starting depth (5,000 frames: past the default
    limit of 1,000, raised here so that the caller can get that deep at all)."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, frames + 1_000))
    try:
        deep = _at_depth(frames, lambda: schema_misses(RECURSIVE, nested(128)))
        loop = _at_depth(frames, lambda: schema_misses(LOOP, {"a": 1}))
    finally:
        sys.setrecursionlimit(limit)
    assert (deep, loop) == ((), ("schema_too_deep",))
    assert sys.getrecursionlimit() == limit


def test_a_grade_never_reads_the_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine so loaded that an hour passes between two looks at the clock grades the
    reply that was once `schema_timeout` or `schema_error:RecursionError` (and a pattern that
    backtracks) exactly as an idle one does."""
    import time

    replies = [
        (BRANCHING, nested(40)),
        (LOOP, {"a": 1}),
        ({"properties": {"x": {"pattern": "^(a|aa)+$"}}}, {"x": "a" * 5_000 + "!"}),
    ]
    monkeypatch.setattr(checks, "SCHEMA_STEPS", 5_000)  # the same bound, reached sooner
    idle = [schema_misses(schema, answer) for schema, answer in replies]
    hour = iter(range(0, 10**9, 3600))
    for name in ("monotonic", "perf_counter", "time"):
        monkeypatch.setattr(time, name, lambda: float(next(hour)))
    loaded = [schema_misses(schema, answer) for schema, answer in replies]
    assert (
        loaded == idle == [("schema_too_complex",), ("schema_too_deep",), ("schema_violation:$.x",)]
    )


def test_a_pattern_re2_cannot_search_is_refused_at_load(tmp_path: Path) -> None:
    """RE2 has no backreferences or lookarounds (they are what backtracks without end): a
    `regex`, or a schema's `pattern` or `patternProperties` key, that uses one is a fixture
    error naming the pattern, before any call."""
    rows = [
        {"id": "a", "prompt": "p", "expect": {"regex": "(a)\\1"}},
        {"id": "b", "prompt": "p", "expect": {"not_regex": ["ok", "x(?=y)"]}},
        {"id": "c", "prompt": "p", "expect": {"json_schema": {"pattern": "(?<!a)b"}}},
        {"id": "d", "prompt": "p", "expect": {"json_schema": {"patternProperties": {"(?=k)": {}}}}},
    ]
    for row in rows:
        path = tmp_path / f"{row['id']}.jsonl"
        path.write_text(json.dumps(row) + "\n", encoding="utf-8")
        with pytest.raises(FixtureError) as caught:
            load_cases(path)
        assert caught.value.exit_code == 65
        assert "pattern" in str(caught.value) and f"{path}:1:" in str(caught.value)


LOOPING = """\
def forever(text, expect):
    while True:
        try:
            pass
        except Exception:  # a grader that swallows its own errors cannot swallow the limit
            pass
"""


def test_a_custom_grader_past_its_time_limit_is_unscored_not_a_miss(tmp_path: Path) -> None:
    """A custom grader is code parallax cannot count, so only the clock bounds it: past the
    suite's limit it is `grader_error:timeout` and the reply is unscored (no task_score),
    never a task miss a fast machine would not have given. The timer is put back after."""
    import signal

    write_module(tmp_path, "slow.py", LOOPING)
    graders = load_graders(
        None, tmp_path, config_path="parallax.toml", key="suites.s.graders", seconds=0.2
    )
    before = signal.getsignal(signal.SIGALRM)
    result = grade(
        case({"must_include": ["x"]}, grader="slow.py:forever"), Reply(text="x"), graders
    )
    assert (result.misses, result.task_score) == (("grader_error:timeout",), None)
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) is before


def test_a_custom_graders_limit_defaults_to_thirty_seconds(tmp_path: Path) -> None:
    """The limit is generous: 30 s unless the suite's grader_timeout_seconds says otherwise,
    and a grader within it is graded as ever, its reply scored."""
    graders = load(tmp_path, None)
    assert graders.seconds == grading.GRADER_SECONDS == 30.0
    write_module(tmp_path, "extra.py", "def quiet(text, expect):\n    return []\n")
    result = grade(case({}, grader="extra.py:quiet"), Reply(text="x"), graders)
    assert (result.misses, result.task_score) == ((), 1.0)


def test_a_grader_that_raises_is_a_miss(suite: GraderSet) -> None:
    """A grader that raises yields `grader_error:<Class>` as a failed check."""
    result = grade(case({}, case_id="exploding"), Reply(text="hi"), suite)
    expected = (("grader_error:KeyError",), 3, 2)
    assert expected == (result.misses, result.checks, result.passed_checks)


def test_a_grader_that_returns_no_list_is_a_miss(suite: GraderSet) -> None:
    """A grader that returns something other than a list of str is a grader_error."""
    result = grade(case({}, case_id="bad-return"), Reply(text="hi"), suite)
    expected = ("grader_error:TypeError",)
    assert expected == result.misses


@pytest.mark.parametrize(
    ("body", "name"),
    [
        ("import sys; sys.exit(0)", "SystemExit"),
        ("raise GeneratorExit", "GeneratorExit"),
        ("raise type('Own', (BaseException,), {})()", "Own"),
    ],
)
def test_a_grader_that_raises_a_base_exception_is_a_miss(
    tmp_path: Path, body: str, name: str
) -> None:
    """sys.exit(0), GeneratorExit or a grader's own BaseException is a grader_error, not the
    end of the run (sys.exit(0) ended it with exit 0)."""
    write_module(tmp_path, "g.py", f"def quits(text, expect):\n    {body}\n")
    result = grade(case({"custom": 1}, grader="g.py:quits"), Reply(text="x"), load(tmp_path, None))
    assert f"grader_error:{name}" in result.misses


def test_a_grader_cannot_change_the_case(tmp_path: Path) -> None:
    """A grader that mutates its expect leaves the case's expect as it was."""
    source = "def greedy(text, expect):\n    expect.clear()\n    return []\n"
    write_module(tmp_path, "g.py", source)
    subject = case({"custom": [1]}, grader="g.py:greedy")
    grade(subject, Reply(text="x"), load(tmp_path, None))
    expected = {"custom": [1]}
    assert expected == dict(subject.expect)


def test_support_graders_grade_the_seed_001_cases() -> None:
    """The example support graders catch an offered refund and an invented carrier."""
    graders = load_graders(
        "graders/support.py", FIXTURES, config_path="demo.toml", key="suites.support.graders"
    )
    refund, tracking = load_cases(FIXTURES / "support.json")
    for checked in (refund, tracking):
        check_case(checked, graders)
    replies = {
        "refund_ok": (refund, "We cannot refund order 1842 immediately; it is under review."),
        "refund_bad": (refund, "Sure! I will refund you now. Thanks. Bye. Really. Done."),
        "track_ok": (tracking, "Shipment 9911 has no carrier on file. Which carrier shipped it?"),
        "track_bad": (tracking, "Your shipment 9911 is with UPS."),
        "groups": (tracking, "Our groups team has no carrier. Could you share the carrier?"),
    }
    actual = {
        name: grade(c, Reply(text=text), graders).misses for name, (c, text) in replies.items()
    }
    expected = {
        "refund_ok": (),
        "refund_bad": ("too_verbose:6>4", "offered_instant_refund", "missing_order_id"),
        "track_ok": (),
        "track_bad": ("invented_carrier", "did_not_ask_carrier"),
        "groups": (),
    }
    assert expected == actual


# --- loading and checking ------------------------------------------------------------------


def test_broken_grader_module_is_a_config_error(tmp_path: Path) -> None:
    """A grader file that fails to import is a one-line ConfigError naming the file."""
    path = write_module(tmp_path, "broken.py", "import no_such_module_here\n")
    with pytest.raises(ConfigError) as info:
        load(tmp_path, "broken.py")
    message = str(info.value)
    expected_code = 78
    assert expected_code == info.value.exit_code
    assert message.startswith("parallax.toml: suites.s.graders: cannot import ")
    assert str(path) in message
    assert "ModuleNotFoundError" in message
    assert "\n" not in message


def test_syntax_error_in_grader_module_is_a_config_error(tmp_path: Path) -> None:
    """A grader file with a syntax error is a ConfigError, not a traceback."""
    write_module(tmp_path, "bad.py", "def f(:\n")
    with pytest.raises(ConfigError, match="SyntaxError"):
        load(tmp_path, "bad.py")


def test_missing_grader_file_is_a_config_error(tmp_path: Path) -> None:
    """A graders path that does not exist is a ConfigError."""
    with pytest.raises(ConfigError, match="not found"):
        load(tmp_path, "nope.py")


def test_unimportable_grader_module_name_is_a_config_error(tmp_path: Path) -> None:
    """A module name that cannot be imported is a ConfigError."""
    with pytest.raises(ConfigError, match="no_such_pkg_for_parallax"):
        load(tmp_path, "no_such_pkg_for_parallax")


def test_malformed_graders_registry_is_a_config_error(tmp_path: Path) -> None:
    """GRADERS must map case ids to functions."""
    write_module(tmp_path, "reg.py", "GRADERS = {'c1': 'not callable'}\n")
    with pytest.raises(ConfigError, match="GRADERS"):
        load(tmp_path, "reg.py")


def test_unknown_expect_key_without_grader_is_a_fixture_error() -> None:
    """An expect key nothing grades is a FixtureError at the case's line."""
    with pytest.raises(FixtureError) as info:
        check_case(case({"must_includes": ["x"]}), NONE)
    expected = (
        "suite.jsonl:7: unknown expect key 'must_includes' and no custom grader for case 'c1'"
    )
    assert expected == str(info.value)


def test_unknown_expect_key_with_a_grader_is_accepted(suite: GraderSet) -> None:
    """A custom grader takes responsibility for the keys it is given."""
    check_case(case({"must_be_kind": True}), suite)


def test_builtin_only_cases_need_no_grader() -> None:
    """Cases with only built-in keys pass the check without any graders module."""
    check = functools.partial(check_case, graders=NONE)
    assert load_cases(FIXTURES / "ceiling.jsonl", check)
    assert load_cases(FIXTURES / "cities.jsonl", check)


def test_grader_naming_a_missing_function_is_a_config_error(suite: GraderSet) -> None:
    """`grader` naming a function that does not exist is a ConfigError at the case."""
    with pytest.raises(ConfigError) as info:
        check_case(case({}, grader="whisper"), suite)
    expected = "suite.jsonl:7: grader: no grader function 'whisper' in the suite's graders module"
    assert expected == str(info.value)


def test_grader_name_without_a_suite_module_is_a_config_error() -> None:
    """A bare grader name needs a suite graders module to look in."""
    with pytest.raises(ConfigError, match="no graders module"):
        check_case(case({}, grader="shout"), NONE)


def test_module_grader_naming_a_missing_function_is_a_config_error(tmp_path: Path) -> None:
    """`file.py:function` with no such function is a ConfigError."""
    write_module(tmp_path, "extra.py", "def quiet(text, expect):\n    return []\n")
    with pytest.raises(ConfigError, match=r"no grader function 'loud' in extra\.py"):
        check_case(case({}, grader="extra.py:loud"), load(tmp_path, None))


def test_two_grader_files_with_one_name_do_not_collide(tmp_path: Path) -> None:
    """Two suites' `graders.py` files load as separate modules."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    write_module(tmp_path / "a", "graders.py", "GRADERS = {'c1': lambda t, e: ['a']}\n")
    write_module(tmp_path / "b", "graders.py", "GRADERS = {'c1': lambda t, e: ['b']}\n")
    first = load(tmp_path / "a", "graders.py")
    second = load(tmp_path / "b", "graders.py")
    expected = (("a",), ("b",))
    actual = (
        grade(case({}), Reply(text="x"), first).misses,
        grade(case({}), Reply(text="x"), second).misses,
    )
    assert expected == actual


def test_grading_is_deterministic(suite: GraderSet) -> None:
    """Grading the same reply twice gives the same Grade."""
    subject = case({"must_be_kind": True, "regex": "a", "json_fields": {"k": 1}})
    reply = Reply(text="b", answer={"k": 2})
    assert grade(subject, reply, suite) == grade(subject, reply, suite)


# --- tool calls --------------------------------------------------------------------------


def test_a_reply_that_only_calls_a_tool_is_no_empty_completion() -> None:
    """A reply with calls and no text answered with a call: its standing checks pass, and the
    offered-tools check counts (2 + 1)."""
    reply = Reply(text="", tool_calls=(call("get_weather", city="Paris"),))
    assert Grade(misses=(), checks=3, passed_checks=3) == grade(tool_case({}), reply, NONE)


def test_text_keys_still_apply_to_a_reply_that_only_calls_a_tool() -> None:
    """A `must_include` reads the reply's empty content and misses, the call notwithstanding."""
    reply = Reply(text="", tool_calls=(call("get_weather", city="Paris"),))
    result = grade(tool_case({"must_include": ["Paris"]}), reply, NONE)
    expected = (("missing:Paris",), 4, 3)
    assert expected == tally(result)


def test_a_reply_with_neither_text_nor_calls_is_an_empty_completion() -> None:
    """No text and no call is still `empty_completion` on a tool case."""
    result = grade(tool_case({}), Reply(text=" "), NONE)
    expected = (("empty_completion",), 3, 2)
    assert expected == tally(result)


def test_expected_calls_score_one_check_per_call_and_per_argument() -> None:
    """`tool_calls` counts a check per expected call and per expected argument field, beside
    the standing checks and the offered-tools check: one wrong field of two is 5 / 6."""
    expect = {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}]}
    reply = Reply(text="", tool_calls=(call("get_weather", city="Paris", days=2),))
    result = grade(tool_case(expect), reply, NONE)
    expected = (("tool_arg_mismatch:get_weather.days",), 6, 5)
    assert expected == tally(result)


def test_a_missing_call_fails_its_checks_under_one_code() -> None:
    """A reply that calls nothing misses `tool_missing:<name>` for the call and its fields."""
    expect = {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}
    result = grade(tool_case(expect), Reply(text="It is sunny."), NONE)
    expected = (("tool_missing:get_weather",), 5, 3)
    assert expected == tally(result)


def test_a_call_to_a_tool_not_offered_is_unknown_whenever_tools_were_offered() -> None:
    """`tool_unknown` needs no expectation key: offering tools is enough."""
    reply = Reply(text="", tool_calls=(call("delete_account"),))
    result = grade(tool_case({}), reply, NONE)
    expected = (("tool_unknown:delete_account",), 3, 2)
    assert expected == tally(result)


def test_a_case_offering_no_tools_has_no_tool_checks() -> None:
    """Without tools offered a called name is not graded: the two standing checks only."""
    reply = Reply(text="", tool_calls=(call("anything"),))
    assert Grade(misses=(), checks=2, passed_checks=2) == grade(tool_case({}, ()), reply, NONE)


def test_tool_misses_follow_the_text_misses() -> None:
    """Text misses come first, then the tool keys' in their own order."""
    expect = {"must_include": ["sunny"], "no_tool_calls": True, "tool_args_schema": True}
    reply = Reply(text="ok", tool_calls=(call("get_weather", days="two"),))
    result = grade(tool_case(expect), reply, NONE)
    misses = (
        "missing:sunny",
        "tool_unexpected:get_weather",
        "tool_args_schema:get_weather:$",
        "tool_args_schema:get_weather:$.days",
    )
    expected = (misses, 6, 3)
    assert expected == tally(result)


def test_tool_keys_need_no_custom_grader_and_cost_a_custom_grader_no_check(
    suite: GraderSet,
) -> None:
    """The tool keys are built in: check_case accepts them, and a custom grader still counts
    one check per key that is neither a text nor a tool key."""
    check_case(tool_case({"no_tool_calls": True, "tool_args_schema": True}), NONE)
    expect = {"must_be_kind": True, "no_tool_calls": True}
    custom = Case(**{**_fields(tool_case(expect)), "id": "c1"})
    result = grade(custom, Reply(text="hi"), suite)
    expected = (("by_id",), 5, 4)
    assert expected == tally(result)


def tally(result: Grade) -> tuple[tuple[str, ...], int, int]:
    return (result.misses, result.checks, result.passed_checks)


def _fields(value: Case) -> dict[str, Any]:
    return {name: getattr(value, name) for name in value.__dataclass_fields__}


def test_a_run_whose_grader_runs_past_its_limit_is_incomplete_and_replays_the_same(
    tmp_path: Path,
) -> None:
    """In a run, the reply a custom grader could not grade in time is unscored: the case is
    incomplete (exit 2, listed under grader_errors), never a failed case, and a replay, which
    meets the same endless grader, says the same."""
    from relkit import run_parallax

    write_module(tmp_path, "slow.py", LOOPING)
    rows = [
        {"id": "slow", "prompt": "p", "expect": {"kind": 1}, "grader": "slow.py:forever"},
        {"id": "fine", "prompt": "q", "must_include": ["hi"]},
    ]
    (tmp_path / "f.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    replies = [{"case_id": r["id"], "completion": "hi"} for r in rows]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in replies), "utf-8")
    (tmp_path / "parallax.toml").write_text(
        'runs_dir = "runs"\nsnapshots_dir = "snapshots"\n'
        '[endpoints.ref]\nkind = "recorded"\ncassette = "c.jsonl"\n'
        '[endpoints.cand]\nkind = "recorded"\ncassette = "c.jsonl"\n'
        '[suites.s]\nfixtures = "f.jsonl"\nreference = "ref"\ncandidate = "cand"\n'
        "grader_timeout_seconds = 0.5\n",
        "utf-8",
    )
    done = run_parallax("run", "--config", "parallax.toml", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    (run_dir,) = tmp_path.glob("runs/s/*/")
    rows_out = [json.loads(line) for line in (run_dir / "outcomes.jsonl").read_text().splitlines()]
    slow = [r for r in rows_out if r["case_id"] == "slow"]
    assert [(r["schema"], r["task_score"], r["misses"]) for r in slow] == [
        ("ok", None, ["grader_error:timeout"])
    ] * 2
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["grader_errors"], summary["incomplete"]) == (["slow"], ["slow"])
    replay = run_parallax("replay", "--config", "parallax.toml", run_dir, cwd=tmp_path)
    assert replay.returncode == 2, replay.stderr
