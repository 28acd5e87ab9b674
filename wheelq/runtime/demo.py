"""`wheelq demo`: enqueue jobs spread over a few seconds, fire them, and check the result.

It runs a scheduler node in this process against the given Redis, enqueues
`jobs` jobs due uniformly over `spread_s` seconds (starting `lead_s`
from now), waits until every one is in the streams, and summarises: fired
/ expected, duplicates, early, and entry lateness percentiles.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from typing import Any

from wheelq.core.keys import TOPICS_KEY, all_shards, nodes_key
from wheelq.core.stats import summarize
from wheelq.runtime.client import AsyncClient
from wheelq.runtime.observe import read_fired
from wheelq.runtime.producer import EnqueueItem
from wheelq.runtime.scheduler import Scheduler

Progress = Callable[[int, int], None]


async def run_demo(
    url: str,
    *,
    jobs: int = 10_000,
    spread_s: float = 3.0,
    lead_s: float = 1.0,
    shards: int = 4,
    timeout_s: float = 30.0,
    progress: Progress | None = None,
    redis_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run the demo; returns the summary (see `wheelq.core.stats.summarize`)."""
    topic = f"demo-{secrets.token_hex(4)}"
    client = AsyncClient.from_url(url, redis_options=redis_options)
    scheduler = Scheduler.from_url(url, [topic], redis_options=redis_options)
    try:
        await client.create_topic(topic, shards)
        await scheduler.start()
        items = [
            EnqueueItem({"n": i}, delay=lead_s + spread_s * i / max(1, jobs - 1))
            for i in range(jobs)
        ]
        ids = await client.enqueue_many(topic, items)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + lead_s + spread_s + timeout_s
        fired = 0
        while fired < jobs and loop.time() < deadline:
            await asyncio.sleep(0.1)
            stats = await client.stats(topic)
            fired = stats.ready if stats else 0
            if progress is not None:
                progress(fired, jobs)
        records = await read_fired(client.redis, topic, shards)
        summary = summarize(records, ids)
        summary["topic"] = topic
        return summary
    finally:
        await scheduler.stop()
        await _drop_topic(client, topic, shards)
        await client.aclose()


async def _drop_topic(client: AsyncClient, topic: str, shards: int) -> None:
    """Remove the demo's keys, one slot per DEL (so it works on Redis Cluster too)."""
    for k in all_shards(topic, shards):
        await client.redis.delete(*k.data_keys)
    await client.redis.delete(nodes_key(topic))
    await client.redis.hdel(TOPICS_KEY, topic)
