"""The clock keeper: re-measures the node's offset to the Redis clock now and then.

Every ``clock_sync_interval_ms`` it reads the server's TIME and feeds the round trip
to the node's `RedisClock`, which keeps the best of its recent samples.
"""

from __future__ import annotations

import logging
from typing import Protocol

from wheelq.runtime.service import DEFAULT_MAX_PAUSE_MS, Service
from wheelq.store import nodes
from wheelq.store.executor import Executor

log = logging.getLogger(__name__)


class SyncedClock(Protocol):
    """A clock corrected by measured round trips to the server (`RedisClock`, or a fake)."""

    def now_ms(self) -> int: ...

    def local_ms(self) -> float:
        """The local clock the offset is applied to (monotonic ms)."""
        ...

    def add_sample(self, before_ms: float, server_ms: float, after_ms: float) -> None:
        """Record one round trip: `local_ms` before and after, the server's ms between."""
        ...


class ClockKeeper(Service):
    """Measures the offset to the Redis clock now and then (docs/architecture.md, invariant 6).

    A sample is a round trip timed on the local monotonic clock, not on the corrected
    clock (which is what is being measured). It reads that local clock from the clock
    it corrects, `SyncedClock.local_ms`, so both ends of a sample and the offset
    computed from it are on the one clock `now_ms()` adds the offset to; a test passes
    a fake clock and decides what each round trip took.

    Args:
        executor: Sends the TIME call.
        clock: The clock to correct; also the clock this part's pauses are logged on.
        interval_ms: Between samples (``clock_sync_interval_ms``).
        max_pause_ms: Longest pause after failed samples (``failure_pause_max_ms``).
    """

    name = "clock"
    title = "clock keeper"

    def __init__(
        self,
        executor: Executor,
        clock: SyncedClock,
        interval_ms: int,
        *,
        max_pause_ms: int = DEFAULT_MAX_PAUSE_MS,
    ) -> None:
        super().__init__(clock, log, max_pause_ms=max_pause_ms)
        self._executor = executor
        self._clock = clock
        self._interval_ms = interval_ms

    async def sample(self) -> None:
        """Read TIME once and give the clock the round trip."""
        before = self._clock.local_ms()
        (server_ms,) = await self._executor.run([nodes.server_time()])
        self._clock.add_sample(before, server_ms, self._clock.local_ms())

    async def first_wait(self) -> float:
        return self._interval_ms / 1000

    async def step(self) -> float:
        await self.sample()
        return self._interval_ms / 1000
