"""The transport stamp of an attempt: `classify`, the one place a stamp is decided.

From the exception class or the status code, never the body. Every exception a call can raise
is named here, as a stamp, a config error or not an outcome at all, so a new httpx class cannot
slip through (the test walks `httpx.__all__`)::

    TimeoutException (+4 subclasses), TimeoutError (the attempt deadline) -> timeout
    ConnectError, ProxyError                                           -> connect_error
    NetworkError (Read/Write/CloseError), ProtocolError                -> connection_lost
      (RemoteProtocolError: reset or a body shorter than Content-Length)
    DecodingError (Content-Encoding stream damaged in transit)          -> connection_lost
    RequestError/TransportError raised bare by a custom transport      -> connection_lost
    BodyTooLarge (ours: a 2xx body past max_response_bytes)            -> too_large
    cancellation                                                       -> cancelled
    CONFIG_ERRORS: InvalidURL, UnsupportedProtocol, LocalProtocolError -> ConfigError (exit 78)
    NOT_TRANSPORT: misuse of httpx's API, never an outcome of a call   -> propagate (a bug)
"""

from __future__ import annotations

import asyncio

import anyio
import httpx

from runner.model import Transport

# Raised by a request that could never have worked as configured: `validate` reports them
# before a run, and `call` turns them into a ConfigError instead of a misleading stamp.
# LocalProtocolError is h11 refusing what *we* would send (e.g. a newline in a header value
# from `[endpoints.x.headers]`).
CONFIG_ERRORS: tuple[type[Exception], ...] = (
    httpx.InvalidURL,
    httpx.UnsupportedProtocol,
    httpx.LocalProtocolError,
)


# Not outcomes of a call, so they have no stamp and propagate as bugs if they ever occur:
# - HTTPError: an abstract base, only ever raised through a subclass.
# - HTTPStatusError: only `raise_for_status()` raises it; status codes are classified directly.
# - TooManyRedirects: redirects are not followed (follow_redirects=False), a 3xx is http_error.
# - CookieConflict: raised by the cookie-jar lookup API, which the client never calls.
# - StreamError and its four subclasses: misuse of the streaming API by our own code (reading
#   a consumed or closed stream); hiding them behind a stamp would hide a bug.
NOT_TRANSPORT: tuple[type[Exception], ...] = (
    httpx.HTTPError,
    httpx.HTTPStatusError,
    httpx.TooManyRedirects,
    httpx.CookieConflict,
    httpx.StreamError,
    httpx.StreamConsumed,
    httpx.StreamClosed,
    httpx.ResponseNotRead,
    httpx.RequestNotRead,
)


class BodyTooLarge(Exception):
    """A 2xx body ran past `max_response_bytes`; ours, so no library can raise it."""

    def __init__(self, cap: int) -> None:
        super().__init__(f"response body exceeds max_response_bytes={cap}")


CAUGHT: tuple[type[BaseException], ...] = (
    httpx.TransportError,
    httpx.DecodingError,
    TimeoutError,
    BodyTooLarge,
)


def _cancelled_classes() -> tuple[type[BaseException], ...]:
    """Cancellation differs per backend; outside an event loop only asyncio's is knowable."""
    try:
        return (anyio.get_cancelled_exc_class(), asyncio.CancelledError)
    except Exception:  # sniffio: no async library running (a sync caller or a unit test)
        return (asyncio.CancelledError,)


def classify(exc: BaseException | None, status: int | None) -> Transport:
    """The one place a transport stamp is decided: the exception wins, else the status.

    Raises ValueError for an exception that is not a transport outcome (CONFIG_ERRORS,
    NOT_TRANSPORT, anything foreign), and for a call with neither exception nor status.
    """
    if exc is not None:
        if isinstance(exc, _cancelled_classes()):
            return Transport.CANCELLED
        if isinstance(exc, CONFIG_ERRORS):
            raise ValueError(f"{type(exc).__name__} is a config error, not a transport outcome")
        if isinstance(exc, httpx.TimeoutException | TimeoutError):
            return Transport.TIMEOUT
        if isinstance(exc, httpx.ConnectError | httpx.ProxyError):
            return Transport.CONNECT_ERROR
        if isinstance(exc, BodyTooLarge):
            return Transport.TOO_LARGE
        if isinstance(exc, httpx.TransportError | httpx.DecodingError):
            return Transport.CONNECTION_LOST
        if isinstance(exc, httpx.RequestError) and not isinstance(exc, httpx.TooManyRedirects):
            return Transport.CONNECTION_LOST
        raise ValueError(f"{type(exc).__name__} is not a transport outcome")
    if status is None:
        raise ValueError("classify needs an exception or a status code")
    if 200 <= status < 300:
        return Transport.OK
    if status == 429:
        return Transport.RATE_LIMITED
    return Transport.HTTP_ERROR
