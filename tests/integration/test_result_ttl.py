"""A task's ``result_ttl`` (issue 59, item 4): its result is fetchable right after the run,
kept in its own key with that TTL on the Redis clock (asserted by the key's PTTL), and gone
(`UnknownJobError`) once it has passed; a task without one keeps its result with the job's
history record, as before. Sync and async handles, sync and async tasks, through a retry,
on both servers and a cluster
(docs/guides/tasks.md, "How long results are kept")."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
import redis

import wheelq
from tests.support.waiting import eventually
from tests.support.workers import Workers
from wheelq.core.history import SEPARATOR
from wheelq.core.keys import ShardKeys, result_key, shard_of

pytestmark = [pytest.mark.both_servers, pytest.mark.cluster_too]

TTL_S = 1


@pytest.fixture
async def app(redis_url: str) -> AsyncIterator[wheelq.App]:
    made = wheelq.App.from_url(redis_url)
    yield made
    await made.aclose()


def _key(topic: str, job_id: str, group: str) -> str:
    shard = shard_of(job_id, wheelq.ClientSettings().default_shards)
    return result_key(ShardKeys(topic, shard), job_id + SEPARATOR + group)


async def _run(app: wheelq.App, task: wheelq.Task[Any, Any], redis_url: str) -> Workers:
    pool = Workers(redis_url, task.topic, {"visibility_timeout_ms": 1000})
    await pool.start(task.route(), group=app.group)
    return pool


async def test_a_result_is_fetchable_then_gone_once_its_result_ttl_has_passed(
    app: wheelq.App, topic: str, redis_url: str, redis_sync: redis.Redis
) -> None:
    @app.task(name="double", topic=topic, result_ttl=TTL_S)
    def double(n: int) -> int:
        return 2 * n

    pool = await _run(app, double, redis_url)
    try:
        handle = await double.aenqueue(21)
        assert await handle.aresult(timeout=20) == 42
        assert await asyncio.to_thread(handle.result, 0) == 42  # the blocking face too
        key = _key(topic, handle.id, app.group)
        pttl_ms = redis_sync.pttl(key)
        assert 0 < pttl_ms <= TTL_S * 1000, pttl_ms  # set with the task's TTL, on Redis
        (kept,) = (await app.aclient.get(topic, handle.id)).groups  # get() reads it there
        assert (kept.result, kept.result_ttl_ms) == (42, TTL_S * 1000)
        fetched_s = time.monotonic()

        async def gone() -> bool:
            try:
                await handle.aresult(timeout=0)
            except wheelq.UnknownJobError:
                return True
            return False

        # Redis expires the key within its TTL (lazily on access, so the read sees it gone)
        await eventually(gone, timeout_s=TTL_S + 5, what="the result gone after result_ttl")
        assert time.monotonic() - fetched_s <= TTL_S + 5
        assert redis_sync.exists(key) == 0
        with pytest.raises(wheelq.UnknownJobError):
            await asyncio.to_thread(handle.result, 0)
        info = await app.aclient.get(topic, handle.id)  # the job's record is still there
        assert info.state is wheelq.JobState.SUCCEEDED
        assert (info.groups[0].result, info.groups[0].result_ttl_ms) == (None, TTL_S * 1000)
    finally:
        await pool.close()


async def test_an_async_task_keeps_its_result_for_a_timedelta(
    app: wheelq.App, topic: str, redis_url: str, redis_sync: redis.Redis
) -> None:
    @app.task(name="greet", topic=topic, result_ttl=timedelta(minutes=5))
    async def greet(who: str) -> str:
        return f"hello {who}"

    pool = await _run(app, greet, redis_url)
    try:
        handle = await greet.aenqueue("ann")
        assert await handle.aresult(timeout=20) == "hello ann"
        pttl_ms = redis_sync.pttl(_key(topic, handle.id, app.group))
        assert 290_000 < pttl_ms <= 300_000, pttl_ms
    finally:
        await pool.close()


async def test_a_task_without_result_ttl_keeps_its_result_with_its_record(
    app: wheelq.App, topic: str, redis_url: str, redis_sync: redis.Redis
) -> None:
    @app.task(name="plain", topic=topic)
    def plain(n: int) -> int:
        return n + 1

    pool = await _run(app, plain, redis_url)
    try:
        handle = await plain.aenqueue(1)
        assert await handle.aresult(timeout=20) == 2
        assert redis_sync.exists(_key(topic, handle.id, app.group)) == 0  # no key of its own
        assert (await app.aclient.get(topic, handle.id)).groups[0].result == 2
    finally:
        await pool.close()


async def test_a_result_after_a_retry_is_kept_for_the_result_ttl_too(
    app: wheelq.App, topic: str, redis_url: str, redis_sync: redis.Redis
) -> None:
    runs: list[int] = []
    fast = wheelq.RetryPolicy(base=0.02, max=timedelta(milliseconds=20), jitter_pct=0)

    @app.task(name="flaky", topic=topic, result_ttl=60, retry=fast, max_attempts=3)
    def flaky(n: int) -> int:
        runs.append(n)
        if len(runs) < 2:
            raise RuntimeError("the first run fails")
        return n * 10

    node = wheelq.Scheduler.from_url(redis_url, topic, preload_interval_ms=100)
    await node.start()  # fires the retry
    pool = await _run(app, flaky, redis_url)
    try:
        handle = await flaky.aenqueue(4)
        assert await handle.aresult(timeout=20) == 40
        assert len(runs) == 2
        pttl_ms = redis_sync.pttl(_key(topic, handle.id, app.group))
        assert 50_000 < pttl_ms <= 60_000, pttl_ms
    finally:
        await pool.close()
        await node.stop()


async def test_none_returned_under_a_result_ttl_reads_as_none(
    app: wheelq.App, topic: str, redis_url: str, redis_sync: redis.Redis
) -> None:
    @app.task(name="nothing", topic=topic, result_ttl=TTL_S)
    def nothing() -> None:
        return None

    pool = await _run(app, nothing, redis_url)
    try:
        handle = await nothing.aenqueue()
        assert await handle.aresult(timeout=20) is None
        assert redis_sync.exists(_key(topic, handle.id, app.group)) == 0  # nothing to keep
    finally:
        await pool.close()
