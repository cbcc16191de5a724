"""The aiohttp-backed httpx transport: every aiohttp exception mapped, real faults stamped right."""

from __future__ import annotations

import inspect
import random
import socket
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import anyio
import httpx
import pytest
from aiohttp import client_exceptions, http_exceptions
from faultserver import FaultServer
from hypothesis import given
from hypothesis import strategies as st

from runner.client.endpoint import HttpEndpoint
from runner.client.stamp import CONFIG_ERRORS, classify
from runner.client.transport import (
    AIOHTTP_EXCEPTION_MAP,
    AiohttpTransport,
    _header_pairs,
    _request_body,
    httpx_class_for,
    map_aiohttp_exception,
)
from runner.config import EndpointConfig, RetryPolicy, Timeouts
from runner.errors import ConfigError
from runner.model import Case, Exchange, Transport

CONFIG = "config"  # a request that could never be sent: ConfigError, exit 78
NOT_HTTP = "not raised by an HTTP request"

# What each aiohttp exception class means for a call. A class aiohttp adds in a later release
# fails `test_every_aiohttp_exception_is_mapped` until it is given a line here.
EXPECTED: dict[str, tuple[type[Exception] | None, str]] = {
    "ConnectionTimeoutError": (httpx.ConnectTimeout, Transport.TIMEOUT),
    "SocketTimeoutError": (httpx.ReadTimeout, Transport.TIMEOUT),
    "ServerTimeoutError": (httpx.ReadTimeout, Transport.TIMEOUT),
    "ClientProxyConnectionError": (httpx.ProxyError, Transport.CONNECT_ERROR),
    "ClientHttpProxyError": (httpx.ProxyError, Transport.CONNECT_ERROR),
    "ClientConnectorError": (httpx.ConnectError, Transport.CONNECT_ERROR),
    "ClientConnectorDNSError": (httpx.ConnectError, Transport.CONNECT_ERROR),
    "ClientSSLError": (httpx.ConnectError, Transport.CONNECT_ERROR),
    "ClientConnectorSSLError": (httpx.ConnectError, Transport.CONNECT_ERROR),
    "ClientConnectorCertificateError": (httpx.ConnectError, Transport.CONNECT_ERROR),
    "ServerFingerprintMismatch": (httpx.ConnectError, Transport.CONNECT_ERROR),
    "ClientConnectionResetError": (httpx.WriteError, Transport.CONNECTION_LOST),
    "UploadAbortedError": (httpx.WriteError, Transport.CONNECTION_LOST),
    "ServerDisconnectedError": (httpx.RemoteProtocolError, Transport.CONNECTION_LOST),
    "ClientPayloadError": (httpx.RemoteProtocolError, Transport.CONNECTION_LOST),
    "ClientResponseError": (httpx.RemoteProtocolError, Transport.CONNECTION_LOST),
    "ContentTypeError": (httpx.RemoteProtocolError, Transport.CONNECTION_LOST),
    "WSServerHandshakeError": (httpx.RemoteProtocolError, Transport.CONNECTION_LOST),
    "ClientOSError": (httpx.ReadError, Transport.CONNECTION_LOST),
    "ClientConnectionError": (httpx.ReadError, Transport.CONNECTION_LOST),
    "ServerConnectionError": (httpx.ReadError, Transport.CONNECTION_LOST),
    "ClientError": (httpx.RemoteProtocolError, Transport.CONNECTION_LOST),
    "RedirectClientError": (httpx.RemoteProtocolError, Transport.CONNECTION_LOST),
    "InvalidURL": (httpx.InvalidURL, CONFIG),
    "InvalidUrlClientError": (httpx.InvalidURL, CONFIG),
    "InvalidUrlRedirectClientError": (httpx.InvalidURL, CONFIG),
    "NonHttpUrlClientError": (httpx.UnsupportedProtocol, CONFIG),
    "NonHttpUrlRedirectClientError": (httpx.UnsupportedProtocol, CONFIG),
    "WSMessageTypeError": (None, NOT_HTTP),  # a TypeError of the websocket API
}

KEY = "sk-test-transport-0123456789"
CASE = Case(id="t", prompt="Name the SKU.", expect={}, fixture_sha="a" * 16, path="x", line=1)
ONE_TRY = RetryPolicy(attempts=1, backoff_base=0, backoff_max=0, jitter=0, retry_after_cap=0)


def _stamp_of(cls: type[Exception]) -> str:
    try:
        return classify(cls.__new__(cls), None)
    except ValueError:
        return CONFIG


def test_every_aiohttp_exception_is_mapped() -> None:
    """Each class aiohttp's client exports maps to the httpx class and stamp listed above."""
    exported = {
        name: getattr(client_exceptions, name)
        for name in client_exceptions.__all__
        if inspect.isclass(getattr(client_exceptions, name))
    }
    assert len(exported) >= 29
    assert set(exported) == set(EXPECTED)
    for name, cls in exported.items():
        target, stamp = EXPECTED[name]
        assert httpx_class_for(cls) is target, name
        if target is not None:
            assert _stamp_of(target) == stamp, name
            if stamp == CONFIG:
                assert target in CONFIG_ERRORS, name


def test_server_hang_ups_are_never_timeouts() -> None:
    """httpx-aiohttp's mistake stays out: a closed or reset connection is not a timeout."""
    for cls in (
        client_exceptions.ServerDisconnectedError,
        client_exceptions.ClientPayloadError,
        client_exceptions.ClientOSError,
        client_exceptions.ClientConnectionError,
        client_exceptions.ClientConnectionResetError,
    ):
        target = httpx_class_for(cls)
        assert target is not None
        assert not issubclass(target, httpx.TimeoutException), cls.__name__
        assert _stamp_of(target) == Transport.CONNECTION_LOST


def test_http_parser_errors_are_protocol_errors() -> None:
    """Every HttpProcessingError (bad status line, bad chunk, short body) is a protocol error."""
    classes = [
        obj
        for obj in vars(http_exceptions).values()
        if inspect.isclass(obj) and issubclass(obj, http_exceptions.HttpProcessingError)
    ]
    assert len(classes) >= 8
    for cls in classes:
        assert httpx_class_for(cls) is httpx.RemoteProtocolError, cls.__name__


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (TimeoutError(), httpx.ReadTimeout),
        (ConnectionResetError(104, "reset"), httpx.ReadError),
        (BrokenPipeError(32, "pipe"), httpx.ReadError),
    ],
)
def test_builtin_socket_errors_are_mapped(exc: Exception, expected: type[Exception]) -> None:
    """A bare OS error or timeout escaping aiohttp still gets an httpx class, with the request."""
    request = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    mapped = map_aiohttp_exception(exc, request)
    assert type(mapped) is expected
    assert isinstance(mapped, httpx.RequestError)
    assert mapped.request is request


def test_unmapped_exceptions_pass_through() -> None:
    """Anything outside the map (a bug in our code) is returned unchanged, never disguised."""
    request = httpx.Request("POST", "http://127.0.0.1:9/")
    bug = KeyError("x")
    assert map_aiohttp_exception(bug, request) is bug
    assert all(issubclass(target, Exception) for _, target in AIOHTTP_EXCEPTION_MAP)


# -- the transport against real sockets ------------------------------------------------------


async def _send(transport: AiohttpTransport, url: str, **kw: Any) -> httpx.Response:
    request = httpx.Request(
        "POST",
        url,
        content=b'{"messages": [{"role": "user", "content": "hi"}]}',
        extensions={"timeout": httpx.Timeout(1.0).as_dict()},
        **kw,
    )
    response = await transport.handle_async_request(request)
    try:
        await response.aread()
    finally:
        await response.aclose()
    return response


@pytest.mark.anyio
async def test_keep_alive_and_body_through_httpx(fault_server: FaultServer) -> None:
    """Replies come back as httpx Responses with status, headers and the whole body."""
    transport = AiohttpTransport(limit=2)
    try:
        with anyio.fail_after(5):
            for _ in range(3):
                response = await _send(transport, fault_server.url("ok") + "/chat/completions")
                assert response.status_code == 200
                assert response.headers["x-request-id"] == "req-fault"
                assert response.json()["choices"][0]["message"]["content"] == "echo: hi"
    finally:
        await transport.aclose()
    assert len(fault_server.received()) == 3


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("close", {httpx.RemoteProtocolError}),
        ("reset", {httpx.RemoteProtocolError, httpx.ReadError}),
        ("short", {httpx.RemoteProtocolError}),
        ("hang", {httpx.ReadTimeout}),
    ],
)
async def test_real_faults_raise_the_httpx_class(
    fault_server: FaultServer, mode: str, expected: set[type[Exception]]
) -> None:
    """Socket faults surface as the httpx exception httpx's own transport would raise."""
    transport = AiohttpTransport(limit=2)
    try:
        with anyio.fail_after(5), pytest.raises(httpx.TransportError) as info:
            await _send(transport, fault_server.url(mode) + "/chat/completions")
    finally:
        await transport.aclose()
    assert type(info.value) in expected


@pytest.mark.anyio
async def test_refused_port_raises_connect_error(closed_port: int) -> None:
    """Nothing listening is httpx.ConnectError, not a timeout; its text names the host, the
    port and the OS's reason, and no `ssl:default` for an http URL (aiohttp's own text)."""
    transport = AiohttpTransport(limit=2)
    try:
        with anyio.fail_after(5), pytest.raises(httpx.ConnectError) as info:
            await _send(transport, f"http://127.0.0.1:{closed_port}/v1/chat/completions")
    finally:
        await transport.aclose()
    assert str(info.value) == f"cannot connect to 127.0.0.1:{closed_port}: Connection refused"


def _key(host: str, port: int, *, tls: bool) -> Any:
    from aiohttp.client_reqrep import ConnectionKey

    return ConnectionKey(host, port, tls, True, None, None, None)


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (
            client_exceptions.ClientConnectorDNSError(
                _key("llm.example", 443, tls=True), socket.gaierror(-2, "Name or service not known")
            ),
            "cannot connect to llm.example:443: Name or service not known",
        ),
        (
            client_exceptions.ClientConnectorCertificateError(
                _key("llm.example", 443, tls=True),
                ssl.SSLCertVerificationError(
                    1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed"
                ),
            ),
            "cannot connect to llm.example:443: [SSL: CERTIFICATE_VERIFY_FAILED] certificate "
            "verify failed",
        ),
        (
            client_exceptions.ClientConnectorError(
                _key("::1", 8080, tls=False), OSError(113, "Connect call failed ('::1', 8080)")
            ),
            "cannot connect to [::1]:8080: No route to host",
        ),
        (
            client_exceptions.ClientConnectorError(
                _key("h", 80, tls=False), OSError("Multiple exceptions: a, b")
            ),
            "cannot connect to h:80: Multiple exceptions: a, b",
        ),
    ],
)
def test_a_connect_error_says_where_and_why(exc: Exception, expected: str) -> None:
    """The message is `cannot connect to HOST:PORT: REASON`: the OS's words for an errno, the
    resolver's for DNS, the TLS library's for a certificate (never errno 1's words)."""
    request = httpx.Request("GET", "http://h/")
    assert str(map_aiohttp_exception(exc, request)) == expected


@pytest.mark.anyio
async def test_header_injection_is_a_config_error(fault_server: FaultServer) -> None:
    """A header newline that got past config validation is still refused before sending."""
    # load_config already refuses it (test_config.py); built unvalidated, the client must too
    cfg = EndpointConfig.model_construct(
        kind="openai-chat",
        base_url=fault_server.url("ok"),
        model="m",
        headers={"X-Team": "a\r\nX-Evil: 1"},
        timeout=Timeouts(connect=1, read=1, write=1, pool=1),
        retry=ONE_TRY,
    )
    endpoint = HttpEndpoint("ep", cfg, KEY, rng=random.Random(1))
    try:
        with anyio.fail_after(5), pytest.raises(ConfigError) as info:
            await endpoint.call(CASE, "candidate", 0)
    finally:
        await endpoint.aclose()
    assert info.value.exit_code == 78
    assert fault_server.received() == []


@pytest.mark.anyio
async def test_closed_transport_reopens_lazily(fault_server: FaultServer) -> None:
    """aclose is safe twice, and a transport used again opens a fresh session."""
    transport = AiohttpTransport(limit=1)
    url = fault_server.url("ok") + "/chat/completions"
    with anyio.fail_after(5):
        assert (await _send(transport, url)).status_code == 200
        await transport.aclose()
        await transport.aclose()
        assert (await _send(transport, url)).status_code == 200
        await transport.aclose()


def test_aiohttp_is_the_default_pool() -> None:
    """Without an injected transport, HttpEndpoint sends through aiohttp, not httpx's pool."""
    cfg = EndpointConfig(kind="openai-chat", base_url="http://127.0.0.1:9/v1", model="m")
    endpoint = HttpEndpoint("ep", cfg, None)
    assert isinstance(endpoint._transport, AiohttpTransport)
    assert aiohttp.__version__


def _encoded(data: bytes, encoding: str) -> bytes:
    """`data` under one Content-Encoding, as a server writes it (deflate: zlib or raw)."""
    import gzip
    import zlib

    if encoding in ("gzip", "x-gzip"):
        return gzip.compress(data)
    if encoding == "deflate":
        return zlib.compress(data)
    raw = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)  # "raw deflate"
    return raw.compress(data) + raw.flush()


async def _call_replying(headers: dict[str, str], body: bytes) -> Exchange:
    """One call, one attempt, to an in-process endpoint that answers 200 with these bytes."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers=headers, content=body)

    cfg = EndpointConfig(
        kind="openai-chat", base_url="http://mock.test/v1", model="m", retry={"attempts": 1}
    )
    endpoint = HttpEndpoint("ep", cfg, None, transport=httpx.MockTransport(handler))
    try:
        with anyio.fail_after(5):
            return await endpoint.call(CASE, "reference", 0)
    finally:
        await endpoint.aclose()


@pytest.mark.anyio
@pytest.mark.parametrize(
    "encoding", [None, "gzip", "x-gzip", "deflate", "deflate-raw", "gzip, deflate", "br"]
)
async def test_bodies_are_recorded_decoded(encoding: str | None) -> None:
    """An identity body is read as sent; gzip and deflate (zlib or raw), in layers too, are
    undone as httpx would; an encoding httpx cannot decode (br here) is kept as sent."""
    text = '{"choices": [{"message": {"content": "SKU-9"}}]}'
    raw = text.encode()
    headers = {"content-type": "application/json"}
    if encoding:
        for layer in encoding.split(", "):
            raw = raw if layer == "br" else _encoded(raw, layer)
        headers["content-encoding"] = encoding.replace("deflate-raw", "deflate")

    exchange = await _call_replying(headers, raw)
    assert exchange.transport == "ok"
    assert exchange.response is not None
    assert exchange.response.body == text


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("encoding", "body"),
    [("gzip", b"not gzip at all"), ("deflate", b"\xff" * 40), ("gzip", b"\x1f\x8b\x08")],
    ids=["gzip-garbage", "deflate-garbage", "gzip-cut-short"],
)
async def test_a_damaged_encoded_body_is_connection_lost(encoding: str, body: bytes) -> None:
    """A body its Content-Encoding cannot undo is a transport stamp, never a crash or a grade."""

    exchange = await _call_replying({"content-encoding": encoding}, body)
    assert exchange.transport == "connection_lost"
    assert exchange.attempts[-1].error == "DecodingError"


@pytest.mark.anyio
@pytest.mark.parametrize("proxy", [None, "http://127.0.0.1:9"])
async def test_proxy_env_is_honoured_only_when_set(
    monkeypatch: pytest.MonkeyPatch, proxy: str | None
) -> None:
    """HTTPS_PROXY is read as httpx.AsyncClient read it; without one, no per-request env scan."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    if proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy)
    transport = AiohttpTransport(limit=1)
    try:
        session = transport._open()
        assert session.trust_env is bool(proxy)
    finally:
        await transport.aclose()


def test_https_verifies_against_certifi() -> None:
    """TLS verification uses certifi's bundle, httpx's default, with hostname checks on."""
    import ssl

    context = AiohttpTransport(limit=1)._tls()
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    assert context.cert_store_stats()["x509_ca"] > 50


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["Host", "Content-Length", "Authorization", "X-Key"])
            | st.text("abcXYZ-\u00e9", min_size=1, max_size=6),
            st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF), max_size=8),
        ),
        max_size=6,
    ),
    st.sampled_from(["utf-8", "latin-1"]),
)
def test_request_headers_go_out_as_httpx_decodes_them(
    pairs: list[tuple[str, str]], encoding: str
) -> None:
    """The header pairs handed to aiohttp are `multi_items()`'s, ASCII or not: the same
    names, lower-cased as bytes, in the same order, and the same values."""
    try:
        headers = httpx.Headers([(k.encode(encoding), v.encode(encoding)) for k, v in pairs])
    except UnicodeEncodeError:
        return
    assert _header_pairs(headers) == headers.multi_items()


async def _pieces(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


@pytest.mark.anyio
@pytest.mark.parametrize(
    "make",
    [
        lambda: httpx.Request("POST", "http://x/", content=b'{"a": 1}'),
        lambda: httpx.Request("POST", "http://x/", stream=httpx.ByteStream(b'{"a": 1}')),
        lambda: httpx.Request("POST", "http://x/", content=_pieces(b'{"a"', b": 1}")),
    ],
    ids=["content", "byte-stream", "iterator"],
)
async def test_a_request_body_is_sent_whole_however_it_was_given(make: Any) -> None:
    """A body given as bytes, as one `ByteStream` (how the endpoint builds its requests) or
    as pieces is sent as the same bytes."""
    assert await _request_body(make()) == b'{"a": 1}'
