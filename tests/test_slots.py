"""An endpoint's concurrency slots (`runner.client.slots.Slots`): bounded, first come first
served, and never lost or doubled by a cancelled waiter."""

from __future__ import annotations

import asyncio

import pytest

from runner.client.slots import Slots

pytestmark = pytest.mark.anyio  # on asyncio (conftest), as the endpoint's transport runs


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_waiters_are_served_in_the_order_they_asked() -> None:
    slots = Slots(2)
    order: list[int] = []

    async def take(i: int) -> None:
        await slots.acquire()
        order.append(i)

    await slots.acquire()
    await slots.acquire()
    tasks = [asyncio.create_task(take(i)) for i in range(4)]
    await _settle()
    assert order == []
    for expected in ([0], [0, 1], [0, 1, 2], [0, 1, 2, 3]):
        slots.release()
        await _settle()
        assert order == expected
    await asyncio.gather(*tasks)
    assert slots.held == 2


async def test_a_free_slot_does_not_jump_the_queue() -> None:
    """A slot freed while others wait goes to the first waiter, not to a newcomer."""
    slots = Slots(1)
    await slots.acquire()
    first = asyncio.create_task(slots.acquire())
    await _settle()
    slots.release()  # handed to `first`, which has not run yet
    newcomer = asyncio.create_task(slots.acquire())
    await _settle()
    assert first.done()
    assert not newcomer.done()
    slots.release()
    await newcomer
    assert slots.held == 1


async def test_a_cancelled_waiter_leaves_the_queue() -> None:
    slots = Slots(1)
    await slots.acquire()
    gone = asyncio.create_task(slots.acquire())
    after = asyncio.create_task(slots.acquire())
    await _settle()
    gone.cancel()
    await _settle()
    assert gone.cancelled()
    slots.release()
    await after
    assert slots.held == 1


async def test_a_waiter_cancelled_as_it_is_given_a_slot_hands_it_on() -> None:
    """Given a slot and cancelled before it ran: the slot goes to the next waiter."""
    slots = Slots(1)
    await slots.acquire()
    given = asyncio.create_task(slots.acquire())
    after = asyncio.create_task(slots.acquire())
    await _settle()
    slots.release()  # `given` now holds the slot but has not resumed
    given.cancel()
    await _settle()
    assert given.cancelled()
    assert after.done()
    assert slots.held == 1


async def test_raising_the_total_lets_waiters_in_and_lowering_it_holds_new_ones() -> None:
    """AIMD: a cut holds new attempts back until enough slots come back; a raise lets
    waiters in at once."""
    slots = Slots(4)
    for _ in range(4):
        await slots.acquire()
    slots.total = 2
    waiter = asyncio.create_task(slots.acquire())
    for _ in range(2):
        slots.release()
    await _settle()
    assert not waiter.done()  # 2 held of 2
    slots.total = 3
    await _settle()
    assert waiter.done()
    assert slots.held == 3
