"""The unled-shards watch against a scripted executor: the definition (no lease and jobs
due within the horizon), its bounded cost (two calls a shard, `BATCH_SHARDS` shards a
round trip, none for the shards the caller leads), one warning when a topic becomes unled
and one line when it is led again, and no gauge samples while reads fail."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tests.support.fakes import ScriptedExecutor
from wheelq.core.clock import ManualClock
from wheelq.core.keys import Registry, ShardKeys
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


def watch_of(world: World, led: tuple[ShardKeys, ...] = ()) -> UnledWatch:
    return UnledWatch(world.executor, ManualClock(NOW_MS), 1000, led=lambda: led)


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
    assert world.asked_until == [NOW_MS + HORIZON_MS] * 4  # the horizon, on the Redis clock
    assert watch.shards_unled() == [("a", 1), ("b", 0)]


async def test_the_cost_is_two_calls_a_shard_in_batches_and_none_for_led_shards() -> None:
    world = World({"big": 1000, "small": 300})
    mine = tuple(ShardKeys("big", s) for s in range(100))
    watch = watch_of(world, led=mine)
    await watch.check()
    registry, *batches = world.executor.rounds
    assert [c.command[0] for c in registry] == ["HGETALL"]
    asked = 1000 + 300 - len(mine)
    assert [len(b) for b in batches] == [2 * BATCH_SHARDS, 2 * BATCH_SHARDS, 2 * (asked - 1000)]
    leases = {c.command[1] for c in world.executor.sent("EXISTS")}
    assert len(leases) == asked and not leases & {k.lease for k in mine}


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
