"""Backpressure on a real server (`wheelq.core.flow`): a topic at its max_pending refuses
enqueues and writes nothing of them; a stream at its max_ready holds due jobs back in the
sorted set, never grows past the limit, and every job still runs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis
import redis.asyncio

from tests.support.entries import add_ready, dead_fields
from tests.support.waiting import eventually
from tests.support.web import serving
from wheelq import Admin, AsyncAdmin, AsyncClient, Client, EnqueueItem, Job, Scheduler, Worker
from wheelq.core.flow import TopicLimits
from wheelq.core.history import JobState
from wheelq.core.keys import ShardKeys, all_shards, shard_of
from wheelq.errors import InvalidArgumentError, TopicFullError


def test_a_full_topic_refuses_with_nothing_written(redis_url: str, topic: str) -> None:
    with Client.from_url(redis_url) as c:
        admin = Admin.of(c)
        admin.create_topic(topic, 1)
        assert admin.set_limits(topic, max_pending=10) == TopicLimits(10, None)
        for i in range(10):
            c.enqueue(topic, i, job_id=f"j{i}", delay=60)
        with pytest.raises(TopicFullError) as info:
            c.enqueue(topic, 10, job_id="j10", delay=60)
        assert info.value.job_ids == ["j10"] and info.value.enqueued == []
        assert c.get(topic, "j10").state is JobState.UNKNOWN
        assert admin.stats(topic).pending == 10  # type: ignore[union-attr]
        # Not adding to what waits: replacing a pending job, and a job due now (it fires).
        c.enqueue(topic, "new", job_id="j3", delay=30, replace=True)
        c.enqueue(topic, "now", job_id="fires", delay=0)
        assert c.get(topic, "fires").state is JobState.READY
        # Room again once a job leaves.
        assert c.cancel(topic, "j0")
        c.enqueue(topic, 10, job_id="j10", delay=60)
        admin.set_limits(topic, max_pending=None, max_ready=None)
        assert admin.limits(topic) == TopicLimits()
        c.enqueue(topic, 11, job_id="j11", delay=60)


def test_a_batch_into_a_full_topic_names_what_was_refused_and_writes_none_of_it(
    redis_url: str, topic: str
) -> None:
    shards = 4
    with Client.from_url(redis_url) as c:
        admin = Admin.of(c)
        admin.create_topic(topic, shards)
        admin.set_limits(topic, max_pending=40)  # 10 per shard
        ids = [f"b{i}" for i in range(100)]
        with pytest.raises(TopicFullError) as info:
            c.enqueue_many(topic, [EnqueueItem(payload=i, delay=60, job_id=i) for i in ids])
        refused, enqueued = set(info.value.job_ids), set(info.value.enqueued)
        assert refused | enqueued == set(ids) and not refused & enqueued
        assert all(c.get(topic, i).state is JobState.UNKNOWN for i in refused)
        assert all(c.get(topic, i).state is JobState.PENDING for i in enqueued)
        per_shard = [sum(shard_of(i, shards) == s for i in enqueued) for s in range(shards)]
        assert max(per_shard) <= 10 and admin.stats(topic).pending == len(enqueued)  # type: ignore[union-attr]


def test_limits_out_of_range_are_refused_naming_the_parameter(redis_url: str, topic: str) -> None:
    with Admin.from_url(redis_url) as admin:
        admin.create_topic(topic)
        for bad in (
            {"max_pending": 0},
            {"max_ready": -1},
            {"max_pending": True},
            {"max_ready": 2.5},
        ):
            with pytest.raises(InvalidArgumentError) as info:
                admin.set_limits(topic, **bad)  # type: ignore[arg-type]
            assert info.value.parameter == next(iter(bad))
        assert admin.limits(topic) == TopicLimits()


def backlog(r: redis.Redis, keys: ShardKeys) -> int:
    """What the slowest group of the shard has to catch up on: unacked + not yet read."""
    groups = r.xinfo_groups(keys.ready)
    return max(g["pending"] + (g["lag"] or 0) for g in groups)


@pytest.fixture
async def scheduler(redis_url: str, topic: str) -> AsyncIterator[Scheduler]:
    node = Scheduler.from_url(redis_url, topic, window_ms=2000, preload_interval_ms=100)
    await node.start()
    yield node
    await node.stop()


async def test_a_held_back_stream_never_exceeds_max_ready_and_every_job_runs(
    redis_url: str, redis_sync: redis.Redis, topic: str, scheduler: Scheduler
) -> None:
    shards, share, n = 2, 10, 600
    seen: list[int] = []
    done: set[str] = set()

    async def slow(job: Job) -> None:
        seen.append(max(backlog(redis_sync, k) for k in all_shards(topic, shards)))
        await asyncio.sleep(0.002)  # the work: slower than jobs come due
        done.add(job.id)

    async with AsyncClient.from_url(redis_url) as c:
        admin = AsyncAdmin.of(c)
        await admin.create_topic(topic, shards)
        await admin.set_limits(topic, max_ready=share * shards)
        worker = Worker.from_url(redis_url, topic, slow, concurrency=4)
        await worker.start()
        try:
            ids = await c.enqueue_many(topic, [EnqueueItem(payload=i, delay=0.3) for i in range(n)])
            await eventually(
                lambda: _all(done, ids), timeout_s=60, what=f"all {n} jobs to be handled"
            )
        finally:
            await worker.stop()
    assert max(seen) <= share, f"a shard's stream held {max(seen)} > max_ready share {share}"
    assert max(seen) >= share - 4, "the limit was never reached: the test proved nothing"
    assert all(redis_sync.zcard(k.delayed) == 0 for k in all_shards(topic, shards))


@pytest.mark.cluster_too
def test_jobs_due_now_wait_in_the_sorted_set_while_the_stream_is_at_max_ready(
    redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    """Every path that fires a job at once (a delay of 0, no delay, an ``at`` in the past, a
    batch, a reschedule to now) keeps to max_ready: with no consumer, the stream holds the
    limit and the rest wait as pending jobs, none lost."""
    limit = 4
    keys = ShardKeys(topic, 0)
    with Client.from_url(redis_url) as c:
        admin = Admin.of(c)
        admin.create_topic(topic, 1)
        admin.set_limits(topic, max_ready=limit)
        ids = [c.enqueue(topic, i, delay=0) for i in range(10)]
        ids += [c.enqueue(topic, i) for i in range(10)]
        ids += [c.enqueue(topic, i, at=1_000_000_000) for i in range(5)]
        ids += c.enqueue_many(topic, [EnqueueItem(payload=i, delay=0) for i in range(100)])
        later = c.enqueue(topic, "later", delay=600)
        assert c.reschedule(topic, later, delay=0)
        ids.append(later)
        assert redis_sync.xlen(keys.ready) == limit
        states = [c.get(topic, i).state for i in ids]
        assert states.count(JobState.READY) == limit
        assert states.count(JobState.PENDING) == len(ids) - limit
        assert redis_sync.zcard(keys.delayed) == len(ids) - limit


@pytest.mark.cluster_too
async def test_jobs_held_back_at_enqueue_all_run_once_workers_catch_up(
    redis_url: str, topic: str, scheduler: Scheduler
) -> None:
    done: list[str] = []

    async def handle(job: Job) -> None:
        done.append(job.id)

    async with AsyncClient.from_url(redis_url) as c:
        admin = AsyncAdmin.of(c)
        await admin.create_topic(topic, 1)
        await admin.set_limits(topic, max_ready=4)
        ids = await c.enqueue_many(topic, [EnqueueItem(payload=i, delay=0) for i in range(200)])
        worker = Worker.from_url(redis_url, topic, handle, concurrency=2)
        await worker.start()
        try:
            await eventually(
                lambda: _all(set(done), ids), timeout_s=60, what="all 200 jobs to be handled"
            )
        finally:
            await worker.stop()
    assert sorted(done) == sorted(ids), "a job ran twice"


@pytest.mark.cluster_too
def test_replay_into_a_stream_at_max_ready_leaves_the_rest_dead(
    redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    keys = ShardKeys(topic, 0)
    with Admin.from_url(redis_url) as admin:
        admin.create_topic(topic, 1)
        for i in range(6):  # six dead letters, written as a worker writes them
            fields = dead_fields(
                f"d{i}", topic=topic, due_ms=1, attempt=3, max_attempts=3, payload=b"\x01"
            )
            add_ready(redis_sync, keys.dead, fields)
        admin.set_limits(topic, max_ready=2)
        assert admin.replay(topic) == 2
        assert redis_sync.xlen(keys.ready) == 2 and redis_sync.xlen(keys.dead) == 4
        admin.set_limits(topic, max_pending=None, max_ready=None)
        assert admin.replay(topic) == 4
        assert redis_sync.xlen(keys.ready) == 6 and redis_sync.xlen(keys.dead) == 0


async def _all(done: set[str], ids: list[str]) -> bool:
    return done >= set(ids)


async def test_the_http_service_answers_a_full_topic_with_429_and_writes_nothing(
    redis_url: str, topic: str
) -> None:
    with Admin.from_url(redis_url) as admin:
        admin.create_topic(topic, 1)
        admin.set_limits(topic, max_pending=2)
    async with serving(redis_url) as api:
        path = f"/v1/topics/{topic}/jobs"
        answers = [
            await api.call("POST", path, {"payload": i, "delay_ms": 60_000}) for i in range(3)
        ]
        assert [status for status, _, _ in answers] == [201, 201, 429]
        _, problem, headers = answers[2]
        assert problem["type"].endswith("topic-full") and headers["Retry-After"] == "1"
        jobs = [{"payload": 9, "delay_ms": 60_000, "id": "x"}]
        status, body, _ = await api.call("POST", f"{path}/batch", {"jobs": jobs})
        assert status == 200 and [r["status"] for r in body["results"]] == [429]
    with Client.from_url(redis_url) as c:
        admin = Admin.of(c)
        assert admin.stats(topic).pending == 2  # type: ignore[union-attr]
        assert c.get(topic, "x").state is JobState.UNKNOWN
