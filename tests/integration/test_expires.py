"""``expires=``: a job not started by its expiry is dropped as expired, never run, on both
servers and a cluster. Decided at fire (emit_due, and a job due as it is written) and at the
start of a run (a worker that reads the entry late, a retry due after it); `get()` says
expired, `result()` raises saying so, the shard counts it, the events name it.

The test plays the scheduler where time must pass (`come_due`: what is pending made due and
emitted, as test_cancel_retries does), so no test sleeps for an expiry it can set in the past.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis.asyncio

from tests.support.waiting import eventually, until
from wheelq import AsyncAdmin, AsyncClient, Job, JobFailedError, JobState, Worker
from wheelq.core.job import Envelope
from wheelq.core.keys import ShardKeys
from wheelq.metrics.collectors import WorkerCollector
from wheelq.store import fire, leases

pytestmark = [pytest.mark.cluster_too, pytest.mark.both_servers]

TOKEN = "test-node:1"
HOUR_MS = 3_600_000
FAST: dict[str, Any] = {
    "visibility_timeout_ms": 30_000,
    "claim_interval_ms": 100,
    "shutdown_grace_ms": 0,
    "retry_jitter_pct": 0,
}


async def redis_now_ms(r: redis.asyncio.Redis) -> int:
    sec, usec = await r.time()
    return int(sec) * 1000 + int(usec) // 1000


async def come_due(client: AsyncClient, r: redis.asyncio.Redis, keys: ShardKeys) -> int:
    """Time passes: everything pending becomes due and is emitted; returns how many fired."""
    executor = client.executor
    (lease,) = await executor.run([leases.lease_acquire(keys, TOKEN, 60_000)])
    assert lease.held
    now = await redis_now_ms(r)
    members = await r.zrange(keys.delayed, 0, -1)
    if members:
        await r.zadd(keys.delayed, {m: now - 1 for m in members}, xx=True)
    (emitted,) = await executor.run([fire.emit_due(keys, TOKEN, now, limit=100)])
    return int(emitted.emitted)


@asynccontextmanager
async def running(
    redis_url: str, topic: str, handler: Any, **settings: Any
) -> AsyncIterator[Worker]:
    """A worker of `topic` running `handler` (FAST, and `settings`), stopped after."""
    worker = Worker.from_url(redis_url, topic, handler, **{**FAST, **settings})
    await worker.start()
    try:
        yield worker
    finally:
        await worker.stop(grace_ms=0)


@pytest.fixture
async def client(redis_url: str, topic: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient.from_url(redis_url) as c:
        await AsyncAdmin.of(c).create_topic(topic, 1)
        yield c


async def test_a_job_whose_expiry_passes_before_its_due_time_never_fires_and_reads_expired(
    client: AsyncClient, redis_async: redis.asyncio.Redis, topic: str
) -> None:
    keys = ShardKeys(topic, 0)
    await AsyncAdmin.of(client).set_events(topic, True)
    expires = datetime.now(UTC) + timedelta(seconds=5)
    # due after its expiry: accepted, and dropped when it comes due
    await client.enqueue(topic, {"n": 1}, job_id="late", delay=3600, expires=expires)
    pending = await client.get(topic, "late")
    assert pending.state is JobState.PENDING
    assert pending.options["expires"] == -(-int(expires.timestamp() * 1_000_000) // 1000)

    await redis_async.zadd(keys.delayed, {"late": 1}, xx=True)  # its due time: long past
    envelope = await redis_async.hget(keys.jobs, "late")
    await redis_async.hset(keys.jobs, "late", _with_expiry(envelope, 2))
    assert await come_due(client, redis_async, keys) == 0
    assert await redis_async.xlen(keys.ready) == 0  # never fired
    info = await client.get(topic, "late")
    assert info.state is JobState.EXPIRED and info.expired_ms is not None
    assert await redis_async.hget(keys.limits, "expired") == b"1"
    with pytest.raises(JobFailedError, match="is expired") as caught:
        await client.result(topic, "late", timeout=1)
    assert caught.value.state == "expired"
    kinds = [f[b"k"] for _, f in await redis_async.xrange(keys.events)]
    assert kinds == [b"expired"]


def _with_expiry(envelope: bytes | None, expires_ms: int) -> bytes:
    """The envelope with its expiry moved to `expires_ms` (long past: the job has expired)."""
    assert envelope is not None
    env = Envelope.unpack(envelope)
    assert env.expires
    return replace(env, expires=expires_ms).pack()


async def test_a_job_due_now_with_an_expiry_in_the_past_is_dropped_as_it_is_written(
    client: AsyncClient, redis_async: redis.asyncio.Redis, topic: str
) -> None:
    keys = ShardKeys(topic, 0)
    past = datetime.now(UTC) - timedelta(minutes=1)
    await client.enqueue(topic, "x", job_id="stale", expires=past)
    assert await redis_async.xlen(keys.ready) == 0
    assert (await client.get(topic, "stale")).state is JobState.EXPIRED
    # enqueue_many and enqueue_bulk take it too
    await client.enqueue_many(topic, [{"payload": 1, "job_id": "m1", "expires": past}])
    await client.enqueue_bulk(topic, [1, 2], expires=past)
    assert await redis_async.xlen(keys.ready) == 0
    assert await redis_async.hget(keys.limits, "expired") == b"4"
    # a job without one, or one not expired yet, fires as before
    await client.enqueue(topic, "y", job_id="fresh", expires=60)
    await client.enqueue(topic, "z", job_id="plain")
    assert await redis_async.xlen(keys.ready) == 2


async def test_an_entry_read_after_its_expiry_is_dropped_unrun(
    client: AsyncClient, redis_async: redis.asyncio.Redis, redis_url: str, topic: str
) -> None:
    """Fired before its expiry, read after it (the worker started later): never run."""
    keys = ShardKeys(topic, 0)
    ran: list[str] = []

    async def handle(job: Job) -> None:
        ran.append(job.id)

    await client.enqueue(topic, "x", job_id="slow", expires=timedelta(milliseconds=300))
    await client.enqueue(topic, "y", job_id="marker")
    assert await redis_async.xlen(keys.ready) == 2
    (entry,) = [f for _, f in await redis_async.xrange(keys.ready) if f[b"id"] == b"slow"]
    expires_ms = int(entry[b"expires"])
    # the worker starts once the expiry has passed (on the Redis clock the entry's is on)
    await eventually(
        lambda: _after(redis_async, expires_ms), timeout_s=5, what="the expiry to pass"
    )
    async with running(redis_url, topic, handle) as worker:
        await until(lambda: "marker" in ran, timeout_s=15, what="the marker to run")

        async def expired() -> bool:
            return (await client.get(topic, "slow")).state is JobState.EXPIRED

        await eventually(expired, timeout_s=15, what="slow to read expired")
        assert ran == ["marker"]
        assert worker.status()["expired"] == 1
        (family,) = [m for m in WorkerCollector(worker).collect() if m.name.endswith("expired")]
        assert family.name == "wheelq_worker_expired" and family.samples[0].value == 1
        assert await redis_async.hget(keys.limits, "expired") == b"1"
        with pytest.raises(JobFailedError, match="expired"):
            await client.result(topic, "slow", timeout=1)


async def _after(r: redis.asyncio.Redis, ms: int) -> bool:
    return await redis_now_ms(r) > ms


async def test_a_retry_due_after_the_expiry_is_dropped(
    client: AsyncClient, redis_async: redis.asyncio.Redis, redis_url: str, topic: str
) -> None:
    keys = ShardKeys(topic, 0)
    ran: list[int] = []

    async def fail(job: Job) -> None:
        ran.append(job.attempt)
        raise RuntimeError("attempt fails")

    expires = datetime.now(UTC) + timedelta(minutes=10)
    async with running(redis_url, topic, fail, retry_base_ms=HOUR_MS):
        await client.enqueue(topic, "x", job_id="r", expires=expires, max_attempts=3)

        async def retrying() -> bool:
            return (await client.get(topic, "r")).state is JobState.RETRYING

        await eventually(retrying, timeout_s=15, what="the retry to wait")
        member = (await redis_async.zrange(keys.delayed, 0, -1))[0]
        await redis_async.hset(
            keys.jobs, member, _with_expiry(await redis_async.hget(keys.jobs, member), 2)
        )
        assert await come_due(client, redis_async, keys) == 0
        info = await client.get(topic, "r")
        assert info.state is JobState.EXPIRED, info
        assert ran == [1]
        assert await redis_async.zcard(keys.retries) == 0
        with pytest.raises(JobFailedError, match="expired"):
            await client.result(topic, "r", timeout=1)


async def test_an_ordered_job_dropped_at_its_expiry_does_not_hold_its_keys_next(
    client: AsyncClient, redis_url: str, topic: str
) -> None:
    """The key's order counts an expired job as gone (`flow_gate.GONE`)."""
    ran: list[str] = []

    async def handle(job: Job) -> None:
        ran.append(job.id)

    past = datetime(2020, 1, 1, tzinfo=UTC)
    await client.enqueue(topic, 1, job_id="first", key="k", ordered=True, expires=past)
    await client.enqueue(topic, 2, job_id="second", key="k", ordered=True)
    assert (await client.get(topic, "first")).state is JobState.EXPIRED
    async with running(redis_url, topic, handle):
        await until(lambda: ran == ["second"], timeout_s=30, what="the key's next job to run")
