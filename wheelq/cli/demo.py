"""`wheelq demo`: enqueue jobs spread over a few seconds, fire and handle them in this
process, and summarize the lateness.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Callable
from typing import Any

from wheelq.admin.async_admin import AsyncAdmin
from wheelq.core.job import Job
from wheelq.producer.async_client import AsyncClient
from wheelq.producer.items import EnqueueItem
from wheelq.runtime.clock import ClockKeeper, RedisClock
from wheelq.scheduler.scheduler import Scheduler
from wheelq.store.executor import AsyncExecutor
from wheelq.testing.fired import Fired, read_fired, summarize
from wheelq.worker.worker import Worker

Progress = Callable[[int, int, int], None]  # progress(fired, handled, total)

CLOCK_SAMPLES = 5


async def run_demo(
    url: str,
    *,
    jobs: int = 10_000,
    spread_s: float = 3.0,
    lead_s: float = 1.0,
    shards: int = 4,
    concurrency: int = 100,
    timeout_s: float = 30.0,
    progress: Progress | None = None,
    redis_options: dict[str, Any] | None = None,
    stop: asyncio.Event | None = None,
) -> dict[str, Any]:
    """Run the demo; returns the firing's summary, the handlers' under ``"handled"``. Once
    `stop` is set it waits no longer for the jobs: it stops and drops its topic."""
    stop = stop or asyncio.Event()
    topic = f"demo-{secrets.token_hex(4)}"
    client = AsyncClient.from_url(url, redis_options=redis_options)
    clock = RedisClock()
    keeper = ClockKeeper(AsyncExecutor(client.redis), clock, 5000)
    started: list[Fired] = []

    async def handler(job: Job) -> None:
        started.append(Fired(job.id, job.due_ms, round(clock.now_ms())))

    scheduler = Scheduler.from_url(url, [topic], redis_options=redis_options)
    worker = Worker.from_url(
        url, topic, handler, concurrency=concurrency, redis_options=redis_options
    )
    try:
        for _ in range(CLOCK_SAMPLES):
            await keeper.sample()
        await AsyncAdmin.of(client).create_topic(topic, shards)
        await scheduler.start()
        await worker.start()
        await keeper.start()
        items = [
            EnqueueItem(payload={"n": i}, delay=lead_s + spread_s * i / max(1, jobs - 1))
            for i in range(jobs)
        ]
        ids = await client.enqueue_many(topic, items)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + lead_s + spread_s + timeout_s
        while len(started) < jobs and loop.time() < deadline and not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.1)
            stats = await AsyncAdmin.of(client).stats(topic)
            if progress is not None:
                progress(stats.in_stream if stats else 0, len(started), jobs)
        await worker.stop()
        summary = summarize(await read_fired(client.redis, topic, shards), ids)
        summary["handled"] = summarize(started, ids)
        summary["topic"] = topic
        return summary
    finally:
        await keeper.stop()
        await worker.stop()
        await scheduler.stop()
        await AsyncAdmin.of(client).drop_topic(topic, force=True)  # the demo's keys go
        await client.aclose()
