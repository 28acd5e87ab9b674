"""The production clocks, and `ClockKeeper` (docs/architecture.md, invariant 6)."""

from __future__ import annotations

import logging
import time
from typing import Protocol

from wheelq.core.clock import ClockSample, OffsetEstimator
from wheelq.runtime.service import DEFAULT_MAX_PAUSE_MS, Service
from wheelq.store import server
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
    """Measures the offset to the Redis clock every `interval_ms`."""

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
        before = self._clock.local_ms()
        (server_ms,) = await self._executor.run([server.server_time()])
        self._clock.add_sample(before, server_ms, self._clock.local_ms())

    async def first_wait(self) -> float:
        return self._interval_ms / 1000

    async def step(self) -> float:
        await self.sample()
        return self._interval_ms / 1000


def monotonic_ms() -> float:
    return time.monotonic_ns() / 1e6


def wall_ms() -> int:
    """The local wall clock in epoch ms (job ids only: they need no precision)."""
    return time.time_ns() // 1_000_000


class RedisClock:
    """Epoch ms on the Redis server's clock, read from the local monotonic clock."""

    def __init__(self) -> None:
        self._estimator = OffsetEstimator()
        self._fallback_offset_ms = wall_ms() - monotonic_ms()

    def now_ms(self) -> int:
        return int(self.now_ms_float())

    def now_ms_float(self) -> float:
        offset = self._estimator.offset_ms() if self._estimator.ready else self._fallback_offset_ms
        return monotonic_ms() + offset

    def local_ms(self) -> float:
        """The local monotonic ms clock that `add_sample`'s round trips are read from."""
        return monotonic_ms()

    def add_sample(self, before_ms: float, server_ms: float, after_ms: float) -> None:
        """Record one TIME round trip (`local_ms` before and after, server ms between)."""
        self._estimator.add(ClockSample(before_ms, server_ms, after_ms))

    @property
    def error_bound_ms(self) -> float:
        return self._estimator.error_bound_ms()


class LocalClock:
    """Epoch ms from the local monotonic clock: it never steps with the wall clock."""

    def __init__(self) -> None:
        self._offset_ms = wall_ms() - monotonic_ms()

    def now_ms(self) -> int:
        return int(monotonic_ms() + self._offset_ms)


class WallClock:
    """The local wall clock in epoch ms."""

    now_ms = staticmethod(wall_ms)  # one call less: the worker reads it twice per job
