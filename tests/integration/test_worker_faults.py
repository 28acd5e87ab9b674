"""The consuming side under real faults: kill -9 of Redis itself (AOF, fsync always) while a
worker handles jobs, then a restart; and a proxy that cuts every connection of a scheduler
node and a worker while jobs fire and run."""

from __future__ import annotations

import asyncio

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from tests.support.servers import dedicated_server
from tests.support.waiting import eventually
from wheelq import AsyncAdmin, AsyncClient, Job, RedisUnavailableError, Scheduler, Worker
from wheelq.core.keys import all_shards
from wheelq.testing import ServerBinary
from wheelq.testing.proxy import CuttingProxy

pytestmark = pytest.mark.both_servers  # the server killed -9 and restarted (AOF)

SHARDS = 2


async def _all_acked(client: AsyncClient, topic: str) -> bool:
    """Nothing pending in the default group on any shard."""
    for keys in all_shards(topic, SHARDS):
        if (await client.redis.xpending(keys.ready, "default"))["pending"]:
            return False
    return True


async def _enqueue_when_up(client: AsyncClient, topic: str, payload: int) -> str | None:
    try:
        return await client.enqueue(topic, payload)  # due now: appended to the stream at once
    except (RedisUnavailableError, RedisConnectionError, OSError):
        return None  # the server is still coming back; the caller tries again


async def test_worker_keeps_serving_across_a_server_crash_and_restart(
    server_binary: ServerBinary,
) -> None:
    with dedicated_server(
        server_binary, appendonly=True, extra_args=["--appendfsync", "always"]
    ) as srv:
        topic = "worker-restart"
        seen: set[str] = set()

        async def handler(job: Job) -> None:
            await asyncio.sleep(0.005)  # work in flight when the server dies
            seen.add(job.id)

        async with AsyncClient.from_url(srv.url) as client:
            admin = AsyncAdmin.of(client)
            await admin.create_topic(topic, SHARDS)
            worker = Worker.from_url(
                srv.url,
                topic,
                handler,
                concurrency=4,
                block_ms=200,
                claim_interval_ms=200,
                visibility_timeout_ms=1000,
            )
            await worker.start()
            try:
                before = [await client.enqueue(topic, i) for i in range(300)]

                async def some_handled() -> bool:
                    return len(seen) >= 20

                await eventually(some_handled, timeout_s=10, what="the worker to get going")
                assert len(seen) < len(before), "the fault must hit while jobs are in flight"
                await asyncio.to_thread(srv.kill)
                await asyncio.to_thread(srv.restart)

                after: list[str] = []

                async def enqueued_after() -> bool:
                    job_id = await _enqueue_when_up(client, topic, len(after))
                    if job_id is not None:
                        after.append(job_id)
                    return len(after) >= 50

                await eventually(enqueued_after, timeout_s=20, what="enqueues after the restart")

                async def all_handled() -> bool:
                    return set(before) | set(after) <= seen

                await eventually(all_handled, timeout_s=30, what="every job to be handled")

                await eventually(
                    lambda: _all_acked(client, topic), timeout_s=30, what="every entry acked"
                )
            finally:
                await worker.stop()
        assert set(before) | set(after) <= seen


async def test_worker_and_scheduler_ride_out_cut_connections(redis_url: str, topic: str) -> None:
    """Every connection of a scheduler node and a worker is cut, twice, while jobs are due and
    in flight: each reconnects, every job fires once and is handled, every entry is acked."""
    port = int(redis_url.rsplit(":", 1)[1])
    seen: list[str] = []

    async def handler(job: Job) -> None:
        await asyncio.sleep(0.002)
        seen.append(job.id)

    async with CuttingProxy(port) as proxy, AsyncClient.from_url(redis_url) as client:
        admin = AsyncAdmin.of(client)
        url = f"redis://127.0.0.1:{proxy.port}"
        await admin.create_topic(topic, SHARDS)
        node = Scheduler.from_url(url, [topic], preload_interval_ms=100, sweep_grace_ms=300)
        worker = Worker.from_url(
            url,
            topic,
            handler,
            concurrency=8,
            block_ms=200,
            claim_interval_ms=200,
            visibility_timeout_ms=1000,
        )
        await node.start()
        await worker.start()
        try:
            ids = await client.enqueue_many(
                topic, [{"payload": i, "delay": 0.2 + i / 1000} for i in range(2000)]
            )

            async def handled(count: int) -> bool:
                return len(set(seen)) >= count

            for count in (300, 900):  # cut while jobs are firing and being handled
                await eventually(lambda c=count: handled(c), timeout_s=20, what="progress")
                assert proxy.cut() > 0

            async def all_handled() -> bool:
                return set(ids) <= set(seen)

            await eventually(all_handled, timeout_s=30, what="every job to be handled")

            await eventually(
                lambda: _all_acked(client, topic), timeout_s=30, what="every entry acked"
            )
        finally:
            await worker.stop()
            await node.stop()
    fired = [
        fields[b"id"].decode()
        for k in all_shards(topic, SHARDS)
        for _, fields in await _entries(redis_url, k.ready)
    ]
    assert sorted(fired) == sorted(ids), "a job was fired twice or not at all"
    assert proxy.cuts == 3  # two in the run, one on close


async def _entries(url: str, key: str) -> list[tuple[bytes, dict[bytes, bytes]]]:
    async with AsyncClient.from_url(url) as client:
        return await client.redis.xrange(key)  # type: ignore[no-any-return]
