"""Specification of the JSONL ledgers: whole-line appends, and only a torn last line forgiven."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from runner.errors import DataError
from runner.jsontext import dumps
from runner.ledger import (
    LedgerWriter,
    read_json_map,
    read_jsonl,
    repair_tail,
    write_json,
    write_json_map,
)


def ledger(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "outcomes.jsonl"
    path.write_bytes(data)
    return path


def rows(path: Path, *, tolerate: bool = True) -> list[tuple[int, object]]:
    return list(read_jsonl(path, tolerate_torn_tail=tolerate))


# --- dumps ---------------------------------------------------------------------------------


def test_dumps_is_one_canonical_line() -> None:
    """Sorted keys, no spaces, non-ASCII kept as is, so a replay writes identical bytes."""
    expected = '{"a":[1,2],"b":"café"}'.encode()
    assert expected == dumps({"b": "café", "a": [1, 2]})


@pytest.mark.parametrize(
    "value",
    [
        {"usage": {"prompt_tokens": 10**30}},  # beyond 64 bits
        {"model": "served-\ud800"},  # a lone surrogate
        {"n": -(2**64), "s": "café \udfff"},
        {"n": -(2**63) - 1},  # 19 digits, just beyond 64 bits
    ],
)
def test_dumps_keeps_what_orjson_refuses_and_reads_it_back(tmp_path: Path, value: object) -> None:
    """Values orjson will not encode still make one valid line that reads back the same."""
    line = dumps(value)
    assert b"\n" not in line
    path = ledger(tmp_path, line + b"\n")
    assert [(1, value)] == rows(path)


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_no_ledger_row_holds_a_number_that_is_not_finite(bad: float) -> None:
    """`Infinity` and `NaN` are not JSON: a row writes one as null, on orjson's path and on
    the stdlib's (taken for an integer orjson cannot hold)."""
    for row in ({"x": bad}, {"x": [bad], "big": 10**30}):
        assert json.loads(dumps(row), parse_constant=pytest.fail)["x"] in (None, [None])


def test_a_record_with_a_number_that_is_not_finite_is_not_written(tmp_path: Path) -> None:
    """summary.json, manifest.json and snapshots are parallax's own figures: one that is not
    finite is a bug, refused naming where it sits, and the file on disk stays as it was."""
    path = tmp_path / "summary.json"
    write_json(path, {"ok": 1})
    with pytest.raises(ValueError, match=r"summary.json: \$.usage.sides\[1\].cost_usd is not a"):
        write_json(path, {"usage": {"sides": [{"cost_usd": 1.0}, {"cost_usd": math.inf}]}})
    assert json.loads(path.read_text()) == {"ok": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


# --- read_jsonl ----------------------------------------------------------------------------


def test_read_yields_line_numbers_and_skips_blank_lines(tmp_path: Path) -> None:
    """Blank lines are skipped but still counted, so numbers match an editor's."""
    path = ledger(tmp_path, b'{"a":1}\n\n  \n{"a":2}\n')
    expected = [(1, {"a": 1}), (4, {"a": 2})]
    assert expected == rows(path)


def test_a_torn_last_line_is_skipped_when_tolerated(tmp_path: Path) -> None:
    """A killed writer's half line at the end is dropped; the rows before it survive."""
    path = ledger(tmp_path, b'{"a":1}\n{"a":2}\n{"a":')
    expected = [(1, {"a": 1}), (2, {"a": 2})]
    assert expected == rows(path)


def test_a_torn_last_line_is_an_error_when_not_tolerated(tmp_path: Path) -> None:
    """Strict readers (cassettes, diff) report the torn line with its number."""
    path = ledger(tmp_path, b'{"a":1}\n{"a":')
    with pytest.raises(DataError) as info:
        rows(path, tolerate=False)
    assert f"{path}:2: truncated last line" == str(info.value)


def test_a_broken_line_before_the_end_is_an_error_even_when_tolerating(tmp_path: Path) -> None:
    """Only the last line may be torn: a bad line in the middle names its file and line."""
    path = ledger(tmp_path, b'{"a":1}\n{"a":\n{"a":3}\n')
    with pytest.raises(DataError) as info:
        rows(path)
    assert str(info.value).startswith(f"{path}:2: invalid JSON")
    expected = 65
    assert expected == info.value.exit_code


def test_a_bad_last_line_with_its_newline_is_not_torn(tmp_path: Path) -> None:
    """A complete (newline-terminated) bad line was written whole: it is an error."""
    path = ledger(tmp_path, b'{"a":1}\n{"a":\n')
    with pytest.raises(DataError) as info:
        rows(path)
    assert str(info.value).startswith(f"{path}:2: invalid JSON")


def test_an_unterminated_last_line_that_parses_is_kept(tmp_path: Path) -> None:
    """A last row missing only its newline is still a row."""
    path = ledger(tmp_path, b'{"a":1}\n{"a":2}')
    expected = [(1, {"a": 1}), (2, {"a": 2})]
    assert expected == rows(path, tolerate=False)


def test_a_line_that_is_not_utf8_is_an_error(tmp_path: Path) -> None:
    """A whole line with invalid UTF-8 is reported at its line."""
    path = ledger(tmp_path, b'{"a":1}\n{"a":"\xff"}\n')
    with pytest.raises(DataError) as info:
        rows(path)
    assert f"{path}:2: not UTF-8 at byte 6" == str(info.value)


def test_a_torn_last_line_cut_inside_a_multibyte_character_is_tolerated(tmp_path: Path) -> None:
    """A kill can land between the bytes of 'é'; that torn tail is dropped like any other."""
    whole = dumps({"a": "café"}) + b"\n"
    path = ledger(tmp_path, b'{"a":1}\n' + whole[: whole.index("é".encode()) + 1])
    expected = [(1, {"a": 1})]
    assert expected == rows(path)


def test_a_missing_ledger_is_a_data_error(tmp_path: Path) -> None:
    """Reading a ledger that does not exist names it."""
    path = tmp_path / "raw.jsonl"
    with pytest.raises(DataError) as info:
        rows(path)
    assert f"{path}: no such file" == str(info.value)


# --- repair_tail ---------------------------------------------------------------------------


def test_repair_cuts_a_torn_last_line(tmp_path: Path) -> None:
    """Everything after the last newline goes; True says a line was cut."""
    path = ledger(tmp_path, b'{"a":1}\n{"a":2}\n{"a":')
    assert repair_tail(path) is True
    expected = b'{"a":1}\n{"a":2}\n'
    assert expected == path.read_bytes()


def test_repair_leaves_a_clean_ledger_alone(tmp_path: Path) -> None:
    """A ledger ending in a newline is untouched, and False says so."""
    path = ledger(tmp_path, b'{"a":1}\n')
    assert repair_tail(path) is False
    expected = b'{"a":1}\n'
    assert expected == path.read_bytes()


def test_repair_of_a_missing_or_empty_ledger_is_a_no_op(tmp_path: Path) -> None:
    """Nothing to cut in a file that does not exist or is empty."""
    assert repair_tail(tmp_path / "absent.jsonl") is False
    assert repair_tail(ledger(tmp_path, b"")) is False
    assert not (tmp_path / "absent.jsonl").exists()


def test_repair_of_a_single_torn_line_empties_the_file(tmp_path: Path) -> None:
    """A ledger whose only line is torn becomes empty."""
    path = ledger(tmp_path, b'{"a":')
    assert repair_tail(path) is True
    expected = b""
    assert expected == path.read_bytes()


def test_repair_finds_the_newline_before_a_torn_line_longer_than_a_chunk(tmp_path: Path) -> None:
    """A torn line of many kilobytes is cut back to the previous newline."""
    path = ledger(tmp_path, b'{"a":1}\n' + b'{"a":"' + b"x" * 10_000)
    assert repair_tail(path) is True
    expected = b'{"a":1}\n'
    assert expected == path.read_bytes()


def test_repair_keeps_a_whole_last_row_that_lacks_only_its_newline(tmp_path: Path) -> None:
    """A row that parses is not torn: it stays, gets its newline, and nothing counts as cut,
    so a resume does not call that key again."""
    path = ledger(tmp_path, b'{"a":1}\n{"a":2}')
    assert repair_tail(path) is False
    expected = b'{"a":1}\n{"a":2}\n'
    assert expected == path.read_bytes()


@pytest.mark.parametrize("tail", [b'"a"', b"[1]", b'{"a":"\xc3', b"2"], ids=repr)
def test_repair_cuts_a_last_line_that_is_no_whole_row(tmp_path: Path, tail: bytes) -> None:
    """Only a JSON object is a row: any other complete value or torn UTF-8 is cut."""
    path = ledger(tmp_path, b'{"a":1}\n' + tail)
    assert repair_tail(path) is True
    assert path.read_bytes() == b'{"a":1}\n'


# --- LedgerWriter --------------------------------------------------------------------------


def test_writer_appends_whole_lines_visible_before_close(tmp_path: Path) -> None:
    """Each write is flushed: a reader sees every row of every batch before close."""
    path = tmp_path / "raw.jsonl"
    writer = LedgerWriter(path)
    writer.write([{"n": 1}, {"n": 2}])
    writer.write(iter([{"n": 3, "s": "é"}]))
    try:
        expected = [(1, {"n": 1}), (2, {"n": 2}), (3, {"n": 3, "s": "é"})]
        assert expected == rows(path, tolerate=False)
        assert path.read_bytes().endswith(b"\n")
    finally:
        writer.close()


def test_writer_appends_to_an_existing_ledger(tmp_path: Path) -> None:
    """Opening a ledger again appends after its rows, never truncating them."""
    path = ledger(tmp_path, b'{"n":1}\n')
    writer = LedgerWriter(path)
    writer.write([{"n": 2}])
    writer.close()
    expected = b'{"n":1}\n{"n":2}\n'
    assert expected == path.read_bytes()


def test_writer_repairs_a_torn_tail_before_appending(tmp_path: Path) -> None:
    """A resumed writer cuts the torn line first, so new rows never glue onto half a row."""
    path = ledger(tmp_path, b'{"n":1}\n{"n":')
    writer = LedgerWriter(path)
    writer.write([{"n": 2}])
    writer.close()
    expected = [(1, {"n": 1}), (2, {"n": 2})]
    assert expected == rows(path, tolerate=False)


def test_writer_close_is_idempotent(tmp_path: Path) -> None:
    """Closing twice is harmless and the rows stay."""
    path = tmp_path / "raw.jsonl"
    writer = LedgerWriter(path)
    writer.write([{"n": 1}])
    writer.close()
    writer.close()
    expected = b'{"n":1}\n'
    assert expected == path.read_bytes()


def test_write_json_writes_sorted_indented_json_and_no_temp_file(tmp_path: Path) -> None:
    """write_json replaces the file whole, with a trailing newline and no leftover temp."""
    path = tmp_path / "summary.json"
    path.write_text("old", encoding="utf-8")
    write_json(path, {"b": 1, "a": "é"})
    expected = '{\n  "a": "é",\n  "b": 1\n}\n'
    assert expected == path.read_text(encoding="utf-8")
    expected = {"a": "é", "b": 1}
    assert expected == json.loads(path.read_text(encoding="utf-8"))
    expected = ["summary.json"]
    assert expected == [p.name for p in tmp_path.iterdir()]


# --- write_json_map / read_json_map --------------------------------------------------------


ENTRIES = [(f"case-{i}", {"gate": "unchanged", "misses": [i, "café"]}) for i in range(4)]


def test_a_json_map_reads_back_one_entry_a_line(tmp_path: Path) -> None:
    """What write_json_map writes is one JSON document, and read_json_map streams its entries."""
    path = tmp_path / "disagreement.json"
    write_json_map(path, {"version": 1, "suite": "s"}, "cases", iter(ENTRIES))
    assert json.loads(path.read_text(encoding="utf-8"))["cases"] == dict(ENTRIES)
    assert list(read_json_map(path, "cases")) == ENTRIES


def test_a_reformatted_json_map_is_read_whole(tmp_path: Path) -> None:
    """A map someone pretty-printed by hand still reads, in id order."""
    path = tmp_path / "disagreement.json"
    path.write_text(json.dumps({"cases": dict(reversed(ENTRIES)), "version": 1}, indent=2))
    assert list(read_json_map(path, "cases")) == ENTRIES


@pytest.mark.parametrize(
    ("cut", "reason"),
    [
        (lambda text: text[: text.rindex("}}")], "truncated"),
        (lambda text: text.replace('"case-2":{', '"case-2":{{', 1), "not one 'cases' entry"),
    ],
)
def test_a_broken_json_map_names_file_and_line(tmp_path: Path, cut: Any, reason: str) -> None:
    path = tmp_path / "disagreement.json"
    write_json_map(path, {"version": 1}, "cases", iter(ENTRIES))
    path.write_text(cut(path.read_text(encoding="utf-8")), encoding="utf-8")
    with pytest.raises(DataError) as info:
        list(read_json_map(path, "cases"))
    assert reason in str(info.value)
    assert str(info.value).startswith(f"{path}:")
