"""`jsontext.loads` reads JSON as the stdlib does, whichever parser it picks."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner.jsontext import loads

NUMBERS = st.one_of(
    st.integers(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64, 10**19, -(10**18)]),
    st.floats(allow_nan=False),
)
TEXT = st.text(st.characters(codec="utf-16", exclude_categories=()))  # lone surrogates too
VALUES = st.recursive(
    st.none() | st.booleans() | NUMBERS | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)


def same(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down (1 == 1.0 would hide a float)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, float) and isinstance(b, float) and math.isinf(a):
        return a == b
    return type(a) is type(b) and a == b


@given(value=VALUES, ascii_only=st.booleans())
def test_loads_gives_the_stdlib_value_from_text_and_from_bytes(
    value: Any, ascii_only: bool
) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    expected = json.loads(text)
    assert same(loads(text), expected)
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate written as itself: text only
        return
    assert same(loads(data), expected)


@given(digits=st.integers(1, 40), sign=st.sampled_from(["", "-"]), pad=TEXT)
def test_a_long_integer_stays_exact_wherever_it_sits(digits: int, sign: str, pad: str) -> None:
    """19 digits and more may be beyond 64 bits: never read back as a float."""
    number = int(sign + "9" * digits)
    text = json.dumps({"pad": pad, "n": number}, ensure_ascii=False)
    assert same(loads(text), {"pad": pad, "n": number})


def test_text_nested_past_what_the_stdlib_can_read_is_a_value_error() -> None:
    """Every reader already handles ValueError as broken JSON; a RecursionError would escape."""
    deep = "[" * 100_000 + "]" * 100_000
    for raw in (deep, deep.encode()):
        with pytest.raises(ValueError, match="nested too deeply"):
            loads(raw)
