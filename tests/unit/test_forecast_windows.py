"""The forecast's pure part: which windows are accepted (the same typed error naming
``within`` and its range for every bad one, from values and from text), how shards sum
into one `Forecast`, and how a scheduler node's gauges export it per topic and window."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import wheelq
from wheelq.core.forecast import (
    MAX_WINDOWS,
    MAX_WITHIN_S,
    WITHIN_S,
    Forecast,
    forecast_of,
    within_seconds,
    within_text,
)
from wheelq.core.observe import GroupView, ShardObservation
from wheelq.errors import InvalidArgumentError
from wheelq.metrics.collectors import FORECAST_MS, SchedulerCollector, ShardGauges

RANGE = f"each a whole number of seconds in [1, {MAX_WITHIN_S}]"


@pytest.mark.parametrize(
    ("within", "windows"),
    [
        (60, (60,)),
        ((300, 10, 60), (10, 60, 300)),
        ([5, 5, 1], (1, 5)),
        ((1, MAX_WITHIN_S), (1, MAX_WITHIN_S)),
        (list(range(1, MAX_WINDOWS + 1)), tuple(range(1, MAX_WINDOWS + 1))),
    ],
)
def test_windows_are_sorted_without_repeats(within: object, windows: tuple[int, ...]) -> None:
    assert within_seconds(within) == windows


@pytest.mark.parametrize(
    ("within", "said"),
    [
        (0, "got 0"),
        (-1, "got -1"),
        (MAX_WITHIN_S + 1, f"got {MAX_WITHIN_S + 1}"),
        (math.nan, "got nan"),
        (math.inf, "got inf"),
        (1.5, "got 1.5"),
        (10.0, "got 10.0"),
        (True, "got True"),
        ("60", "got '60'"),
        (None, "got None"),
        ((), "got 0 windows"),
        (list(range(1, MAX_WINDOWS + 2)), f"got {MAX_WINDOWS + 1} windows"),
        ((10, 0), "got 0"),
    ],
)
def test_a_bad_window_names_within_and_the_range(within: object, said: str) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        within_seconds(within)
    assert raised.value.parameter == "within"
    assert RANGE in str(raised.value) and str(raised.value).endswith(said)


@pytest.mark.parametrize(
    ("parts", "windows"),
    [(["10"], (10,)), (["10,60", " 300 "], (10, 60, 300)), (["60", "10"], (10, 60))],
)
def test_windows_from_text(parts: list[str], windows: tuple[int, ...]) -> None:
    assert within_text(parts) == windows


@pytest.mark.parametrize(
    ("parts", "said"),
    [
        (["nan"], "got nan"),
        (["-5"], "got -5"),
        (["1.5"], "got 1.5"),
        (["1e3"], "got 1e3"),
        (["10,"], "got nothing"),
        (["\N{ARABIC-INDIC DIGIT THREE}"], "got \N{ARABIC-INDIC DIGIT THREE}"),
        (["0"], "got 0"),
        ([",".join(["1"] * (MAX_WINDOWS + 1))], f"got {MAX_WINDOWS + 1} windows"),
    ],
)
def test_bad_text_is_named_as_given(parts: list[str], said: str) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        within_text(parts)
    assert raised.value.parameter == "within"
    assert RANGE in str(raised.value) and str(raised.value).endswith(said)


def shard(
    topic: str, n: int, due: tuple[int, ...], lag: int | None, length: int
) -> ShardObservation:
    """Shard `n` with counts per `FORECAST_MS` window and one group `g` `lag` behind."""
    return ShardObservation(
        topic=topic,
        shard=n,
        at_ms=5_000,
        pending=due[-1],
        due_soon=0,
        length=length,
        entries_added=length,
        dead=0,
        groups=(GroupView("g", pending=0, lag=lag, entries_read=length),),
        due_within=tuple(zip(FORECAST_MS, due, strict=True)),
    )


def test_shards_sum_per_window_and_ready_is_the_observations() -> None:
    shards = [shard("t", 0, (1, 2, 5), 3, 9), shard("t", 1, (0, 4, 4), None, 7)]
    found = forecast_of("t", 5_000, shards)
    assert found == Forecast("t", 5_000, {10: 1, 60: 6, 300: 9}, ready=3 + 7)
    assert found.ready == sum(o.ready for o in shards)  # a lag not told: the stream's length
    assert list(found.due_within) == list(WITHIN_S)


def test_a_node_exports_jobs_due_per_topic_and_window_summed_over_its_shards() -> None:
    node = wheelq.Scheduler.from_url("redis://127.0.0.1:1/0", ["a", "b"])
    gauges = ShardGauges(node)
    gauges.latest = [
        shard("a", 0, (1, 2, 3), 0, 0),
        shard("a", 1, (10, 20, 30), 0, 0),
        shard("b", 0, (0, 0, 7), 0, 0),
    ]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SchedulerCollector(node, gauges))
    text = generate_latest(registry).decode()
    (family,) = [f for f in text_string_to_metric_families(text) if f.name == "wheelq_jobs_due"]
    assert family.type == "gauge"
    got = {(s.labels["topic"], s.labels["within"]): s.value for s in family.samples}
    assert got == {
        ("a", "10"): 11,
        ("a", "60"): 22,
        ("a", "300"): 33,
        ("b", "10"): 0,
        ("b", "60"): 0,
        ("b", "300"): 7,
    }
