"""The `Clock` protocol, a manual clock for tests, and the offset math against Redis ``TIME``
(docs/architecture.md, invariant 6).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Protocol


class Clock(Protocol):
    """Milliseconds on the Redis server's clock (epoch based)."""

    def now_ms(self) -> int: ...


class ManualClock:
    """A clock that only moves when told to (tests)."""

    def __init__(self, start_ms: int = 0) -> None:
        self._now_ms = start_ms

    def now_ms(self) -> int:
        return self._now_ms

    def advance(self, delta_ms: int) -> None:
        self._now_ms += delta_ms

    def set(self, now_ms: int) -> None:
        self._now_ms = now_ms


@dataclass(frozen=True, slots=True)
class ClockSample:
    """One ``TIME`` round trip: local readings before and after, server reading in between."""

    local_before_ms: float
    server_ms: float
    local_after_ms: float

    @property
    def rtt_ms(self) -> float:
        return self.local_after_ms - self.local_before_ms

    @property
    def offset_ms(self) -> float:
        """server - local, assuming the server read its clock mid-way through the trip."""
        return self.server_ms - (self.local_before_ms + self.local_after_ms) / 2


class OffsetEstimator:
    """The offset of the sample with the smallest round trip among the last `keep` (NTP)."""

    def __init__(self, keep: int = 8) -> None:
        self._samples: deque[ClockSample] = deque(maxlen=keep)

    def add(self, sample: ClockSample) -> None:
        if sample.rtt_ms >= 0:
            self._samples.append(sample)

    @property
    def ready(self) -> bool:
        return bool(self._samples)

    def offset_ms(self) -> float:
        """Best offset (server - local) in ms; 0.0 before the first sample."""
        if not self._samples:
            return 0.0
        return min(self._samples, key=lambda s: s.rtt_ms).offset_ms

    def error_bound_ms(self) -> float:
        """Half the best round trip: how far off the offset can be."""
        if not self._samples:
            return float("inf")
        return min(s.rtt_ms for s in self._samples) / 2
