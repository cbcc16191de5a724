"""An httpx transport on aiohttp's connection pool: httpx's API, without its pool's cost.

httpx 0.28's pool walks every connection on every request, which at a few dozen connections
costs milliseconds of CPU per call (bench/RESULTS.md). `AiohttpTransport` keeps the httpx API
that `runner.client` is written against and lets aiohttp's C-parsed, LIFO keep-alive pool carry
the bytes.

Exception map: every aiohttp exception becomes the httpx exception a `httpx.AsyncHTTPTransport`
raises for the same socket event, in `map_aiohttp_exception` only, so `client.stamp.classify`
(the one place a stamp is decided) never sees an aiohttp class. Most specific first::

    ConnectionTimeoutError (connect, incl. waiting for a pooled connection) -> ConnectTimeout
    SocketTimeoutError, ServerTimeoutError, a bare TimeoutError            -> ReadTimeout
    ClientProxyConnectionError, ClientHttpProxyError                      -> ProxyError
    ClientConnectorError (refused, DNS, TLS, certificate), fingerprint     -> ConnectError
    ClientConnectionResetError, UploadAbortedError (request not sent)     -> WriteError
    ServerDisconnectedError (closed before a whole response)              -> RemoteProtocolError
    ClientPayloadError (body cut short: FIN or RST mid-body, bad chunks)  -> RemoteProtocolError
    ClientResponseError, HttpProcessingError (unparseable status/headers) -> RemoteProtocolError
    ClientOSError, ClientConnectionError, other OSError (reset, broken)   -> ReadError
    NonHttpUrlClientError                                                -> UnsupportedProtocol
    InvalidURL                                                           -> InvalidURL
    ValueError while writing the request (a newline in a header value)   -> LocalProtocolError
    any other ClientError                                                -> RemoteProtocolError

Never ConnectTimeout wholesale: a server that hangs up is `connection_lost`, not `timeout`.
Cancellation (anyio's deadline, a cancelled task group) passes through untouched.

A connect error's text is built here from the host, the port and the OS error
(`cannot connect to 127.0.0.1:8080: Connection refused`): aiohttp's own names `ssl:default`
for a plain http URL (and an SSLContext's address for https), which reads as a TLS problem and
differs per process.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx
from aiohttp import client_exceptions as ae
from aiohttp.http_exceptions import HttpProcessingError

__all__ = [
    "AIOHTTP_EXCEPTION_MAP",
    "AiohttpTransport",
    "httpx_class_for",
    "map_aiohttp_exception",
]

# (aiohttp or builtin class, httpx class): the first entry the exception is an instance of wins.
AIOHTTP_EXCEPTION_MAP: tuple[tuple[type[BaseException], type[Exception]], ...] = (
    (ae.ConnectionTimeoutError, httpx.ConnectTimeout),
    (ae.SocketTimeoutError, httpx.ReadTimeout),
    (ae.ServerTimeoutError, httpx.ReadTimeout),
    (ae.ClientProxyConnectionError, httpx.ProxyError),
    (ae.ClientHttpProxyError, httpx.ProxyError),
    (ae.ClientConnectorError, httpx.ConnectError),
    (ae.ServerFingerprintMismatch, httpx.ConnectError),
    (ae.ClientConnectionResetError, httpx.WriteError),
    (ae.UploadAbortedError, httpx.WriteError),
    (ae.ServerDisconnectedError, httpx.RemoteProtocolError),
    (ae.ClientPayloadError, httpx.RemoteProtocolError),
    (ae.ClientResponseError, httpx.RemoteProtocolError),
    (HttpProcessingError, httpx.RemoteProtocolError),
    (ae.NonHttpUrlClientError, httpx.UnsupportedProtocol),
    (ae.InvalidURL, httpx.InvalidURL),
    (ae.ClientOSError, httpx.ReadError),
    (ae.ClientConnectionError, httpx.ReadError),
    (ae.ClientError, httpx.RemoteProtocolError),
    (TimeoutError, httpx.ReadTimeout),
    (OSError, httpx.ReadError),
)


def httpx_class_for(exc_type: type[BaseException]) -> type[Exception] | None:
    """The httpx class an aiohttp (or OS) exception class becomes, or None if unmapped."""
    for source, target in AIOHTTP_EXCEPTION_MAP:
        if issubclass(exc_type, source):
            return target
    return None


def map_aiohttp_exception(exc: BaseException, request: httpx.Request) -> BaseException:
    """The httpx exception for an aiohttp one; anything unmapped is returned as it is.

    A plain ValueError is left unmapped here: only while a request is being written does it
    mean "aiohttp refuses what we would send", so `handle_async_request` maps that one itself.
    """
    target = httpx_class_for(type(exc))
    if target is None:
        return exc
    if isinstance(exc, ae.ClientConnectorError):
        message = _connect_message(exc)
    else:
        message = str(exc) or type(exc).__name__
    if issubclass(target, httpx.RequestError):
        return target(message, request=request)
    return target(message)  # httpx.InvalidURL carries no request


def _connect_message(exc: ae.ClientConnectorError) -> str:
    """`cannot connect to HOST:PORT: REASON`, in the words of whatever refused the connection.

    An OS errno is said as the OS says it (`Connection refused`; asyncio's own text only
    repeats the address), a resolver failure and a TLS failure as their library words them
    (a certificate error carries errno 1, which the OS would call `Operation not permitted`).
    """
    host = f"[{exc.host}]" if ":" in exc.host else exc.host
    cause: BaseException = getattr(exc, "certificate_error", None) or exc.os_error
    if isinstance(cause, ssl.SSLError | ssl.CertificateError):
        reason = str(cause)
    elif isinstance(cause, socket.gaierror):
        reason = cause.strerror or str(cause)
    elif isinstance(cause, OSError) and isinstance(cause.errno, int) and cause.errno > 0:
        reason = os.strerror(cause.errno)
    else:
        reason = str(cause) or type(cause).__name__
    return f"cannot connect to {host}:{exc.port}: {reason}"


class _Body(httpx.AsyncByteStream):
    """The response body as aiohttp delivers it; errors mapped, connection released on close."""

    __slots__ = ("_request", "_response")

    def __init__(self, response: aiohttp.ClientResponse, request: httpx.Request) -> None:
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        content = self._response.content
        try:
            while True:
                chunk = await content.readany()
                if not chunk:
                    return
                yield chunk
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            mapped = map_aiohttp_exception(exc, self._request)
            if mapped is exc:
                raise
            # Bytes that arrived before the connection broke are still the server's reply:
            # hand them over first, as httpx's own transport does, then the error.
            tail = _unread(content)
            self._response.release()  # a broken connection goes back to no pool
            if tail:
                yield tail
            raise mapped from exc

    async def aclose(self) -> None:
        self._response.release()


def _unread(content: aiohttp.StreamReader) -> bytes:
    """What aiohttp buffered but would not hand out once an exception was set on the stream."""
    buffer: Any = getattr(content, "_buffer", None)  # private, hence the getattr and the guard
    if not buffer:
        return b""
    data = b"".join(bytes(part) for part in buffer)
    buffer.clear()
    return data


async def _request_body(request: httpx.Request) -> bytes:
    """The request's body bytes. A body handed over whole (`httpx.ByteStream`, as
    `runner.client` builds every request) is joined as it is, without `aread`'s pass
    through an async iterator and the copy it stores on the request."""
    if hasattr(request, "_content"):
        return request.content
    if isinstance(request.stream, httpx.ByteStream):
        return b"".join(request.stream)
    return await request.aread()


def _header_pairs(headers: httpx.Headers) -> list[tuple[str, str]]:
    """`headers.multi_items()`, the same pairs: names lower-cased as bytes, decoded with the
    block's encoding. Nearly every block is ASCII, which is decoded straight away; httpx
    works its encoding out first (one decode of every header) and looks it up twice a
    header."""
    try:
        return [
            (name.lower().decode("ascii"), value.decode("ascii")) for name, value in headers.raw
        ]
    except UnicodeDecodeError:  # utf-8 or latin-1: httpx's own choice, as it sends them
        return headers.multi_items()


class AiohttpTransport(httpx.AsyncBaseTransport):
    """One aiohttp session per transport, opened in the running loop on first use.

    `limit` bounds open connections (the endpoint's concurrency); idle ones are kept for
    `keepalive_expiry` seconds. The per-phase timeouts come from each request's httpx
    extensions: connect (plus pool wait) -> ConnectTimeout, read -> ReadTimeout. aiohttp has no
    write timeout; the caller's per-attempt deadline bounds a stuck write.
    """

    def __init__(self, *, limit: int, keepalive_expiry: float = 30.0) -> None:
        self._limit = limit
        self._keepalive = keepalive_expiry
        self._session: aiohttp.ClientSession | None = None
        self._timeouts: dict[tuple[Any, ...], aiohttp.ClientTimeout] = {}
        self._ssl: ssl.SSLContext | None = None

    def _open(self) -> aiohttp.ClientSession:
        import urllib.request

        connector = aiohttp.TCPConnector(
            limit=self._limit,
            limit_per_host=0,
            keepalive_timeout=self._keepalive,
            ttl_dns_cache=300,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            cookie_jar=aiohttp.DummyCookieJar(),  # httpx owns cookies; we send none
            auto_decompress=False,  # httpx decodes, so DecodingError stays httpx's
            # HTTP(S)_PROXY / NO_PROXY honoured as httpx.AsyncClient did; aiohttp rereads them
            # (and ~/.netrc) on every request, so only when a proxy is configured at all
            trust_env=bool(urllib.request.getproxies()),
            raise_for_status=False,
            skip_auto_headers=("Accept-Encoding", "User-Agent", "Content-Type"),
        )
        return self._session

    def _tls(self) -> ssl.SSLContext:
        """The CA bundle httpx verifies against by default (certifi), built on the first https
        request: endpoints that verified over httpx's pool verify the same way here."""
        if self._ssl is None:
            import certifi

            self._ssl = ssl.create_default_context(cafile=certifi.where())
        return self._ssl

    def _timeout(self, request: httpx.Request) -> aiohttp.ClientTimeout:
        spec = request.extensions.get("timeout") or {}
        key = (spec.get("connect"), spec.get("read"), spec.get("pool"))
        found = self._timeouts.get(key)
        if found is None:
            connect, read, pool = key
            found = aiohttp.ClientTimeout(
                total=None,
                connect=(connect + pool) if connect is not None and pool is not None else None,
                sock_connect=connect,
                sock_read=read,
            )
            self._timeouts[key] = found
        return found

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        session = self._session if self._session is not None else self._open()
        body = await _request_body(request)
        try:
            response = await session.request(
                request.method,
                str(request.url),
                headers=_header_pairs(request.headers),
                data=body or None,
                allow_redirects=False,
                timeout=self._timeout(request),
                compress=None,
                chunked=None,
                ssl=self._tls() if request.url.scheme == "https" else True,
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            mapped = map_aiohttp_exception(exc, request)
            if mapped is exc and isinstance(exc, ValueError):
                raise httpx.LocalProtocolError(str(exc)) from exc
            if mapped is exc:
                raise
            raise mapped from exc
        return httpx.Response(
            status_code=response.status,
            headers=list(response.raw_headers),
            stream=_Body(response, request),
            request=request,
            extensions={
                "http_version": b"HTTP/1.1",
                "reason_phrase": (response.reason or "").encode("latin-1", "replace"),
            },
        )

    async def aclose(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()
