"""A fixed-bucket latency histogram (ms) cheap enough for the hot paths: a bisect, two
additions, no lock; buckets are Prometheus ``le`` buckets.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import accumulate, pairwise

LATENCY_BOUNDS_MS: tuple[float, ...] = (
    *range(1, 11),
    15,
    20,
    30,
    50,
    75,
    100,
    150,
    250,
    500,
    1000,
    2500,
    5000,
    10_000,
)
"""Upper bounds (ms, inclusive) of every bucket but +Inf: 1 ms steps where lateness lives."""


@dataclass(frozen=True, slots=True)
class HistogramSnapshot:
    """A copy of a histogram at one moment: per-bucket (not cumulative) counts, +Inf last."""

    bounds_ms: tuple[float, ...]
    counts: tuple[int, ...]
    sum_ms: float

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[float, int]]:
        """``(upper bound ms, values <= it)`` per bucket, ending with ``(inf, count)``."""
        return list(zip((*self.bounds_ms, float("inf")), accumulate(self.counts), strict=True))

    def quantile_ms(self, q: float) -> float:
        """The upper bound of the bucket of the `q` quantile; nan when empty."""
        if not 0 < q <= 1:
            raise ValueError(f"q must be in (0, 1], got {q!r}")
        total = self.count
        if total == 0:
            return float("nan")
        rank = q * total
        for bound, below in self.cumulative():
            if below >= rank:
                return bound
        return float("inf")  # pragma: no cover (the last cumulative count is the total)


class Histogram:
    """Counts of observed values (ms) per bucket of `bounds_ms` (strictly increasing) and +Inf."""

    __slots__ = ("_bounds", "_counts", "sum_ms")

    def __init__(self, bounds_ms: Sequence[float] = LATENCY_BOUNDS_MS) -> None:
        bounds = tuple(float(b) for b in bounds_ms)
        if not bounds or any(a >= b for a, b in pairwise(bounds)):
            raise ValueError(f"bounds_ms must be strictly increasing and non-empty, got {bounds}")
        self._bounds = bounds
        self._counts = [0] * (len(bounds) + 1)
        self.sum_ms = 0.0

    def observe(self, value_ms: float) -> None:
        self._counts[bisect_left(self._bounds, value_ms)] += 1
        self.sum_ms += value_ms

    def observe_all(self, values_ms: Iterable[float]) -> None:
        """Count several values (ms): one bisect per distinct value (whole ms repeat a lot)."""
        self._add(0, 1, values_ms)

    def observe_since(self, now_ms: float, dues_ms: Iterable[int]) -> None:
        """Count ``now_ms - due`` for each due time (ms), one bisect per distinct due."""
        self._add(now_ms, -1, dues_ms)

    def _add(self, offset: float, sign: int, values: Iterable[float]) -> None:
        counts, bounds, total = self._counts, self._bounds, 0.0
        for v, n in Counter(values).items():
            value = offset + sign * v
            counts[bisect_left(bounds, value)] += n
            total += value * n
        self.sum_ms += total

    @property
    def count(self) -> int:
        return sum(self._counts)

    def snapshot(self) -> HistogramSnapshot:
        """A consistent-enough copy for a scrape (see the module docstring)."""
        return HistogramSnapshot(self._bounds, tuple(self._counts[:]), self.sum_ms)


class RunTimings:
    """A worker's handler timings (ms): the hot path extends `pending`, `count` folds them in."""

    def __init__(self, batch: int = 1024) -> None:
        self.batch = batch
        self.start_lateness: dict[int, Histogram] = {}
        """Handler start - due, ms (worker's clock against the Redis clock: skew included), by
        the jobs' priority (0-9: a bounded label set)."""
        self.run_time = Histogram()
        self.pending: list[int] = []
        """Start lateness, run time and priority of each run not counted yet, in turn."""

    def count(self) -> None:
        """Put the pending timings into the histograms."""
        timings, self.pending = self.pending, []
        lateness, priorities = timings[0::3], timings[2::3]
        self.run_time.observe_all(timings[1::3])
        kinds = set(priorities)
        if len(kinds) == 1:  # the usual case: one priority in a batch
            self._late(kinds.pop()).observe_all(lateness)
            return
        for priority in kinds:
            self._late(priority).observe_all(
                ms for ms, p in zip(lateness, priorities, strict=True) if p == priority
            )

    def _late(self, priority: int) -> Histogram:
        found = self.start_lateness.get(priority)
        if found is None:
            found = self.start_lateness[priority] = Histogram()
        return found
