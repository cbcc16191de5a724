"""The call engine: one anyio task group per run, both sides of every case at once.

Each side has its own producer bounded by that endpoint's concurrency, so a slow reference
never starves the candidate. Finished exchanges go through one memory stream to a single
writer, which keeps memory bounded by the concurrency rather than the size of the suite and
keeps every ledger line whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from runner.errors import ParallaxError, first_cause
from runner.model import Case, Endpoint, Exchange
from runner.shutdown import NotStarted

Sink = Callable[[Sequence[Exchange]], None]


async def _writer(receive: MemoryObjectReceiveStream[Exchange], sink: Sink) -> None:
    """Drain whatever is ready into one batch, so a busy run writes in few syscalls."""
    async with receive:
        async for first in receive:
            batch = [first]
            while True:
                try:
                    batch.append(receive.receive_nowait())
                except (anyio.WouldBlock, anyio.EndOfStream):
                    break
            sink(batch)


async def _produce(
    endpoint: Endpoint,
    side: str,
    work: Iterable[tuple[Case, int]],
    send: MemoryObjectSendStream[Exchange],
    in_flight: int,
) -> None:
    """`in_flight` workers share one iterator of this side's work: no task spawned per call."""
    items = iter(work)

    async def worker() -> None:
        for case, sample in items:  # next() never awaits, so workers cannot interleave in it
            try:
                exchange = await endpoint.call(case, side, sample)
            except NotStarted:  # the run is stopping: this worker's work is done
                return
            try:  # the fast path skips a checkpoint per call; a full buffer still waits
                send.send_nowait(exchange)
            except anyio.WouldBlock:
                await send.send(exchange)

    async with send, anyio.create_task_group() as calls:
        for i in range(in_flight):
            calls.start_soon(worker, name=f"{side}:worker-{i}")


async def execute(
    work: Mapping[str, Iterable[tuple[Case, int]]],
    endpoints: Mapping[str, Endpoint],
    sink: Sink,
    *,
    in_flight: Mapping[str, int],
) -> None:
    """Call every (case, sample) of `work[side]` on `endpoints[side]`; results go to `sink`."""
    send, receive = anyio.create_memory_object_stream[Exchange](
        max_buffer_size=max(1, sum(in_flight.values()))
    )
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(_writer, receive, sink, name="ledger-writer")
            async with send:
                for side, items in work.items():
                    group.start_soon(
                        _produce,
                        endpoints[side],
                        side,
                        items,
                        send.clone(),
                        in_flight[side],
                        name=f"producer:{side}",
                    )
    except BaseExceptionGroup as errors:
        # A bad input met mid-run (a fixture edited under the run) is one clear error, not a
        # group of it and the broken streams it left behind.
        found = errors.subgroup(lambda exc: isinstance(exc, ParallaxError))
        if found is None:
            raise
        raise first_cause(found) from None
