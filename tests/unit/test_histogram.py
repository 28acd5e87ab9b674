"""The fixed-bucket histogram the roles observe per job: buckets, count, sum, quantiles."""

from __future__ import annotations

import math

import pytest

from wheelq.core.histogram import LATENCY_BOUNDS_MS, Histogram


def test_bounds_resolve_one_ms_at_the_low_end_and_reach_ten_seconds() -> None:
    assert LATENCY_BOUNDS_MS[:10] == tuple(range(1, 11))
    assert LATENCY_BOUNDS_MS[-1] == 10_000


@pytest.mark.parametrize(
    ("value_ms", "bucket"),
    [(-3, 0), (0, 0), (1, 0), (1.5, 1), (2, 1), (10, 9), (10.1, 10), (10_000, 22), (10_001, 23)],
)
def test_a_value_falls_in_the_first_bucket_whose_bound_is_at_least_it(
    value_ms: float, bucket: int
) -> None:
    hist = Histogram()
    hist.observe(value_ms)
    counts = hist.snapshot().counts
    assert counts[bucket] == 1
    assert sum(counts) == 1


def test_count_sum_and_cumulative_buckets() -> None:
    hist = Histogram([1, 5])
    hist.observe_all([0, 1, 2, 5, 7])
    snap = hist.snapshot()
    assert snap.count == hist.count == 5
    assert snap.sum_ms == 15
    assert snap.cumulative() == [(1.0, 2), (5.0, 4), (math.inf, 5)]


def test_observe_since_counts_each_due_as_observe_would() -> None:
    dues = [100, 100, 99, 95, 100, 90, 50]
    by_one, together = Histogram([1, 5]), Histogram([1, 5])
    by_one.observe_all([100 - due for due in dues])
    together.observe_since(100, dues)
    assert together.snapshot() == by_one.snapshot()
    assert together.snapshot().counts == (4, 1, 2)


def test_a_snapshot_does_not_move_with_later_observations() -> None:
    hist = Histogram([1])
    snap = hist.snapshot()
    hist.observe(0)
    assert snap.count == 0
    assert hist.snapshot().count == 1


def test_quantile_is_the_bound_of_the_bucket_that_holds_it() -> None:
    hist = Histogram()
    hist.observe_all([1] * 50 + [3] * 49 + [400])
    snap = hist.snapshot()
    assert snap.quantile_ms(0.5) == 1
    assert snap.quantile_ms(0.99) == 3
    assert snap.quantile_ms(1.0) == 500
    assert math.isnan(Histogram().snapshot().quantile_ms(0.5))
    with pytest.raises(ValueError, match=r"q must be in \(0, 1\], got 0"):
        snap.quantile_ms(0)


@pytest.mark.parametrize("bounds", [[], [1, 1], [2, 1]])
def test_bounds_must_increase(bounds: list[float]) -> None:
    with pytest.raises(ValueError, match="bounds_ms must be strictly increasing"):
        Histogram(bounds)
