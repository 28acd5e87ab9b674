"""How far a worker reads ahead of its slots (docs/architecture.md, "The life of a job")."""

from __future__ import annotations

READ_AHEAD_MAX = 1000  # Most entries held beyond the slots.
LINE_READ_AHEAD_MS = 2
"""The horizon, at most, while a topic the worker reads orders its due jobs
(docs/architecture.md, "The due line"): what a worker has read ahead starts in read order
whatever the line decides after it, so the line's order reaches the handlers within this much
work."""

_WEIGHT = 1 / 8
_MIN_MEAN_MS = 0.001  # A mean below 1 µs (or 0: below the timer's resolution) counts as 1 µs.


class ReadAhead:
    """Entries to hold beyond `slots`: the ones the slots start within `horizon_ms`."""

    __slots__ = ("_horizon_ms", "_limit", "_lined", "_set_ms", "_slots", "extra", "mean_ms")

    def __init__(self, slots: int, horizon_ms: int, limit: int = READ_AHEAD_MAX) -> None:
        self._slots = slots
        self._set_ms = horizon_ms  # the setting (read_ahead_ms)
        self._horizon_ms = horizon_ms
        self._limit = limit
        self._lined: set[str] = set()  # topics read whose shards order their due jobs
        self.mean_ms: float | None = None
        """Mean run time (exponential average), None before the first run."""
        self.extra = 0  # Entries to hold beyond the slots now.

    @property
    def horizon_ms(self) -> int:
        """The horizon now: the setting, or `LINE_READ_AHEAD_MS` while a topic has a line."""
        return self._horizon_ms

    def line(self, topic: str, on: bool) -> None:
        """Whether `topic` orders its due jobs now (its due line): while any topic read does,
        the horizon is at most `LINE_READ_AHEAD_MS`."""
        if on:
            self._lined.add(topic)
        else:
            self._lined.discard(topic)
        horizon = min(self._set_ms, LINE_READ_AHEAD_MS) if self._lined else self._set_ms
        if horizon != self._horizon_ms:
            self._horizon_ms = horizon
            if self.mean_ms is not None:
                self._size(self.mean_ms)

    def ran(self, ms: float) -> None:
        """One run took `ms` (from its start in a slot to its end)."""
        mean = ms if self.mean_ms is None else self.mean_ms + (ms - self.mean_ms) * _WEIGHT
        self.mean_ms = mean
        self._size(mean)

    def _size(self, mean: float) -> None:
        if self._horizon_ms:
            wanted = self._slots * self._horizon_ms / max(mean, _MIN_MEAN_MS)
            self.extra = min(self._limit, int(wanted))
        else:
            self.extra = 0
