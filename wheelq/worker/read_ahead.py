"""How far a worker reads ahead of its slots (docs/architecture.md, "The life of a job")."""

from __future__ import annotations

READ_AHEAD_MAX = 1000  # Most entries held beyond the slots.

_WEIGHT = 1 / 8
_MIN_MEAN_MS = 0.001  # A mean below 1 µs (or 0: below the timer's resolution) counts as 1 µs.


class ReadAhead:
    """Entries to hold beyond `slots`: the ones the slots start within `horizon_ms`."""

    __slots__ = ("_horizon_ms", "_limit", "_slots", "extra", "mean_ms")

    def __init__(self, slots: int, horizon_ms: int, limit: int = READ_AHEAD_MAX) -> None:
        self._slots = slots
        self._horizon_ms = horizon_ms
        self._limit = limit
        self.mean_ms: float | None = None
        """Mean run time (exponential average), None before the first run."""
        self.extra = 0  # Entries to hold beyond the slots now.

    def ran(self, ms: float) -> None:
        """One run took `ms` (from its start in a slot to its end)."""
        mean = ms if self.mean_ms is None else self.mean_ms + (ms - self.mean_ms) * _WEIGHT
        self.mean_ms = mean
        if self._horizon_ms:
            wanted = self._slots * self._horizon_ms / max(mean, _MIN_MEAN_MS)
            self.extra = min(self._limit, int(wanted))
