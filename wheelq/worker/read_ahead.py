"""How far a worker reads ahead of its slots: enough to keep fast handlers busy between
reads, never so much that slow handlers hoard entries another worker could start.

A worker holds the entries its handlers run plus entries waiting for a slot. Reading no more
than it has free slots makes every read (and every ack batch) as small as its concurrency:
with 10 slots and handlers of 50 µs, about 8 jobs per round trip, so the round trips and not
the handlers set the pace. Reading a fixed number ahead instead (a "prefetch count") hoards:
with 1-second handlers, 100 entries wait in one busy worker while another has nothing.

`ReadAhead` sizes the read-ahead in time, not in entries: as many entries as the slots start
within `horizon_ms` at their recent pace, that is ``slots * horizon_ms / mean run time``,
at most `limit`. The mean is an exponential moving average of run times (weight 1/8), so it
follows a change of workload within a few dozen runs. Before the first run it is unknown and
the read-ahead is 0.

Worked example, horizon 10 ms: 10 slots and 0.05-ms handlers give 10 * 10 / 0.05 = 2,000,
capped at `limit` (1,000); 10 slots and 200-ms handlers give 0.5, so 0 entries: a worker
busy with slow jobs leaves the rest to idle workers. Entries read ahead are held like any
other: their claims are kept alive, and a stopping worker hands them on at once.

Pure arithmetic, no clock: the caller passes each run's duration. Not thread-safe (the
worker's event loop owns it).
"""

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
