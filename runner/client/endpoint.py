"""`HttpEndpoint`: a live endpoint behind `model.Endpoint`, one case in, one Exchange out.

An attempt goes from its pacing through the run's budget and its concurrency slot to the wire
and back into an `Attempt` row; the retry loop obeys `retry.decide_retry`, the stamp is
`stamp.classify`'s, and AIMD shrinks the concurrency on 429s. `request_problem` checks, for
`parallax validate`, that a request could be sent at all.

Latency is the model's, never parallax's own waiting: an attempt's `elapsed_ms` runs from the
moment its request is handed to the transport to its last byte, and the exchange's is its
final attempt's (the one whose reply is graded). What a call waited before its attempts went
out (its `rpm` pacing, its concurrency slot, the run's budget) is its `queued_ms`, and what it
slept between them its `backoff_ms`, so a slow run can be explained without a side that waits
more looking slower. Every time is read from the endpoint's clock (`now`), the seam a test
drives to prove it.
"""

from __future__ import annotations

import asyncio
import bisect
import math
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import anyio
import httpx

from runner import logs
from runner.client.body import close_body, read_body
from runner.client.record import KEPT_HEADERS, body_text, kept_headers, plain_headers
from runner.client.retry import decide_retry, retry_after_of
from runner.client.slots import Slots
from runner.client.stamp import CAUGHT, CONFIG_ERRORS, BodyTooLarge, classify
from runner.config import EndpointConfig
from runner.cost.budget import Meter, refusal
from runner.errors import ConfigError
from runner.jsontext import dumps
from runner.model import Attempt, Case, Exchange, Response, Transport
from runner.protocols import Wire, first_token, is_event_stream, stream_end, wire_for
from runner.request.shape import PLAIN, Shape
from runner.shutdown import NotStarted, may_start

MESSAGE_CHARS = 300


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


@dataclass(slots=True)
class _Try:
    """The outcome of one attempt before it is frozen into an Attempt."""

    attempt: Attempt
    stamp: Transport
    response: Response | None
    sent: float  # the endpoint's clock when the request was handed to the transport
    ttft_ms: int | None = None
    in_band: bool = False  # an error event inside a 2xx stream: retried as a 5xx


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def loop_time() -> float:
    """The running event loop's clock, which anyio's `current_time` reads too, without
    anyio's lookup of the running backend on every call (a few are made per attempt)."""
    return asyncio.get_running_loop().time()


def _first_token_ms(
    kind: str, buf: bytearray, arrivals: list[tuple[int, float]], sent: float
) -> int | None:
    """Milliseconds from sending to the arrival of the piece that completed the stream's first
    event carrying a token (`protocols.first_token`), or None when no event did. The bytes are
    framed as they arrived (undecodable ones kept as surrogate escapes, so each offset maps
    back to the byte it came from); the stored body may have been masked since."""
    text = bytes(buf).decode("utf-8", "surrogateescape")
    end = first_token(kind, text)
    if end is None:
        return None
    size = len(text[:end].encode("utf-8", "surrogateescape"))
    at = bisect.bisect_left(arrivals, size, key=lambda arrival: arrival[0])
    return _ms(arrivals[at][1] - sent) if at < len(arrivals) else None


class HttpEndpoint:
    """A live endpoint (openai-chat, anthropic-messages, http-json) behind `model.Endpoint`.

    One AsyncClient per endpoint (connection reuse across thousands of calls), concurrency
    slots (`Slots`) cut on 429 and grown back on success (AIMD), and optional even pacing for
    `rpm`. The secret lives only in the client's default headers, never in an Exchange.

    `now` and `sleep` are the loop clock the pacing, the retry waits, AIMD and every recorded
    time (`elapsed_ms`, `ttft_ms`, `queued_ms`, `backoff_ms`) go by; a test passes a fake pair
    to read the start times, waits and timings the endpoint decided on.

    The client runs on asyncio, as its aiohttp transport does: the per-attempt deadline is
    `asyncio.timeout` (a third of `anyio.fail_after`'s CPU; both go by the loop's clock,
    raise TimeoutError, and let a cancellation from outside pass as a cancellation).
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
        now: Callable[[], float] = loop_time,
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
        self._kept = KEPT_HEADERS | ({header} if header else frozenset())
        logs.register_secret(api_key)
        self._shown_url = logs.scrub_text(self._url)  # a base_url from the environment: masked
        # Request headers as httpx.AsyncClient would send them, but Content-Length, built once
        # (`_request`). Requests go straight to the transport: the client's cookie jar, auth
        # flow and redirect loop are all unused here and cost more CPU per call than the HTTP
        # exchange itself (bench/RESULTS.md).
        self._base_headers = {
            "Accept": "*/*",
            "Accept-Encoding": "gzip, deflate",
            "Connection": "keep-alive",
            "User-Agent": "parallax",
            **self._wire.headers(cfg, api_key),
        }
        self._headers: httpx.Headers | None = None
        t = cfg.timeout
        self._extensions = {
            "timeout": httpx.Timeout(
                connect=t.connect, read=t.read, write=t.write, pool=t.pool
            ).as_dict()
        }
        if transport is None:  # httpx's own pool costs milliseconds of CPU per call (bench/)
            from runner.client.transport import AiohttpTransport

            transport = AiohttpTransport(limit=cfg.concurrency)
        self._transport = transport
        self._parsed_url: httpx.URL | None = None
        self._max_limit = cfg.concurrency
        self._limit = cfg.concurrency
        self._slots = Slots(cfg.concurrency)
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
        """One POST as httpx.AsyncClient would build it, the same headers in the same order
        (InvalidURL and a header httpx cannot encode surface here, on the first one).

        Built from a stream of the body, which httpx takes as given: from `content=` it would
        work out Host and Content-Length itself, rescanning every header each time (20 us of
        a call's CPU). Host comes first and Content-Length last, where httpx puts them.
        """
        url, headers = self._parsed_url, self._headers
        if url is None or headers is None:
            url = self._parsed_url = httpx.URL(self._url)
            base = httpx.Request("POST", url, headers=self._base_headers, content=b"x")
            headers = self._headers = httpx.Headers(base.headers)  # Host added, as httpx does
        request = httpx.Request(  # which copies the headers: the shared ones stay as they are
            "POST",
            url,
            headers=headers,
            stream=httpx.ByteStream(content),
            extensions=self._extensions,
        )
        request.headers["Content-Length"] = str(len(content))
        return request

    async def call(self, case: Case, side: str, sample: int) -> Exchange:
        """Send one case with bounded retries; transport trouble comes back as a stamp.

        Only cancellation propagates (the engine re-calls such pairs on resume), and a
        ConfigError when the request could never be sent as configured. An attempt the run's
        budget refuses is not sent, and ends the call `cancelled` (detail `budget`).
        """
        body = self._wire.body(self._cfg, self._shape, case)
        content = dumps(body)  # compact UTF-8 JSON by orjson: the stdlib was 1.6% of a call
        started_at = datetime.now(UTC).isoformat(timespec="milliseconds")
        attempts: list[Attempt] = []
        key = (case.id, side, sample)
        # what each attempt holds of the run's budget: one estimate of this very body
        estimate = (
            0 if self._meter is None else self._meter.estimate(content, tools="tools" in body)
        )
        n = 0
        result: _Try | None = None
        queued = backoff = 0.0  # seconds waited before attempts went out, and between them
        while True:
            n += 1
            asked = self._now()
            # once the budget is spent, an attempt its case holds nothing for waits for no
            # pacing or concurrency slot
            spent = self._meter is not None and self._meter.refuses(key, n)
            result = None if spent else await self._attempt(n, content, case, key, estimate)
            queued += (result.sent if result is not None else self._now()) - asked
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
            slept = self._now()
            await self._sleep(decision.wait)
            backoff += self._now() - slept
        return Exchange(
            case_id=case.id,
            side=side,
            sample=sample,
            fixture_sha=case.fixture_sha,
            endpoint=self.name,
            adapter=self._cfg.kind,
            model_alias=self._cfg.model,
            # as sent, but with every secret masked (a `body_env` value, a key in the URL): what
            # is stored is what a report shows and a replay reads
            request={
                "method": "POST",
                "url": self._shown_url,
                "body": logs.scrub_body(body, content),
            },
            attempts=tuple(attempts),
            transport=str(attempts[-1].transport),
            # the final attempt's: never an earlier attempt's body (a refused one has none)
            response=result.response if result is not None else None,
            started_at=started_at,
            # the model's time for the reply that is graded: the final attempt's on the wire
            elapsed_ms=attempts[-1].elapsed_ms,
            answer_pointer=self._cfg.answer_pointer if self._cfg.kind == "http-json" else None,
            served_model_header=self._cfg.served_model_header,
            stream=self._shape.stream,
            ttft_ms=result.ttft_ms if result is not None else None,
            request_sha=self._shape.request_sha,
            queued_ms=_ms(queued),
            backoff_ms=_ms(backoff),
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

    async def _turn(self, n: int, case: Case, key: tuple[str, str, int], estimate: int) -> bool:
        """Wait an attempt's turn: its `rpm` pacing, the run's budget, then a concurrency
        slot, held on True (False: the budget refused it, nothing is held). A first attempt
        is not sent once a stop came (NotStarted). The budget is reserved before the slot,
        so no call holds a slot while it waits for the budget: a slot is only ever held by
        an attempt on its way to the wire, and the calls an admitted case holds parts for can
        always get one."""
        await self._pace()
        if n == 1 and not may_start():
            raise NotStarted
        if self._meter is not None and not await self._meter.reserve(key, estimate, case, n):
            return False
        await self._slots.acquire()  # no event-loop round trip when a slot is free
        if n == 1 and not may_start():  # a stop came while it waited for its slot
            self._slots.release()
            if self._meter is not None:
                self._meter.unsent(key)
            raise NotStarted
        return True

    async def _attempt(
        self, n: int, content: bytes, case: Case, key: tuple[str, str, int], estimate: int
    ) -> _Try | None:
        """One attempt, or None when the run's budget refused it (nothing was sent)."""
        if not await self._turn(n, case, key, estimate):
            return None
        cap = self._cfg.max_response_bytes
        status: int | None = None
        headers: dict[str, str] | None = None
        buf = bytearray()
        truncated = False
        arrivals: list[tuple[int, float]] | None = None  # a 2xx stream's pieces, dated
        exc: BaseException | None = None
        try:
            begun = self._now()  # handed to the transport: the attempt's latency starts here
            try:
                async with asyncio.timeout(self._cfg.deadline):
                    resp = await self._transport.handle_async_request(self._request(content))
                    try:
                        status, headers = resp.status_code, plain_headers(resp.headers)
                        if self._streams and 200 <= status < 300 and is_event_stream(headers):
                            arrivals = []
                        truncated = await read_body(resp, headers, cap, buf, arrivals, self._now)
                        if truncated and 200 <= status < 300:
                            raise BodyTooLarge(cap)  # an oversized error page keeps its stamp
                    finally:
                        await close_body(resp)
            except CONFIG_ERRORS as err:
                raise ConfigError(
                    f"endpoint {self.name!r}", None, f"{type(err).__name__}: {err}"
                ) from err
            except CAUGHT as err:
                exc = err
                if status is not None and not isinstance(err, BodyTooLarge):
                    truncated = True  # the body stopped short of what the server meant
            elapsed_ms = _ms(self._now() - begun)
        finally:
            self._slots.release()
        # An error status is the server's answer: a body that then breaks off or will not
        # decode is kept as far as it came, and the stamp (so the retry and AIMD) follows the
        # status. Only a 2xx needs its whole body to be graded.
        answered_error = status is not None and not 200 <= status < 300
        verdict = _Verdict(
            classify(None if answered_error else exc, status), _error_name(exc), self._message(exc)
        )
        response = None
        # a 2xx stream's first token, however the stream then ended (cut off, stalled, an
        # error event): the time it took is the model's answer so far
        ttft_ms = _first_token_ms(self._wire.kind, buf, arrivals, begun) if arrivals else None
        if status is not None and headers is not None:
            response = self._response(status, headers, buf, truncated)
            # a stream read to its end (a transport error wins) is folded once for how it
            # ended; the stored text is what a replay sees, so it is what decides
            if verdict.stamp is Transport.OK and arrivals is not None:
                verdict = self._stream_end(response) or verdict
        self._adjust(verdict.stamp, begun)
        attempt = Attempt(
            n=n,
            transport=str(verdict.stamp),
            elapsed_ms=elapsed_ms,
            status=status,
            error=verdict.error,
            message=verdict.message,
            retry_after=retry_after_of(headers) if headers is not None else None,
        )
        return _Try(attempt, verdict.stamp, response, begun, ttft_ms, verdict.in_band)

    def _response(
        self, status: int, headers: dict[str, str], buf: bytearray, truncated: bool
    ) -> Response:
        """The response as it is recorded: secrets scrubbed, allow-listed headers only."""
        text, encoding = body_text(logs.scrub_bytes(bytes(buf)))  # an echoed key too
        kept = {
            logs.scrub_name(k): logs.scrub_text(v)
            for k, v in kept_headers(headers, self._kept).items()
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
        """AIMD on the concurrency slots: halve on 429, +1 after a window of successes.

        A 429 from an attempt that began before the last cut reflects the old limit, so a
        burst of concurrent 429s halves the limit once, not once per reply.
        """
        if stamp == Transport.RATE_LIMITED:
            self._streak = 0
            if begun < self._last_cut or self._limit == 1:
                return
            old, self._limit = self._limit, max(1, self._limit // 2)
            self._slots.total = self._limit
            self._last_cut = self._now()
            self._log.warning(logs.ENDPOINT_BACKOFF, endpoint=self.name, old=old, new=self._limit)
            return
        if stamp != Transport.OK or self._limit >= self._max_limit:
            return
        self._streak += 1
        if self._streak >= self._limit:
            old, self._limit = self._limit, self._limit + 1
            self._streak = 0
            self._slots.total = self._limit
            self._log.info(logs.ENDPOINT_RECOVER, endpoint=self.name, old=old, new=self._limit)
