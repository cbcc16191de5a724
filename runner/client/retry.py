"""Whether an attempt is tried again, and after how long: a frozen `RetryDecision`.

The decision is a value the loop in `HttpEndpoint.call` obeys, bounded by the policy's
`attempts` and explicit about its reason, and the server's Retry-After (from whichever hop
asks for the longest wait) is read here too, so no retry happens anywhere else.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from runner.config import RetryPolicy
from runner.model import Transport

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


def retry_after_of(headers: dict[str, str]) -> float | None:
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
