"""What of a reply is recorded in runs/: allow-listed headers, the body as text.

An allow-list, so a response header nobody thought of never reaches a run directory; the
body is kept as UTF-8 text, or base64 when it is not, so raw.jsonl holds the bytes as sent.
"""

from __future__ import annotations

import base64

import httpx

from runner.client.retry import RETRY_AFTER_HEADERS
from runner.protocols import GATEWAY_MODEL_HEADERS

KEPT_HEADERS = frozenset(
    {
        "content-type",
        "content-length",
        *(name for pair in RETRY_AFTER_HEADERS for name in pair),
        *GATEWAY_MODEL_HEADERS,
        "date",
        "x-request-id",
        "request-id",
        "openai-model",
        "openai-processing-ms",
        "openai-version",
        "server",
    }
)


_KEPT_PREFIXES = ("x-ratelimit-", "anthropic-ratelimit-")


def plain_headers(headers: httpx.Headers) -> dict[str, str]:
    """Lower-cased name -> value, repeated headers joined with ", " as `httpx.Headers` does.

    Read once per response: each `httpx.Headers` lookup rescans and re-decodes every header.
    The raw pairs are decoded here as `multi_items` decodes them (the header block's encoding,
    names lower-cased as bytes), which looks the encoding up once, not twice a header.
    """
    try:  # nearly every header block is ASCII, which httpx would find by decoding it all
        return _joined(headers.raw, "ascii")
    except UnicodeDecodeError:
        return _joined(headers.raw, headers.encoding)


def _joined(raw: list[tuple[bytes, bytes]], encoding: str) -> dict[str, str]:
    plain: dict[str, str] = {}
    for raw_name, raw_value in raw:
        name, value = raw_name.lower().decode(encoding), raw_value.decode(encoding)
        plain[name] = f"{plain[name]}, {value}" if name in plain else value
    return plain


def kept_headers(headers: dict[str, str], kept: frozenset[str]) -> dict[str, str]:
    """Allow-list, not deny-list: a response header we never thought of stays out of runs/."""
    return {
        name: value
        for name, value in headers.items()
        if name in kept or name.startswith(_KEPT_PREFIXES)
    }


def body_text(raw: bytes) -> tuple[str, str]:
    try:
        return raw.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(raw).decode("ascii"), "base64"
