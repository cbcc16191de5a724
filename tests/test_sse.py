"""Specification of Server-Sent Events framing (WHATWG HTML, "Parsing an event stream")."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner.protocols.sse import Event, SSEBody, parse


def datas(body: SSEBody) -> list[str]:
    return [e.data for e in body.events]


@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"])
def test_every_line_ending_frames_the_same_events(end: str) -> None:
    """LF, CRLF and a lone CR each end a line; a blank line dispatches."""
    text = f"data: one{end}{end}data: two{end}{end}"
    assert parse(text) == SSEBody(events=(Event("one"), Event("two")), complete=True)


def test_line_endings_can_be_mixed_in_one_body() -> None:
    """A body may mix the three line endings; CRLF counts as one line end, not two."""
    body = parse("data: a\r\ndata: b\rdata: c\n\r\n")
    assert datas(body) == ["a\nb\nc"]


def test_data_lines_of_one_event_are_joined_with_a_line_feed() -> None:
    """Several `data` lines are one event's data, joined with LF, no trailing LF."""
    assert datas(parse('data: {"a":\ndata: 1}\n\n')) == ['{"a":\n1}']


def test_one_space_after_the_colon_is_stripped_and_no_more() -> None:
    """Only the first space after the colon goes; `data:x` needs none."""
    assert datas(parse("data:x\n\ndata:  two spaces\n\ndata: \n\n")) == ["x", " two spaces", ""]


def test_a_data_line_without_a_colon_is_an_empty_data_field() -> None:
    """A line naming only the field has an empty value: an event with data ""."""
    assert datas(parse("data\n\n")) == [""]


def test_comments_id_and_retry_are_read_past() -> None:
    """`:` lines are comments (keep-alives); `id` and `retry` carry no data."""
    text = ": keep-alive\nid: 7\nretry: 100\ndata: x\n: more\n\n"
    assert datas(parse(text)) == ["x"]


def test_the_event_field_names_the_event_and_resets_after_dispatch() -> None:
    """`event` sets the type of the event it is in; the next defaults to "message"."""
    body = parse("event: message_start\ndata: {}\n\ndata: {}\n\n")
    assert [e.event for e in body.events] == ["message_start", "message"]


def test_an_event_without_data_is_not_dispatched() -> None:
    """A blank line after only an `event` field dispatches nothing and resets the type."""
    body = parse("event: ping\n\ndata: x\n\n")
    assert body.events == (Event("x"),)


def test_unknown_fields_are_ignored() -> None:
    """A field the standard does not name is read past."""
    assert datas(parse("foo: bar\ndata: x\n\n")) == ["x"]


def test_a_leading_byte_order_mark_is_dropped_once() -> None:
    """One BOM at the start is not part of the first field name; a second one is."""
    assert datas(parse("\ufeffdata: x\n\n")) == ["x"]
    assert datas(parse("\ufeff\ufeffdata: x\n\n")) == []


def test_a_body_ending_without_a_blank_line_drops_its_last_event() -> None:
    """The last event is not dispatched without its blank line: the body ended mid-event."""
    assert parse("data: a\n\ndata: b\n") == SSEBody(events=(Event("a"),), complete=False)


def test_a_body_cut_inside_a_line_is_not_complete() -> None:
    """An unterminated last line is never read, even a comment."""
    assert parse("data: a\n\ndata: b") == SSEBody(events=(Event("a"),), complete=False)
    assert parse("data: a\n\n: ping").complete is False


def test_an_empty_body_and_trailing_comments_end_on_a_boundary() -> None:
    """No events is a complete body; a comment line after the last event is no open event."""
    assert parse("") == SSEBody(events=(), complete=True)
    assert parse("data: a\n\n: bye\n").complete is True


def test_a_carriage_return_at_the_very_end_ends_the_line() -> None:
    """A final CR is a whole line end: the body is complete."""
    assert parse("data: a\r\r") == SSEBody(events=(Event("a"),), complete=True)


def test_other_unicode_line_breaks_are_data() -> None:
    """Only CR and LF end lines: U+2028, form feed and NEL stay in the data."""
    assert datas(parse("data: a\u2028b\x0cc\x85d\n\n")) == ["a\u2028b\x0cc\x85d"]


@given(st.text())
def test_parse_never_raises_on_any_text(text: str) -> None:
    """Any text frames into some events and a flag, without raising."""
    body = parse(text)
    assert isinstance(body.complete, bool)
    assert all("\r" not in e.data for e in body.events)


@given(st.lists(st.text(alphabet=st.characters(exclude_characters="\r\n")), max_size=8))
def test_events_written_as_data_lines_read_back(values: list[str]) -> None:
    """Each value written as `data: value` plus a blank line reads back as that event."""
    text = "".join(f"data: {v}\n\n" for v in values)
    assert datas(parse(text)) == values


def test_large_bodies_frame_whole() -> None:
    """Half a million data lines are one event; a 4 MB unterminated line is an open event.

    (Framing that re-scanned its buffer per line would not finish within the test timeout.)
    """
    assert len(parse("data: x\n" * 500_000 + "\n").events[0].data) == 999_999
    assert parse("data: " + "x" * 4_000_000).complete is False


SSE_PIECES = st.sampled_from(
    ["data: a", "data:b", "data", "event: e", ": note", "id: 1", "x: y", "\n", "\n\n", "\ufeff"]
)


@given(st.lists(SSE_PIECES, max_size=12).map("".join))
def test_a_body_in_line_feeds_frames_as_the_same_body_in_crlf(text: str) -> None:
    """Bodies with no carriage return are split on line feeds alone; a body with one is read
    by the standard's three line ends: both give the same events, the same completeness,
    and each event's offset past the same line."""
    from runner.protocols.sse import dispatched

    crlf = text.replace("\n", "\r\n")
    assert parse(text) == parse(crlf)
    lf_offsets = [end for _, end in dispatched(text)]
    crlf_offsets = [end for _, end in dispatched(crlf)]
    assert crlf_offsets == [end + text[:end].count("\n") for end in lf_offsets]
