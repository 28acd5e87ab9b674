"""What an observation of a shard means (ready, in flight, handled, oldest age), the rates
between two observations, and the fire lateness a node counts per emit call."""

from __future__ import annotations

import math

from wheelq.core.observe import GroupView, ShardObservation, by_shard, rate, topic_rows
from wheelq.scheduler.led_shards import NodeMetrics
from wheelq.store.fire import EmitResult


def _obs(shard: int, at_ms: int, added: int, read: int, **kw: object) -> ShardObservation:
    fields: dict[str, object] = {
        "topic": "t",
        "shard": shard,
        "at_ms": at_ms,
        "pending": 5,
        "due_soon": 3,
        "length": added,
        "entries_added": added,
        "dead": 1,
        "groups": (GroupView("g", pending=2, lag=added - read, entries_read=read),),
    }
    fields.update(kw)
    return ShardObservation(**fields)  # type: ignore[arg-type]


def test_ready_is_the_lag_of_the_group_furthest_behind_else_the_stream() -> None:
    groups = (GroupView("a", 0, 4, 6), GroupView("b", 3, 1, 9), GroupView("c", 0, None, None))
    obs = _obs(0, 0, 10, 0, groups=groups)
    assert obs.ready == 10  # c: the server cannot tell, so the whole stream
    assert _obs(0, 0, 10, 0, groups=groups[:2]).ready == 4
    assert _obs(0, 0, 7, 0, groups=()).ready == 7
    assert obs.in_flight == 3


def test_ready_counts_the_jobs_waiting_on_the_due_line_on_top_of_the_lag() -> None:
    groups = (GroupView("a", 0, 4, 6),)
    assert _obs(0, 0, 10, 0, groups=groups, waiting=7).ready == 4 + 7
    assert _obs(0, 0, 3, 0, groups=(), waiting=7).ready == 3 + 7


def test_oldest_in_flight_age_counts_from_its_entry_id() -> None:
    groups = (GroupView("a", 1, 0, 1, oldest_pending_ms=900), GroupView("b", 1, 0, 1, 950))
    assert _obs(0, 1000, 1, 1, groups=groups).oldest_age_ms() == 100
    assert _obs(0, 1000, 1, 1, groups=(GroupView("a", 0, 0, 1),)).oldest_age_ms() is None


def test_rate_per_second_and_a_counter_that_restarted() -> None:
    assert rate(100, 300, 2000) == 100
    assert rate(300, 50, 1000) == 50  # a stream dropped and made again
    assert rate(1, 2, 0) is None


def test_topic_rows_sum_the_shards_and_rate_against_the_previous_observations() -> None:
    first = [_obs(0, 1000, 100, 90), _obs(1, 1000, 50, 50)]
    second = [
        _obs(0, 3000, 300, 250, lateness_ms=(1, 2, 3)),
        _obs(1, 3000, 150, 110, lateness_ms=tuple(range(4, 101))),
    ]
    (row,) = topic_rows(second, by_shard(first))
    assert row.fired_per_s == (200 + 100) / 2
    assert row.handled_per_s_by_group == (("g", (160 + 60) / 2),)
    assert (row.pending, row.in_flight, row.dead, row.shards) == (10, 4, 2, 2)
    assert row.ready == (300 - 250) + (150 - 110)
    assert row.due_per_s == 6
    assert (row.lateness_p50_ms, row.lateness_p99_ms) == (50, 99)
    (fresh,) = topic_rows(second)
    assert fresh.fired_per_s is None and fresh.handled_per_s_by_group is None


def test_handled_per_second_is_each_groups_own_not_their_sum() -> None:
    def groups(a_read: int, b_read: int | None) -> tuple[GroupView, ...]:
        a = GroupView("audit", pending=0, lag=0, entries_read=a_read)
        if b_read is None:
            return (a,)
        return (a, GroupView("billing", pending=0, lag=0, entries_read=b_read))

    first = [
        _obs(0, 1000, 100, 0, groups=groups(100, 40)),
        _obs(1, 1000, 0, 0, groups=groups(0, None)),
    ]
    second = [
        _obs(0, 2000, 300, 0, groups=groups(300, 50)),  # fan-out: both read every entry
        _obs(1, 2000, 0, 0, groups=groups(0, 0)),  # billing new on shard 1: no rate there
    ]
    (row,) = topic_rows(second, by_shard(first))
    assert row.handled_per_s_by_group == (("audit", 200.0), ("billing", 10.0))
    (row,) = topic_rows(
        [_obs(0, 2000, 1, 1, groups=groups(1, 1))], by_shard([_obs(0, 1000, 1, 1, groups=())])
    )
    assert row.handled_per_s_by_group == (("audit", None), ("billing", None))


def test_a_topic_without_samples_has_no_lateness() -> None:
    (row,) = topic_rows([_obs(0, 0, 0, 0)])
    assert math.isnan(row.lateness_p50_ms)


def test_fire_lateness_counts_exactly_what_each_emit_fired() -> None:
    metrics = NodeMetrics()
    ids, dues = ["a", "b", "c", "d"], [990, 995, 999, 1000]
    metrics.fired_by_wheel("t", 1000, ids, dues, EmitResult(4, False, 0, []))
    snap = metrics.lateness("t").snapshot()
    assert snap.count == 4 and snap.sum_ms == 10 + 5 + 1 + 0
    # b rescheduled later, c held back by the byte budget, one of the others cancelled:
    held = EmitResult(1, False, 0, [("b", 2000)], held=["c"])
    metrics.fired_by_wheel("t", 1000, ids, dues, held)
    assert metrics.lateness("t").snapshot().count == 5
    metrics.fired_by_sweep("t", 5000, 4000, 3)
    snap = metrics.lateness("t").snapshot()
    assert snap.count == 8
    assert snap.counts[snap.bounds_ms.index(1000)] == 3  # at least 1000 ms late: (500, 1000]


def test_node_events_are_counted_by_kind_topic_and_shard() -> None:
    metrics = NodeMetrics()
    metrics.record("emitted", "t", 1, 40)
    metrics.record("emitted", "t", 1, 2)
    metrics.record("acquired", "t", 1, 0)
    assert metrics.counts[("emitted", "t", 1)] == 42
    assert metrics.counts[("acquired", "t", 1)] == 1
