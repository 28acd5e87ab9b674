"""A fixed-bucket latency histogram cheap enough for the per-job hot paths.

The roles (scheduler, worker) observe one value per job: at tens of thousands
of jobs a second, an observation must be a bisect and two additions, with no
lock and no call into a metrics library. `prometheus_client` reads these
histograms at scrape time (``wheelq.metrics``), from another thread: it copies
the bucket list, which CPython does atomically, so a scrape never sees a bucket
count fall (it may see ``count`` one observation ahead of the buckets).

The bounds are in milliseconds and resolve 1 ms at the low end, where wheelq's
lateness lives (p99 of a few ms), and reach 10 s for outages and backlogs:

    1, 2, 3, ..., 10, 15, 20, 30, 50, 75, 100, 150, 250, 500, 1000, 2500, 5000, 10000, +Inf

A value falls in the first bucket whose upper bound is >= it, as Prometheus's
``le`` buckets do; negative values (a clock read on another host) go to the first.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise

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
"""Upper bounds (ms, inclusive) of every bucket but the last, which is +Inf."""


@dataclass(frozen=True, slots=True)
class HistogramSnapshot:
    """A copy of a histogram at one moment: per-bucket (not cumulative) counts.

    Attributes:
        bounds_ms: Upper bounds of all buckets but the +Inf one.
        counts: One count per bucket, the +Inf bucket last (``len(bounds_ms) + 1``).
        sum_ms: Sum of every observed value, ms.
    """

    bounds_ms: tuple[float, ...]
    counts: tuple[int, ...]
    sum_ms: float

    @property
    def count(self) -> int:
        """How many values were observed."""
        return sum(self.counts)

    def cumulative(self) -> list[tuple[float, int]]:
        """``(upper bound ms, values <= it)`` per bucket, ending with ``(inf, count)``."""
        out: list[tuple[float, int]] = []
        running = 0
        for bound, n in zip((*self.bounds_ms, float("inf")), self.counts, strict=True):
            running += n
            out.append((bound, running))
        return out

    def quantile_ms(self, q: float) -> float:
        """The upper bound of the bucket holding the `q` quantile (0 < q <= 1); nan when
        empty, inf when it lies in the +Inf bucket.

        Raises:
            ValueError: `q` is not in (0, 1].
        """
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
    """Counts of observed values (ms) per fixed bucket, with their count and sum.

    Args:
        bounds_ms: Strictly increasing upper bounds; the +Inf bucket is added.

    Raises:
        ValueError: `bounds_ms` is empty or not strictly increasing.
    """

    __slots__ = ("_bounds", "_counts", "sum_ms")

    def __init__(self, bounds_ms: Sequence[float] = LATENCY_BOUNDS_MS) -> None:
        bounds = tuple(float(b) for b in bounds_ms)
        if not bounds or any(a >= b for a, b in pairwise(bounds)):
            raise ValueError(f"bounds_ms must be strictly increasing and non-empty, got {bounds}")
        self._bounds = bounds
        self._counts = [0] * (len(bounds) + 1)
        self.sum_ms = 0.0

    def observe(self, value_ms: float) -> None:
        """Count one value (ms)."""
        self._counts[bisect_left(self._bounds, value_ms)] += 1
        self.sum_ms += value_ms

    def observe_all(self, values_ms: Iterable[float]) -> None:
        """Count several values (ms). Timings in whole ms repeat a lot, so equal values
        are counted at once: one bisect per distinct value."""
        self._add(0, 1, values_ms)

    def observe_since(self, now_ms: float, dues_ms: Iterable[int]) -> None:
        """Count ``now_ms - due`` for each due time (ms); as `observe_all`, one bisect per
        distinct due (jobs fired together mostly share one)."""
        self._add(now_ms, -1, dues_ms)

    def _add(self, offset: float, sign: int, values: Iterable[float]) -> None:
        """Count ``offset + sign * v`` for each v of `values`."""
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
    """A worker's handler timings: start lateness and run time, in ms, two histograms.

    The hot path appends each run's pair to `pending` (a list extended by a tuple, no
    call); `count` puts them into the histograms, one update per `batch` runs instead of
    two per run. A scrape sees them at most a batch late, or until the worker next holds
    nothing (it counts them then).
    """

    def __init__(self, batch: int = 1024) -> None:
        self.batch = batch
        self.start_lateness = Histogram()
        """Handler start - due, ms: on the worker's wall clock against the due time on the
        Redis clock, so it includes the skew between the two."""
        self.run_time = Histogram()
        """How long handlers ran, ms."""
        self.pending: list[int] = []
        """Start lateness and run time of each run not counted yet, in turn."""

    def count(self) -> None:
        """Put the pending timings into the histograms."""
        timings, self.pending = self.pending, []
        self.start_lateness.observe_all(timings[0::2])
        self.run_time.observe_all(timings[1::2])
