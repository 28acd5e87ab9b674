"""Runner tasks: a worker's async handlers run one entry after another in a few tasks, not
a task per entry (docs/architecture.md, "The life of a job": Runners)."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

RUNS_BEFORE_YIELD = 64
"""Runs a runner takes back to back before it lets the loop run the rest (the readers, the
settler): handlers that never wait would otherwise hold it for a whole backlog, and the
reads and settles would no longer overlap the runs. Measured: 8 makes the reads and settles
small (34k jobs/s in process against 58-63k with a task per entry), 64 is the best of 8, 64,
256 and unbounded."""

Waits = Callable[[bool], None]
"""Told as a run waits (True) and goes on (False): `Runners.waits`."""


class Taker(Protocol):
    """What runs an entry taken by a runner (`wheelq.worker.in_flight.InFlightSet`)."""

    def run_taken(self, item: Any, task: asyncio.Task[None], waits: Waits) -> Awaitable[None]:
        """Run `item` in `task` (a runner's), telling `waits` as it waits and goes on."""
        ...


@dataclass(slots=True, eq=False)
class _Runner:
    task: asyncio.Task[None] | None = None
    wake: asyncio.Future[None] | None = None  # while parked


class Runners:
    """The runners of one worker's slots, shared by its topics (so entries start in the
    order the slots chose them).

    An entry started goes in a queue; a runner takes the next as its last run ends. While a
    run waits (its handler awaits, or the flow gate), another runner takes the entries
    started meanwhile, so each waiting run holds a runner as a task would; with none left,
    a runner parks until one comes. Handlers that never wait run back to back in one task.
    """

    __slots__ = ("_awake", "_parked", "_todo", "closing", "errors")

    def __init__(self) -> None:
        self._todo: deque[tuple[Taker, Any]] = deque()
        """Entries started (each counted in `Slots.tasks`) that wait for a runner."""
        self._parked: list[_Runner] = []
        self._awake = 0
        """Runners that will take the next entry: running or about to, neither parked nor
        waiting in a run."""
        self.closing = False
        """Set on stop: a runner with nothing to take ends rather than park."""
        self.errors = 0
        """Runs that raised an error of the worker's own (not a handler's: that is its job's
        outcome), logged (`failed`); the entry stays pending and is taken over, so it runs
        again."""

    def start(self, taker: Taker, item: Any) -> None:
        """Run `item` on a runner, in its turn."""
        self._todo.append((taker, item))
        if not self._awake:
            self._rouse()

    def drop(self, taker: Taker) -> list[Any]:
        """Take back `taker`'s entries not taken by a runner yet (they never run)."""
        mine = [item for who, item in self._todo if who is taker]
        if mine:
            rest = [(who, item) for who, item in self._todo if who is not taker]
            self._todo.clear()
            self._todo.extend(rest)
        return mine

    def close(self) -> None:
        """End the parked runners; the others end once nothing is left to take."""
        self.closing = True
        while self._parked:
            self._rouse()

    def failed(self) -> None:
        """Count and log the error being handled: the worker's own, raised running an entry
        (a runner's, a sync handler's thread's or task's), not the handler's."""
        self.errors += 1
        log.exception(
            "a worker failed to run an entry (it stays pending and is taken over after the "
            "visibility timeout)"
        )

    def waits(self, waiting: bool) -> None:
        """A runner's run waits (`waiting`) or goes on: while it waits, another runner
        takes the entries started meanwhile."""
        if waiting:
            self._awake -= 1
            if self._todo and not self._awake:
                self._rouse()
        else:
            self._awake += 1

    def _rouse(self) -> None:
        """One more runner takes entries: a parked one, or a new one."""
        self._awake += 1
        if self._parked:
            wake = self._parked.pop().wake
            assert wake is not None
            wake.set_result(None)
            return
        runner = _Runner()
        runner.task = asyncio.create_task(self._serve(runner), name="wheelq-runner")

    async def _serve(self, runner: _Runner) -> None:
        """Take started entries and run them, one after another; park when there are none."""
        todo, back_to_back, awake = self._todo, 0, True
        task = runner.task
        assert task is not None
        try:
            while True:
                if not todo:
                    if self.closing:
                        return
                    self._awake, awake = self._awake - 1, False
                    runner.wake = asyncio.get_running_loop().create_future()
                    self._parked.append(runner)
                    await runner.wake  # `_rouse` counts it awake again
                    awake, back_to_back = True, 0
                    continue
                taker, item = todo.popleft()
                try:
                    await taker.run_taken(item, task, self.waits)
                except Exception:  # not a handler's (its errors are its outcome): ours
                    self.failed()
                back_to_back += 1
                if back_to_back >= RUNS_BEFORE_YIELD and todo:
                    back_to_back = 0
                    await asyncio.sleep(0)  # the loop's turn: the readers, the settler
        finally:
            if awake:
                self._awake -= 1
            elif runner in self._parked:  # cancelled while parked
                self._parked.remove(runner)


async def waiting(awaitable: Awaitable[T], waits: Waits | None) -> T:
    """Await `awaitable`, telling `waits` (a runner's) around it."""
    if waits is None:
        return await awaitable
    waits(True)
    try:
        return await awaitable
    finally:
        waits(False)
