"""Text held for a whole run and shown to people: lone surrogates refused or scrubbed, repeated
strings shared, and what could disguise text shown as escapes (`visible`).

Lone UTF-16 surrogates: `"\\ud800"` is a valid JSON escape but not text.

Python's json decodes such an escape into a str that no UTF-8 file can hold, so one hostile
reply would stop the ledger writer mid-run. Replies are scrubbed as they are parsed (the raw
body keeps the original bytes, so nothing is lost); fixtures and cassettes are input a person
wrote, so there it is refused with its line instead.
"""

from __future__ import annotations

import re
import sys
from typing import Any, overload

_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
# Unicode's format characters (category Cf, as of Unicode 15): invisible, yet they change
# what text shows or how it compares. The Bidi_Control characters among them (U+061C,
# U+200E-U+200F, U+202A-U+202E, U+2066-U+2069) reorder what follows; the zero-width ones
# (U+200B-U+200D, U+2060, U+FEFF, the soft hyphen U+00AD) make two ids that look the same
# differ; tags (U+E0000-U+E007F) can spell hidden words. Spelled out here rather than built
# from unicodedata at import (a tenth of a second of every command's start); tests/test_text.py
# checks that it holds every Cf character this Python knows.
_FORMAT = (
    "\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f"
    "\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
    "\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001"
    "\U000e0020-\U000e007f"
)
_C0_C1 = "\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f"  # all but tab, newline, carriage return
_HIDDEN = re.compile(f"[{_FORMAT}{_C0_C1}]|\r(?!\n)")
_HIDDEN_ONE_LINE = re.compile(f"[{_FORMAT}{_C0_C1}\t\n\r]")
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
_SURROGATE = re.compile("[\ud800-\udfff]")


def may_hold_surrogates(text: str) -> bool:
    """Cheap pre-check on JSON text: without a surrogate escape no parsed str can hold one."""
    return _ESCAPE.search(text) is not None


def scrub(value: Any) -> Any:
    """The same JSON value with every lone surrogate replaced by U+FFFD.

    json pairs a valid high/low escape into one code point, so any surrogate left is lone.
    Walked with a stack, not recursion, so that how deep the caller's stack already is can
    never change how a reply is graded (a live run and its replay call from different depths).
    """
    if not isinstance(value, dict | list):
        return _fix(value)
    top: dict[Any, Any] | list[Any] = {} if isinstance(value, dict) else []
    stack: list[tuple[Any, dict[Any, Any] | list[Any]]] = [(value, top)]
    while stack:
        source, target = stack.pop()
        pairs = source.items() if isinstance(source, dict) else enumerate(source)
        for key, item in pairs:
            copy: Any
            if isinstance(item, dict | list):
                copy = {} if isinstance(item, dict) else []
                stack.append((item, copy))
            else:
                copy = _fix(item)
            if isinstance(target, dict):
                target[_fix(key)] = copy
            else:
                target.append(copy)
    return top


def _fix(value: Any) -> Any:
    return _SURROGATE.sub("\ufffd", value) if isinstance(value, str) else value


def holds_surrogate(value: Any) -> bool:
    """Whether any string (or key) in a JSON value holds a lone surrogate; walked with a stack."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item) is not None:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def visible(value: Any, *, one_line: bool = False) -> str:
    """Untrusted text as a reader can trust it: what could disguise it is shown as an escape.

    A bidi control reorders what follows it (`invoice\\u202egpj.exe` displays as
    `invoiceexe.jpg`; a reply can render reversed), a zero-width character or another
    format character (Unicode category Cf) is invisible (`a\\u200bb` looks like `ab`), and a
    NUL or another C0/C1 control is invisible, rewrites a terminal line or breaks the file it
    lands in. Each is replaced by its escape: `\\u202e` for a format character (`\\U000e0041` past
    U+FFFF, `\\xad` for the soft hyphen), `\\x00` for a control character, `\\r` for a
    carriage return not followed by a newline. Tab, newline and CRLF stay as they are, unless
    `one_line`: then they are `\\t`, `\\n`, `\\r` too, so a value can never start a line of
    its own (a summary line, an error message). Everything else, backslashes included, is
    left alone. The one function every human-facing output uses (report.html, report.md,
    JUnit, the CLI's stderr and `history`), so a template can use it as a filter.
    """
    text = "" if value is None else str(value)
    pattern = _HIDDEN_ONE_LINE if one_line else _HIDDEN
    return pattern.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


@overload
def shared(text: str) -> str: ...
@overload
def shared(text: None) -> None: ...
def shared(text: str | None) -> str | None:
    """One copy of a string many rows repeat (a model name, a stamp, an expectation key).

    str() first: stamps may be StrEnum members, which cannot be interned.
    """
    return None if text is None else sys.intern(str(text))
