"""The dashboard's charts: drawing (round axes, gaps, escaping, what a screen reader is
told; the forecast's bars), the service's own samples (rates between samples, resets,
retention, cost) and the Prometheus queries (the Grafana dashboard's expressions)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from wheelq.web.charts import Chart, Series, bars, nice_ceiling, runs, svg, ticks
from wheelq.web.prometheus import CHARTS, expression
from wheelq.web.samples import (
    COARSE_MS,
    FINE_KEEP_MS,
    Sample,
    TopicHistory,
    interval_s,
    sample_charts,
)

ROOT = Path(__file__).resolve().parents[2]


def test_bars_share_one_scale_and_say_every_count() -> None:
    drawn = bars("f", "Due <soon>", [("next 10 s", 50), ("next 60 s", 200), ("<b>", 0)])
    widths = [float(w) for w in re.findall(r'<rect class="s0"[^>]* width="([\d.]+)"', drawn)]
    assert widths[0] * 4 == pytest.approx(widths[1]) and widths[2] == 0
    counts = re.findall(r'id="bars-f-(\d)"[^>]*>([^<]*)<', drawn)
    assert counts == [("0", "50"), ("1", "200"), ("2", "0")]
    desc = re.search(r"<desc[^>]*>(.*?)</desc>", drawn)
    assert desc is not None and desc[1] == "next 10 s: 50, next 60 s: 200, &lt;b&gt;: 0"
    assert "<b>" not in drawn and "Due &lt;soon&gt;" in drawn
    assert 'role="img"' in drawn and 'aria-labelledby="bars-f-title bars-f-desc"' in drawn
    nothing = bars("z", "Z", [("a", 0), ("b", 0)])  # all zero: no bar, no division by 0
    assert re.findall(r'width="([\d.]+)" height', nothing) == ["0.0", "0.0"]


@pytest.mark.parametrize(
    ("value", "ceiling"),
    [(0, 0), (-3, 0), (0.7, 1), (1, 1), (1.01, 2), (3, 5), (7, 10), (12, 20), (4500, 5000)],
)
def test_the_value_axis_tops_at_a_round_number(value: float, ceiling: float) -> None:
    assert nice_ceiling(value) == ceiling
    assert ticks(nice_ceiling(value))[-1] == ceiling


def test_a_gap_breaks_the_line() -> None:
    points = [(0, 1.0), (1, None), (2, 2.0), (3, 3.0), (4, float("nan")), (5, 4.0)]
    assert runs(points) == [[(0, 1.0)], [(2, 2.0), (3, 3.0)], [(5, 4.0)]]
    drawn = svg(Chart("c", "C", "jobs", 0, 5, [Series("a", points)]))
    assert drawn.count("<polyline") == 1 and drawn.count("<circle") == 2


def test_names_are_escaped_and_the_description_says_the_latest_values() -> None:
    chart = Chart(
        "k",
        'Fired <script>alert(1)</script> "x"',
        "jobs/s",
        0,
        60_000,
        [Series("<b>fired</b>", [(0, 1.0), (30_000, 2.5)]), Series("none", [(0, None)])],
    )
    drawn = svg(chart)
    assert "<script>" not in drawn and "<b>" not in drawn
    assert "&lt;script&gt;" in drawn
    desc = re.search(r"<desc[^>]*>(.*?)</desc>", drawn)
    assert desc is not None and desc[1] == "latest: &lt;b&gt;fired&lt;/b&gt; 2.5, none none"
    assert 'role="img"' in drawn and "aria-labelledby" in drawn
    empty = svg(Chart("e", "E", "ms", 0, 1, [Series("a", [(0, None)])]))
    assert "no data in this range" in empty


def sample(at_ms: int, **values: int | float | None) -> Sample:
    base: dict[str, int | float | None] = {
        "pending": 0,
        "ready": 0,
        "in_flight": 0,
        "dead": 0,
        "fired": 0,
        "handled": 0,
        "late_p50_ms": None,
        "late_p99_ms": None,
    }
    return Sample(at_ms, **(base | values))  # type: ignore[arg-type]


def series(charts: list[Chart], key: str, label: str) -> list[float | None]:
    (chart,) = [c for c in charts if c.key == key]
    (found,) = [s for s in chart.series if s.label == label]
    return [v for _, v in found.points]


def test_rates_are_taken_between_samples_and_a_counter_that_went_back_gives_none() -> None:
    a = [
        sample(0, fired=100, handled=90, dead=5),
        sample(10_000, fired=150, handled=140, dead=6),
        sample(20_000, fired=160, handled=None, dead=1),  # dead letters purged
    ]
    charts = sample_charts([a], 0, 20_000)
    assert series(charts, "throughput", "fired/s") == [None, 5.0, 1.0]
    assert series(charts, "throughput", "handled/s") == [None, 5.0, None]
    assert series(charts, "throughput", "dead-lettered/s") == [None, 0.1, None]


def test_topics_add_up_and_the_worst_lateness_shows() -> None:
    a = [sample(0, pending=3, ready=1, late_p99_ms=5.0), sample(10_000, fired=10, pending=4)]
    b = [sample(400, pending=7, ready=2, late_p99_ms=9.0), sample(10_400, fired=20)]
    charts = sample_charts([a, b], 0, 20_000)
    assert series(charts, "backlog", "pending") == [10.0, 4.0]
    assert series(charts, "backlog", "ready") == [3.0, 0.0]
    assert series(charts, "lateness", "p99") == [9.0, None]
    assert series(charts, "throughput", "fired/s") == [None, 3.0]


def test_topics_sampled_in_turns_each_count_with_their_latest_sample() -> None:
    # Issue 43 item 9: a point summed only the topics sampled at its moment.
    busy = [sample(at, fired=13 * at // 1000, pending=45) for at in range(0, 61_000, 15_000)]
    idle = [sample(at + 1000) for at in range(0, 61_000, 15_000)]
    charts = sample_charts([busy, idle], 0, 61_000)
    assert series(charts, "backlog", "pending") == [45.0] * 10
    # a rate once both topics have one (the idle topic's second sample, at 16 s)
    assert series(charts, "throughput", "fired/s") == [None] * 3 + [13.0] * 7


def test_the_lists_rates_start_with_the_first_real_rate_never_a_zero() -> None:
    # Issue 57 item 12: the idle topic's second sample (a rate of 0) came before the busy
    # topic's: the sum of the topics with a rate so far put a 0 first on the list's chart.
    idle = [sample(at) for at in (0, 15_000, 30_000)]
    busy = [sample(at, fired=13 * at // 1000) for at in (1000, 16_000, 31_000)]
    listed = sample_charts([idle, busy], 0, 31_000)
    assert series(listed, "throughput", "fired/s") == [None, None, None, 13.0, 13.0, 13.0]
    assert series(listed, "throughput", "dead-lettered/s") == [None, None, None, 0.0, 0.0, 0.0]
    assert series(listed, "backlog", "pending")[0] == 0.0  # a backlog needs one sample
    own = sample_charts([busy], 0, 31_000)
    assert series(own, "throughput", "fired/s") == [None, 13.0, 13.0]


def test_a_topic_keeps_an_hour_as_sampled_and_a_day_coarsely() -> None:
    history = TopicHistory()
    step = 20_000
    for at in range(0, 30 * 3_600_000, step):  # 30 h of samples every 20 s
        history.add(sample(at, fired=at))
    end = 30 * 3_600_000 - step
    assert history.fine[0].at_ms >= end - FINE_KEEP_MS
    assert len(history.fine) <= FINE_KEEP_MS // step + 1
    assert history.coarse[0].at_ms >= end - 86_400_000
    gaps = {
        b.at_ms - a.at_ms for a, b in zip(history.coarse, list(history.coarse)[1:], strict=False)
    }
    assert gaps == {COARSE_MS}
    day = history.between(end - 86_400_000, end)
    assert day[0].at_ms < end - 86_400_000 + COARSE_MS  # the first rate has a sample before it
    assert [s.at_ms for s in day] == sorted({s.at_ms for s in day})


@pytest.mark.parametrize(("shards", "groups", "at_least_s"), [(1, 1, 15), (8, 1, 15), (16, 5, 44)])
def test_sampling_costs_a_topic_at_most_five_commands_a_second(
    shards: int, groups: int, at_least_s: float
) -> None:
    every = interval_s(shards, groups)
    assert every >= at_least_s
    assert shards * (6 + groups) / every <= 5


def test_the_prometheus_queries_are_the_grafana_dashboard_s() -> None:
    dashboard = json.loads((ROOT / "config" / "grafana-dashboard.json").read_text())
    grafana = {
        t["expr"]
        .replace("sum by (topic) (", "sum(")
        .replace("sum by (le, topic) (", "sum by (le) (")
        for panel in dashboard["panels"]
        for t in panel.get("targets", [])
    }
    for key, (_, _, queries) in CHARTS.items():
        for query in queries:
            assert any(expr in query.expr for expr in grafana), (key, query.expr)


def test_a_topic_name_is_matched_exactly_in_the_queries() -> None:
    (query, *_) = CHARTS["throughput"][2]
    assert 'topic=~"orders\\\\.eu"' in expression(query.expr, "orders.eu")
    assert 'topic=~".+"' in expression(query.expr, None)
