"""Cancel and reschedule of a job whose retries wait in more than one consumer group, on real
servers (and a cluster): every group's retry is covered, and `get()` never shows a retry that
no longer exists. A cancel is final: an attempt running at the cancel (in another group, a
pull consumer's, a callback's delivery) may finish, but is never retried after it.

Two real workers (groups "a" and "b") fail attempt 1 of the job, so each group's retry waits
an hour in the sorted set: the first under the job id, the second under an alias member
(retry.lua). The test plays the scheduler: "time passes" makes whatever is still pending due
and emits it (`come_due`), so a retry that a cancel missed runs at once.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis.asyncio

from tests.support.callback_server import Reply, ScriptedServer
from tests.support.cli import run_wheelq
from tests.support.waiting import eventually, until
from tests.support.web import serving
from wheelq import AsyncAdmin, AsyncClient, Job, JobInfo, JobState, Worker
from wheelq.callbacks.deliverer import Deliverer
from wheelq.callbacks.delivery import GROUP as CALLBACK_GROUP
from wheelq.callbacks.delivery import delivery_worker
from wheelq.core.keys import ShardKeys
from wheelq.core.settings import CallbackSettings, WorkerSettings
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
    """What each group's handler started: (group, job id, attempt); attempt 1 fails. A run
    named in `hold` ((group, job id), taken once) holds its attempt until `release`, then
    fails; `holding` says it started."""

    started: list[tuple[str, str, int]] = field(default_factory=list)
    hold: set[tuple[str, str]] = field(default_factory=set)
    holding: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def handler(self, group: str, kind: str = "async") -> Callable[[Job], Any]:
        def held(job: Job) -> bool:
            self.started.append((group, job.id, job.attempt))
            if (group, job.id) not in self.hold:
                return False
            self.hold.discard((group, job.id))
            self.holding.set()
            return True

        def fail(job: Job) -> None:
            if job.attempt == 1 and job.id != "marker":
                raise RuntimeError(f"attempt 1 of {job.id} fails in {group}")

        async def handle(job: Job) -> None:
            if held(job):
                await until(self.release.is_set, timeout_s=60, what="the test's release")
            fail(job)

        def handle_sync(job: Job) -> None:
            if held(job):
                assert self.release.wait(60), "the test's release"
            fail(job)

        return handle_sync if kind == "sync" else handle

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

    async def settled_marker(self, groups: tuple[str, ...] = GROUPS) -> None:
        """Fire a marker after everything else and wait until the workers' groups ran it:
        each group reads the (one) stream in order, so whatever fired before has reached its
        handler."""
        await self.client.enqueue(self.topic, "m", job_id="marker")
        await until(
            lambda: self.runs.attempts("marker", 1) == set(groups),
            timeout_s=15,
            what="the groups to run the marker",
        )


@pytest.fixture
async def retrying(
    request: pytest.FixtureRequest, redis_url: str, redis_async: redis.asyncio.Redis, topic: str
) -> AsyncIterator[Retrying]:
    """Workers of groups "a" and "b" (their handlers async, or as the test's indirect
    parameter says: "async", "sync"; "a only": group b is left to a pull consumer)."""
    runs = Runs()
    kind = getattr(request, "param", "async")
    groups = ("a",) if kind == "a only" else GROUPS
    async with AsyncClient.from_url(redis_url) as client:
        admin = AsyncAdmin.of(client)
        await admin.create_topic(topic, 1)  # one shard: one stream, one order
        workers = [
            Worker.from_url(redis_url, topic, runs.handler(g, kind), group=g, **FAST)
            for g in groups
        ]
        for worker in workers:
            await worker.start()
        try:
            yield Retrying(client, runs, ShardKeys(topic, 0), redis_async, topic)
        finally:
            runs.release.set()  # a held handler ends, whatever the test came to
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


def states(info: JobInfo) -> dict[str, JobState]:
    return {g.group: g.state for g in info.groups}


async def pending_in(r: redis.asyncio.Redis, stream: str, group: str) -> int:
    """How many entries of `stream` `group` has delivered and not settled."""
    return int((await r.xpending(stream, group))["pending"])


async def retry_waits(r: Retrying, job_id: str) -> None:
    """Wait until group a's retry of `job_id` waits in the sorted set."""

    async def waiting() -> bool:
        return await r.redis.zcard(r.keys.delayed) == 1 and await r.fired(job_id) == 1

    await eventually(waiting, timeout_s=15, what=f"group a to retry {job_id}")


@pytest.mark.parametrize("retrying", ["async", "sync"], indirect=True)
async def test_a_run_in_another_group_at_the_cancel_ends_and_is_never_retried(
    retrying: Retrying,
) -> None:
    r = retrying
    r.runs.hold.add(("b", "final"))
    await r.client.enqueue(r.topic, {"n": 1}, job_id="final", max_attempts=3)
    await until(r.runs.holding.is_set, timeout_s=15, what="group b to run attempt 1")
    await retry_waits(r, "final")  # group a's attempt failed: its retry is pending

    assert await r.client.cancel(r.topic, "final") is True
    r.runs.release.set()  # group b's attempt, running at the cancel, ends: it fails

    async def settled_in_b() -> bool:
        return await pending_in(r.redis, r.keys.ready, "b") == 0

    await eventually(settled_in_b, timeout_s=15, what="group b to settle its attempt")
    emitted = await r.come_due()
    await r.settled_marker()
    info = await r.client.get(r.topic, "final")
    assert info.state is JobState.CANCELLED
    assert states(info) == {"a": JobState.CANCELLED, "b": JobState.CANCELLED}
    b = next(g for g in info.groups if g.group == "b")
    assert b.error is not None and "attempt 1 of final fails in b" in b.error
    assert r.runs.attempts("final", 2) == set()  # in no group
    assert emitted == 0 and await r.fired("final") == 1
    assert await r.redis.zcard(r.keys.delayed) == 0
    assert await r.redis.zcard(r.keys.retries) == 0

    # The fence is the cancelled enqueue's: the id enqueued again is retried as usual.
    await r.fail_in_both_groups("final")
    assert (await r.client.get(r.topic, "final")).state is JobState.RETRYING


@pytest.mark.parametrize("retrying", ["a only"], indirect=True)
async def test_a_pull_consumers_nack_after_the_cancel_settles_it_without_a_retry(
    retrying: Retrying, redis_url: str
) -> None:
    r = retrying
    async with serving(redis_url) as api:
        status, body, _ = await api.call("POST", f"/v1/topics/{r.topic}/groups", {"name": "b"})
        assert status == 201, body
        group = f"/v1/topics/{r.topic}/groups/b"
        await r.client.enqueue(r.topic, {"n": 1}, job_id="pulled", max_attempts=3)
        _, body, _ = await api.call("POST", f"{group}/pull", {"max": 10, "wait_ms": 5000})
        (job,) = body["jobs"]
        assert (job["id"], job["attempt"]) == ("pulled", 1)
        await retry_waits(r, "pulled")

        path = f"/v1/topics/{r.topic}/jobs/pulled"
        assert (await api.call("DELETE", path))[0] == 204
        nack = {"receipts": [job["receipt"]], "delay_ms": 0}
        status, body, _ = await api.call("POST", f"{group}/nack", nack)

        assert (status, body["retried"], body["cancelled"]) == (200, 0, 1), body
        assert body["results"] == [{"status": 200, "outcome": "cancelled"}]
        emitted = await r.come_due()
        _, again, _ = await api.call("POST", f"{group}/pull", {"max": 10, "wait_ms": 0})
        assert (emitted, again["jobs"]) == (0, [])
        await r.settled_marker(groups=("a",))
        status, info, _ = await api.call("GET", path)
        assert (status, info["state"]) == (200, "cancelled")
        assert {g["group"]: g["state"] for g in info["groups"]} == {
            "a": "cancelled",
            "b": "cancelled",
        }
    assert r.runs.attempts("pulled", 2) == set()
    assert await r.redis.zcard(r.keys.delayed) == 0


@pytest.mark.parametrize("retrying", ["a only"], indirect=True)
async def test_a_job_pulled_before_the_cancel_is_not_pulled_again_after_its_timeout(
    retrying: Retrying, redis_url: str
) -> None:
    """Its consumer went away: the take-over settles the run as cancelled, handing it out
    to no one."""
    r = retrying
    ws = WorkerSettings(visibility_timeout_ms=200, claim_interval_ms=50)
    async with serving(redis_url, worker_settings=ws) as api:
        status, body, _ = await api.call("POST", f"/v1/topics/{r.topic}/groups", {"name": "b"})
        assert status == 201, body
        group = f"/v1/topics/{r.topic}/groups/b"
        await r.client.enqueue(r.topic, {"n": 1}, job_id="gone", max_attempts=3)
        pull = {"max": 10, "wait_ms": 5000, "consumer": "first"}
        (job,) = (await api.call("POST", f"{group}/pull", pull))[1]["jobs"]
        assert job["id"] == "gone"
        await retry_waits(r, "gone")
        assert await r.client.cancel(r.topic, "gone") is True
        again: list[dict[str, Any]] = []

        async def cancelled_in_b() -> bool:
            pull = {"max": 10, "wait_ms": 0, "consumer": "second"}
            again.extend((await api.call("POST", f"{group}/pull", pull))[1]["jobs"])
            _, info, _ = await api.call("GET", f"/v1/topics/{r.topic}/jobs/gone")
            return {g["group"]: g["state"] for g in info["groups"]}.get("b") == "cancelled"

        await eventually(cancelled_in_b, timeout_s=20, what="b's run of gone settled cancelled")
        assert again == []
        nack = {"receipts": [job["receipt"]]}  # the first consumer, back late
        body = (await api.call("POST", f"{group}/nack", nack))[1]
        assert (body["retried"], body["results"][0]["outcome"]) == (0, "settled_before")
    assert await r.come_due() == 0


async def test_a_callback_delivery_running_at_the_cancel_is_never_retried(
    redis_url: str,
    redis_async: redis.asyncio.Redis,
    topic: str,
    receiver: ScriptedServer,
) -> None:
    release = asyncio.Event()
    url = receiver.url("/hook")
    receiver.scripts["/hook"] = lambda n: Reply(500, until=release) if n == 1 else Reply(200)
    deliverer = Deliverer(CallbackSettings(), signing_secret="s3cret", allow_private=True)
    async with AsyncClient.from_url(redis_url) as client:
        await AsyncAdmin.of(client).create_topic(topic, 1)
        keys = ShardKeys(topic, 0)
        worker = delivery_worker(redis_async, topic, deliverer, WorkerSettings(**FAST))
        await worker.start()
        try:
            await client.enqueue(topic, "x", job_id="hook", callback=url, max_attempts=3)
            await until(lambda: receiver.to("/hook"), timeout_s=15, what="the delivery to start")
            # The id again, pending: the cancel removes it, and so answers True.
            await client.enqueue(topic, "y", job_id="hook", callback=url, delay=3600)

            assert await client.cancel(topic, "hook") is True
            release.set()  # the delivery running at the cancel ends: 500, a failure

            async def settled() -> bool:
                return await pending_in(redis_async, keys.callbacks, CALLBACK_GROUP) == 0

            await eventually(settled, timeout_s=15, what="the delivery to be settled")
            r = Retrying(client, Runs(), keys, redis_async, topic)
            assert await r.come_due() == 0
            info = await client.get(topic, "hook")
            assert info.state is JobState.CANCELLED
            assert states(info) == {CALLBACK_GROUP: JobState.CANCELLED}
            assert [h.status for h in receiver.to("/hook")] == [500]
            assert await redis_async.zcard(keys.delayed) == 0
        finally:
            release.set()
            await worker.stop(grace_ms=0)
            await deliverer.aclose()
