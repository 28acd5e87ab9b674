"""The clock keeper: re-measures the node's offset to the Redis clock now and then.

Every ``clock_sync_interval_ms`` it reads the server's TIME and feeds the round trip
to the node's `RedisClock`, which keeps the best of its recent samples.
"""

from __future__ import annotations

import logging

from redis.exceptions import RedisError

from wheelq.runtime.clock import RedisClock, monotonic_ms
from wheelq.runtime.outage import Outage
from wheelq.runtime.service import Service
from wheelq.store import ops
from wheelq.store.calls import AsyncExecutor

log = logging.getLogger(__name__)


class ClockKeeper(Service):
    """Measures the offset to the Redis clock now and then (DESIGN invariant 6)."""

    name = "clock"

    def __init__(self, executor: AsyncExecutor, clock: RedisClock, interval_ms: int) -> None:
        super().__init__()
        self._executor = executor
        self._clock = clock
        self._interval_ms = interval_ms

    async def sample(self) -> None:
        before = monotonic_ms()
        (server_ms,) = await self._executor.run([ops.server_time()])
        self._clock.add_sample(before, server_ms, monotonic_ms())

    async def _run(self) -> None:
        outage = Outage(log, "clock keeper")
        while not self.stopping:
            await self.sleep(self._interval_ms / 1000)
            try:
                await self.sample()
                outage.ok()
            except (RedisError, OSError) as exc:
                outage.failed(exc)  # logged once per outage; the next try is an interval later
