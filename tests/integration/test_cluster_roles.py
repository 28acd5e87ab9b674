"""What the scheduler node and the worker do about a Redis Cluster besides their work (which
the suites marked ``cluster_too`` check): scripts loaded on every primary again after a
SCRIPT FLUSH, a connection pool too small for the per-shard reads, a plain client of a
cluster node, and the wake notes travelling by sharded pub/sub."""

from __future__ import annotations

import asyncio

import pytest
import redis
import redis.asyncio

from tests.support.waiting import eventually
from wheelq import AsyncAdmin, AsyncClient, InvalidArgumentError, Job, Scheduler, Worker
from wheelq.core.keys import ShardKeys
from wheelq.store.scripts import script
from wheelq.testing import EmbeddedCluster

pytestmark = pytest.mark.both_servers  # the cluster: scripts, pools, sharded pub/sub

SHARDS = 6


async def test_scripts_flushed_from_every_primary_are_loaded_again(
    cluster: EmbeddedCluster, topic: str
) -> None:
    handled = asyncio.Event()

    async def handle(job: Job) -> None:
        handled.set()

    async with AsyncClient.from_url(cluster.url) as client:
        admin = AsyncAdmin.of(client)
        await admin.create_topic(topic, SHARDS)
        async with (
            Scheduler.from_url(cluster.url, topic, preload_interval_ms=50) as node,
            Worker.from_url(cluster.url, topic, handle),
        ):
            await eventually(
                lambda: _true(len(node.leads) == SHARDS), timeout_s=10, what="every shard led"
            )
            for primary in cluster.primaries:
                with cluster.client(primary) as c:
                    c.script_flush()
            ids = await client.enqueue_many(
                topic, [{"payload": i, "delay": 0.3} for i in range(SHARDS * 4)]
            )
            await asyncio.wait_for(handled.wait(), timeout=10)
            await eventually(
                lambda: _true(all(p["running"] and not p["failures"] for p in _parts(node))),
                timeout_s=10,
                what="every part healthy",
            )
            assert len(ids) == SHARDS * 4
    for primary in cluster.primaries:
        with cluster.client(primary) as c:
            loaded = c.script_exists(*(script(name).sha for name in ("enqueue", "emit_due")))
        assert loaded == [True, True], f"scripts not loaded again on {primary.port}"


def _parts(node: Scheduler) -> list[dict[str, object]]:
    return list(node.status()["parts"].values())


async def _true(value: bool) -> bool:
    return value


async def test_a_pool_too_small_for_one_blocking_read_per_shard_is_refused(
    cluster: EmbeddedCluster, topic: str
) -> None:
    async def handle(job: Job) -> None:
        pass

    async with AsyncAdmin.from_url(cluster.url) as admin:
        await admin.create_topic(topic, 12)
    worker = Worker.from_url(cluster.url, topic, handle, redis_options={"max_connections": 5})
    with pytest.raises(InvalidArgumentError) as info:
        await worker.start()
    assert info.value.parameter == "redis_options"
    assert "max_connections must be >=" in str(info.value)
    assert await worker.stop() is not None  # nothing runs; its clients were closed


async def test_a_plain_client_of_a_cluster_node_is_refused_at_start(
    cluster: EmbeddedCluster, topic: str
) -> None:
    plain = redis.asyncio.Redis.from_url(cluster.url)
    try:
        node = Scheduler(plain, topic)
        with pytest.raises(InvalidArgumentError) as info:
            await node.start()
        assert info.value.parameter == "connection"
        assert "RedisCluster" in str(info.value)
    finally:
        await plain.aclose()


async def test_wake_notes_travel_by_sharded_pub_sub_on_the_shards_node(
    cluster: EmbeddedCluster, topic: str
) -> None:
    async with AsyncAdmin.from_url(cluster.url) as admin:
        await admin.create_topic(topic, SHARDS)
        async with Scheduler.from_url(cluster.url, topic, window_ms=60_000) as node:
            await eventually(
                lambda: _true(len(node.leads) == SHARDS), timeout_s=10, what="every shard led"
            )
            keys = ShardKeys(topic, 0)

            async def subscribed() -> bool:
                with cluster.client(cluster.owner(_slot(cluster, keys))) as c:
                    [(_, count)] = c.pubsub_shardnumsub(keys.wake_channel)
                return int(count) == 1

            await eventually(subscribed, timeout_s=10, what="the leader on shard 0's channel")


def _slot(cluster: EmbeddedCluster, keys: ShardKeys) -> int:
    with cluster.client(cluster.primaries[0]) as c:
        return int(c.execute_command("CLUSTER", "KEYSLOT", keys.delayed))
