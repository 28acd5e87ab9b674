"""A worker under a real server fault: kill -9 of Redis itself (AOF, fsync always) while the
worker is handling jobs, then a restart on the same port and data."""

from __future__ import annotations

import asyncio

from redis.exceptions import ConnectionError as RedisConnectionError

from tests.support.servers import dedicated_server
from tests.support.waiting import eventually
from wheelq import AsyncClient, Job, Worker
from wheelq.core.keys import all_shards
from wheelq.embedded import ServerBinary

SHARDS = 2


async def _enqueue_when_up(client: AsyncClient, topic: str, payload: int) -> str | None:
    try:
        return await client.enqueue(topic, payload)  # due now: appended to the stream at once
    except (RedisConnectionError, OSError):
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
            await client.create_topic(topic, SHARDS)
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

                async def all_acked() -> bool:
                    pending = [
                        await client.redis.xpending(k.ready, "default")
                        for k in all_shards(topic, SHARDS)
                    ]
                    return all(p["pending"] == 0 for p in pending)

                await eventually(all_acked, timeout_s=30, what="every entry to be acked")
            finally:
                await worker.stop()
        assert set(before) | set(after) <= seen
