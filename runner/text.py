"""Lone UTF-16 surrogates: `"\\ud800"` is a valid JSON escape but not text.

Python's json decodes such an escape into a str that no UTF-8 file can hold, so one hostile
reply would stop the ledger writer mid-run. Replies are scrubbed as they are parsed (the raw
body keeps the original bytes, so nothing is lost); fixtures and cassettes are input a person
wrote, so there it is refused with its line instead.
"""

from __future__ import annotations

import re
from typing import Any

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
