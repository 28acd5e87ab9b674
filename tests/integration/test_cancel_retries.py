"""Cancel and reschedule of a job whose retries wait in more than one consumer group, on real
servers (and a cluster): every group's retry is covered, and `get()` never shows a retry that
no longer exists.

Two real workers (groups "a" and "b") fail attempt 1 of the job, so each group's retry waits
an hour in the sorted set: the first under the job id, the second under an alias member
(retry.lua). The test plays the scheduler: "time passes" makes whatever is still pending due
and emits it (`come_due`), so a retry that a cancel missed runs at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis.asyncio

from tests.support.cli import run_wheelq
from tests.support.waiting import eventually, until
from tests.support.web import serving
from wheelq import AsyncAdmin, AsyncClient, Job, JobState, Worker
from wheelq.core.keys import ShardKeys
from wheelq.store import fire, leases

pytestmark = pytest.mark.cluster_too  # on the single server and on the cluster

GROUPS = ("a", "b")
HOUR_MS = 3_600_000
TOKEN = "test-node:1"
FAST: dict[str, Any] = {
    "visibility_timeout_ms": 30_000,
    "claim_interval_ms": 100,
    "shutdown_grace_ms": 0,
    "retry_base_ms": HOUR_MS,  # a retry waits until the test makes it due
    "retry_jitter_pct": 0,
}


@dataclass
class Runs:
    """What each group's handler started: (group, job id, attempt); attempt 1 fails."""

    started: list[tuple[str, str, int]] = field(default_factory=list)

    def handler(self, group: str) -> Callable[[Job], Any]:
        async def handle(job: Job) -> None:
            self.started.append((group, job.id, job.attempt))
            if job.attempt == 1 and job.id != "marker":
                raise RuntimeError(f"attempt 1 of {job.id} fails in {group}")

        return handle

    def attempts(self, job_id: str, attempt: int) -> set[str]:
        return {g for g, i, a in self.started if (i, a) == (job_id, attempt)}


@dataclass
class Retrying:
    client: AsyncClient
    runs: Runs
    keys: ShardKeys
    redis: redis.asyncio.Redis
    topic: str

    async def fail_in_both_groups(self, job_id: str) -> None:
        """Enqueue `job_id` due now; return once both groups' retries wait."""
        await self.client.enqueue(self.topic, {"n": 1}, job_id=job_id, max_attempts=3)

        async def both_retried() -> bool:
            info = await self.client.get(self.topic, job_id)
            members = await self.redis.zrange(self.keys.delayed, 0, -1)
            mine = [m for m in members if m.split(b"\x1f")[0] == job_id.encode()]
            return info.state is JobState.RETRYING and len(mine) == 2

        await eventually(both_retried, timeout_s=15, what=f"both groups to retry {job_id}")

    async def come_due(self) -> int:
        """Time passes: everything still pending becomes due and is emitted; returns how many
        jobs that emitted."""
        executor = self.client.executor
        (lease,) = await executor.run([leases.lease_acquire(self.keys, TOKEN, 60_000)])
        assert lease.held
        sec, usec = await self.redis.time()
        now = int(sec) * 1000 + int(usec) // 1000
        members = await self.redis.zrange(self.keys.delayed, 0, -1)
        if members:
            await self.redis.zadd(self.keys.delayed, {m: now - 1 for m in members}, xx=True)
        (emitted,) = await executor.run([fire.emit_due(self.keys, TOKEN, now, limit=100)])
        return int(emitted.emitted)

    async def fired(self, job_id: str) -> int:
        """How many entries of the ready stream carry `job_id`."""
        entries = await self.redis.xrange(self.keys.ready)
        return sum(fields[b"id"] == job_id.encode() for _, fields in entries)

    async def settled_marker(self) -> None:
        """Fire a marker after everything else and wait until both groups ran it: each group
        reads the (one) stream in order, so whatever fired before has reached its handler."""
        await self.client.enqueue(self.topic, "m", job_id="marker")
        await until(
            lambda: self.runs.attempts("marker", 1) == set(GROUPS),
            timeout_s=15,
            what="both groups to run the marker",
        )


@pytest.fixture
async def retrying(
    redis_url: str, redis_async: redis.asyncio.Redis, topic: str
) -> AsyncIterator[Retrying]:
    runs = Runs()
    async with AsyncClient.from_url(redis_url) as client:
        admin = AsyncAdmin.of(client)
        await admin.create_topic(topic, 1)  # one shard: one stream, one order
        workers = [
            Worker.from_url(redis_url, topic, runs.handler(g), group=g, **FAST) for g in GROUPS
        ]
        for worker in workers:
            await worker.start()
        try:
            yield Retrying(client, runs, ShardKeys(topic, 0), redis_async, topic)
        finally:
            for worker in workers:
                await worker.stop(grace_ms=0)


async def test_cancel_removes_every_groups_retry_and_get_reads_cancelled(
    retrying: Retrying,
) -> None:
    r = retrying
    await r.fail_in_both_groups("twice")

    assert await r.client.cancel(r.topic, "twice") is True

    emitted = await r.come_due()
    await r.settled_marker()
    info = await r.client.get(r.topic, "twice")
    assert info.state is JobState.CANCELLED and info.cancelled_ms is not None
    assert r.runs.attempts("twice", 2) == set()  # no group ran it again
    assert emitted == 0 and await r.fired("twice") == 1
    assert await r.redis.zcard(r.keys.delayed) == 0
    assert await r.redis.zcard(r.keys.retries) == 0
    assert await r.client.cancel(r.topic, "twice") is False  # not pending any more


async def test_reschedule_moves_every_groups_retry(retrying: Retrying) -> None:
    r = retrying
    await r.fail_in_both_groups("moved")

    assert await r.client.reschedule(r.topic, "moved", delay=0) is True

    await until(
        lambda: r.runs.attempts("moved", 2) == set(GROUPS),
        timeout_s=15,
        what="attempt 2 in both groups",
    )

    async def succeeded() -> bool:
        return (await r.client.get(r.topic, "moved")).state is JobState.SUCCEEDED

    await eventually(succeeded, timeout_s=15, what="moved to succeed in both groups")
    assert await r.redis.zcard(r.keys.delayed) == 0
    assert await r.redis.zcard(r.keys.retries) == 0
    info = await r.client.get(r.topic, "moved")
    assert {(g.group, g.state) for g in info.groups} == {(g, JobState.SUCCEEDED) for g in GROUPS}


async def test_http_delete_is_204_and_cli_cancel_exits_0_for_every_groups_retry(
    retrying: Retrying, redis_url: str
) -> None:
    r = retrying
    await r.fail_in_both_groups("over-http")
    await r.fail_in_both_groups("over-cli")

    async with serving(redis_url) as api:
        path = f"/v1/topics/{r.topic}/jobs"
        assert (await api.call("DELETE", f"{path}/over-http"))[:2] == (204, None)
        status, job, _ = await api.call("GET", f"{path}/over-http")
        assert (status, job["state"]) == (200, "cancelled")
        assert (await api.call("DELETE", f"{path}/over-http"))[0] == 409

    cancelled = await asyncio.to_thread(
        run_wheelq, "cancel", r.topic, "over-cli", "--redis-url", redis_url
    )
    assert (cancelled.returncode, cancelled.stdout.strip()) == (0, "cancelled over-cli")

    emitted = await r.come_due()
    await r.settled_marker()
    for job_id in ("over-http", "over-cli"):
        assert (await r.client.get(r.topic, job_id)).state is JobState.CANCELLED
    assert r.runs.attempts("over-http", 2) == r.runs.attempts("over-cli", 2) == set()
    assert emitted == 0 and await r.redis.zcard(r.keys.delayed) == 0
