"""core.clock: ManualClock, the offset/RTT arithmetic of one TIME sample, and the
min-RTT filter over the last few samples."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wheelq.core.clock import Clock, ClockSample, ManualClock, OffsetEstimator


def sample(before: float, rtt: float, offset: float) -> ClockSample:
    """A sample whose round trip is `rtt` and whose server reading is `offset` past the middle."""
    return ClockSample(before, before + rtt / 2 + offset, before + rtt)


# --- ManualClock ------------------------------------------------------------------------------


def test_manual_clock_moves_only_when_told() -> None:
    clock = ManualClock()
    assert clock.now_ms() == 0
    assert clock.now_ms() == 0
    clock.advance(15)
    assert clock.now_ms() == 15
    clock.advance(0)
    assert clock.now_ms() == 15
    clock.set(1_000)
    assert clock.now_ms() == 1_000
    clock.set(10)  # a manual clock may be set back
    assert clock.now_ms() == 10


def test_manual_clock_start_and_protocol() -> None:
    clock: Clock = ManualClock(1_700_000_000_000)
    assert clock.now_ms() == 1_700_000_000_000


# --- ClockSample ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("before", "server", "after", "rtt", "offset"),
    [
        (100, 1_050, 110, 10, 945),
        (0, 0, 0, 0, 0),
        (1_000, 500, 1_004, 4, -502),
        (1.0, 10.0, 2.0, 1.0, 8.5),
        (5, 5, 5, 0, 0),
        (10, 0, 4, -6, -7),  # a backwards local clock gives a negative round trip
    ],
)
def test_clock_sample_math(
    before: float, server: float, after: float, rtt: float, offset: float
) -> None:
    s = ClockSample(before, server, after)
    assert s.rtt_ms == rtt
    assert s.offset_ms == offset


@settings(max_examples=200)
@given(
    st.integers(0, 2**40),
    st.integers(0, 10_000),
    st.integers(-(2**40), 2**40),
)
def test_clock_sample_recovers_the_offset_of_a_symmetric_trip(
    before: int, half_rtt: int, offset: int
) -> None:
    s = ClockSample(before, before + half_rtt + offset, before + 2 * half_rtt)
    assert s.rtt_ms == 2 * half_rtt
    assert s.offset_ms == offset


# --- OffsetEstimator --------------------------------------------------------------------------


def test_estimator_before_any_sample() -> None:
    est = OffsetEstimator()
    assert not est.ready
    assert est.offset_ms() == 0.0
    assert est.error_bound_ms() == math.inf


def test_estimator_picks_the_min_rtt_sample() -> None:
    est = OffsetEstimator()
    est.add(sample(0, 10, 100))
    assert est.ready
    assert est.offset_ms() == 100
    assert est.error_bound_ms() == 5
    est.add(sample(20, 2, 300))
    est.add(sample(40, 6, 200))
    assert est.offset_ms() == 300
    assert est.error_bound_ms() == 1


def test_estimator_accepts_a_zero_rtt_and_ignores_negative_ones() -> None:
    est = OffsetEstimator()
    est.add(ClockSample(10, 0, 4))  # rtt -6
    assert not est.ready
    assert est.offset_ms() == 0.0
    est.add(sample(0, 4, 50))
    est.add(ClockSample(100, 0, 90))  # rtt -10 would win a plain min
    assert est.offset_ms() == 50
    assert est.error_bound_ms() == 2
    est.add(sample(200, 0, 70))
    assert est.offset_ms() == 70
    assert est.error_bound_ms() == 0


def test_estimator_ages_out_old_samples() -> None:
    est = OffsetEstimator(keep=3)
    est.add(sample(0, 1, 111))  # best, then pushed out by three worse ones
    est.add(sample(10, 9, 222))
    est.add(sample(20, 5, 333))
    assert est.offset_ms() == 111
    est.add(sample(30, 7, 444))
    assert est.offset_ms() == 333
    assert est.error_bound_ms() == 2.5


def test_estimator_keeps_eight_samples_by_default() -> None:
    est = OffsetEstimator()
    est.add(sample(0, 1, 1))
    for i in range(7):
        est.add(sample(10 * (i + 1), 4, 2))
    assert est.offset_ms() == 1
    est.add(sample(100, 4, 2))
    assert est.offset_ms() == 2


def test_negative_rtt_samples_do_not_push_good_ones_out() -> None:
    est = OffsetEstimator(keep=2)
    est.add(sample(0, 2, 10))
    for _ in range(5):
        est.add(ClockSample(10, 0, 5))
    assert est.offset_ms() == 10


@settings(max_examples=200)
@given(
    st.integers(1, 10),
    st.lists(
        st.tuples(st.integers(-5, 50), st.integers(-1_000, 1_000)),
        min_size=0,
        max_size=30,
    ),
)
def test_estimator_matches_a_reference_filter(keep: int, trips: list[tuple[int, int]]) -> None:
    est = OffsetEstimator(keep=keep)
    for i, (rtt, offset) in enumerate(trips):
        est.add(sample(100 * i, 2 * rtt, offset))
    kept = [(2 * rtt, offset) for rtt, offset in trips if rtt >= 0][-keep:]
    if not kept:
        assert (est.ready, est.offset_ms()) == (False, 0.0)
        return
    best_rtt = min(rtt for rtt, _ in kept)
    assert est.ready
    assert est.error_bound_ms() == best_rtt / 2
    assert est.offset_ms() in {offset for rtt, offset in kept if rtt == best_rtt}
