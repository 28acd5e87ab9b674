"""runtime.eager and the slots it leans on: where Python has eager tasks (3.12+) a job that
does not wait runs to its end inside `start`, with its own task current; elsewhere it is an
ordinary task. A lane whose entries end inside `start_next` (and call `fill` again) gets
every slot filled, without recursion."""

from __future__ import annotations

import asyncio
import sys
from collections import deque

from wheelq.runtime import eager
from wheelq.worker.slots import Slots


async def test_a_coroutine_that_does_not_wait_ends_inside_start_where_it_can() -> None:
    seen: list[object] = []

    async def quick() -> int:
        seen.append(asyncio.current_task())
        return 7

    task = eager.start(quick(), "quick")
    assert task.done() is (sys.version_info >= (3, 12))
    assert await task == 7
    assert seen == [task], "the job's own task is current while it runs"


async def test_a_timeout_inside_the_job_cancels_the_job_not_the_caller() -> None:
    async def slow() -> str:
        try:
            async with asyncio.timeout(0.01):
                await asyncio.sleep(10)
        except TimeoutError:
            return "timed out"
        return "not"

    task = eager.start(slow(), "slow")
    assert await task == "timed out"
    assert not asyncio.current_task().cancelling()  # type: ignore[union-attr]


class EagerLane:
    """Entries that end inside `start_next` and free their slot there, as an eager job's."""

    def __init__(self, slots: Slots, entries: int) -> None:
        self.slots = slots
        self.waiting = deque(range(entries))
        self.started: list[int] = []
        self.depth = 0
        self.deepest = 0

    def ready(self) -> bool:
        return bool(self.waiting) and self.slots.tasks < self.slots.concurrency

    def drained(self) -> bool:
        return not self.waiting

    def start_next(self) -> None:
        self.depth += 1
        self.deepest = max(self.deepest, self.depth)
        self.slots.tasks += 1
        self.started.append(self.waiting.popleft())
        self.slots.tasks -= 1  # it ended at once
        self.slots.fill()  # as `InFlightSet._end` does
        self.depth -= 1


def test_entries_that_end_inside_start_fill_every_slot_without_recursion() -> None:
    slots = Slots(4)
    lane = EagerLane(slots, 5000)  # far past the recursion limit, were fill re-entered
    slots.add(lane)
    slots.fill()
    assert lane.started == list(range(5000))
    assert lane.deepest == 1
