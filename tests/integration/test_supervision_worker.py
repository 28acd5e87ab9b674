"""A worker's supervised parts under real faults: each part whose step raises (a key of the
wrong type) shows it in ``status()["parts"][name]`` while it keeps running, and recovers
once the fault ends; the rest of the worker goes on.

The one the issue names: a worker whose topic's dead-letter stream key held a string for
1.5 s still takes over a killed worker's job after the visibility timeout (before the
supervised base its claim keeper died on the first ScriptError, for good).
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio

from tests.support.waiting import eventually
from tests.support.worker_proc import WorkerProcess
from wheelq import AsyncAdmin, AsyncClient, Job, Worker
from wheelq.core.keys import ShardKeys, all_shards, shard_of
from wheelq.testing.proxy import CuttingProxy

SHARDS = 2
FAST: dict[str, Any] = {
    "visibility_timeout_ms": 1000,
    "claim_interval_ms": 100,
    "block_ms": 200,
    "failure_pause_max_ms": 300,
}
FAULT_S = 1.5
NOT_A_STREAM = "not a stream"


@pytest.fixture
async def client(redis_url: str, topic: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient.from_url(redis_url) as c:
        admin = AsyncAdmin.of(c)
        await admin.create_topic(topic, SHARDS)
        yield c


def job_id_on(shard: int, prefix: str) -> str:
    """A job id whose shard is `shard`."""
    return next(i for i in (f"{prefix}-{n}" for n in range(1000)) if shard_of(i, SHARDS) == shard)


def part(worker: Worker, name: str) -> dict[str, Any]:
    status: dict[str, Any] = worker.status()["parts"][name]
    return status


def failing(worker: Worker, name: str, fragment: str) -> Callable[[], Any]:
    """A check for `eventually`: part `name` runs, and has failed with `fragment` in its
    last error."""

    async def check() -> bool:
        status = part(worker, name)
        assert status["running"], f"the {name} part stopped: {status}"
        return status["failures"] > 0 and fragment in (status["last_error"] or "")

    return check


def healthy(worker: Worker, name: str) -> Callable[[], Any]:
    async def check() -> bool:
        return part(worker, name) == {"running": True, "failures": 0, "last_error": None}

    return check


async def pending(r: redis.asyncio.Redis, topic: str) -> int:
    """Entries pending in the default group, over every shard."""
    total = 0
    for keys in all_shards(topic, SHARDS):
        total += int((await r.xpending(keys.ready, "default"))["pending"])
    return total


async def test_the_reader_rides_out_a_ready_stream_of_the_wrong_type(
    client: AsyncClient, redis_url: str, redis_async: redis.asyncio.Redis, topic: str
) -> None:
    seen: list[str] = []

    async def handler(job: Job) -> None:
        seen.append(job.id)

    ready = ShardKeys(topic, 0).ready
    async with Worker.from_url(redis_url, topic, handler, **FAST) as worker:
        first = await client.enqueue(topic, 1, job_id=job_id_on(0, "before"))
        await eventually(lambda: _holds(first in seen), timeout_s=10, what="the first job")

        await redis_async.rename(ready, f"{ready}:saved")  # keeps the stream and its group
        await redis_async.set(ready, NOT_A_STREAM)
        await eventually(
            failing(worker, "reader", "WRONGTYPE"), timeout_s=10, what="the reader to fail"
        )
        await redis_async.delete(ready)
        await redis_async.rename(f"{ready}:saved", ready)

        after = await client.enqueue(topic, 2, job_id=job_id_on(0, "after"))
        await eventually(lambda: _holds(after in seen), timeout_s=10, what="a job after it")
        await eventually(healthy(worker, "reader"), timeout_s=10, what="the reader to recover")
        assert seen == [first, after]
        await eventually(
            lambda: _holds_async(pending(redis_async, topic), 0), timeout_s=10, what="acks"
        )


async def test_the_reader_and_the_claims_ride_out_dropped_connections(
    client: AsyncClient, redis_url: str, redis_async: redis.asyncio.Redis, topic: str
) -> None:
    """Every connection is dropped, and new ones too, for a while: both parts show it,
    keep running, and work again once Redis can be reached."""
    seen: list[str] = []

    async def handler(job: Job) -> None:
        seen.append(job.id)

    port = int(redis_url.rsplit(":", 1)[1])
    async with CuttingProxy(port) as proxy:
        url = f"redis://127.0.0.1:{proxy.port}"
        async with Worker.from_url(url, topic, handler, **FAST) as worker:
            proxy.refusing = True
            proxy.cut()
            for name in ("reader", "claims"):
                await eventually(
                    failing(worker, name, "Connection"), timeout_s=10, what=f"the {name} to fail"
                )
            proxy.refusing = False

            job_id = await client.enqueue(topic, 1)
            await eventually(lambda: _holds(job_id in seen), timeout_s=10, what="the job")
            for name in ("reader", "claims"):
                await eventually(healthy(worker, name), timeout_s=10, what=f"the {name} to recover")
            assert seen == [job_id]


async def test_the_settler_rides_out_a_delayed_set_of_the_wrong_type(
    client: AsyncClient, redis_url: str, redis_async: redis.asyncio.Redis, topic: str
) -> None:
    """A retry refused (the shard's delayed key holds a string) is counted, its entry stays
    pending and runs again after the visibility timeout; once the key is gone the retry is
    written, while acks go on throughout."""
    runs: list[Job] = []
    fail_now = asyncio.Event()

    async def handler(job: Job) -> None:
        runs.append(job)
        if job.payload == "fails":
            await fail_now.wait()
            raise ValueError("fails on purpose")

    job_id = job_id_on(1, "retried")
    delayed = ShardKeys(topic, 1).delayed
    async with Worker.from_url(redis_url, topic, handler, retry_base_ms=60_000, **FAST) as worker:
        await client.enqueue(topic, "fails", job_id=job_id, max_attempts=3)
        await eventually(lambda: _holds(len(runs) == 1), timeout_s=10, what="the job to start")
        await redis_async.set(delayed, NOT_A_STREAM)
        fail_now.set()
        await eventually(
            failing(worker, "settler", f"retry.lua: key '{delayed}'"),
            timeout_s=10,
            what="the settler to report the refused retry",
        )
        ok = await client.enqueue(topic, "ok", job_id=job_id_on(0, "ok"))  # the other shard
        await eventually(
            lambda: _holds(worker.status()["acked"] == 1), timeout_s=10, what="an ack meanwhile"
        )
        assert part(worker, "settler")["running"]
        assert worker.status()["retried"] == 0
        await redis_async.delete(delayed)

        await eventually(
            lambda: _holds(worker.status()["retried"] == 1),
            timeout_s=15,
            what="the retry to be written once the key is gone",
        )
        await eventually(healthy(worker, "settler"), timeout_s=10, what="the settler to recover")
        assert await redis_async.zcard(delayed) == 1
        assert [j.id for j in runs].count(job_id) >= 2  # it ran again after being refused
        assert ok in [j.id for j in runs]


async def test_a_killed_workers_job_is_taken_over_after_its_dead_letter_key_held_a_string(
    client: AsyncClient,
    redis_url: str,
    redis_async: redis.asyncio.Redis,
    topic: str,
    tmp_path: Path,
) -> None:
    procs: list[WorkerProcess] = []
    seen: list[Job] = []

    async def handler(job: Job) -> None:
        seen.append(job)

    job_id = job_id_on(0, "held")
    dead = ShardKeys(topic, 0).dead
    try:
        settings = {**FAST, "concurrency": 1}
        holder = WorkerProcess(redis_url, topic, "holder", tmp_path, {"sleep_s": 120}, settings)
        procs.append(holder)
        await client.enqueue(topic, "long", job_id=job_id)
        await eventually(
            lambda: _holds(job_id in holder.jobs("start")),
            timeout_s=20,
            what=f"the worker process to start the job\n{holder.log_tail()}",
        )

        async with Worker.from_url(redis_url, topic, handler, consumer="live", **FAST) as live:
            await redis_async.set(dead, NOT_A_STREAM)
            fault_began = time.monotonic()
            holder.signal(signal.SIGKILL)
            assert await asyncio.to_thread(holder.proc.wait, 10) == -signal.SIGKILL

            await eventually(
                failing(live, "claims", f"claim.lua: key '{dead}'"),
                timeout_s=10,
                what="the claims part to show the failure",
            )

            async def fault_lasted() -> bool:
                claims = part(live, "claims")
                assert claims["running"] and claims["failures"] > 0, claims
                assert job_id not in [j.id for j in seen], "taken over through a refused claim"
                return time.monotonic() - fault_began >= FAULT_S  # past the visibility timeout

            await eventually(fault_lasted, timeout_s=FAULT_S + 10, what="the fault to last")
            await redis_async.delete(dead)

            await eventually(
                lambda: _holds(job_id in [j.id for j in seen]),
                timeout_s=10,
                what="the live worker to take the killed worker's job over",
            )
            (taken,) = [j for j in seen if j.id == job_id]
            assert (taken.attempt, taken.deliveries) == (1, 2)
            await eventually(healthy(live, "claims"), timeout_s=10, what="the claims to recover")
            await eventually(
                lambda: _holds_async(pending(redis_async, topic), 0),
                timeout_s=10,
                what="the job to be acked",
            )
            assert live.status()["taken_over"] == 1
    finally:
        for proc in procs:
            proc.finish()


async def _holds(value: bool) -> bool:
    return value


async def _holds_async(value: Any, expected: Any) -> bool:
    return bool(await value == expected)
