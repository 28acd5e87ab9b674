"""Backpressure limits, every face: ``max_pending`` set and read through each face (library
sync and async, CLI, HTTP) refuses the next enqueue in each face (`TopicFullError`, HTTP 429,
CLI exit 1) until removed; ``max_ready`` holds due jobs back while nothing is acked and lets
them through to workers with async and ``def`` handlers as they ack.
"""

from __future__ import annotations

import contextlib
from collections import Counter

import pytest

from tests.integration import test_worker
from tests.support.consumers import WorkerConsumer
from tests.support.faces import Face, Refused, having
from tests.support.waiting import eventually
from tests.support.workers import Workers
from wheelq import AsyncAdmin, AsyncClient, Scheduler, TopicFullError

pytestmark = pytest.mark.cluster_too

SHARDS = test_worker.SHARDS  # the scheduler fixture waits for it to lead that many shards
scheduler = test_worker.scheduler
HOUR_S = 3600


@pytest.mark.parametrize("face", having("set_max_pending"), indirect=True)
async def test_max_pending_set_through_every_face_refuses_the_next_enqueue_in_it(
    face: Face, client: AsyncClient, admin: AsyncAdmin, topic: str
) -> None:
    await face.set_max_pending(topic, SHARDS)  # one per shard
    assert await face.max_pending(topic) == SHARDS
    for n in range(50 * SHARDS):  # every shard full: the face's enqueue is refused on any
        with contextlib.suppress(TopicFullError):
            await client.enqueue(topic, n, delay=HOUR_S)
        stats = await admin.stats(topic)
        assert stats is not None
        if stats.pending == SHARDS:
            break
    with pytest.raises((TopicFullError, Refused)) as refused:
        await face.enqueue(topic, "one more", delay_s=HOUR_S)
    if isinstance(refused.value, Refused):
        assert refused.value.code == (429 if face.name == "http" else 1), refused.value.said
        assert "full" in refused.value.said.lower()
    assert (await admin.stats(topic)).pending == SHARDS  # type: ignore[union-attr]
    await face.set_max_pending(topic, None)
    assert (await admin.limits(topic)).max_pending is None
    await client.enqueue(topic, "more", delay=HOUR_S)


@pytest.mark.parametrize("kind", ["async-worker", "sync-worker"])
async def test_max_ready_holds_due_jobs_back_until_workers_ack_them(
    kind: str,
    client: AsyncClient,
    admin: AsyncAdmin,
    pool: Workers,
    scheduler: Scheduler,
    topic: str,
) -> None:
    await admin.set_limits(topic, max_ready=SHARDS)  # one per shard
    await admin.pause(topic)
    ids = [await client.enqueue(topic, n) for n in range(3 * SHARDS)]

    async def held_back() -> bool:
        stats = await admin.stats(topic)
        assert stats is not None and all(s.ready <= 1 for s in stats.shards), stats
        return stats.pending + stats.ready == len(ids) and stats.pending >= len(ids) - SHARDS

    await eventually(held_back, timeout_s=10, what="the jobs held back past max_ready")
    consumer = WorkerConsumer(pool, "default", sync=kind == "sync-worker")
    await consumer.start()
    try:
        await admin.resume(topic)

        async def all_ran() -> bool:
            return Counter(consumer.handled) == Counter(ids)

        await eventually(all_ran, timeout_s=15, what="every job let through and run once")
    finally:
        await consumer.stop()
