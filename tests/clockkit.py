"""Virtual time for the live client's `now`/`sleep` seams, so a timing test asserts exact
figures however busy the machine is.

`VirtualClock.sleep` returns once the clock has reached its end; `run` (a task the test starts
beside the code under test) moves the clock to the earliest pending end whenever every other
task is blocked, as trio's `MockClock(autojump_threshold=0)` does. So three calls that each
wait 3 s for a server behind a concurrency of one finish at 3, 6 and 9 s, in no real time.
Only waits made through the clock move it: a test's fake server and fake transport sleep on
it too, and nothing in such a test may wait on a real socket.
"""

from __future__ import annotations

import heapq
import itertools

import anyio


class VirtualClock:
    """A loop clock that jumps ahead to the next sleep's end once all tasks are blocked."""

    def __init__(self) -> None:
        self.time = 0.0
        self._ends: list[tuple[float, int, anyio.Event]] = []
        self._order = itertools.count()  # sleeps that end together wake in the order they began
        self._added: anyio.Event | None = None

    def now(self) -> float:
        return self.time

    async def sleep(self, seconds: float) -> None:
        woken = anyio.Event()
        heapq.heappush(self._ends, (self.time + max(0.0, seconds), next(self._order), woken))
        if self._added is not None:
            self._added.set()
        await woken.wait()

    async def run(self) -> None:
        """Move time forever (cancel it with the task group once the test's calls are done)."""
        while True:
            await anyio.wait_all_tasks_blocked()
            if not self._ends:
                self._added = anyio.Event()
                await self._added.wait()
                self._added = None
                continue
            end, _, woken = heapq.heappop(self._ends)
            self.time = max(self.time, end)
            woken.set()
