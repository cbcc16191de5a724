"""An endpoint's concurrency slots: at most `total` attempts on the wire, in the order asked.

What `anyio.CapacityLimiter` gave the endpoint, for a fraction of its CPU: that limiter tracks
a set of borrowers and checks the caller's cancel scope on every acquire, and a waiter is an
`asyncio.Event` of its own. Here the attempt holding a slot is the one that took it (by
construction, never twice), so a count does, and a waiter is one future. Like the limiter,
a free slot never jumps a queue of waiters, a cancelled waiter leaves the queue (or hands on
the slot it was given as it was cancelled), and raising `total` lets waiters in at once while
lowering it only holds new attempts back. Runs on asyncio, as the endpoint's transport does.
"""

from __future__ import annotations

import asyncio
from collections import deque


class Slots:
    """At most `total` slots held at once (AIMD moves `total`); waiters served first come,
    first served."""

    __slots__ = ("_held", "_total", "_waiters")

    def __init__(self, total: int) -> None:
        self._total = total
        self._held = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def total(self) -> int:
        return self._total

    @total.setter
    def total(self, value: int) -> None:
        self._total = value
        self._wake()

    @property
    def held(self) -> int:
        return self._held

    async def acquire(self) -> None:
        """Take a slot: at once when one is free and nobody waits, else in turn."""
        if self._held < self._total and not self._waiters:
            self._held += 1
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():  # given a slot, then cancelled
                self.release()
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        self._held -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self._held < self._total:
            waiter = self._waiters.popleft()
            if not waiter.done():  # a cancelled one leaves the queue when its task resumes
                self._held += 1
                waiter.set_result(None)
