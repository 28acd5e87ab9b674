"""Every part of a scheduler node survives a real fault, shows it in
``status()["parts"]`` while it lasts, and does its job again once it is over.

Two kinds of fault, each as a user could meet it:

- a key of the wrong type in one shard (a ready stream or a delayed set holding a string,
  written by hand or by another program): the trimmer, the wheel driver and the preloader
  report that shard while the other shard goes on, until the key is deleted;
- Redis unreachable (`CuttingProxy`: every connection cut, new ones refused):
  the lease keeper, the clock keeper and the wake listener fail until the proxy comes up.

The node's client gives up on a dropped connection at once (no redis-py retries), so a fault
reaches the parts within a step instead of after redis-py's own seconds of retrying.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import redis.asyncio
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from tests.support.waiting import eventually, until
from wheelq import AsyncAdmin, AsyncClient, NodeEvent, Scheduler, SchedulerSettings
from wheelq.core.keys import ShardKeys, shard_of
from wheelq.runtime.clock import RedisClock
from wheelq.testing.proxy import CuttingProxy

SHARDS = 2
SICK, WELL = 0, 1
QUICK = {"failure_pause_max_ms": 200, "check_interval_ms": 100}
GIVE_UP_AT_ONCE = {"retry": Retry(NoBackoff(), 0)}
WRONG_TYPE = re.compile("wrong ?type", re.IGNORECASE)
UNREACHABLE = re.compile("connection|closed|reset|refused", re.IGNORECASE)


def part(node: Scheduler, name: str) -> dict[str, Any]:
    """``status()["parts"][name]`` of `node`."""
    parts: dict[str, dict[str, Any]] = node.status()["parts"]
    return parts[name]


async def sick_until_fixed(node: Scheduler, name: str, problem: re.Pattern[str]) -> None:
    """Wait until part `name` has failed twice in a row (it stays sick, and keeps trying)
    and check what its status says meanwhile."""
    await until(lambda: part(node, name)["failures"] >= 2, what=f"the {name} to fail twice")
    status = part(node, name)
    assert status["running"] is True
    assert status["last_error"] is not None and problem.search(status["last_error"]), status


async def well_again(node: Scheduler, name: str) -> None:
    await until(lambda: part(node, name)["failures"] == 0, what=f"the {name} to recover")
    assert part(node, name) == {"running": True, "failures": 0, "last_error": None}


def ids_on(shard: int, n: int, prefix: str = "job") -> list[str]:
    """`n` job ids that live in `shard` of a `SHARDS`-shard topic."""
    ids = (f"{prefix}-{i}" for i in range(10_000))
    return [job_id for job_id in ids if shard_of(job_id, SHARDS) == shard][:n]


@pytest.fixture
async def client(redis_url: str, topic: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient.from_url(redis_url) as c:
        admin = AsyncAdmin.of(c)
        await admin.create_topic(topic, SHARDS)
        yield c


@asynccontextmanager
async def leading_node(
    url: str, topic: str, events: list[NodeEvent] | None = None, **settings: Any
) -> AsyncIterator[Scheduler]:
    """A started node that leads every shard of `topic`; stopped afterwards."""
    node = Scheduler.from_url(
        url,
        [topic],
        redis_options=GIVE_UP_AT_ONCE,
        on_event=None if events is None else events.append,
        **{**QUICK, **settings},
    )
    await node.start()
    try:
        await until(lambda: len(node.leads) == SHARDS, timeout_s=10, what="both shards led")
        yield node
    finally:
        await node.stop()


async def acked(r: redis.asyncio.Redis, stream: str, n: int) -> None:
    """Append `n` entries to `stream` and have a group read and ack them all."""
    ids = [await r.xadd(stream, {"n": i}) for i in range(n)]
    await r.xgroup_create(stream, "g", "0")
    await r.xreadgroup("g", "c", {stream: ">"})
    assert await r.xack(stream, "g", *ids) == n


def fired_ids(entries: list[tuple[bytes, dict[bytes, bytes]]]) -> list[str]:
    return [fields[b"id"].decode() for _, fields in entries]


# --- a key of the wrong type ------------------------------------------------------------------


async def test_trimmer_trims_the_other_shard_while_one_is_refused_and_that_one_once_fixed(
    redis_url: str, client: AsyncClient, topic: str
) -> None:
    r = client.redis
    sick, well = ShardKeys(topic, SICK), ShardKeys(topic, WELL)
    async with leading_node(redis_url, topic, trim_interval_ms=100, retention_ms=0) as node:
        await r.set(sick.ready, "not a stream")
        await acked(r, well.ready, 3)
        await sick_until_fixed(node, "trimmer", WRONG_TYPE)
        assert sick.ready in part(node, "trimmer")["last_error"]
        await until(lambda: node.trimmer.trimmed >= 3, what="the well shard trimmed")
        assert await r.xlen(well.ready) == 0

        await r.delete(sick.ready)
        await acked(r, sick.ready, 4)
        await until(lambda: node.trimmer.trimmed >= 7, what="the fixed shard trimmed")
        assert await r.xlen(sick.ready) == 0
        await well_again(node, "trimmer")


async def test_driver_fires_the_other_shard_on_time_and_the_refused_one_once_fixed(
    redis_url: str, client: AsyncClient, topic: str
) -> None:
    r = client.redis
    sick, well = ShardKeys(topic, SICK), ShardKeys(topic, WELL)
    sick_ids, well_ids = ids_on(SICK, 3), ids_on(WELL, 3)
    # No sweep for a minute: what fires after the fix is the driver's own retry.
    async with leading_node(redis_url, topic, sweep_grace_ms=60_000) as node:
        for job_id in sick_ids + well_ids:
            await client.enqueue(topic, job_id, job_id=job_id, delay=2)
        await until(lambda: len(node.driver.wheel) == 6, what="every job in the wheel")
        await r.set(sick.ready, "not a stream")
        await sick_until_fixed(node, "driver", WRONG_TYPE)
        assert sick.ready in part(node, "driver")["last_error"]

        async def well_fired() -> bool:  # its last job may be due a moment after the failures
            return sorted(fired_ids(await r.xrange(well.ready))) == sorted(well_ids)

        await eventually(well_fired, timeout_s=10, what="the well shard's jobs to fire")
        assert part(node, "driver")["failures"] >= 2, "the refused shard stays refused meanwhile"

        await r.delete(sick.ready)

        async def fired_after_the_fix() -> bool:
            return await r.xlen(sick.ready) == len(sick_ids)

        await eventually(fired_after_the_fix, timeout_s=10, what="the refused shard's jobs to fire")
        assert sorted(fired_ids(await r.xrange(sick.ready))) == sorted(sick_ids)
        await well_again(node, "driver")
        assert part(node, "preloader")["failures"] == 0, "the sweep never had to step in"


async def test_preloader_reads_the_other_shard_while_one_is_refused_and_that_one_once_fixed(
    redis_url: str, client: AsyncClient, topic: str
) -> None:
    r = client.redis
    sick, well = ShardKeys(topic, SICK), ShardKeys(topic, WELL)
    # A job due in 1.5 s is past the 0.5 s window when enqueued: only a page brings it in.
    # Idle shards are read every 100 ms too, so the broken one is found at once.
    async with leading_node(
        redis_url, topic, window_ms=500, preload_interval_ms=100, idle_preload_interval_ms=100
    ) as node:
        await r.set(sick.delayed, "not a sorted set")
        (well_id,) = ids_on(WELL, 1)
        await client.enqueue(topic, "w", job_id=well_id, delay=1.5)
        await sick_until_fixed(node, "preloader", WRONG_TYPE)

        async def fired(keys: ShardKeys, job_id: str) -> bool:
            return fired_ids(await r.xrange(keys.ready)) == [job_id]

        await eventually(lambda: fired(well, well_id), timeout_s=10, what="the well shard's job")
        assert part(node, "preloader")["failures"] >= 2, "still sick: its shard still refused"

        await r.delete(sick.delayed)
        (sick_id,) = ids_on(SICK, 1)
        await client.enqueue(topic, "s", job_id=sick_id, delay=1.5)
        await well_again(node, "preloader")
        await eventually(lambda: fired(sick, sick_id), timeout_s=10, what="the fixed shard's job")


# --- redis unreachable --------------------------------------------------------------------------


@asynccontextmanager
async def proxied(redis_url: str) -> AsyncIterator[tuple[CuttingProxy, str]]:
    async with CuttingProxy(int(redis_url.rsplit(":", 1)[1])) as proxy:
        yield proxy, f"redis://127.0.0.1:{proxy.port}"


async def outage(proxy: CuttingProxy, node: Scheduler, name: str) -> None:
    """Take Redis away until part `name` shows it, then bring it back and wait for the part
    to recover."""
    proxy.refusing = True
    proxy.cut()
    await sick_until_fixed(node, name, UNREACHABLE)
    proxy.refusing = False
    await well_again(node, name)


async def test_lease_keeper_holds_its_leases_through_an_outage_shorter_than_the_ttl(
    redis_url: str, client: AsyncClient, topic: str
) -> None:
    events: list[NodeEvent] = []
    async with (
        proxied(redis_url) as (proxy, url),
        leading_node(url, topic, events, lease_ttl_ms=10_000) as node,
    ):
        slots = {lead.keys: lead.slot for lead in node.leads.all()}
        await outage(proxy, node, "leases")
        assert {lead.keys: lead.slot for lead in node.leads.all()} == slots
        assert [e.kind for e in events] == ["acquired", "acquired"], "nothing lost meanwhile"
        renewals = len(events)

        async def renewed() -> bool:
            ttls = [await client.redis.pttl(keys.lease) for keys in slots]
            return all(ttl > 9_000 for ttl in ttls)  # renewed since the outage (TTL 10 s)

        await eventually(renewed, timeout_s=10, what="the leases renewed")
        for keys in slots:
            assert await client.redis.get(keys.lease) == node.node_id.encode()
        assert len(events) == renewals


class CountingClock(RedisClock):
    """A `RedisClock` that counts the samples it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.samples = 0

    def add_sample(self, before_ms: float, server_ms: float, after_ms: float) -> None:
        self.samples += 1
        super().add_sample(before_ms, server_ms, after_ms)


async def test_clock_keeper_samples_the_redis_clock_again_after_an_outage(
    redis_url: str, client: AsyncClient, topic: str
) -> None:
    clock = CountingClock()
    async with proxied(redis_url) as (proxy, url):
        connection = redis.asyncio.Redis.from_url(url, **GIVE_UP_AT_ONCE)
        settings = SchedulerSettings(clock_sync_interval_ms=100, **QUICK)
        node = Scheduler(connection, [topic], settings, clock=clock)
        await node.start()
        try:
            await outage(proxy, node, "clock")
            before = clock.samples
            await until(lambda: clock.samples > before, what="a sample after the outage")
            assert clock.error_bound_ms < 1000
        finally:
            await node.stop()
            await connection.aclose()


async def test_wake_listener_delivers_again_after_an_outage(
    redis_url: str, client: AsyncClient, topic: str
) -> None:
    # The preloader reads the inbox once a minute: a job written inside the preloaded
    # window reaches the wheel within seconds only through the wake listener.
    async with (
        proxied(redis_url) as (proxy, url),
        leading_node(
            url, topic, preload_interval_ms=60_000, sweep_grace_ms=60_000, lease_ttl_ms=10_000
        ) as node,
    ):
        await outage(proxy, node, "wake")
        for name in ("preloader", "leases"):
            await well_again(node, name)
        (job_id,) = ids_on(WELL, 1)
        await client.enqueue(topic, "after", job_id=job_id, delay=1)
        lead = node.leads.by_keys[ShardKeys(topic, WELL)]
        await until(lambda: (lead.slot, job_id) in node.driver.wheel, what="the job announced")

        async def fired() -> bool:
            return fired_ids(await client.redis.xrange(lead.keys.ready)) == [job_id]

        await eventually(fired, timeout_s=10, what="the announced job to fire")
