"""Backpressure limits, every face: ``max_pending`` set and read through each face (library
sync and async, CLI, HTTP) refuses the next enqueue in each face (`TopicFullError`, HTTP 429,
CLI exit 1) until removed; ``max_ready`` holds due jobs back while nothing is acked and lets
them through to workers with async and ``def`` handlers as they ack.
"""

from __future__ import annotations

from collections import Counter

import pytest

from tests.integration import test_worker
from tests.support.consumers import WorkerConsumer
from tests.support.faces import Face, Refused, having
from tests.support.waiting import eventually
from tests.support.workers import Workers
from wheelq import AsyncClient, Scheduler, TopicFullError

pytestmark = pytest.mark.cluster_too

SHARDS = test_worker.SHARDS  # the scheduler fixture waits for it to lead that many shards
scheduler = test_worker.scheduler
HOUR_S = 3600


@pytest.mark.parametrize("face", having("set_max_pending"), indirect=True)
async def test_max_pending_set_through_every_face_refuses_the_next_enqueue_in_it(
    face: Face, deployment: str, client: AsyncClient, topic: str
) -> None:
    if face.name == "cli" and deployment == "cluster":
        pytest.skip("the CLI (the sync Client in a process) runs its rows on the single server")
    await face.set_max_pending(topic, SHARDS)  # one per shard
    assert await face.max_pending(topic) == SHARDS
    waiting: list[str] = []
    while len(waiting) < 4 * SHARDS:  # until one is refused: its shard is full
        try:
            waiting.append(await face.enqueue(topic, len(waiting), delay_s=HOUR_S))
        except (TopicFullError, Refused) as refused:
            if isinstance(refused, Refused):
                assert refused.code == (429 if face.name == "http" else 1), refused.said
                assert "full" in refused.said.lower()
            break
    else:
        raise AssertionError(f"{len(waiting)} jobs taken past max_pending={SHARDS}")
    assert len(waiting) <= SHARDS
    stats = await client.stats(topic)
    assert stats is not None and stats.pending == len(waiting)
    await face.set_max_pending(topic, None)
    assert await face.max_pending(topic) is None
    await face.enqueue(topic, "more", delay_s=HOUR_S)


@pytest.mark.parametrize("kind", ["async-worker", "sync-worker"])
async def test_max_ready_holds_due_jobs_back_until_workers_ack_them(
    kind: str, client: AsyncClient, pool: Workers, scheduler: Scheduler, topic: str
) -> None:
    await client.set_limits(topic, max_ready=SHARDS)  # one per shard
    await client.pause(topic)
    ids = [await client.enqueue(topic, n) for n in range(3 * SHARDS)]

    async def held_back() -> bool:
        stats = await client.stats(topic)
        assert stats is not None and all(s.ready <= 1 for s in stats.shards), stats
        return stats.pending + stats.ready == len(ids) and stats.pending >= len(ids) - SHARDS

    await eventually(held_back, timeout_s=10, what="the jobs held back past max_ready")
    consumer = WorkerConsumer(pool, "default", sync=kind == "sync-worker")
    await consumer.start()
    try:
        await client.resume(topic)

        async def all_ran() -> bool:
            return Counter(consumer.handled) == Counter(ids)

        await eventually(all_ran, timeout_s=15, what="every job let through and run once")
    finally:
        await consumer.stop()
