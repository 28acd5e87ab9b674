"""Backpressure limits, every face: ``max_pending`` set and read through each face (library
sync and async, CLI, HTTP) refuses the next enqueue in each face (`TopicFullError`, HTTP 429,
CLI exit 1) until removed; ``max_ready`` holds due jobs back while nothing is acked and lets
them through to workers with async and ``def`` handlers as they ack. The due line's settings
(priority credit, fair shares, fair weights) are set and read back through each face that
sets them, and shown by each that shows them (the console too).
"""

from __future__ import annotations

import contextlib
from collections import Counter

import pytest

from tests.integration import test_worker
from tests.support.consumers import WorkerConsumer
from tests.support.faces import DueLine, Face, Refused, having
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


@pytest.mark.parametrize("face", having("set_due_line"), indirect=True)
async def test_due_line_settings_set_through_every_face_read_back_in_it(
    face: Face, admin: AsyncAdmin, topic: str
) -> None:
    await face.set_due_line(topic, credit_ms=250, fair=True, weights={"big": 5, "a b": 1000})
    want = DueLine(250, True, {"big": 5, "a b": 1000})
    assert await face.due_line(topic) == want
    limits = await admin.limits(topic)
    assert DueLine(limits.priority_credit_ms, limits.fair, limits.fair_weights) == want
    await face.set_due_line(topic, fair=False)  # the others stay as they are
    assert await face.due_line(topic) == want._replace(fair=False)
    await face.set_due_line(topic, credit_ms=0, weights={})
    assert await face.due_line(topic) == DueLine(0, False, {})
    assert (await admin.limits(topic)).max_pending is None


@pytest.mark.parametrize(
    "face", [f for f in having("due_line") if f not in having("set_due_line")], indirect=True
)
async def test_due_line_settings_are_shown_by_every_face_that_shows_them(
    face: Face, admin: AsyncAdmin, topic: str
) -> None:
    await admin.set_limits(topic, max_ready=9)
    assert await face.due_line(topic) == DueLine(1000, False, {})
    await admin.set_limits(topic, priority_credit_ms=1500, fair=True, fair_weights={"t-1": 3})
    assert await face.due_line(topic) == DueLine(1500, True, {"t-1": 3})
