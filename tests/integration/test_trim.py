"""Stream trimming by the scheduler node (docs/architecture.md, invariant 5: trimming never
deletes an entry some group has not acked), driven through the node's own `Trimmer`.

Group positions are set up with raw XREADGROUP/XACK so each case is exact; the node's
background trim interval is an hour and each test calls `trim_once()` itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio

from tests.support.waiting import eventually
from wheelq import AsyncClient, Scheduler
from wheelq.core.keys import ShardKeys

pytestmark = pytest.mark.cluster_too  # on the single server and on the cluster

HOUR_MS = 3_600_000


async def _fire(client: AsyncClient, topic: str, n: int) -> list[bytes]:
    """Enqueue n jobs due now (the enqueue script appends them at once); their entry ids."""
    await client.create_topic(topic, 1)
    for i in range(n):
        await client.enqueue(topic, {"i": i})
    return [entry_id for entry_id, _ in await client.redis.xrange(ShardKeys(topic, 0).ready)]


async def _read(r: redis.asyncio.Redis, key: str, group: str, count: int) -> list[bytes]:
    reply = await r.xreadgroup(group, "c1", {key: ">"}, count=count)
    return [entry_id for entry_id, _ in reply[0][1]] if reply else []


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient.from_url(redis_url) as c:
        yield c


async def _leading_node(redis_url: str, topic: str, retention_ms: int) -> Scheduler:
    node = Scheduler.from_url(
        redis_url, [topic], retention_ms=retention_ms, trim_interval_ms=HOUR_MS
    )
    await node.start()

    async def leads() -> bool:
        return len(node.leads) == 1

    await eventually(leads, timeout_s=10, what="the node to lead the shard")
    return node


async def test_trim_removes_acked_entries_and_keeps_every_unacked_one(
    redis_url: str, client: AsyncClient, topic: str
) -> None:
    ids = await _fire(client, topic, 10)
    r, key = client.redis, ShardKeys(topic, 0).ready
    for group in ("a", "b"):
        await r.xgroup_create(key, group, "0")
    assert await _read(r, key, "a", 10) == ids
    await r.xack(key, "a", *ids[:6])  # a: ids[6:] pending
    assert await _read(r, key, "b", 8) == ids[:8]
    await r.xack(key, "b", *ids[:8])  # b: ids[8:] not delivered yet
    node = await _leading_node(redis_url, topic, retention_ms=0)
    try:
        assert await node.trimmer.trim_once() == 6
        kept = [entry_id for entry_id, _ in await r.xrange(key)]
        assert kept == ids[6:]  # pending in a, or undelivered to b: all kept
        assert await node.trimmer.trim_once() == 0

        await r.xack(key, "a", *ids[6:])
        assert await _read(r, key, "b", 10) == ids[8:]
        await r.xack(key, "b", *ids[8:])
        assert await node.trimmer.trim_once() == 4
        assert await r.xlen(key) == 0
    finally:
        await node.stop()


async def test_trim_keeps_acked_entries_for_the_retention(
    redis_url: str, client: AsyncClient, topic: str
) -> None:
    ids = await _fire(client, topic, 5)
    r, key = client.redis, ShardKeys(topic, 0).ready
    await r.xgroup_create(key, "a", "0")
    await _read(r, key, "a", 5)
    await r.xack(key, "a", *ids)
    node = await _leading_node(redis_url, topic, retention_ms=HOUR_MS)
    try:
        assert await node.trimmer.trim_once() == 0
        assert await r.xlen(key) == 5
    finally:
        await node.stop()


async def test_a_stream_no_group_reads_yet_is_never_trimmed(
    redis_url: str, client: AsyncClient, topic: str
) -> None:
    await _fire(client, topic, 5)
    node = await _leading_node(redis_url, topic, retention_ms=0)
    try:
        assert await node.trimmer.trim_once() == 0
        assert await client.redis.xlen(ShardKeys(topic, 0).ready) == 5
    finally:
        await node.stop()
