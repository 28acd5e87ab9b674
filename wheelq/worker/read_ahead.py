"""How far a worker reads ahead of its slots: ``slots * horizon_ms / mean run time`` entries,
at most `limit`, so fast handlers get large reads and slow ones hoard nothing
(docs/architecture.md, "The life of a job"). Example, horizon 10 ms: 10 slots of 0.05-ms
handlers give 2,000, capped at 1,000; of 200-ms handlers, 0.5, so none."""

from __future__ import annotations

READ_AHEAD_MAX = 1000
"""Most entries held beyond the slots (one read's worth per shard at most: bounded calls)."""

_WEIGHT = 1 / 8
_MIN_MEAN_MS = 0.001
"""A mean below 1 µs (or 0: below the timer's resolution) counts as 1 µs."""


class ReadAhead:
    """Entries to hold beyond `slots`: the ones the slots start within `horizon_ms`.

    Args:
        slots: The worker's concurrency.
        horizon_ms: How far ahead to read, in time (0: never beyond the slots).
        limit: Most entries beyond the slots.
    """

    __slots__ = ("_horizon_ms", "_limit", "_slots", "extra", "mean_ms")

    def __init__(self, slots: int, horizon_ms: int, limit: int = READ_AHEAD_MAX) -> None:
        self._slots = slots
        self._horizon_ms = horizon_ms
        self._limit = limit
        self.mean_ms: float | None = None
        """Mean run time (exponential average), None before the first run."""
        self.extra = 0
        """Entries to hold beyond the slots now."""

    def ran(self, ms: float) -> None:
        """One run took `ms` (from its start in a slot to its end)."""
        mean = ms if self.mean_ms is None else self.mean_ms + (ms - self.mean_ms) * _WEIGHT
        self.mean_ms = mean
        if self._horizon_ms:
            wanted = self._slots * self._horizon_ms / max(mean, _MIN_MEAN_MS)
            self.extra = min(self._limit, int(wanted))
