"""The due line on a real server (docs/architecture.md, "The due line"): on a shard that
orders its due jobs, what enters the stream at the due millisecond is decided there: fair
turns across keys, priority first, a stream kept about a lead deep, and no job lost or fired
twice on the way."""

from __future__ import annotations

import asyncio

import pytest
import redis

from tests.integration import test_backpressure
from tests.integration.test_pause import watch_reads
from tests.support.waiting import eventually, until
from wheelq import AsyncAdmin, AsyncClient, EnqueueItem, Job, Scheduler, Worker
from wheelq.core.keys import ShardKeys
from wheelq.core.settings import WorkerSettings
from wheelq.worker.read_ahead import LINE_READ_AHEAD_MS

# test_backpressure's: a scheduler node leading the topic, stopped at teardown
scheduler = test_backpressure.scheduler


@pytest.mark.cluster_too
async def test_a_key_due_during_another_keys_flood_waits_about_one_turn_not_the_flood(
    redis_url: str, redis_sync: redis.Redis, topic: str, scheduler: Scheduler
) -> None:
    """One key's 400 jobs due at once, then another key's 10 due 50 ms later: with fair shares
    the second key's jobs start in turns with the flood's, so all ten have started well before
    the flood is half done (without them, after all 400)."""
    started: list[str] = []

    async def handler(job: Job) -> None:
        started.append(job.key or "")
        await asyncio.sleep(0.002)

    keys = ShardKeys(topic, 0)
    async with AsyncClient.from_url(redis_url) as c:
        admin = AsyncAdmin.of(c)
        await admin.create_topic(topic, 1)
        await admin.set_limits(topic, fair=True)
        worker = Worker.from_url(redis_url, topic, handler, concurrency=1)
        await worker.start()
        try:
            flood = [EnqueueItem(payload=i, delay=0.3, key="a") for i in range(400)]
            other = [EnqueueItem(payload=i, delay=0.35, key="b") for i in range(10)]
            ids = await c.enqueue_many(topic, flood) + await c.enqueue_many(topic, other)
            await eventually(
                lambda: _true(len(started) == len(ids)), timeout_s=60, what="every job to run"
            )
        finally:
            await worker.stop()
    last_b = max(i for i, key in enumerate(started) if key == "b")
    assert last_b < 200, f"the tenth 'b' job started {last_b}th: behind the flood"
    assert redis_sync.hlen(keys.held) == 0 and redis_sync.zcard(keys.turns) == 0
    assert redis_sync.hlen(keys.jobs) == 0 and redis_sync.zcard(keys.delayed) == 0


@pytest.mark.cluster_too
@pytest.mark.parametrize("backlog_delay", [0.0, 0.3], ids=["due-now", "delayed"])
async def test_priority_9_due_during_a_priority_0_backlog_passes_it(
    redis_url: str, redis_sync: redis.Redis, topic: str, scheduler: Scheduler, backlog_delay: float
) -> None:
    """300 jobs of priority 0 due at once (enqueued due now, or with a delay), then 10 of
    priority 9 due 50 ms later: the enqueue marks the shard ordered, the due line puts each
    priority-9 job ahead of the backlog, so all ten start while most of it still waits
    (without priorities, after all 300). Nothing is lost or run twice on the way."""
    started: list[int] = []
    ran: list[str] = []

    async def handler(job: Job) -> None:
        started.append(job.priority)
        ran.append(job.id)
        await asyncio.sleep(0.002)

    keys = ShardKeys(topic, 0)
    async with AsyncClient.from_url(redis_url) as c:
        await AsyncAdmin.of(c).create_topic(topic, 1)
        worker = Worker.from_url(redis_url, topic, handler, concurrency=1)
        await worker.start()
        try:
            backlog = [EnqueueItem(payload=i, delay=backlog_delay, priority=0) for i in range(300)]
            ids = await c.enqueue_many(topic, backlog)
            ids += await c.enqueue_many(
                topic,
                [EnqueueItem(payload=i, delay=backlog_delay + 0.05, priority=9) for i in range(10)],
            )
            await eventually(
                lambda: _true(len(ran) >= len(ids)), timeout_s=60, what="every job to run"
            )
        finally:
            await worker.stop()
    assert sorted(ran) == sorted(ids), "a job was lost or ran twice"
    last_9 = max(i for i, p in enumerate(started) if p == 9)
    assert last_9 < 150, f"the tenth priority-9 job started {last_9}th: behind the backlog"
    assert redis_sync.hget(keys.limits, "ordered") == b"1"
    assert redis_sync.hlen(keys.held) == 0 and redis_sync.hlen(keys.jobs) == 0


async def _true(value: bool) -> bool:
    return value


@pytest.mark.cluster_too
async def test_a_worker_reads_ahead_less_while_its_topic_has_a_due_line(
    redis_url: str, topic: str
) -> None:
    """What a worker has read ahead starts in read order, whatever the line decides after
    it: a worker started on a fair topic reads ahead `LINE_READ_AHEAD_MS` of work, and one
    already running shortens its horizon at once (told, not at its next poll, 60 s away)
    when its topic turns fair, or when a shard gets its first job of a priority other than
    5 (shards then keep ordering their due jobs)."""
    plain, fair, prioritized = f"{topic}-plain", f"{topic}-fair", f"{topic}-prio"
    async with AsyncClient.from_url(redis_url) as c:
        admin = AsyncAdmin.of(c)
        for name in (plain, fair, prioritized):
            await admin.create_topic(name, 1)
        await admin.set_limits(fair, fair=True)
        on_fair = Worker.from_url(redis_url, fair, _nothing)
        running = {
            name: Worker.from_url(redis_url, name, _nothing, pause_poll_ms=60_000)
            for name in (plain, prioritized)
        }
        await on_fair.start()
        for worker in running.values():
            await worker.start()
        try:
            assert on_fair.slots.read_ahead.horizon_ms == LINE_READ_AHEAD_MS
            for worker in running.values():
                assert worker.slots.read_ahead.horizon_ms == WorkerSettings().read_ahead_ms
                await until(lambda w=worker: watch_reads(w) >= 1, what="the watch subscribed")
            await admin.set_limits(plain, fair=True)
            await c.enqueue(prioritized, b"x", delay=60, priority=9)
            for worker in running.values():

                async def shortened(w: Worker = worker) -> bool:
                    return w.slots.read_ahead.horizon_ms == LINE_READ_AHEAD_MS

                await eventually(shortened, timeout_s=2, what="the running worker told")
        finally:
            await on_fair.stop()
            for worker in running.values():
                await worker.stop()


async def _nothing(job: Job) -> None:
    return None
