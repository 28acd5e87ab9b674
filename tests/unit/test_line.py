"""The due line as seen (`wheelq.core.line`) and the per-priority start lateness: shards'
lines summed, the keys furthest behind in order, the metrics' key labels bounded, lateness
counted under each job's priority."""

from __future__ import annotations

from wheelq.core.histogram import RunTimings
from wheelq.core.keys import ShardKeys
from wheelq.core.line import (
    OTHER,
    SHARED,
    LaneLine,
    ShardLine,
    busiest,
    furthest_behind,
    line_of,
    merged_lanes,
)
from wheelq.store.line import _due, _key, _lane


def shard(
    n: int, lanes: tuple[LaneLine, ...], by_priority: tuple[tuple[int, int], ...]
) -> ShardLine:
    return ShardLine("t", n, 10_000, sum(x.waiting for x in lanes), len(lanes), lanes,
                     by_priority, sum(c for _, c in by_priority))  # fmt: skip


def test_a_topics_line_sums_its_shards_and_merges_a_keys_lanes() -> None:
    one = shard(0, (LaneLine("a", 5, 4_000), LaneLine(None, 2, 9_000)), ((9, 1), (5, 6)))
    two = shard(1, (LaneLine("a", 3, 3_000), LaneLine("b", 4, 6_000)), ((5, 4), (0, 3)))
    view = line_of("t", 10_000, [one, two])
    assert (view.waiting, view.lanes, view.sampled) == (14, 4, 14)
    assert view.by_priority == {9: 1, 5: 10, 0: 3}
    assert list(view.by_priority) == [9, 5, 0]  # highest first
    assert view.behind == (
        LaneLine("a", 8, 3_000),
        LaneLine("b", 4, 6_000),
        LaneLine(None, 2, 9_000),
    )
    assert [view.behind_ms(x) for x in view.behind] == [7_000, 4_000, 1_000]


def test_furthest_behind_leaves_out_lanes_with_none_read_and_keeps_ten() -> None:
    lanes = [LaneLine(f"k{i}", 1, 1_000 + i) for i in range(12)] + [LaneLine("gone", 3, None)]
    found = furthest_behind(lanes)
    assert [x.key for x in found] == [f"k{i}" for i in range(10)]
    assert merged_lanes([]) == []


def test_busiest_labels_ten_keys_and_sums_the_rest_of_the_line_under_other() -> None:
    lanes = [LaneLine(f"k{i:02}", 20 - i, 1_000 * i) for i in range(12)] + [LaneLine(None, 1, 500)]
    waiting = sum(x.waiting for x in lanes) + 7  # 7 jobs in lanes not read
    rows = busiest(lanes, 20_000, waiting)
    assert [r[0] for r in rows] == [f"k{i:02}" for i in range(10)] + [OTHER]
    assert rows[0] == ("k00", 20, 20.0)
    other = rows[-1]
    assert other == (OTHER, 10 + 9 + 1 + 7, 19.5)  # k10, k11, the shared lane, those not read
    assert sum(r[1] for r in rows) == waiting
    assert busiest([LaneLine(None, 2, 19_000)], 20_000, 2) == [(SHARED, 2, 1.0)]  # no rest


def test_start_lateness_is_counted_under_each_runs_priority() -> None:
    timings = RunTimings()
    timings.pending += (3, 1, 5, 7, 1, 5)
    timings.count()
    assert list(timings.start_lateness) == [5] and timings.start_lateness[5].count == 2
    timings.pending += (40, 1, 0, 2, 1, 9, 4, 1, 9)
    timings.count()
    late = timings.start_lateness
    assert {p: (h.count, h.sum_ms) for p, h in late.items()} == {
        5: (2, 10.0),
        0: (1, 40.0),
        9: (2, 6.0),
    }
    assert timings.run_time.count == 5 and timings.pending == []


def test_the_reader_finds_lanes_under_the_names_the_scripts_give() -> None:
    assert _lane(ShardKeys("t", 1), b"k:\xff") == b"{t:1}:lane:k:\xff"  # a key need not be UTF-8
    assert _key(b"") is None and _key(b"k:a b") == "a b"
    assert _due(b"1700000000123 k:a") == 1_700_000_000_123 and _due(None) is None
