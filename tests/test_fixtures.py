"""Specification of the fixture loader: accepted shapes, fixture_sha, pin output and errors."""

from __future__ import annotations

import functools
import json
import os
import random
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.errors import DataError, FixtureError, ParallaxError
from runner.fixtures import validate
from runner.fixtures.load import FixtureFile, load_cases, pin_lines
from runner.fixtures.pin import fixture_sha
from runner.fixtures.refs import CaseRef, CaseRefs, RefFields
from runner.grading.graders import GraderSet, check_case
from runner.model import Case, ToolCall

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

CITY_07 = (
    '{"case_id":"city-07","prompt":"Return a JSON object with city and country for the '
    'capital of France.","expect":{"city":"Paris","country":"France"}}'
)
CITY_09 = (
    '{"case_id":"city-09","prompt":"Return a JSON object with city and country for the '
    'capital of Japan.","expect":{"city":"Tokyo","country":"Japan"}}'
)


def write(tmp_path: Path, text: str | bytes, name: str = "cases.jsonl") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def fixture_error(path: Path) -> str:
    with pytest.raises(FixtureError) as info:
        load_cases(path)
    assert info.value.exit_code == 65
    return str(info.value)


# --- fixture_sha -------------------------------------------------------------------------


def test_seed_004_rows_hash_to_the_seed_pins() -> None:
    """Seed 004's two city rows hash exactly as the seed's own pin rule does."""
    expected = ["6c4336d172e6e214", "d8c8b2f09aaad00d"]
    assert expected == [fixture_sha(json.loads(CITY_07)), fixture_sha(json.loads(CITY_09))]


def test_fixture_sha_ignores_an_existing_pin() -> None:
    """A row's own fixture_sha, stale or not, does not enter its hash."""
    row = json.loads(CITY_07)
    assert fixture_sha(row) == fixture_sha({**row, "fixture_sha": "placeholder-hash"})


json_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)
rows = st.dictionaries(st.text(max_size=8), json_values, max_size=6)


@given(row=rows, seed=st.integers())
def test_fixture_sha_is_stable_under_key_order(row: dict[str, object], seed: int) -> None:
    """Reordering a row's keys never changes its fixture_sha."""
    keys = list(row)
    random.Random(seed).shuffle(keys)
    assert fixture_sha(row) == fixture_sha({key: row[key] for key in keys})


@given(row=rows, prompt=st.text(max_size=20), other=st.text(max_size=20))
def test_fixture_sha_moves_when_the_prompt_changes(
    row: dict[str, object], prompt: str, other: str
) -> None:
    """Editing a prompt changes the pin; keeping it does not."""
    before = fixture_sha({**row, "prompt": prompt})
    after = fixture_sha({**row, "prompt": other})
    assert (prompt == other) == (before == after)


# --- accepted shapes ---------------------------------------------------------------------


def test_canonical_row_loads_every_field(tmp_path: Path) -> None:
    """A canonical row becomes a Case with each optional field carried over."""
    row = {
        "id": "medium-sku-contract",
        "stratum": "medium",
        "prompt": "Name the SKU that ships.",
        "system": "Be brief.",
        "expect": {"must_include": ["SKU-9"], "max_chars": 160},
        "grader": "graders.py:grade_sku",
        "owner": "ops",
        "tags": ["sku", "contract"],
    }
    path = write(tmp_path, "\n" + json.dumps(row) + "\n")
    [case] = load_cases(path)
    expected = (
        "medium-sku-contract",
        "Name the SKU that ships.",
        {"must_include": ["SKU-9"], "max_chars": 160},
        fixture_sha(row),
        str(path),
        2,
        "medium",
        "Be brief.",
        "graders.py:grade_sku",
        None,
        "ops",
        ("sku", "contract"),
    )
    actual = (
        case.id,
        case.prompt,
        dict(case.expect),
        case.fixture_sha,
        case.path,
        case.line,
        case.stratum,
        case.system,
        case.grader,
        case.completion,
        case.owner,
        case.tags,
    )
    assert expected == actual


def test_seed_000_rows_normalise_top_level_checks_into_expect() -> None:
    """Seed 000's rows load unchanged, their checks moved into expect, completion kept."""
    cases = load_cases(FIXTURES / "ceiling.jsonl")
    expected = [
        ("easy-empty-guard", "easy", 1),
        ("easy-no-apology-loop", "easy", 2),
        ("medium-sku-contract", "medium", 3),
        ("medium-budget", "medium", 4),
        ("stretch-policy-cite", "stretch", 5),
        ("stretch-missing-field", "stretch", 6),
    ]
    assert expected == [(case.id, case.stratum, case.line) for case in cases]
    expected_first = (
        {"must_include": ["1842"], "must_not_include": ["as an AI"], "max_chars": 240},
        "Order 1842 ships two blue mugs to Denver tomorrow.",
    )
    assert expected_first == (dict(cases[0].expect), cases[0].completion)


def test_seed_000_hash_is_taken_before_normalisation() -> None:
    """A seed 000 case is pinned by the row as written, not by its normalised expect."""
    raw = (FIXTURES / "ceiling.jsonl").read_text(encoding="utf-8").splitlines()[0]
    assert fixture_sha(json.loads(raw)) == load_cases(FIXTURES / "ceiling.jsonl")[0].fixture_sha


def test_seed_001_document_loads_with_case_lines() -> None:
    """Seed 001's document loads both cases, custom keys intact, lines at each case object."""
    cases = load_cases(FIXTURES / "support.json")
    expected = [("refund.policy.v3", 4, None), ("tool.tracking.missing_carrier", 13, None)]
    assert expected == [(case.id, case.line, case.stratum) for case in cases]
    expected_expect = {
        "must_refuse_instant_refund": True,
        "must_cite_order_id": True,
        "max_sentences": 4,
    }
    assert expected_expect == dict(cases[0].expect)


def test_seed_004_rows_become_json_field_expectations() -> None:
    """Seed 004's case_id rows load with their flat expect under json_fields."""
    cases = load_cases(FIXTURES / "cities.jsonl")
    expected = [
        ("city-07", "6c4336d172e6e214", True),
        ("city-09", "d8c8b2f09aaad00d", True),
        ("city-11", "8e4f116f1a0ef848", True),
    ]
    assert expected == [(case.id, case.fixture_sha, case.expects_json) for case in cases]
    expected_expect = {"json_fields": {"city": "Paris", "country": "France"}}
    assert expected_expect == dict(cases[0].expect)


def test_a_stale_pin_in_the_file_is_recomputed(tmp_path: Path) -> None:
    """A pinned row whose fixture_sha is stale gets the hash of its content."""
    row = {**json.loads(CITY_07), "fixture_sha": "placeholder-hash"}
    [case] = load_cases(write(tmp_path, json.dumps(row) + "\n"))
    expected = "6c4336d172e6e214"
    assert expected == case.fixture_sha


def test_a_single_line_file_is_jsonl_not_a_document(tmp_path: Path) -> None:
    """A one-row JSONL file (its only line an object without cases) loads as one case."""
    [case] = load_cases(write(tmp_path, CITY_07))
    expected = ("city-07", 1)
    assert expected == (case.id, case.line)


def test_a_one_line_document_is_a_document(tmp_path: Path) -> None:
    """A document written on one line is still read as a document."""
    doc = {"version": 1, "cases": [{"id": "a", "prompt": "p"}, {"id": "b", "prompt": "q"}]}
    cases = load_cases(write(tmp_path, json.dumps(doc), "suite.json"))
    expected = [("a", 1), ("b", 1)]
    assert expected == [(case.id, case.line) for case in cases]


def test_document_line_points_at_the_case_not_at_quoted_json(tmp_path: Path) -> None:
    """A case's line is where its object starts, even if an earlier prompt quotes an id."""
    text = (
        '{"version": 2,\n'
        ' "cases": [\n'
        '  {"id": "a", "prompt": "say {\\"id\\": \\"b\\"}"},\n'
        "\n"
        '  {"id": "b",\n'
        '   "prompt": "q"}\n'
        " ]}\n"
    )
    cases = load_cases(write(tmp_path, text, "suite.json"))
    expected = [3, 5]
    assert expected == [case.line for case in cases]


def test_empty_file_has_no_cases(tmp_path: Path) -> None:
    """An empty (or blank) file is a suite with zero cases, not an error."""
    expected: list[Case] = []
    assert expected == load_cases(write(tmp_path, ""))
    assert expected == load_cases(write(tmp_path, "\n  \n", "blank.jsonl"))


def test_null_optional_fields_count_as_absent(tmp_path: Path) -> None:
    """JSON null for an optional field reads as if the key were absent."""
    row = {"id": "a", "prompt": "p", "stratum": None, "system": None, "completion": None}
    [case] = load_cases(write(tmp_path, json.dumps(row) + "\n"))
    expected = (None, None, None, {})
    assert expected == (case.stratum, case.system, case.completion, case.expect)


def test_unknown_expect_keys_are_left_for_grading(tmp_path: Path) -> None:
    """The loader keeps custom expect keys; only the suite's graders can judge them."""
    row = {"id": "a", "prompt": "p", "expect": {"must_sound_kind": True}}
    [case] = load_cases(write(tmp_path, json.dumps(row) + "\n"))
    expected = {"must_sound_kind": True}
    assert expected == dict(case.expect)


# --- pin ---------------------------------------------------------------------------------


def test_pin_prints_seed_004_format(tmp_path: Path) -> None:
    """pin prints each row with its fixture_sha, sorted keys and default separators."""
    path = write(tmp_path, CITY_07 + "\n\n" + CITY_09 + "\n")
    expected = [
        '{"case_id": "city-07", "expect": {"city": "Paris", "country": "France"}, '
        '"fixture_sha": "6c4336d172e6e214", "prompt": "Return a JSON object with city and '
        'country for the capital of France."}',
        '{"case_id": "city-09", "expect": {"city": "Tokyo", "country": "Japan"}, '
        '"fixture_sha": "d8c8b2f09aaad00d", "prompt": "Return a JSON object with city and '
        'country for the capital of Japan."}',
    ]
    assert expected == list(pin_lines(path))


def test_pinning_a_pinned_file_changes_nothing(tmp_path: Path) -> None:
    """Pinning is idempotent: a pinned file pins to itself."""
    first = list(pin_lines(FIXTURES / "cities.jsonl"))
    again = list(pin_lines(write(tmp_path, "\n".join(first) + "\n")))
    assert first == again


def test_pin_prints_every_case_of_a_document() -> None:
    """pin on a document prints one pinned line per case."""
    lines = list(pin_lines(FIXTURES / "support.json"))
    cases = load_cases(FIXTURES / "support.json")
    assert [case.fixture_sha for case in cases] == [json.loads(x)["fixture_sha"] for x in lines]


def test_pin_validates_before_printing(tmp_path: Path) -> None:
    """pin refuses a bad file before yielding any line."""
    path = write(tmp_path, CITY_07 + "\n" + "{broken\n")
    lines = pin_lines(path)
    with pytest.raises(FixtureError):
        next(lines)


# --- errors ------------------------------------------------------------------------------


def test_missing_file_is_a_data_error(tmp_path: Path) -> None:
    """A fixture path that does not exist is a DataError naming the file."""
    path = tmp_path / "nope.jsonl"
    with pytest.raises(DataError) as info:
        load_cases(path)
    assert f"{path}: no such file" == str(info.value)


def test_a_fifo_named_as_fixtures_is_refused_without_blocking(tmp_path: Path) -> None:
    """The reader asks the opened file what it is: a FIFO nobody writes to (swapped in after
    any check of the path) is a DataError at once, never a read that waits for a writer."""
    path = tmp_path / "cases.jsonl"
    os.mkfifo(path)
    with pytest.raises(DataError) as info:
        load_cases(path)
    assert f"{path}: not a regular file (a device, FIFO or socket)" == str(info.value)


def test_schema_refs_inside_the_schema_resolve(tmp_path: Path) -> None:
    """Refs to $defs, to a nested $id and to draft-07 definitions load: only a ref that names
    nothing is refused."""
    schemas = [
        {"$defs": {"x": {"type": "string"}}, "properties": {"a": {"$ref": "#/$defs/x"}}},
        {
            "$id": "https://example.test/root",
            "$defs": {"s": {"$id": "sub", "$defs": {"y": {}}, "items": {"$ref": "#/$defs/y"}}},
            "properties": {"a": {"$ref": "sub"}},
        },
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "definitions": {"d": {}},
            "properties": {"a": {"$ref": "#/definitions/d"}},
        },
    ]
    path = tmp_path / "cases.jsonl"
    rows = [
        {"id": f"c{i}", "prompt": "p", "expect": {"json_schema": schema}}
        for i, schema in enumerate(schemas)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    assert [case.id for case in load_cases(path)] == ["c0", "c1", "c2"]


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ('{"id": "a", "prompt": "p"}\n{"id": "b", "prompt": }\n', 2, "invalid JSON"),
        ('{"id": "a", "prompt": "p"}\n{"id": "b", "pro', 2, "truncated last line"),
        ('{"id": "a", "prompt": "p"}\n["a", "b"]\n', 2, "not a JSON object"),
        ('{"prompt": "p"}\n', 1, "missing 'id'"),
        ('{"id": "  ", "prompt": "p"}\n', 1, "'id' must be a non-empty string"),
        ('{"case_id": "", "prompt": "p", "expect": {}}\n', 1, "'case_id' must be a non-empty"),
        ('{"id": "a"}\n', 1, "missing 'prompt'"),
        ('{"id": "a", "prompt": 3}\n', 1, "'prompt' must be a string"),
        ('{"id": "a", "prompt": "p", "must_include": "x"}\n', 1, "'must_include' must be a list"),
        ('{"id": "a", "prompt": "p", "max_chars": 0}\n', 1, "'max_chars' must be a positive"),
        ('{"id": "a", "prompt": "p", "max_chars": true}\n', 1, "'max_chars' must be a positive"),
        ('{"id": "a", "prompt": "p", "expect": {"max_sentences": 2.5}}\n', 1, "'max_sentences'"),
        ('{"id": "a", "prompt": "p", "expect": {"regex": "("}}\n', 1, "invalid pattern '('"),
        ('{"id": "a", "prompt": "p", "expect": {"json_schema": {"type": 5}}}\n', 1, "JSON Schema"),
        (
            '{"id": "a", "prompt": "p"}\n'
            '{"id": "b", "prompt": "p", "expect": {"json_schema": {"$ref": "#/nope"}}}\n',
            2,
            "$ref that names nothing in the schema: '#/nope'",
        ),
        (
            '{"id": "a", "prompt": "p", "expect": {"json_schema": '
            '{"properties": {"x": {"$ref": "http://127.0.0.1:9/s.json"}}}}}\n',
            1,
            "$ref that names nothing in the schema: 'http://127.0.0.1:9/s.json'",
        ),
        (  # jsonschema would search these patterns with `re`, unbounded (`^(a+)+$`)
            '{"id": "a", "prompt": "p", "expect": {"json_schema": {"patternProperties": '
            '{"^(a+)+$": {}}, "unevaluatedProperties": false}}}\n',
            1,
            "pairs unevaluatedProperties with patternProperties",
        ),
        (
            '{"id": "a", "prompt": "p", "expect": {"json_schema": {"$ref": "#/$defs/k", '
            '"unevaluatedProperties": false, "$defs": {"k": {"patternProperties": {"x": {}}}}}}}\n',
            1,
            "use additionalProperties",
        ),
        *(
            (
                '{"id": "a", "prompt": "p", "expect": {"json_schema": ' + schema + "}}\n",
                1,
                "cannot check an answer",
            )
            for schema in (  # a ref that loops, or names no anchor: a traceback mid-run
                '{"$ref": "#"}',
                '{"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}}',
                '{"allOf": [{"$ref": "#/allOf/0"}]}',
                '{"$schema": "https://json-schema.org/draft/2019-09/schema", "$recursiveRef": "#"}',
            )
        ),
        (  # no anchor of that name anywhere in the schema: refused as a $ref naming nothing
            '{"id": "a", "prompt": "p", "expect": {"json_schema": {"$dynamicRef": "#meta"}}}\n',
            1,
            "has a $ref that names nothing in the schema: '#meta'",
        ),
        ('{"id": "a", "prompt": "p", "expect": []}\n', 1, "'expect' must be an object"),
        (
            '\n{"version": 1,\n "cases": [{"id": "a", "prompt": "p"}],\n "cases": []}\n',
            2,
            "duplicate key 'cases' in the document",
        ),
        ('{"id": "a", "prompt": "p", "tags": ["x", 1]}\n', 1, "'tags' must be a list of strings"),
        ('{"id": "a", "prompt": "p", "system": 1}\n', 1, "'system' must be a string"),
        ('{"id": "a", "prompt": "p", "stratum": "hard"}\n', 1, "unknown stratum 'hard'"),
        ('{"id": "a", "prompt": "p", "promt": "x"}\n', 1, "unknown key 'promt'"),
        ('{"id": "a", "case_id": "a", "prompt": "p"}\n', 1, "both 'id' and 'case_id'"),
        ('{"case_id": "a", "prompt": "p"}\n', 1, "missing 'expect'"),
        ('{"id": "a", "prompt": "p", "prompt": "q"}\n', 1, "duplicate key 'prompt'"),
        ('{"id": "a", "prompt": "p", "max_chars": NaN}\n', 1, "invalid JSON"),
        (
            '{"id": "a", "prompt": "p", "max_chars": 5, "expect": {}}\n',
            1,
            "'max_chars' at top level and an 'expect' object",
        ),
        (
            '{"id": "a", "prompt": "p"}\n\n{"id": "a", "prompt": "q"}\n',
            3,
            "duplicate id 'a' (first on line 1)",
        ),
    ],
)
def test_malformed_rows_name_file_and_line(
    tmp_path: Path, text: str, line: int, reason: str
) -> None:
    """Each malformed row is a FixtureError reading `path:line: reason`."""
    path = write(tmp_path, text)
    message = fixture_error(path)
    assert message.startswith(f"{path}:{line}: ")
    assert reason in message


def test_invalid_json_that_ends_with_a_newline_is_not_called_truncated(tmp_path: Path) -> None:
    """A bad last line that does end in a newline is plain invalid JSON."""
    message = fixture_error(write(tmp_path, '{"id": "a", "pro\n'))
    assert "truncated" not in message
    assert "invalid JSON" in message


def test_non_utf8_bytes_name_their_line(tmp_path: Path) -> None:
    """Bytes that are not UTF-8 are reported on the line they sit on."""
    path = write(tmp_path, b'{"id": "a", "prompt": "p"}\n{"id": "b", "prompt": "caf\xe9"}\n')
    message = fixture_error(path)
    assert message.startswith(f"{path}:2: not UTF-8")


def test_a_utf8_bom_is_tolerated(tmp_path: Path) -> None:
    """A leading UTF-8 byte-order mark, as some editors write, is not an error."""
    [case] = load_cases(write(tmp_path, b'\xef\xbb\xbf{"id": "a", "prompt": "p"}\n'))
    expected = "a"
    assert expected == case.id


def test_document_without_cases_list_is_an_error(tmp_path: Path) -> None:
    """A JSON document whose `cases` is missing or not a list is refused at its first line."""
    missing = write(tmp_path, '{\n  "version": 1\n}\n', "a.json")
    not_list = write(tmp_path, '{"version": 1, "cases": {"id": "a"}}', "b.json")
    assert f"{missing}:1: JSON document without a 'cases' list" == fixture_error(missing)
    assert f"{not_list}:1: JSON document without a 'cases' list" == fixture_error(not_list)


def test_document_case_errors_point_at_the_case(tmp_path: Path) -> None:
    """A bad case inside a document is reported at the line where that case starts."""
    text = '{"cases": [\n  {"id": "a", "prompt": "p"},\n  {"id": "a",\n   "prompt": "q"}\n]}\n'
    path = write(tmp_path, text, "suite.json")
    assert f"{path}:3: duplicate id 'a' (first on line 2)" == fixture_error(path)


def test_document_case_that_is_not_an_object_is_an_error(tmp_path: Path) -> None:
    """A document case that is not an object is refused at its own line."""
    path = write(tmp_path, '{"cases": [\n  {"id": "a", "prompt": "p"},\n  "b"\n]}\n', "s.json")
    assert f"{path}:3: case 1 is not a JSON object (got string)" == fixture_error(path)


def test_broken_document_is_reported_at_the_typo(tmp_path: Path) -> None:
    """A pretty-printed document with a syntax error names the line of the error."""
    text = (
        '{\n  "cases": [\n    {"id": "a", "prompt": "p"}\n    {"id": "b", "prompt": "q"}\n  ]\n}\n'
    )
    path = write(tmp_path, text, "suite.json")
    message = fixture_error(path)
    assert message.startswith(f"{path}:4: invalid JSON: Expecting ',' delimiter")


# --- FixtureFile: cases read back one at a time --------------------------------------------

ROWS = [
    {"id": "a", "prompt": "Café au lait, s'il vous plaît.", "expect": {"must_include": ["é"]}},
    {"id": "b", "stratum": "easy", "prompt": "日本語で答えて", "system": "short"},
    {"id": "c", "prompt": "plain ascii", "expect": {"max_chars": 40}},
    # every other accepted shape: read back through its own path, it must build the same case
    {"case_id": "d", "prompt": "as JSON", "stratum": "stretch", "expect": {"sku": "A-1"}},
    {"id": "e", "prompt": "seed 000", "must_include": ["y"], "max_chars": 9, "completion": "y"},
    {"id": "f", "prompt": "p", "tags": ["t1", "t2"], "owner": "qa", "grader": "g", "expect": {}},
]


@pytest.mark.parametrize(
    "layout",
    ["jsonl", "jsonl-bom-crlf", "document", "document-bom"],
)
def test_a_fixture_file_reads_back_each_case_as_loaded(tmp_path: Path, layout: str) -> None:
    """Every ref's byte span reads back the very case `load_cases` built, in any layout."""
    path = tmp_path / "cases.jsonl"
    if layout.startswith("document"):
        body = json.dumps({"cases": ROWS}, indent=2, ensure_ascii=False)
    else:
        newline = "\r\n" if layout.endswith("crlf") else "\n"
        body = "".join(json.dumps(r, ensure_ascii=False) + newline for r in ROWS)
    prefix = "\ufeff" if "bom" in layout else ""
    path.write_text(prefix + body, encoding="utf-8")
    fixtures = FixtureFile(path)
    built: list[Case] = []  # the cases as validation built them
    refs = fixtures.validate(built.append)
    assert built == [fixtures.load(ref) for ref in reversed(refs)][::-1]
    assert [r.line for r in refs] == [c.line for c in built]


def test_a_fixture_file_evicts_old_cases_and_reads_them_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ROWS))
    monkeypatch.setattr(FixtureFile, "KEEP", 1)
    fixtures = FixtureFile(path)
    refs = fixtures.validate()
    first = [fixtures.load(ref) for ref in refs]
    assert first == [fixtures.load(ref) for ref in refs] == load_cases(path)


def test_a_fixture_edited_during_the_run_is_a_data_error(tmp_path: Path) -> None:
    """A row that no longer reads as the validated case names the file and line (exit 65)."""
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ROWS))
    refs = FixtureFile(path).validate()
    path.write_text(path.read_text().replace("plain ascii", "plain ASCII"))
    with pytest.raises(DataError) as info:
        FixtureFile(path).load(refs[2])
    assert str(info.value).startswith(f"{path}:3: changed during the run")
    path.write_text("")
    with pytest.raises(DataError):
        FixtureFile(path).load(refs[0])


# --- validation in worker processes -------------------------------------------------------------

# Row kinds for files validated both ways; the first row of every file is case "c0".
TYPO = {"must_includ": []}  # an expectation key nothing grades: refused by `check_case`
WORKER_ROWS: dict[str, Callable[[int], str]] = {
    "ok": lambda i: json.dumps({"id": f"c{i}", "prompt": "p", "expect": {"must_include": ["x"]}}),
    "unicode": lambda i: json.dumps({"id": f"ü{i}", "prompt": "héllo ✓"}, ensure_ascii=False),
    "blank": lambda i: "  ",
    "bad_json": lambda i: f'{{"id": "b{i}", "prompt": ',
    "unknown_key": lambda i: json.dumps({"id": f"k{i}", "prompt": "p", "colour": 1}),
    "typo_expect": lambda i: json.dumps({"id": f"t{i}", "prompt": "p", "expect": TYPO}),
    "no_grader": lambda i: json.dumps({"id": f"g{i}", "prompt": "p", "grader": "whisper"}),
    "deep": lambda i: f'{{"id": "d{i}", "prompt": "p", "tags": {"[" * 130 + "]" * 130}}}',
    "surrogate": lambda i: f'{{"id": "s{i}", "prompt": "\\ud800"}}',
    "dup": lambda i: json.dumps({"id": "c0", "prompt": "again"}),
    "dup_typo": lambda i: json.dumps({"id": "c0", "prompt": "p", "expect": TYPO}),
}


def _validated(path: Path, *, chunk: int | None) -> tuple[str, Any]:
    """What validating `path` gives: its refs, or the error's class and line. `chunk` set:
    in two forked workers, that many lines a task."""
    check = functools.partial(check_case, graders=GraderSet.empty())
    pools: list[int] = []
    with pytest.MonkeyPatch.context() as patch:
        if chunk is not None:
            real = validate.ordered
            patch.setattr(validate, "PARALLEL_BYTES", 0)
            patch.setattr(validate, "CHUNK_LINES", chunk)
            patch.setattr(validate, "available", lambda: 2)
            patch.setattr(validate, "ordered", lambda *a: pools.append(1) or real(*a))
        try:
            result: tuple[str, Any] = ("refs", list(FixtureFile(path).validate(check)))
        except ParallaxError as exc:
            result = (type(exc).__name__, str(exc))
    assert pools == ([1] if chunk is not None else [])
    return result


@settings(max_examples=60)
@given(
    kinds=st.lists(st.sampled_from(sorted(WORKER_ROWS)), max_size=24),
    newline=st.sampled_from(["\n", "\r\n"]),
    bom=st.booleans(),
    torn=st.booleans(),
    chunk=st.integers(1, 5),
)
def test_validating_in_workers_gives_what_one_process_gives(
    kinds: list[str], newline: str, bom: bool, torn: bool, chunk: int
) -> None:
    """The same refs, or the same first error in file order: a duplicate id on an earlier
    line than a broken row, or on the very row a check refuses, is still the one reported."""
    lines = [WORKER_ROWS["ok"](0)] + [WORKER_ROWS[kind](i) for i, kind in enumerate(kinds, 1)]
    text = ("\ufeff" if bom else "") + newline.join(lines) + ("" if torn else newline)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "cases.jsonl"
        path.write_text(text, encoding="utf-8")
        one = _validated(path, chunk=None)
        assert _validated(path, chunk=chunk) == one
        if one[0] == "refs":
            assert not {"bad_json", "unknown_key", "typo_expect", "no_grader"} & set(kinds)
            fixtures_file = FixtureFile(path)
            assert [c.id for c in map(fixtures_file.load, one[1])] == [r.id for r in one[1]]
            fixtures_file.close()


def test_a_duplicate_id_is_reported_before_a_check_on_the_same_row(tmp_path: Path) -> None:
    """One process checks ids before expectation keys; a worker checks keys first, and the
    parent puts the duplicate back in front."""
    path = write(tmp_path, WORKER_ROWS["ok"](0) + "\n" + WORKER_ROWS["dup_typo"](1) + "\n")
    expected = f"{path}:2: duplicate id 'c0' (first on line 1)"
    assert _validated(path, chunk=None) == _validated(path, chunk=1) == ("FixtureError", expected)


REF_FIELDS = st.tuples(
    st.sampled_from(["a", "b", "c", "d", "é", "case-000001"]),
    st.sampled_from([None, "easy", "medium", "stretch"]),
    st.text("0123456789abcdef", min_size=16, max_size=16),
    st.integers(1, 2**40),
    st.integers(0, 2**62),
    st.integers(0, 2**62),
    st.binary(min_size=16, max_size=16),
)


@given(rows=st.lists(REF_FIELDS, max_size=12))
def test_case_refs_give_back_each_case_as_added(rows: list[RefFields]) -> None:
    """Columns in, the same refs out: by position, by id, in order; a second id is refused
    with the first one's line."""
    refs = CaseRefs()
    kept: dict[str, CaseRef] = {}
    for row in rows:
        first = refs.add(row)
        if row[0] in kept:
            assert first == kept[row[0]].line
        else:
            assert first is None
            kept[row[0]] = CaseRef(*row)
    assert list(refs) == list(kept.values())
    assert list(refs.ids) == list(kept)
    assert len(refs) == len(kept)
    assert list(refs[1:]) == list(kept.values())[1:]
    assert all(refs.get(case_id) == ref for case_id, ref in kept.items())
    assert refs.get("missing") is None
    refs.default_stratum("medium")
    assert list(refs) == [ref._replace(stratum=ref.stratum or "medium") for ref in kept.values()]


def test_an_error_found_stops_the_validating_workers_at_once(tmp_path: Path) -> None:
    """The first error ends the pool before it propagates, not when the traceback that holds
    the chunks still to come is finally let go."""
    import multiprocessing

    rows = [WORKER_ROWS["ok"](i) for i in range(40)]
    rows[2] = WORKER_ROWS["bad_json"](2)
    path = write(tmp_path, "\n".join(rows) + "\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(validate, "PARALLEL_BYTES", 0)
        patch.setattr(validate, "CHUNK_LINES", 1)
        patch.setattr(validate, "available", lambda: 2)
        with pytest.raises(FixtureError, match=":3: invalid JSON") as info:
            FixtureFile(path).validate()
    assert info.traceback  # the validation's frames are still held here
    assert multiprocessing.active_children() == []


# --- request keys: conversations, vars, tools, formats -------------------------------------

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}
CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 18}'},
]


def rows_file(tmp_path: Path, *rows: dict[str, Any], name: str = "cases.jsonl") -> Path:
    """A JSONL fixture of `rows`, one a line from line 1."""
    return write(tmp_path, "".join(json.dumps(row) + "\n" for row in rows), name)


def test_a_conversation_row_loads_with_every_request_key(tmp_path: Path) -> None:
    """`messages`, `vars`, `tools`, `tool_choice` and `response_format` reach the Case as
    written; a conversation has no prompt."""
    row = {
        "id": "weather",
        "messages": CONVERSATION,
        "vars": {"tone": "dry"},
        "tools": [WEATHER],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "expect": {"must_include": ["18"]},
    }
    (case,) = load_cases(rows_file(tmp_path, row))
    assert (case.prompt, case.messages) == (None, tuple(CONVERSATION))
    assert (case.vars, case.tools, case.tool_choice) == (
        {"tone": "dry"},
        (WEATHER,),
        row["tool_choice"],
    )
    assert (case.response_format, case.expects_json) == (None, False)
    assert case.fixture_sha == fixture_sha(row)


def test_a_prompt_row_defaults_every_request_key(tmp_path: Path) -> None:
    """A row without the new keys is the Case it always was: no tools, no vars, no format."""
    (case,) = load_cases(rows_file(tmp_path, {"id": "a", "prompt": "p"}))
    assert (case.prompt, case.messages, case.vars, case.tools) == ("p", None, {}, ())
    assert (case.tool_choice, case.response_format, case.completion_calls) == (None, None, ())


@pytest.mark.parametrize(
    "response_format",
    [
        {"type": "json_object"},
        {"type": "json_schema", "json_schema": {"name": "city", "schema": {"type": "object"}}},
        {
            "type": "json_schema",
            "json_schema": {"name": "c-1", "schema": {}, "strict": True, "description": "d"},
        },
    ],
)
def test_a_response_format_makes_the_case_expect_json(
    tmp_path: Path, response_format: dict[str, Any]
) -> None:
    """Either response_format type asks for a JSON answer, so the case expects one (a prose
    reply is the schema's `answer_not_json`), with no JSON expectation key of its own."""
    row = {"id": "a", "prompt": "p", "response_format": response_format}
    (case,) = load_cases(rows_file(tmp_path, row))
    assert (case.response_format, case.expects_json) == (response_format, True)


def test_a_tools_file_is_read_relative_to_the_fixture_file(tmp_path: Path) -> None:
    """`tools` naming a file reads it from the fixture's folder, once for every row naming it."""
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "tools.json").write_text(json.dumps([WEATHER]), encoding="utf-8")
    rows = [{"id": f"c{i}", "prompt": "p", "tools": "tools.json"} for i in range(2)]
    first, second = load_cases(rows_file(tmp_path / "suite", *rows))
    assert first.tools == (WEATHER,)
    assert first.tools is second.tools


def test_a_tools_file_pins_the_row_as_the_same_tools_written_inline(tmp_path: Path) -> None:
    """A row naming a tools file hashes as the row with the file's tools in place of the path,
    so moving tools into a file keeps the pin and editing the file moves it."""
    (tmp_path / "tools.json").write_text(json.dumps([WEATHER]), encoding="utf-8")
    path = rows_file(tmp_path, {"id": "a", "prompt": "p", "tools": "tools.json"})
    (case,) = load_cases(path)
    assert case.fixture_sha == fixture_sha({"id": "a", "prompt": "p", "tools": [WEATHER]})
    edited = {**WEATHER, "function": {**WEATHER["function"], "description": "Weather."}}
    (tmp_path / "tools.json").write_text(json.dumps([edited]), encoding="utf-8")
    (moved,) = load_cases(path)
    assert moved.fixture_sha == fixture_sha({"id": "a", "prompt": "p", "tools": [edited]})
    assert moved.fixture_sha != case.fixture_sha
    assert [json.loads(line)["tools"] for line in pin_lines(path)] == ["tools.json"]


def test_a_tools_file_changed_after_validating_in_workers_stops_the_run(tmp_path: Path) -> None:
    """Validated in worker processes, a tools file is read again where the case is used: a file
    that no longer pins the case as validated is `changed during the run`, never a
    silently different case."""
    (tmp_path / "tools.json").write_text(json.dumps([WEATHER]), encoding="utf-8")
    path = rows_file(
        tmp_path, *({"id": f"c{i}", "prompt": "p", "tools": "tools.json"} for i in range(3))
    )
    fixtures_file = FixtureFile(path)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(validate, "PARALLEL_BYTES", 0)
        patch.setattr(validate, "CHUNK_LINES", 1)
        patch.setattr(validate, "available", lambda: 2)
        refs = fixtures_file.validate()
    edited = {**WEATHER, "function": {**WEATHER["function"], "description": "Weather."}}
    (tmp_path / "tools.json").write_text(json.dumps([edited]), encoding="utf-8")
    try:
        with pytest.raises(DataError) as info:
            fixtures_file.load(refs[1])
    finally:
        fixtures_file.close()
    assert f"{path}:2: changed during the run: case 'c1': 'tools' file tools.json" in str(
        info.value
    )


def test_a_recorded_reply_may_carry_tool_calls(tmp_path: Path) -> None:
    """A row's top-level `tool_calls` is its recorded reply's calls (beside `completion`), read
    as graders see calls: arguments an object, the id optional."""
    row = {
        "id": "a",
        "prompt": "p",
        "tools": [WEATHER],
        "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "c1"}],
        "expect": {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
    }
    (case,) = load_cases(rows_file(tmp_path, row))
    assert case.completion_calls == (
        ToolCall(id="c1", name="get_weather", arguments={"city": "Paris"}),
    )
    assert case.expect["tool_calls"] == row["expect"]["tool_calls"]


def test_tool_expectation_keys_pass_the_suite_check(tmp_path: Path) -> None:
    """The tool keys are built in: a case using them needs no custom grader."""
    row = {
        "id": "a",
        "prompt": "p",
        "tools": [WEATHER],
        "expect": {"no_tool_calls": True, "tool_args_schema": True},
    }
    check = functools.partial(check_case, graders=GraderSet.empty())
    assert [case.id for case in load_cases(rows_file(tmp_path, row), check=check)] == ["a"]


def turns(*extra: dict[str, Any]) -> dict[str, Any]:
    """A conversation row of the standard turns and then `extra`."""
    return {"id": "b", "messages": [*CONVERSATION, *extra]}


def with_tools(**keys: Any) -> dict[str, Any]:
    return {"id": "b", "prompt": "p", "tools": [WEATHER], **keys}


BAD_REQUESTS: list[tuple[dict[str, Any], str]] = [
    ({"id": "b", "prompt": "p", "messages": CONVERSATION}, "both 'prompt' and 'messages'"),
    ({"id": "b"}, "missing 'prompt' (or 'messages', for a conversation)"),
    ({"id": "b", "messages": []}, "'messages' must be a non-empty list of turns"),
    ({"id": "b", "messages": "hi"}, "'messages' must be a non-empty list of turns"),
    ({"id": "b", "messages": ["hi"]}, "'messages'[0] must be an object, got string"),
    ({"id": "b", "messages": [{"role": "bot", "content": "x"}]}, "'messages'[0].role must be one"),
    ({"id": "b", "messages": [{"content": "x"}]}, "'messages'[0].role must be one of system"),
    (
        {"id": "b", "messages": [{"role": "user", "content": "x", "name": "ann"}]},
        "'messages'[0] has an unknown key 'name'",
    ),
    ({"id": "b", "messages": [{"role": "user"}]}, "'messages'[0] has no 'content'"),
    (
        {"id": "b", "messages": [{"role": "user", "content": 3}]},
        "content must be a string, got number",
    ),
    (
        {"id": "b", "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]},
        "lists of content parts are not accepted",
    ),
    ({"id": "b", "messages": [{"role": "user", "content": None}]}, "must be a string, got null"),
    (
        {"id": "b", "system": "s", "messages": [{"role": "user", "content": "x"}]},
        "'system' beside 'messages'",
    ),
    (
        {
            "id": "b",
            "messages": [{"role": "user", "content": "x"}, {"role": "system", "content": "s"}],
        },
        "'messages'[1] is a system turn after the first",
    ),
    (
        {
            "id": "b",
            "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}],
        },
        "'messages' must end with a user or tool turn",
    ),
    (
        {
            "id": "b",
            "messages": [{"role": "assistant", "content": None}, {"role": "user", "content": "x"}],
        },
        "'messages'[0].content must be a string, got null",
    ),
    (
        {"id": "b", "messages": [{"role": "user", "content": "x", "tool_calls": [CALL]}]},
        "'messages'[0] is a user turn: only an assistant turn has 'tool_calls'",
    ),
    (
        {"id": "b", "messages": [{"role": "user", "content": "x", "tool_call_id": "c"}]},
        "'messages'[0] is a user turn: only a tool turn has 'tool_call_id'",
    ),
    (
        turns({"role": "tool", "content": "again", "tool_call_id": "call_1"}),
        "'messages'[4].tool_call_id 'call_1' names no unanswered call",
    ),
    (turns({"role": "tool", "content": "x"}), "'messages'[4].tool_call_id must name the call"),
    (
        {
            "id": "b",
            "messages": [
                {"role": "user", "content": "x"},
                {"role": "tool", "content": "r", "tool_call_id": "call_9"},
            ],
        },
        "'messages'[1].tool_call_id 'call_9' names no unanswered call of the assistant turn",
    ),
    (
        {"id": "b", "messages": [*CONVERSATION[:3], {"role": "user", "content": "and?"}]},
        "'messages'[2] calls 'call_1', which no tool turn right after it answers",
    ),
    (
        {"id": "b", "messages": CONVERSATION[:3]},
        "'messages'[2] calls 'call_1', which no tool turn right after it answers",
    ),
    (
        turns(
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "content": "r", "tool_call_id": "call_1"},
        ),
        "'messages'[4].tool_calls[0].id 'call_1' is the id of an earlier call",
    ),
    (
        {
            "id": "b",
            "messages": [CONVERSATION[1], {"role": "assistant", "tool_calls": []}, CONVERSATION[1]],
        },
        "'messages'[1].tool_calls must be a non-empty list of calls",
    ),
    (
        {
            "id": "b",
            "messages": [
                CONVERSATION[1],
                {"role": "assistant", "tool_calls": [{"id": "c", "function": {}}]},
            ],
        },
        '\'messages\'[1].tool_calls[0] must be {"id", "type": "function", "function"}',
    ),
    (
        {
            "id": "b",
            "messages": [
                CONVERSATION[1],
                {"role": "assistant", "tool_calls": [{**CALL, "type": "code"}]},
            ],
        },
        "'messages'[1].tool_calls[0].type must be \"function\", got 'code'",
    ),
    (
        {
            "id": "b",
            "messages": [
                CONVERSATION[1],
                {
                    "role": "assistant",
                    "tool_calls": [
                        {**CALL, "function": {"name": "get weather", "arguments": "{}"}}
                    ],
                },
            ],
        },
        "'messages'[1].tool_calls[0].function.name must be 1-64 of A-Z a-z 0-9 _ -, got 'get w",
    ),
    (
        {
            "id": "b",
            "messages": [
                CONVERSATION[1],
                {
                    "role": "assistant",
                    "tool_calls": [
                        {**CALL, "function": {"name": "f", "arguments": {"city": "Paris"}}}
                    ],
                },
            ],
        },
        "'messages'[1].tool_calls[0].function.arguments must be a JSON object as a string",
    ),
    (
        {
            "id": "b",
            "messages": [
                CONVERSATION[1],
                {
                    "role": "assistant",
                    "tool_calls": [{**CALL, "function": {"name": "f", "arguments": "[1]"}}],
                },
            ],
        },
        "'messages'[1].tool_calls[0].function.arguments must be a JSON object as a string",
    ),
    ({"id": "b", "prompt": "p", "vars": ["x"]}, "'vars' must be an object of strings, got array"),
    ({"id": "b", "prompt": "p", "vars": {"n": 3}}, "'vars'['n'] must be a string, got number"),
    (
        {"id": "b", "prompt": "p", "tools": []},
        "'tools' must be a non-empty list of tools or the path of a JSON file of them, got an em",
    ),
    (
        {"id": "b", "prompt": "p", "tools": {"type": "function"}},
        "'tools' must be a non-empty list of tools or the path of a JSON file of them, got object",
    ),
    ({"id": "b", "prompt": "p", "tools": ""}, "got string"),
    (
        {"id": "b", "prompt": "p", "tools": [{"type": "function"}]},
        '\'tools\'[0] must be {"type": "function", "function": {...}}',
    ),
    (
        {"id": "b", "prompt": "p", "tools": [{**WEATHER, "type": "web"}]},
        "'tools'[0].type must be \"function\", got 'web'",
    ),
    (
        {"id": "b", "prompt": "p", "tools": [{"type": "function", "function": "f"}]},
        "'tools'[0].function must be an object, got string",
    ),
    (
        {
            "id": "b",
            "prompt": "p",
            "tools": [{"type": "function", "function": {"name": "f", "args": {}}}],
        },
        "'tools'[0].function has an unknown key 'args'",
    ),
    (
        {"id": "b", "prompt": "p", "tools": [{"type": "function", "function": {"name": "x" * 65}}]},
        "'tools'[0].function.name must be 1-64 of",
    ),
    (
        {
            "id": "b",
            "prompt": "p",
            "tools": [{"type": "function", "function": {"description": "d"}}],
        },
        "'tools'[0].function.name must be 1-64 of A-Z a-z 0-9 _ -, got null",
    ),
    (
        {"id": "b", "prompt": "p", "tools": [WEATHER, WEATHER]},
        "'tools'[1].function.name 'get_weather' is offered twice",
    ),
    (
        {
            "id": "b",
            "prompt": "p",
            "tools": [{"type": "function", "function": {"name": "f", "description": 1}}],
        },
        "'tools'[0].function.description must be a string",
    ),
    (
        {
            "id": "b",
            "prompt": "p",
            "tools": [{"type": "function", "function": {"name": "f", "strict": "yes"}}],
        },
        "'tools'[0].function.strict must be true or false",
    ),
    (
        {
            "id": "b",
            "prompt": "p",
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": 5}}}],
        },
        "'tools'[0].function.parameters is not a valid JSON Schema",
    ),
    (
        {
            "id": "b",
            "prompt": "p",
            "tools": [
                {"type": "function", "function": {"name": "f", "parameters": {"$ref": "#/nope"}}}
            ],
        },
        "'tools'[0].function.parameters has a $ref that names nothing",
    ),
    (
        {
            "id": "b",
            "prompt": "p",
            "tools": [
                {"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}
            ],
        },
        '\'tools\'[0].function.parameters must have "type": "object"',
    ),
    (
        {"id": "b", "prompt": "p", "tool_choice": "auto"},
        "'tool_choice' needs 'tools' to choose from",
    ),
    (
        with_tools(tool_choice="any"),
        "'tool_choice' must be one of auto, none, required or a function",
    ),
    (with_tools(tool_choice=None), "'tool_choice' must be one of auto, none, required or"),
    (
        with_tools(tool_choice={"type": "function", "name": "get_weather"}),
        '\'tool_choice\' must be one of auto, none, required or {"type": "function"',
    ),
    (
        with_tools(tool_choice={"type": "tool", "function": {"name": "get_weather"}}),
        '\'tool_choice\' must be {"type": "function", "function": {"name": ...}}',
    ),
    (
        with_tools(tool_choice={"type": "function", "function": {"name": "search"}}),
        "'tool_choice' names 'search', a tool the case does not offer",
    ),
    (
        {"id": "b", "prompt": "p", "response_format": "json"},
        "'response_format' must be an object, got string",
    ),
    (
        {"id": "b", "prompt": "p", "response_format": {"type": "text"}},
        "'response_format'.type must be json_object or json_schema, got 'text' (a text answer "
        "needs no response_format)",
    ),
    (
        {"id": "b", "prompt": "p", "response_format": {"type": "json_object", "strict": True}},
        "'response_format' of type json_object has no other key",
    ),
    (
        {"id": "b", "prompt": "p", "response_format": {"type": "json_schema", "schema": {}}},
        "'response_format' of type json_schema must be",
    ),
    (
        {
            "id": "b",
            "prompt": "p",
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "n", "schema": {}, "type": "object"},
            },
        },
        "'response_format'.json_schema has an unknown key 'type'",
    ),
    (
        {
            "id": "b",
            "prompt": "p",
            "response_format": {"type": "json_schema", "json_schema": {"schema": {}}},
        },
        "'response_format'.json_schema.name must be 1-64 of A-Z a-z 0-9 _ -, got null",
    ),
    (
        {
            "id": "b",
            "prompt": "p",
            "response_format": {"type": "json_schema", "json_schema": {"name": "n"}},
        },
        "'response_format'.json_schema needs a 'schema'",
    ),
    (
        {
            "id": "b",
            "prompt": "p",
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "n", "schema": {"type": 5}},
            },
        },
        "'response_format'.json_schema.schema is not a valid JSON Schema",
    ),
    (
        {
            "id": "b",
            "prompt": "p",
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "n", "schema": {}, "strict": 1},
            },
        },
        "'response_format'.json_schema.strict must be true or false",
    ),
    (
        {
            "id": "b",
            "prompt": "p",
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "n", "schema": {}, "description": 1},
            },
        },
        "'response_format'.json_schema.description must be a string",
    ),
    (
        {"id": "b", "prompt": "p", "tool_calls": {"name": "f"}},
        "'tool_calls' must be a list of recorded calls, got object",
    ),
    (
        {"id": "b", "prompt": "p", "tool_calls": ["f"]},
        "'tool_calls'[0] must be a {name, arguments} object, got string",
    ),
    (
        {"id": "b", "prompt": "p", "tool_calls": [{"name": "f", "args": {}}]},
        "'tool_calls'[0] has an unknown key 'args' (known: id, name, arguments)",
    ),
    (
        {"id": "b", "prompt": "p", "tool_calls": [{"name": ""}]},
        "'tool_calls'[0].name must be a non-empty string",
    ),
    (
        {"id": "b", "prompt": "p", "tool_calls": [{"name": "f", "arguments": "{}"}]},
        "'tool_calls'[0].arguments must be an object, got string",
    ),
    (
        {"id": "b", "prompt": "p", "tool_calls": [{"name": "f", "id": 1}]},
        "'tool_calls'[0].id must be a string, got number",
    ),
    (
        {"id": "b", "prompt": "p", "expect": {"tool_calls": [{"name": "get_weather"}]}},
        "expect.'tool_calls'[0] expects a call to 'get_weather', a tool the case does not offer",
    ),
    (with_tools(expect={"tool_calls": []}), "expect.'tool_calls' is empty"),
    (with_tools(expect={"no_tool_calls": "yes"}), "expect.'no_tool_calls' must be true or false"),
    (
        {"id": "b", "prompt": "p", "expect": {"tool_args_schema": True}},
        "expect.'tool_args_schema' needs the case to offer tools",
    ),
    (
        with_tools(tool_choice="none", expect={"tool_calls": [{"name": "get_weather"}]}),
        "expect.'tool_calls' with 'tool_choice' \"none\": the request forbids every call",
    ),
    (
        with_tools(tool_choice="required", expect={"no_tool_calls": True}),
        "expect.'no_tool_calls' with a 'tool_choice' that makes the model call a tool",
    ),
]


@pytest.mark.parametrize(("row", "reason"), BAD_REQUESTS)
def test_malformed_request_keys_name_file_line_and_key(
    tmp_path: Path, row: dict[str, Any], reason: str
) -> None:
    """Every refusal of a request key is `path:line: reason` naming the key (exit 65); the
    bad row sits on line 2, after a good one."""
    path = rows_file(tmp_path, {"id": "a", "prompt": "p"}, row)
    message = fixture_error(path)
    assert message.startswith(f"{path}:2: ")
    assert reason in message, message


def test_the_accepted_turn_shapes_load(tmp_path: Path) -> None:
    """An assistant turn may carry text and calls, or text alone; a call's arguments may be an
    empty object; several calls are answered in any order before the next turn."""
    second = {**CALL, "id": "call_2", "function": {"name": "get_time", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "Weather and time?"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [CALL, second]},
        {"role": "tool", "tool_call_id": "call_2", "content": "09:00"},
        {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
        {"role": "assistant", "content": "18C at 09:00."},
        {"role": "user", "content": ""},
    ]
    (case,) = load_cases(rows_file(tmp_path, {"id": "a", "messages": messages}))
    assert case.messages == tuple(messages)


TOOLS_FILE_ERRORS: list[tuple[str | bytes | None, str]] = [
    (None, "'tools' file tools.json: no such file"),
    (
        b'[\n  {"type": "function",\n   "function": {"name": "f",}}\n]\n',
        "'tools' file tools.json:3: invalid JSON: Expecting property name enclosed in double "
        "quotes (column 29)",
    ),
    (b"[\n\xff]", "'tools' file tools.json:2: not UTF-8: byte 0xff cannot be decoded"),
    ("[" * 130 + "]" * 130, "'tools' file tools.json:1: nested deeper than 128 levels"),
    (
        '[{"type": "function", "type": "function"}]',
        "'tools' file tools.json: duplicate key 'type' in one object",
    ),
    (
        '[{"type": "function", "function": {"name": "f", "x": NaN}}]',
        "'tools' file tools.json: invalid JSON: NaN is not valid JSON",
    ),
    (
        '[{"type": "function", "function": {"name": "\\ud800"}}]',
        "'tools' file tools.json: lone surrogate escape (\\ud800-\\udfff) is not text",
    ),
    ('{"tools": []}', "'tools' file tools.json: must be a non-empty list of tools, got object"),
    ("[]", "'tools' file tools.json: must be a non-empty list of tools, got an empty list"),
    (
        '[{"type": "function", "function": {"name": "a b"}}]',
        "'tools' file tools.json: [0].function.name must be 1-64 of A-Z a-z 0-9 _ -, got 'a b'",
    ),
]


@pytest.mark.parametrize(("content", "reason"), TOOLS_FILE_ERRORS)
def test_a_bad_tools_file_names_the_row_the_file_and_its_line(
    tmp_path: Path, content: str | bytes | None, reason: str
) -> None:
    """A tools file that is missing, no JSON or no list of tools is one line: the fixture's
    file and row, then the tools file and (for bad JSON) its own line."""
    if isinstance(content, bytes):
        (tmp_path / "tools.json").write_bytes(content)
    elif content is not None:
        (tmp_path / "tools.json").write_text(content, encoding="utf-8")
    path = rows_file(
        tmp_path, {"id": "a", "prompt": "p"}, {"id": "b", "prompt": "p", "tools": "tools.json"}
    )
    assert fixture_error(path) == f"{path}:2: {reason}"


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_a_tools_path_that_is_no_regular_file_is_refused(tmp_path: Path, kind: str) -> None:
    """A directory or a FIFO named as a tools file is refused at once, never read or waited on."""
    target = tmp_path / "tools.json"
    if kind == "directory":
        target.mkdir()
        problem = "a directory, not a file"
    else:
        os.mkfifo(target)
        problem = "not a regular file (a device, FIFO or socket)"
    path = rows_file(tmp_path, {"id": "a", "prompt": "p", "tools": "tools.json"})
    assert fixture_error(path) == f"{path}:1: 'tools' file tools.json: {problem}"


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A well-formed conversation: an optional system turn, then user turns, assistant text and
    assistant calls answered by tool turns in any order, ending on a user or tool turn."""
    turns: list[dict[str, Any]] = []
    if draw(st.booleans()):
        turns.append({"role": "system", "content": draw(st.text(max_size=5))})
    calls = 0
    for kind in draw(st.lists(st.sampled_from(["user", "text", "calls"]), min_size=1, max_size=6)):
        if kind == "user":
            turns.append({"role": "user", "content": draw(st.text(max_size=5))})
        elif kind == "text":
            turns.append({"role": "assistant", "content": draw(st.text(max_size=5))})
        else:
            ids = [f"call_{calls + n}" for n in range(draw(st.integers(1, 3)))]
            calls += len(ids)
            made = [
                {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}}
                for i in ids
            ]
            content = draw(st.sampled_from([None, "", "Checking."]))
            turns.append({"role": "assistant", "content": content, "tool_calls": made})
            for i in draw(st.permutations(ids)):
                turns.append({"role": "tool", "tool_call_id": i, "content": "r"})
    if turns[-1]["role"] not in ("user", "tool"):
        turns.append({"role": "user", "content": "and?"})
    return turns


@settings(max_examples=40, deadline=None)
@given(messages=conversations(), data=st.data())
def test_a_well_formed_conversation_loads_and_loses_no_tool_turn(
    messages: list[dict[str, Any]], data: st.DataObject
) -> None:
    """Any well-formed conversation loads as written; without one of its tool turns it is
    refused on its line, naming the assistant turn whose call went unanswered."""
    with tempfile.TemporaryDirectory() as folder:
        path = rows_file(Path(folder), {"id": "a", "messages": messages})
        (case,) = load_cases(path)
        assert case.messages == tuple(messages)
        tool_turns = [at for at, turn in enumerate(messages) if turn["role"] == "tool"]
        if tool_turns:
            dropped = data.draw(st.sampled_from(tool_turns))
            rest = messages[:dropped] + messages[dropped + 1 :]
            rows_file(Path(folder), {"id": "a", "messages": rest})
            message = fixture_error(path)
            assert message.startswith(f"{path}:1: 'messages'[")
            assert "which no tool turn right after it answers" in message


def test_the_readme_conversation_example_loads(tmp_path: Path) -> None:
    """The tool-call guide's conversation and its tools file load as written (one line)."""
    import re

    guide = FIXTURES.parent / "docs" / "how-to" / "tools-and-structured-output.md"
    readme = guide.read_text(encoding="utf-8")
    blocks = re.findall(r"```json\n(.*?)```", readme, re.DOTALL)
    (row,) = [block for block in blocks if '"weather-followup"' in block]
    (tools,) = [block for block in blocks if block.startswith('[{"type": "function"')]
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "weather.json").write_text(tools, encoding="utf-8")
    (case,) = load_cases(rows_file(tmp_path, json.loads(row)))
    assert (case.prompt, len(case.messages or ()), case.tools) == (
        None,
        5,
        tuple(json.loads(tools)),
    )


def test_no_tool_calls_goes_with_a_tool_choice_of_none(tmp_path: Path) -> None:
    """`tool_choice: "none"` forbids every call, which is what `no_tool_calls` expects: the
    case loads (only a choice that makes the model call a tool contradicts it)."""
    row = with_tools(tool_choice="none", expect={"no_tool_calls": True})
    (case,) = load_cases(rows_file(tmp_path, row))
    assert (case.tool_choice, case.expect["no_tool_calls"]) == ("none", True)
