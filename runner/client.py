"""The live HTTP endpoint: one case in, one Exchange out, every attempt recorded.

Transport trouble is data here, never an exception: `classify` is the only place a stamp is
decided, from the exception class or the status code (never the body, which is stored as the
bytes arrived and judged later by `protocols.read`). Retries are explicit: `decide_retry`
returns a frozen `RetryDecision` and the loop in `HttpEndpoint.call` just obeys it; httpx's
own retries stay off, so the attempt list in raw.jsonl is the whole truth about a call.

A 2xx `text/event-stream` body is read like any other (kept as received, size-capped, bounded
by the deadline; a stall is the read timeout), then its protocol folds it once to say how it
ended, the one place the body decides a transport stamp: a stream that ends without its
finish event is `connection_lost` (error `stream_truncated`), one that carries an error event
is `http_error` (error `stream_error:<type>`), retried as a 5xx is. Both are facts of the
connection, not of the reply's content, and are recorded per attempt, so a replay reads the
stamp back. `ttft_ms` is the time from sending the request to the stream's first bytes.

Exception map (the test walks `httpx.__all__` so a new httpx class cannot slip through)::

    TimeoutException (+4 subclasses), TimeoutError (anyio.fail_after)  -> timeout
    ConnectError, ProxyError                                           -> connect_error
    NetworkError (Read/Write/CloseError), ProtocolError                -> connection_lost
      (RemoteProtocolError: reset or a body shorter than Content-Length)
    DecodingError (Content-Encoding stream damaged in transit)          -> connection_lost
    RequestError/TransportError raised bare by a custom transport      -> connection_lost
    _BodyTooLarge (ours: a 2xx body past max_response_bytes)           -> too_large
    cancellation                                                       -> cancelled
    CONFIG_ERRORS: InvalidURL, UnsupportedProtocol, LocalProtocolError -> ConfigError (exit 78)
    NOT_TRANSPORT: misuse of httpx's API, never an outcome of a call   -> propagate (a bug)
"""

from __future__ import annotations

import asyncio
import base64
import math
import random
import re
import time
import zlib
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import anyio
import httpx

from runner import logs
from runner.budget import Meter, refusal
from runner.config import EndpointConfig, RetryPolicy
from runner.errors import ConfigError
from runner.jsontext import dumps
from runner.model import Attempt, Case, Exchange, Response, Transport
from runner.protocols import GATEWAY_MODEL_HEADERS, Wire, is_event_stream, stream_end, wire_for
from runner.protocols.wire import PLAIN, Shape
from runner.shutdown import NotStarted, may_start

__all__ = [
    "CONFIG_ERRORS",
    "NOT_TRANSPORT",
    "RETRYABLE",
    "HttpEndpoint",
    "RetryDecision",
    "classify",
    "decide_retry",
    "parse_retry_after",
    "request_problem",
]

MESSAGE_CHARS = 300

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

# Only these stamps are worth another attempt (DESIGN: retries); http_error only for a 5xx
# or a 408 (the server's own timeout: the OpenAI SDK retries it, and LiteLLM's and llmock's
# timeouts are 408s). A final 408 keeps its stamp: `http_error` with status 408.
RETRYABLE: frozenset[Transport] = frozenset(
    {
        Transport.TIMEOUT,
        Transport.CONNECT_ERROR,
        Transport.CONNECTION_LOST,
        Transport.RATE_LIMITED,
        Transport.HTTP_ERROR,
    }
)
REQUEST_TIMEOUT = 408

# The Retry-After headers, a gateway's renamed upstream ones after the server's own: LiteLLM
# passes its upstream's headers on prefixed `llm_provider-`. Each pair is (milliseconds,
# seconds or HTTP-date).
RETRY_AFTER_HEADERS: tuple[tuple[str, str], ...] = (
    ("retry-after-ms", "retry-after"),
    ("llm_provider-retry-after-ms", "llm_provider-retry-after"),
)

_KEPT_HEADERS = frozenset(
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


class _BodyTooLarge(Exception):
    """A 2xx body ran past `max_response_bytes`; private so no library can raise it."""

    def __init__(self, cap: int) -> None:
        super().__init__(f"response body exceeds max_response_bytes={cap}")


_CAUGHT: tuple[type[BaseException], ...] = (
    httpx.TransportError,
    httpx.DecodingError,
    TimeoutError,
    _BodyTooLarge,
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
        if isinstance(exc, _BodyTooLarge):
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


@dataclass(frozen=True, slots=True)
class RetryDecision:
    """What to do after one attempt; `reason` is kept for tests and debugging."""

    retry: bool
    wait: float
    reason: str


def decide_retry(  # noqa: PLR0917 - the signature is the documented contract
    attempt_no: int,
    stamp: Transport | str,
    status: int | None,
    retry_after: float | None,
    policy: RetryPolicy,
    rng: random.Random,
    *,
    in_band: bool = False,
) -> RetryDecision:
    """Retry only DESIGN's retryable stamps (and a 408), at most `policy.attempts` in all.

    `in_band` marks an `http_error` the server reported inside a 2xx stream (an error
    event): it is retried as a 5xx is, whatever the status line said.

    Without a Retry-After the wait is exponential backoff `min(backoff_max, base * 2**(n-1))`
    of which the `jitter` fraction is drawn at random. With one, the wait is the server's
    value (capped at `retry_after_cap`) plus a random extra of up to `jitter` times the larger
    of that value and the backoff: never less than the server asked, and bounded, so the
    calls one 429 burst sent away do not all come back at the same instant (a Retry-After of
    0 still spreads them over the backoff).
    """
    stamp = Transport(stamp)
    if stamp == Transport.OK:
        return RetryDecision(False, 0.0, "ok")
    if stamp not in RETRYABLE:
        return RetryDecision(False, 0.0, f"not_retryable:{stamp}")
    if stamp == Transport.HTTP_ERROR and not in_band and not _retryable_status(status):
        return RetryDecision(False, 0.0, f"not_retryable:http_{status}")
    if attempt_no >= policy.attempts:
        return RetryDecision(False, 0.0, "attempts_exhausted")
    backoff = min(policy.backoff_max, policy.backoff_base * 2 ** (attempt_no - 1))
    if retry_after is None:
        wait = backoff * (1.0 - policy.jitter) + backoff * policy.jitter * rng.random()
        return RetryDecision(True, wait, "backoff")
    asked = max(0.0, retry_after)
    reason = "retry_after"
    if asked > policy.retry_after_cap:
        asked, reason = policy.retry_after_cap, "retry_after_capped"
    return RetryDecision(True, asked + max(asked, backoff) * policy.jitter * rng.random(), reason)


def _retryable_status(status: int | None) -> bool:
    return status is not None and (500 <= status < 600 or status == REQUEST_TIMEOUT)


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds to wait from a Retry-After value (delta-seconds or HTTP-date); None if unusable.

    `now` must be timezone-aware: an HTTP-date is absolute, and a naive clock would silently
    shift the wait by the host's UTC offset.
    """
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("parse_retry_after needs an aware datetime for now")
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    seconds = _delay(text)
    if seconds is not None:
        return seconds
    when = _http_date(text)
    return None if when is None else max(0.0, (when - now).total_seconds())


# RFC 9110's delta-seconds (ASCII digits), with the fraction some servers send; a sign, an
# underscore, other scripts' digits or an exponent make the header unusable, not a wait
_DELAY = re.compile(r"[0-9]{1,12}(?:\.[0-9]+)?")


def _delay(text: str) -> float | None:
    return float(text) if _DELAY.fullmatch(text) else None


def _http_date(text: str) -> datetime | None:
    """An HTTP-date as an aware datetime, or None: a year past 9999 overflows the parser."""
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000" means UTC with unknown origin (RFC 5322)
        when = when.replace(tzinfo=UTC)
    return when


def request_problem(cfg: EndpointConfig) -> str | None:
    """Why no request to this endpoint could be sent, or None: for `parallax validate`."""
    wire = _wire(cfg)
    try:
        url = httpx.URL(wire.url(cfg))
        if url.scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"unsupported URL scheme {url.scheme!r}")
        httpx.Request("POST", url, headers=wire.headers(cfg, None))
    except CONFIG_ERRORS as exc:
        return f"{type(exc).__name__}: {exc}"
    except UnicodeEncodeError as exc:  # a header value httpx cannot put on the wire
        return f"header not encodable: {exc}"
    return None


def _wire(cfg: EndpointConfig) -> Wire:
    wire = wire_for(cfg.kind)
    if wire is None:
        raise ValueError(f"a {cfg.kind} endpoint is not a live HTTP endpoint")
    return wire


def _plain_headers(headers: httpx.Headers) -> dict[str, str]:
    """Lower-cased name -> value, repeated headers joined with ", " as `httpx.Headers` does.

    Read once per response: each `httpx.Headers` lookup rescans and re-decodes every header.
    """
    plain: dict[str, str] = {}
    for name, value in headers.multi_items():
        plain[name] = f"{plain[name]}, {value}" if name in plain else value
    return plain


def _kept_headers(headers: dict[str, str], kept: frozenset[str]) -> dict[str, str]:
    """Allow-list, not deny-list: a response header we never thought of stays out of runs/."""
    return {
        name: value
        for name, value in headers.items()
        if name in kept or name.startswith(_KEPT_PREFIXES)
    }


class _Inflated(Exception):
    """A Content-Encoding layer inflated past the size cap; private, like `_BodyTooLarge`."""


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


async def _read_body(
    resp: httpx.Response, headers: dict[str, str], cap: int, buf: bytearray
) -> tuple[bool, float | None]:
    """Read the body into `buf`, at most `cap` bytes: whether there was more than that, and
    the monotonic time its first bytes arrived (a stream's first token), None for no bytes.

    The time is kept however the read ends: an exception from here leaves it unread, so a
    stream cut off mid-way has no ttft (nor any grade).
    """
    first: float | None = None
    try:
        async for chunk in _body_chunks(resp, headers, cap):
            if first is None and chunk:
                first = time.monotonic()
            room = cap - len(buf)
            if len(chunk) > room:
                buf += chunk[:room]
                return True, first
            buf += chunk
    except _Inflated:
        return True, first
    return False, first


@dataclass(frozen=True, slots=True)
class _Verdict:
    """An attempt's stamp and what it records as the error: an exception's class name and
    message, or what a 2xx stream that arrived whole but did not end as one should says."""

    stamp: Transport
    error: str | None
    message: str | None
    in_band: bool = False  # an error event inside a 2xx stream: retried as a 5xx


def _error_name(exc: BaseException | None) -> str | None:
    return type(exc).__name__.lstrip("_") if exc is not None else None


def _body_text(raw: bytes) -> tuple[str, str]:
    try:
        return raw.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(raw).decode("ascii"), "base64"


def _retry_after(headers: dict[str, str]) -> float | None:
    """The longest wait any hop asks for: the server's own Retry-After and a gateway's
    renamed upstream one (`llm_provider-retry-after`), each with its `-ms` form (OpenAI's)
    before the coarser one. Waiting less than either hop says is a sure second 429. An
    HTTP-date is measured against the server's own Date header when present, so clock skew
    between hosts cancels out."""
    waits = [_one_retry_after(headers, *pair) for pair in RETRY_AFTER_HEADERS]
    return max((w for w in waits if w is not None), default=None)


def _one_retry_after(headers: dict[str, str], millis_name: str, name: str) -> float | None:
    millis = headers.get(millis_name)  # most replies carry none of these: no parsing
    if millis is not None and (delay := _delay(millis.strip())) is not None:
        return delay / 1000.0
    retry_after = headers.get(name)
    if retry_after is None:
        return None
    date = headers.get("date")
    server_now = _http_date(date) if date is not None else None
    return parse_retry_after(retry_after, server_now or datetime.now(UTC))


@dataclass(slots=True)
class _Try:
    """The outcome of one attempt before it is frozen into an Attempt."""

    attempt: Attempt
    stamp: Transport
    response: Response | None
    ttft_ms: int | None = None
    in_band: bool = False  # an error event inside a 2xx stream: retried as a 5xx


class HttpEndpoint:
    """A live endpoint (openai-chat, anthropic-messages, http-json) behind `model.Endpoint`.

    One AsyncClient per endpoint (connection reuse across thousands of calls), a capacity
    limiter shrunk on 429 and grown back on success (AIMD), and optional even pacing for
    `rpm`. The secret lives only in the client's default headers, never in an Exchange.

    `now` and `sleep` are the loop clock the pacing, the retry waits and AIMD go by; a test
    passes a fake pair to read the start times and waits the endpoint decided on.
    """

    def __init__(
        self,
        name: str,
        cfg: EndpointConfig,
        api_key: str | None,
        *,
        shape: Shape = PLAIN,
        transport: httpx.AsyncBaseTransport | None = None,
        rng: random.Random | None = None,
        now: Callable[[], float] = anyio.current_time,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
        meter: Meter | None = None,
    ) -> None:
        if cfg.kind == "recorded":
            raise ValueError(f"endpoint {name!r} is recorded, not a live HTTP endpoint")
        self.name = name
        self._cfg = cfg
        self._shape = shape
        self._wire = _wire(cfg)
        self._streams = self._wire.fold_stream is not None
        self._url = self._wire.url(cfg)
        self._rng = rng if rng is not None else random.Random()  # noqa: S311 - jitter, not crypto
        self._now = now
        self._sleep = sleep
        self._meter = meter  # the run's budget, when it has one
        # the endpoint's served-model header is kept too: replay reads the served model from it
        header = cfg.served_model_header
        self._kept = _KEPT_HEADERS | ({header} if header else frozenset())
        logs.register_secret(api_key)
        # Request headers as httpx.AsyncClient would send them, built once. Requests go straight
        # to the transport: the client's cookie jar, auth flow and redirect loop are all unused
        # here and cost more CPU per call than the HTTP exchange itself (bench/RESULTS.md).
        self._headers = httpx.Headers(
            {
                "Accept": "*/*",
                "Accept-Encoding": "gzip, deflate",
                "Connection": "keep-alive",
                "User-Agent": "parallax",
                **self._wire.headers(cfg, api_key),
            }
        ).raw  # raw pairs: httpx.Request copies them faster than a Headers object
        t = cfg.timeout
        self._extensions = {
            "timeout": httpx.Timeout(
                connect=t.connect, read=t.read, write=t.write, pool=t.pool
            ).as_dict()
        }
        if transport is None:  # httpx's own pool costs milliseconds of CPU per call (bench/)
            from runner.transport import AiohttpTransport

            transport = AiohttpTransport(limit=cfg.concurrency)
        self._transport = transport
        self._parsed_url: httpx.URL | None = None
        self._max_limit = cfg.concurrency
        self._limit = cfg.concurrency
        self._limiter = anyio.CapacityLimiter(cfg.concurrency)
        self._streak = 0  # successes since the last change of the limit
        self._last_cut = -math.inf  # loop time of the last multiplicative decrease
        self._interval = 60.0 / cfg.rpm if cfg.rpm else 0.0
        self._next_start = -math.inf
        self._log = logs.get_logger()

    @property
    def limit(self) -> int:
        """The current AIMD concurrency limit (at most `cfg.concurrency`)."""
        return self._limit

    async def aclose(self) -> None:
        await self._transport.aclose()

    def _request(self, content: bytes) -> httpx.Request:
        """One POST as httpx.AsyncClient would build it (InvalidURL surfaces here)."""
        url = self._parsed_url
        if url is None:
            url = self._parsed_url = httpx.URL(self._url)
        return httpx.Request(
            "POST", url, headers=self._headers, content=content, extensions=self._extensions
        )

    async def call(self, case: Case, side: str, sample: int) -> Exchange:
        """Send one case with bounded retries; transport trouble comes back as a stamp.

        Only cancellation propagates (the engine re-calls such pairs on resume), and a
        ConfigError when the request could never be sent as configured. An attempt the run's
        budget refuses is not sent, and ends the call `cancelled` (detail `budget`).
        """
        body = self._wire.body(self._cfg, self._shape, case)
        content = dumps(body)  # compact UTF-8 JSON by orjson: the stdlib was 1.6% of a call
        started_at = datetime.now(UTC).isoformat(timespec="milliseconds")
        t0 = time.monotonic()
        attempts: list[Attempt] = []
        key = (case.id, side, sample)
        # what each attempt holds of the run's budget: one estimate of this very body
        estimate = (
            0 if self._meter is None else self._meter.estimate(content, tools="tools" in body)
        )
        n = 0
        result: _Try | None = None
        while True:
            n += 1
            # once the budget is spent, an attempt waits for no pacing or concurrency slot
            spent = self._meter is not None and self._meter.exhausted
            result = None if spent else await self._attempt(n, content, key, estimate)
            if result is None:
                attempts.append(refusal(n))
                break
            attempts.append(result.attempt)
            decision = decide_retry(
                n,
                result.stamp,
                result.attempt.status,
                result.attempt.retry_after,
                self._cfg.retry,
                self._rng,
                in_band=result.in_band,
            )
            if not decision.retry:
                break
            if self._meter is not None:  # it waits out its backoff holding nothing
                self._meter.retried(key, result.attempt)
            await self._sleep(decision.wait)
        return Exchange(
            case_id=case.id,
            side=side,
            sample=sample,
            fixture_sha=case.fixture_sha,
            endpoint=self.name,
            adapter=self._cfg.kind,
            model_alias=self._cfg.model,
            request={"method": "POST", "url": self._url, "body": body},
            attempts=tuple(attempts),
            transport=str(attempts[-1].transport),
            # the final attempt's: never an earlier attempt's body (a refused one has none)
            response=result.response if result is not None else None,
            started_at=started_at,
            elapsed_ms=round((time.monotonic() - t0) * 1000),
            answer_pointer=self._cfg.answer_pointer if self._cfg.kind == "http-json" else None,
            served_model_header=self._cfg.served_model_header,
            stream=self._shape.stream,
            ttft_ms=result.ttft_ms if result is not None else None,
            request_sha=self._shape.request_sha,
        )

    async def _pace(self) -> None:
        """Evenly spaced start times for `rpm`: reserve the next slot, then sleep until it.

        Reserving before sleeping needs no lock: nothing awaits between read and write.
        """
        if not self._interval:
            return
        now = self._now()
        slot = max(now, self._next_start)
        self._next_start = slot + self._interval
        if slot > now:
            await self._sleep(slot - now)

    async def _may_send(self, n: int, key: tuple[str, str, int], estimate: int) -> bool:
        """Whether an attempt that has its concurrency slot goes out: a first one is not
        sent once a stop came while it waited its turn (NotStarted), and none past the run's
        budget (False). Reserved last, once it is sure to be sent: a call waiting its turn
        holds nothing of the budget."""
        if n == 1 and not may_start():
            raise NotStarted
        return self._meter is None or await self._meter.reserve(key, estimate)

    async def _attempt(
        self, n: int, content: bytes, key: tuple[str, str, int], estimate: int
    ) -> _Try | None:
        """One attempt, or None when the run's budget refused it (nothing was sent)."""
        await self._pace()
        cap = self._cfg.max_response_bytes
        status: int | None = None
        headers: dict[str, str] | None = None
        buf = bytearray()
        truncated = False
        first: float | None = None
        exc: BaseException | None = None
        # The limiter's fast path: `async with` would add two event-loop round trips per call
        # even when a token is free; acquire_nowait refuses to jump a queue of waiters.
        try:
            self._limiter.acquire_nowait()
        except anyio.WouldBlock:
            await self._limiter.acquire()
        try:
            if not await self._may_send(n, key, estimate):
                return None
            begun = self._now()
            t0 = time.monotonic()
            try:
                with anyio.fail_after(self._cfg.deadline):
                    resp = await self._transport.handle_async_request(self._request(content))
                    try:
                        status, headers = resp.status_code, _plain_headers(resp.headers)
                        truncated, first = await _read_body(resp, headers, cap, buf)
                        if truncated and 200 <= status < 300:
                            raise _BodyTooLarge(cap)  # an oversized error page keeps its stamp
                    finally:
                        await resp.aclose()
            except CONFIG_ERRORS as err:
                raise ConfigError(
                    f"endpoint {self.name!r}", None, f"{type(err).__name__}: {err}"
                ) from err
            except _CAUGHT as err:
                exc = err
                if status is not None and not isinstance(err, _BodyTooLarge):
                    truncated = True  # the body stopped short of what the server meant
            elapsed_ms = round((time.monotonic() - t0) * 1000)
        finally:
            self._limiter.release()
        # An error status is the server's answer: a body that then breaks off or will not
        # decode is kept as far as it came, and the stamp (so the retry and AIMD) follows the
        # status. Only a 2xx needs its whole body to be graded.
        answered_error = status is not None and not 200 <= status < 300
        verdict = _Verdict(
            classify(None if answered_error else exc, status), _error_name(exc), self._message(exc)
        )
        response = None
        ttft_ms: int | None = None
        if status is not None and headers is not None:
            response = self._response(status, headers, buf, truncated)
            # a stream read to its end (a transport error wins) is folded once for how it
            # ended; the stored text is what a replay sees, so it is what decides
            if verdict.stamp is Transport.OK and self._streams and is_event_stream(headers):
                ttft_ms = None if first is None else round((first - t0) * 1000)
                verdict = self._stream_end(response) or verdict
        self._adjust(verdict.stamp, begun)
        attempt = Attempt(
            n=n,
            transport=str(verdict.stamp),
            elapsed_ms=elapsed_ms,
            status=status,
            error=verdict.error,
            message=verdict.message,
            retry_after=_retry_after(headers) if headers is not None else None,
        )
        return _Try(attempt, verdict.stamp, response, ttft_ms, verdict.in_band)

    def _response(
        self, status: int, headers: dict[str, str], buf: bytearray, truncated: bool
    ) -> Response:
        """The response as it is recorded: secrets scrubbed, allow-listed headers only."""
        text, encoding = _body_text(logs.scrub_bytes(bytes(buf)))  # an echoed key too
        kept = {
            logs.scrub_name(k): logs.scrub_text(v)
            for k, v in _kept_headers(headers, self._kept).items()
        }
        return Response(status, kept, text, encoding, truncated)

    def _stream_end(self, response: Response) -> _Verdict | None:
        """How a 2xx stream that arrived whole ended, when that is a transport failure
        (`protocols.stream_end`); a stream not in UTF-8 is read later, as `not_utf8`."""
        if response.encoding != "utf-8":
            return None
        ended = stream_end(self._wire.kind, response.body)
        if ended is None:
            return None
        in_band = ended.transport is Transport.HTTP_ERROR
        return _Verdict(ended.transport, ended.error, ended.message, in_band=in_band)

    def _message(self, exc: BaseException | None) -> str | None:
        if exc is None:
            return None
        text = str(exc)
        if not text and isinstance(exc, TimeoutError):
            text = f"attempt exceeded the {self._cfg.deadline:g}s deadline"
        if not text:
            return None
        if len(text) > MESSAGE_CHARS:
            text = text[: MESSAGE_CHARS - 3] + "..."
        return logs.scrub_text(text)

    def _adjust(self, stamp: Transport, begun: float) -> None:
        """AIMD on the capacity limiter: halve on 429, +1 after a window of successes.

        A 429 from an attempt that began before the last cut reflects the old limit, so a
        burst of concurrent 429s halves the limit once, not once per reply.
        """
        if stamp == Transport.RATE_LIMITED:
            self._streak = 0
            if begun < self._last_cut or self._limit == 1:
                return
            old, self._limit = self._limit, max(1, self._limit // 2)
            self._limiter.total_tokens = self._limit
            self._last_cut = self._now()
            self._log.warning(logs.ENDPOINT_BACKOFF, endpoint=self.name, old=old, new=self._limit)
            return
        if stamp != Transport.OK or self._limit >= self._max_limit:
            return
        self._streak += 1
        if self._streak >= self._limit:
            old, self._limit = self._limit, self._limit + 1
            self._streak = 0
            self._limiter.total_tokens = self._limit
            self._log.info(logs.ENDPOINT_RECOVER, endpoint=self.name, old=old, new=self._limit)
