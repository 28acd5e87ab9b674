"""The production clocks: the only place wheelq reads the machine's clocks.

`RedisClock` is the local monotonic clock plus a measured offset to the
Redis server's ``TIME`` (docs/architecture.md, invariant 6): it never jumps with NTP
steps of the local wall clock, and due times computed on the server agree
with it to within half the best measured round trip.
"""

from __future__ import annotations

import time

from wheelq.core.clock import ClockSample, OffsetEstimator


def monotonic_ms() -> float:
    """The local monotonic clock in ms (arbitrary origin)."""
    return time.monotonic_ns() / 1e6


def wall_ms() -> int:
    """The local wall clock in epoch ms (job ids only: they need no precision)."""
    return time.time_ns() // 1_000_000


class RedisClock:
    """Epoch ms on the Redis server's clock, read from the local monotonic clock.

    Before the first `add_sample` it falls back to the local wall clock.
    """

    def __init__(self) -> None:
        self._estimator = OffsetEstimator()
        self._fallback_offset_ms = wall_ms() - monotonic_ms()

    def now_ms(self) -> int:
        return int(self.now_ms_float())

    def now_ms_float(self) -> float:
        offset = self._estimator.offset_ms() if self._estimator.ready else self._fallback_offset_ms
        return monotonic_ms() + offset

    def local_ms(self) -> float:
        """The local clock this clock adds its offset to (monotonic, ms, arbitrary origin):
        what the two ends of a round trip given to `add_sample` must be read from."""
        return monotonic_ms()

    def add_sample(self, before_ms: float, server_ms: float, after_ms: float) -> None:
        """Record one TIME round trip (`local_ms` before and after, server ms between)."""
        self._estimator.add(ClockSample(before_ms, server_ms, after_ms))

    @property
    def error_bound_ms(self) -> float:
        return self._estimator.error_bound_ms()


class LocalClock:
    """Epoch ms read from the local monotonic clock: monotone, it never steps with the wall
    clock. A worker's parts time their intervals on it."""

    def __init__(self) -> None:
        self._offset_ms = wall_ms() - monotonic_ms()

    def now_ms(self) -> int:
        return int(monotonic_ms() + self._offset_ms)


class WallClock:
    """The local wall clock in epoch ms."""

    now_ms = staticmethod(wall_ms)  # one call less: the worker reads it twice per job
