"""`visible`: untrusted text shown so that nothing in it can disguise it."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner.text import visible

BIDI = [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
CONTROLS = [c for c in [*range(0x20), *range(0x7F, 0xA0)] if chr(c) not in "\t\n\r"]
# every format character this Python's Unicode database knows: zero-width ones, bidi
# controls, the BOM, the soft hyphen, tags
FORMAT = [c for c in range(0x110000) if unicodedata.category(chr(c)) == "Cf"]


def test_the_bidi_controls_are_exactly_unicodes_bidi_control_set() -> None:
    """Every character Unicode marks Bidi_Control (they are the ones of class LRE ... PDI, LRM,
    RLM, ALM) is in the list escaped, and nothing else of those classes is needed."""
    classes = {"LRE", "RLE", "PDF", "LRO", "RLO", "LRI", "RLI", "FSI", "PDI"}
    found = {c for c in range(0x110000) if unicodedata.bidirectional(chr(c)) in classes}
    assert found | {0x061C, 0x200E, 0x200F} == set(BIDI)


def test_a_right_to_left_override_in_a_case_id_is_shown_as_its_escape() -> None:
    """`invoice<RLO>gpj.exe` would display as `invoiceexe.jpg`; shown, it reads as it is."""
    assert visible("invoice\u202egpj.exe") == "invoice\\u202egpj.exe"


@pytest.mark.parametrize("code", BIDI)
def test_every_bidi_control_is_escaped(code: int) -> None:
    """Each bidi control becomes \\uXXXX, in either mode."""
    expected = f"a\\u{code:04x}b"
    assert (visible(f"a{chr(code)}b"), visible(f"a{chr(code)}b", one_line=True)) == (
        expected,
        expected,
    )


@pytest.mark.parametrize("code", CONTROLS)
def test_every_c0_and_c1_control_but_tab_newline_and_cr_is_escaped(code: int) -> None:
    """NUL, ESC, DEL, the C1 block: each becomes \\xNN, in either mode."""
    expected = f"a\\x{code:02x}b"
    assert (visible(f"a{chr(code)}b"), visible(f"a{chr(code)}b", one_line=True)) == (
        expected,
        expected,
    )


@pytest.mark.parametrize("code", FORMAT, ids=[f"U+{c:04X}" for c in FORMAT])
def test_every_format_character_is_escaped(code: int) -> None:
    """A zero-width space, joiner or non-joiner, a word joiner, a BOM, a tag (Unicode category
    Cf): invisible, so two case ids that differ by one look the same; each is shown as its
    escape, in either mode."""
    if code < 0x100:
        escape = f"\\x{code:02x}"
    else:
        escape = f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
    expected = f"a{escape}b"
    assert (visible(f"a{chr(code)}b"), visible(f"a{chr(code)}b", one_line=True)) == (
        expected,
        expected,
    )


def test_two_ids_that_differ_by_a_zero_width_space_read_apart() -> None:
    """`refund` and `ref<U+200B>und` look alike on a page; shown, they do not."""
    assert (visible("refund"), visible("ref\u200bund")) == ("refund", "ref\\u200bund")


def test_tab_newline_and_crlf_stay_in_text_and_a_lone_cr_is_escaped() -> None:
    """A body keeps its lines; a carriage return that could rewrite a line is shown."""
    assert visible("a\tb\r\nc\nd\re") == "a\tb\r\nc\nd\\re"


def test_one_line_escapes_tab_newline_and_cr_too() -> None:
    """A value in a one-line context (an id in the summary) can never start a line."""
    assert visible("a\tb\r\nc\n  run dir: /etc", one_line=True) == (
        "a\\tb\\r\\nc\\n  run dir: /etc"
    )


def test_ordinary_text_is_left_alone() -> None:
    """Accents, CJK, emoji, backslashes and markup are not this function's business."""
    text = "café 漢字 😀 C:\\path\\x00 <b>&amp;</b> עברית"
    assert visible(text) == text
    assert visible(None) == ""
    assert visible(42) == "42"


@given(st.text(), st.booleans())
def test_no_hidden_character_survives(text: str, one_line: bool) -> None:
    """Whatever the input, the output holds no format character (bidi controls among them)
    and no control character other than tab, newline and the CR of a CRLF (none of those
    either in one-line mode)."""
    shown = visible(text, one_line=one_line)
    kept = "" if one_line else "\t\n"
    for i, char in enumerate(shown):
        code = ord(char)
        assert code not in BIDI and unicodedata.category(char) != "Cf", (text, shown)
        if code in CONTROLS or char in "\t\n\r":
            assert char in kept or (
                char == "\r" and not one_line and shown[i + 1 : i + 2] == "\n"
            ), (text, shown)


@given(st.text(), st.booleans())
def test_visible_is_idempotent(text: str, one_line: bool) -> None:
    """Escaping twice changes nothing more: a template filter may meet text already shown."""
    once = visible(text, one_line=one_line)
    assert visible(once, one_line=one_line) == once
