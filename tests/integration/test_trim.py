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
from wheelq import AsyncAdmin, AsyncClient, Callback, EnqueueItem, JobState, Scheduler
from wheelq.core.keys import ShardKeys

pytestmark = [
    pytest.mark.cluster_too,  # on the single server and on the cluster
    pytest.mark.both_servers,  # stream trimming and group positions (XTRIM, XINFO)
]

HOUR_MS = 3_600_000


async def _fire(client: AsyncClient, topic: str, n: int) -> list[bytes]:
    """Enqueue n jobs due now (the enqueue script appends them at once); their entry ids."""
    await AsyncAdmin.of(client).create_topic(topic, 1)
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


async def _leading_node(
    redis_url: str, topic: str, retention_ms: int, history_max_bytes: int = 0
) -> Scheduler:
    node = Scheduler.from_url(
        redis_url,
        [topic],
        retention_ms=retention_ms,
        trim_interval_ms=HOUR_MS,
        history_max_bytes=history_max_bytes,
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


async def test_trim_trims_the_callbacks_stream_by_its_own_group_and_keeps_its_jobs_known(
    redis_url: str, client: AsyncClient, admin: AsyncAdmin, topic: str
) -> None:
    """Jobs with a callback fire into their own stream: the topic's groups neither see nor
    hold them back, the deliverer's group alone does, and their history outlives a trim of
    the other stream."""
    await admin.create_topic(topic, 1)
    keys = ShardKeys(topic, 0)
    hook = Callback("https://hooks.example.com/x")
    plain = [await client.enqueue(topic, i) for i in range(4)]
    hooked = [await client.enqueue(topic, i, callback=hook) for i in range(4)]
    r = client.redis
    await r.xgroup_create(keys.ready, "a", "0")
    await r.xgroup_create(keys.callbacks, "callbacks", "0")
    ready_ids = await _read(r, keys.ready, "a", 10)
    await r.xack(keys.ready, "a", *ready_ids)
    hook_ids = await _read(r, keys.callbacks, "callbacks", 10)
    assert len(ready_ids) == len(hook_ids) == 4
    await r.xack(keys.callbacks, "callbacks", *hook_ids[:2])
    node = await _leading_node(redis_url, topic, retention_ms=0)
    try:
        assert await node.trimmer.trim_once() == 6
        assert await r.xlen(keys.ready) == 0
        assert [e for e, _ in await r.xrange(keys.callbacks)] == hook_ids[2:]
        states = [(await client.get(topic, i)).state for i in hooked]
        assert states[2:] == [JobState.RUNNING, JobState.RUNNING]
        assert (await client.get(topic, plain[0])).state is not JobState.RUNNING
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


async def _history_bytes(r: redis.asyncio.Redis, keys: ShardKeys) -> int:
    """What the byte budget counts: MEMORY USAGE of the stream, history and cancellations."""
    return sum([await r.memory_usage(k) or 0 for k in (keys.ready, keys.history, keys.cancelled)])


async def _records(r: redis.asyncio.Redis, key: str) -> list[bytes]:
    """A history generation's job records (without its \\x1f markers)."""
    return [f for f in await r.hkeys(key) if not f.startswith(b"\x1f")]


async def test_over_its_byte_budget_history_loses_the_oldest_acked_entries_and_their_records(
    redis_url: str, client: AsyncClient, admin: AsyncAdmin, topic: str
) -> None:
    await admin.create_topic(topic, 1)
    await client.enqueue_many(
        topic, [EnqueueItem(payload="x" * 200, job_id=f"j{i}") for i in range(2000)]
    )
    r, keys = client.redis, ShardKeys(topic, 0)
    ids = [entry_id for entry_id, _ in await r.xrange(keys.ready)]
    await r.xgroup_create(keys.ready, "a", "0")
    assert await _read(r, keys.ready, "a", 2000) == ids
    await r.xack(keys.ready, "a", *ids[:1500])  # the last 500 stay pending
    for i in range(100):
        await client.enqueue(topic, "c", delay=60, job_id=f"c{i}")
        await client.cancel(topic, f"c{i}")
    before = await _history_bytes(r, keys)
    budget = before * 7 // 10
    node = await _leading_node(redis_url, topic, HOUR_MS, history_max_bytes=budget)
    try:
        trimmed = await node.trimmer.trim_once()
        # Within retention, so only the budget trims: the oldest acked entries, a batch at a
        # time towards the last one the records' old generation can name, until the history
        # is within 90% of its budget; never a pending one; cancellations in proportion.
        assert 0 < trimmed <= 1500
        assert [entry_id for entry_id, _ in await r.xrange(keys.ready)] == ids[trimmed:]
        assert await _history_bytes(r, keys) <= budget * 0.9, (before, budget)
        assert await r.zcard(keys.cancelled) < 100
        # The records stay, a generation whole, while it can name an entry still there.
        assert await r.exists(keys.history_old) == 1
        assert (await client.get(topic, "j1999")).state is JobState.RUNNING

        # A budget below what the unacked entries take never trims those.
        await node.stop()
        node = await _leading_node(redis_url, topic, HOUR_MS, history_max_bytes=1)
        await node.trimmer.trim_once()
        assert [entry_id for entry_id, _ in await r.xrange(keys.ready)] == ids[1500:]

        # Once they are acked and trimmed, the generation goes with them.
        await r.xack(keys.ready, "a", *ids[1500:])
        await node.trimmer.trim_once()
        assert await r.xlen(keys.ready) == 0
        assert await r.exists(keys.history_old) == 0
        assert await _records(r, keys.history) == []
        for job_id in ("j0", "j1999"):
            assert (await client.get(topic, job_id)).state is JobState.UNKNOWN
    finally:
        await node.stop()
