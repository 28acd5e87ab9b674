"""The unled-shards watch against a scripted executor: the definition (no lease and jobs
due within the horizon), its bounded cost (two calls a shard, `BATCH_SHARDS` shards a
round trip, none for the shards the caller leads), one warning when a topic becomes unled
and one line when it is led again, and no gauge samples while reads fail."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tests.support.fakes import ScriptedExecutor, name_of
from wheelq.core.clock import ManualClock
from wheelq.core.keys import Registry, ShardKeys, all_shards
from wheelq.runtime.unled_watch import UnledWatch
from wheelq.store.call import Call
from wheelq.store.unled import BATCH_SHARDS, HORIZON_MS, is_unled

NOW_MS = 1_000_000


class World:
    """The registry, which leases exist, and each shard's jobs due by the time asked."""

    def __init__(self, topics: dict[str, int]) -> None:
        self.topics = topics
        self.leased: set[str] = set()
        self.due: dict[str, int] = {}  # the shard's delayed key -> jobs due within the horizon
        self.asked_until: list[int] = []
        self.executor = ScriptedExecutor()
        self.executor.answer("HGETALL", lambda call: Registry(dict(self.topics), {}))
        self.executor.answer("EXISTS", lambda call: call.command[1] in self.leased)
        self.executor.answer("due_within", self._due)

    def _due(self, call: Call[Any]) -> list[int]:
        (until,) = call.args
        self.asked_until.append(int(until))
        return [self.due.get(call.keys[0], 0)]


def watch_of(world: World, skip: tuple[str, ...] = ()) -> UnledWatch:
    return UnledWatch(world.executor, ManualClock(NOW_MS), 1000, skip=lambda: skip)


def test_the_definition_is_no_lease_and_jobs_due() -> None:
    assert is_unled(lease_held=False, due=1)
    assert not is_unled(lease_held=True, due=5)
    assert not is_unled(lease_held=False, due=0)


async def test_a_shard_is_unled_without_a_lease_with_jobs_due_within_the_horizon() -> None:
    world = World({"a": 3, "b": 1})
    world.due = {ShardKeys("a", 0).delayed: 2, ShardKeys("a", 1).delayed: 1}
    world.leased = {ShardKeys("a", 1).lease}  # led: not unled, however much is due
    watch = watch_of(world)
    assert await watch.check() == {"a": (0,)}
    assert world.asked_until == [NOW_MS + HORIZON_MS] * 3  # the horizon, on the Redis clock
    assert watch.shards_unled() == [("a", 1), ("b", 0)]


async def test_the_cost_is_a_call_a_shard_in_batches_and_none_for_skipped_topics() -> None:
    """All led: an EXISTS a shard, 500 a round trip; the jobs due are read only where no
    lease is; a scheduler node's own topics are not read."""
    world = World({"big": 1000, "small": 300, "mine": 50})
    world.leased = {k.lease for t, n in world.topics.items() for k in all_shards(t, n)}
    world.leased -= {ShardKeys("small", 7).lease, ShardKeys("small", 9).lease}
    watch = watch_of(world, skip=("mine",))
    await watch.check()
    rounds = [[name_of(c) for c in calls] for calls in world.executor.rounds]
    assert rounds == [
        ["HGETALL"],
        ["EXISTS"] * BATCH_SHARDS,
        ["EXISTS"] * BATCH_SHARDS,
        ["EXISTS"] * 300,
        ["due_within"] * 2,  # the two shards without a lease, in their batch
    ]
    leases = {c.command[1] for c in world.executor.sent("EXISTS")}
    assert not leases & {k.lease for k in all_shards("mine", 50)}


async def test_it_warns_once_when_a_topic_becomes_unled_and_once_when_led_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="wheelq")
    world = World({"plain": 2})
    world.due = {ShardKeys("plain", 1).delayed: 4}
    watch = watch_of(world)
    for _ in range(3):
        await watch.check()
    world.leased = {ShardKeys("plain", 1).lease}
    for _ in range(3):
        await watch.check()
    world.leased = set()
    await watch.check()
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    command = "run wheelq scheduler --topics plain"
    assert [level for level, _ in lines] == ["WARNING", "INFO", "WARNING"]
    assert "in 1 shard(s) no scheduler node leads (1)" in lines[0][1] and command in lines[0][1]
    assert lines[1][1] == "topic plain is led again: every shard with jobs due has a scheduler node"
    assert watch.reads == 7


async def test_a_dropped_topic_is_forgotten_without_a_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="wheelq")
    world = World({"gone": 1})
    world.due = {ShardKeys("gone", 0).delayed: 1}
    watch = watch_of(world)
    await watch.check()
    world.topics = {}
    await watch.check()
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert watch.unled == {} and watch.shards_unled() == []


async def test_no_gauge_samples_while_reads_fail() -> None:
    world = World({"a": 1})
    world.due = {ShardKeys("a", 0).delayed: 1}
    watch = watch_of(world)
    await watch.check()
    assert watch.shards_unled() == [("a", 1)]
    world.executor.fail_next(ConnectionError("reset"))
    with pytest.raises(ConnectionError):
        await watch.check()
    watch.failed(ConnectionError("reset"))  # what the part's loop does with it
    assert watch.shards_unled() == []
