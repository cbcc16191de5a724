"""A reply's body read off the wire: size-capped, Content-Encoding undone layer by layer.

Kept apart from the attempt because it is what a hostile server aims at: a body is never
held, nor inflated, past `max_response_bytes`, however it is encoded or framed.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import AsyncIterable, AsyncIterator, Callable

import httpx


class _Inflated(Exception):
    """A Content-Encoding layer inflated past the size cap; ours, so no library can raise it."""


class _Layer:
    """One Content-Encoding layer, inflating no more than `limit` bytes in all.

    httpx's decoders inflate each chunk whole, so 18 KB of `gzip, gzip` grew to gigabytes
    before the size cap saw a byte. Like httpx, `deflate` is tried as zlib, then as raw
    deflate, and a damaged stream is a DecodingError (stamped connection_lost).
    """

    def __init__(self, encoding: str, limit: int) -> None:
        self._raw_fallback = encoding == "deflate"
        wbits = zlib.MAX_WBITS | 16 if encoding in ("gzip", "x-gzip") else zlib.MAX_WBITS
        self._zlib = zlib.decompressobj(wbits)
        self._left = limit
        self._fed = False

    def feed(self, data: bytes) -> bytes:
        self._fed = self._fed or bool(data)
        try:
            out = self._zlib.decompress(data, self._left + 1)
        except zlib.error as exc:
            if not self._raw_fallback:
                raise httpx.DecodingError(f"damaged Content-Encoding: {exc}") from None
            self._raw_fallback = False
            self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)
            return self.feed(data)
        self._raw_fallback = False
        return self._take(out)

    def flush(self) -> bytes:
        try:
            out = self._take(self._zlib.flush())
        except zlib.error as exc:
            raise httpx.DecodingError(f"damaged Content-Encoding: {exc}") from None
        if self._fed and not self._zlib.eof:  # the server's stream stopped mid-way
            raise httpx.DecodingError("Content-Encoding stream ends before its end marker")
        return out

    def _take(self, out: bytes) -> bytes:
        if len(out) > self._left:
            raise _Inflated
        self._left -= len(out)
        return out


_ENCODINGS = frozenset({"gzip", "x-gzip", "deflate"})  # httpx's own, without brotli or zstd


def _body_chunks(resp: httpx.Response, headers: dict[str, str], cap: int) -> AsyncIterator[bytes]:
    """The body as sent, Content-Encoding undone layer by layer, never inflating past `cap`.

    An identity body is read straight off the stream (httpx's decoder and chunker cost ~20 us
    a call for nothing); encodings httpx would not decode either pass through as they are.
    """
    raw = resp.stream if isinstance(resp.stream, httpx.AsyncByteStream) else resp.aiter_raw()
    encoding = headers.get("content-encoding")
    names = [e.strip().lower() for e in encoding.split(",")] if encoding else []
    layers = [_Layer(name, cap) for name in reversed(names) if name in _ENCODINGS]
    return _decoded(raw, layers) if layers else aiter(raw)


async def _decoded(raw: AsyncIterable[bytes], layers: list[_Layer]) -> AsyncIterator[bytes]:
    async for chunk in raw:
        data = chunk
        for layer in layers:
            data = layer.feed(data)
        if data:
            yield data
    tail = b""
    for layer in layers:
        tail = layer.feed(tail) + layer.flush()
    if tail:
        yield tail


async def close_body(resp: httpx.Response) -> None:
    """Close a response read by `read_body`: its stream straight away, as it was read (httpx's
    `aclose` wraps the same call in a context manager that only names the request in an
    error), which hands a kept-alive connection back to the pool."""
    if isinstance(resp.stream, httpx.AsyncByteStream):
        await resp.stream.aclose()
    else:
        await resp.aclose()


async def read_body(  # noqa: PLR0917 - the caller's buffers and clock, in reading order
    resp: httpx.Response,
    headers: dict[str, str],
    cap: int,
    buf: bytearray,
    arrivals: list[tuple[int, float]] | None = None,
    now: Callable[[], float] = time.monotonic,
) -> bool:
    """Read the body into `buf`, at most `cap` bytes: whether there was more than that.

    With `arrivals`, each piece read is noted there as it comes: (the bytes in `buf` after
    it, `now()`). The caller's list is kept however the read ends (an exception from here
    leaves it as far as the body came), which is how a stream that breaks off after its first
    token still says when that token arrived.
    """
    try:
        async for chunk in _body_chunks(resp, headers, cap):
            room = cap - len(buf)
            if len(chunk) > room:
                buf += chunk[:room]
                if arrivals is not None:
                    arrivals.append((len(buf), now()))
                return True
            buf += chunk
            if arrivals is not None:
                arrivals.append((len(buf), now()))
    except _Inflated:
        return True
    return False
