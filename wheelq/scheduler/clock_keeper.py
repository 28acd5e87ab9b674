"""The clock keeper: re-measures the node's offset to the Redis clock now and then.

Every ``clock_sync_interval_ms`` it reads the server's TIME and feeds the round trip
to the node's `RedisClock`, which keeps the best of its recent samples.
"""

from __future__ import annotations

import logging

from wheelq.runtime.clock import RedisClock, monotonic_ms
from wheelq.runtime.service import DEFAULT_MAX_PAUSE_MS, Service
from wheelq.store import ops
from wheelq.store.calls import Executor

log = logging.getLogger(__name__)


class ClockKeeper(Service):
    """Measures the offset to the Redis clock now and then (docs/architecture.md, invariant 6)."""

    name = "clock"
    title = "clock keeper"

    def __init__(
        self,
        executor: Executor,
        clock: RedisClock,
        interval_ms: int,
        *,
        max_pause_ms: int = DEFAULT_MAX_PAUSE_MS,
    ) -> None:
        super().__init__(clock, log, max_pause_ms=max_pause_ms)
        self._executor = executor
        self._clock = clock
        self._interval_ms = interval_ms

    async def sample(self) -> None:
        before = monotonic_ms()
        (server_ms,) = await self._executor.run([ops.server_time()])
        self._clock.add_sample(before, server_ms, monotonic_ms())

    async def first_wait(self) -> float:
        return self._interval_ms / 1000

    async def step(self) -> float:
        await self.sample()
        return self._interval_ms / 1000
