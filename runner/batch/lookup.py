"""Finding at the provider a batch whose create a kill cut off from the journal.

A resume that finds an `intent` line with no `submitted` line after it does not know whether
the provider created that batch: the kill may have come before the request left, or after
the provider answered it. Asking the provider (`Batcher.find`) settles it; a lookup the
provider fails for the moment is asked again, a little later, before it counts as failed,
since the answer decides whether the intent's requests are paid for twice.

Where the list shows several batches that fit and nothing on them tells them apart
(Anthropic's: no metadata), their results do: every request's custom_id carries its intent's
nonce, so each candidate is polled until it ends and the one whose results name the nonce is
the intent's (`told_apart`). The resume waits for them as it would for its own batch.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

import anyio

from runner.batch.http import BatchHttp, Failed
from runner.batch.journal import Intent
from runner.batch.provider import Batcher
from runner.model import Transport

LOOKUP_TRIES = 3  # a lookup the provider fails transiently is asked again, then given up
FIRST_WAIT_SECONDS = 1.0  # before the second try; each next wait doubles


@dataclass(frozen=True, slots=True)
class Clock:
    """Wall-clock seconds (a batch outlives the process: its deadline is a date) and a sleep."""

    now: Callable[[], float] = time.time
    sleep: Callable[[float], Awaitable[None]] = anyio.sleep


SYSTEM_CLOCK = Clock()


class Unfound(StrEnum):
    """Why a resume sends an intent's requests again instead of adopting its batch."""

    NONE = "none"  # the provider shows no batch it could be
    AMBIGUOUS = "ambiguous"  # several fit and nothing tells them apart (Anthropic's)
    LOOKUP_FAILED = "lookup_failed"  # the provider's batch list could not be read


async def look_up(
    batcher: Batcher, http: BatchHttp, intent: Intent, within: float, clock: Clock
) -> tuple[list[str], str | None]:
    """The ids of the provider's batches that may be the intent's (created within `within`
    seconds of it), or none and why the list could not be read."""
    wait, tries = FIRST_WAIT_SECONDS, 1
    while True:
        try:
            return await batcher.find(http, intent, within), None
        except Failed as exc:
            if not exc.passing or tries >= LOOKUP_TRIES:
                return [], exc.reason
        await clock.sleep(wait)
        wait, tries = wait * 2, tries + 1


async def told_apart(
    batcher: Batcher,
    http: BatchHttp,
    intent: Intent,
    ids: Sequence[str],
    clock: Clock,
    *,
    until: float,
    poll_max: float,
    cap: int,
    going: Callable[[], bool],
) -> list[str]:
    """Of several batches that fit `intent`, the one whose results carry its nonce; none
    when every one ended without it (or cannot be read). Those still open are given back when
    `until` passes or a stop came (`going` false): still ambiguous. No batch is taken for
    the intent's by elimination: the kill may have come before its create left. Each is
    polled, backing off to `poll_max`, as a batch is."""
    left = list(ids)
    wait = FIRST_WAIT_SECONDS
    while left:
        for batch_id in list(left):
            try:
                polled = await batcher.poll(http, batch_id)
                if not polled.ended:
                    continue
                found = await batcher.results(http, batch_id, polled, cap)
            except Failed as exc:
                if not exc.passing or exc.stamp is Transport.TOO_LARGE:
                    left.remove(batch_id)  # it cannot be read: not one a resume could adopt
                continue
            if any(intent.nonce in result.custom_id for result in found):
                return [batch_id]
            left.remove(batch_id)
        if not left or not going() or clock.now() + wait > until:
            break
        await clock.sleep(wait)
        wait = min(wait * 2, poll_max)
    return left
