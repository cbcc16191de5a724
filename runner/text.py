"""Text held for a whole run: lone surrogates refused or scrubbed, repeated strings shared.

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
_SURROGATE = re.compile("[\ud800-\udfff]")


def may_hold_surrogates(text: str) -> bool:
    """Cheap pre-check on JSON text: without a surrogate escape no parsed str can hold one."""
    return _ESCAPE.search(text) is not None


def scrub(value: Any) -> Any:
    """The same JSON value with every lone surrogate replaced by U+FFFD.

    json pairs a valid high/low escape into one code point, so any surrogate left is lone.
    """
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {scrub(k): scrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    return value


def holds_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return _SURROGATE.search(value) is not None
    if isinstance(value, dict):
        return any(holds_surrogate(k) or holds_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(holds_surrogate(v) for v in value)
    return False


@overload
def shared(text: str) -> str: ...
@overload
def shared(text: None) -> None: ...
def shared(text: str | None) -> str | None:
    """One copy of a string many rows repeat (a model name, a stamp, an expectation key).

    str() first: stamps may be StrEnum members, which cannot be interned.
    """
    return None if text is None else sys.intern(str(text))
