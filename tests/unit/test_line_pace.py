"""The line's sweep pace (`wheelq.scheduler.preloader.line_pace`): about half a lead a sweep,
within its fastest and slowest."""

from __future__ import annotations

from wheelq.scheduler.preloader import LINE_HALF_LEAD, LINE_PACE_MS, LINE_SLACK, line_pace


def test_a_sweep_that_fires_half_a_lead_or_more_sweeps_twice_as_often_down_to_the_fastest() -> None:
    fastest, slowest = LINE_PACE_MS
    assert line_pace(slowest, LINE_HALF_LEAD) == slowest // 2
    assert line_pace(fastest, 2 * LINE_HALF_LEAD) == fastest


def test_a_sweep_that_fires_little_sweeps_half_as_often_up_to_the_slowest() -> None:
    fastest, slowest = LINE_PACE_MS
    assert line_pace(fastest, 0) == fastest * 2
    assert line_pace(slowest, LINE_SLACK - 1) == slowest


def test_a_sweep_in_between_keeps_the_pace() -> None:
    assert line_pace(8, LINE_SLACK) == 8
    assert line_pace(8, LINE_HALF_LEAD - 1) == 8
