"""worker.read_ahead: entries held beyond the slots = slots * horizon / mean run time, capped;
nothing before the first run, nothing for slow handlers or a horizon of 0, and the mean follows
a change of workload."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wheelq.worker.read_ahead import LINE_READ_AHEAD_MS, READ_AHEAD_MAX, ReadAhead


def test_nothing_is_read_ahead_before_the_first_run() -> None:
    ahead = ReadAhead(slots=10, horizon_ms=10)
    assert (ahead.extra, ahead.mean_ms) == (0, None)


@pytest.mark.parametrize(
    ("slots", "horizon_ms", "run_ms", "extra"),
    [
        (10, 10, 1.0, 100),  # 10 slots start 100 one-ms jobs in 10 ms
        (10, 10, 4.0, 25),
        (2, 10, 5.0, 4),
        (10, 10, 200.0, 0),  # slow handlers: no read-ahead, so no hoarding
        (10, 10, 0.05, READ_AHEAD_MAX),  # 2,000 wanted, capped
        (10, 10, 0.0, READ_AHEAD_MAX),  # 0 ms: below the timer's resolution
        (10, 0, 1.0, 0),  # a horizon of 0: only as many as the slots
    ],
)
def test_extra_is_what_the_slots_start_within_the_horizon(
    slots: int, horizon_ms: int, run_ms: float, extra: int
) -> None:
    ahead = ReadAhead(slots=slots, horizon_ms=horizon_ms)
    for _ in range(3):
        ahead.ran(run_ms)
    assert ahead.extra == extra


def test_the_limit_caps_it() -> None:
    ahead = ReadAhead(slots=10, horizon_ms=10, limit=50)
    ahead.ran(1.0)
    assert ahead.extra == 50


def test_the_mean_follows_fast_jobs_turning_slow() -> None:
    ahead = ReadAhead(slots=10, horizon_ms=10)
    for _ in range(100):
        ahead.ran(0.0)
    assert ahead.extra == READ_AHEAD_MAX
    ahead.ran(200.0)  # one slow run is not a trend
    assert ahead.extra > 0
    for _ in range(30):
        ahead.ran(200.0)
    assert ahead.extra == 0


@given(st.lists(st.floats(min_value=0, max_value=10_000), min_size=1, max_size=50))
def test_extra_stays_within_zero_and_the_limit(runs: list[float]) -> None:
    ahead = ReadAhead(slots=10, horizon_ms=10)
    for ms in runs:
        ahead.ran(ms)
        assert 0 <= ahead.extra <= READ_AHEAD_MAX
    assert ahead.mean_ms is not None and min(runs) <= ahead.mean_ms <= max(runs)


def test_a_topic_with_a_due_line_shortens_the_horizon_until_none_has_one() -> None:
    """What is read ahead starts in read order, whatever the line decides after it: while a
    topic read orders its due jobs the horizon is `LINE_READ_AHEAD_MS`, sized at once."""
    ahead = ReadAhead(slots=10, horizon_ms=10)
    ahead.ran(1.0)
    assert (ahead.horizon_ms, ahead.extra) == (10, 100)
    ahead.line("a", True)
    ahead.line("b", True)
    assert (ahead.horizon_ms, ahead.extra) == (LINE_READ_AHEAD_MS, 10 * LINE_READ_AHEAD_MS)
    ahead.line("a", False)
    assert ahead.horizon_ms == LINE_READ_AHEAD_MS, "b still has one"
    ahead.line("b", False)
    assert (ahead.horizon_ms, ahead.extra) == (10, 100)


def test_a_horizon_set_below_the_lines_is_kept() -> None:
    ahead = ReadAhead(slots=10, horizon_ms=1)
    ahead.line("a", True)
    assert ahead.horizon_ms == 1
