"""`BlockingReads.slots`: at most `connections` slots taken at once; a caller waits for
slots within its timeout and gets none past it; a slot given back wakes a waiter; a stop
ends every wait. No Redis: the executor is never asked for a connection here."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.support.waiting import until
from wheelq.store.connect import BlockingReads


def reads(connections: int) -> BlockingReads:
    executor: Any = object()  # slots never touch it
    return BlockingReads(executor, connections)


async def test_slots_are_taken_up_to_the_budget_and_a_late_caller_gets_none() -> None:
    r = reads(2)
    async with r.slots(1, 0) as a, r.slots(1, 0) as b:
        assert (a, b, r.in_use) == (1, 1, 2)
        async with r.slots(1, 0.01) as late:
            assert late == 0  # waited its timeout, then answers without a slot
    assert r.in_use == 0


async def test_a_cluster_read_takes_a_slot_per_shard_at_most_the_budget() -> None:
    r = reads(3)
    async with r.slots(8, 0) as taken:
        assert (taken, r.in_use) == (3, 3)


async def test_a_slot_given_back_goes_to_a_waiter() -> None:
    r = reads(1)
    held = asyncio.Event()
    release = asyncio.Event()

    async def holder() -> None:
        async with r.slots(1, 0) as taken:
            assert taken == 1
            held.set()
            await release.wait()

    async def waiter() -> int:
        await held.wait()
        async with r.slots(1, 60) as taken:
            return taken

    tasks = asyncio.gather(holder(), waiter())
    await until(lambda: r.waiting == 1, timeout_s=5, what="the wait for a slot")
    release.set()
    assert (await tasks)[1] == 1
    assert r.in_use == 0


async def test_a_stop_ends_the_wait_for_slots() -> None:
    r = reads(1)
    stop = asyncio.Event()
    async with r.slots(1, 0):
        waiting = asyncio.create_task(_take(r, stop))
        await until(lambda: r.waiting == 1, timeout_s=5, what="the wait for a slot")
        stop.set()
        assert await asyncio.wait_for(waiting, 5) == 0


async def _take(r: BlockingReads, stop: asyncio.Event) -> int:
    async with r.slots(1, 60, stop) as taken:
        return taken
