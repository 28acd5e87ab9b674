"""Continuations (docs/architecture.md, "Jobs that follow jobs"): a job enqueued with
``after=`` awaits, due nowhere, until the job it follows ends in its group; it then becomes
due its ``delay`` later (never sooner), or is cancelled when that job failed for good, was
cancelled or expired (``on_parent_failure="cancel"``, the default), or runs anyway
(``"run"``). Through a retry of the followed job, a cancel of either, chains, other topics,
the sync client, a notice heard before its job's write, and a leader killed -9 between
hearing notices and deleting them. On both servers, one server and a cluster."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.integration.test_worker import holds
from tests.support.waiting import eventually
from wheelq import AsyncAdmin, AsyncClient, Client, Job, JobRef, Scheduler, Worker
from wheelq.core.follow import WAIT_DUE_MS, OnFailure, waiting_record, wire_ref
from wheelq.core.history import JobState
from wheelq.core.keys import ShardKeys, shard_of
from wheelq.errors import (
    DuplicateJobError,
    InvalidArgumentError,
    UnknownJobError,
)
from wheelq.store import follow

pytestmark = pytest.mark.cluster_too

SHARDS = 3
FAST = {"retry_base_ms": 50, "retry_max_ms": 50, "retry_jitter_pct": 0}
START_BOUND_S = 0.5
"""A continuation starts within this of its delay after the followed job's run ended (the
hop and a worker's read; the figure is loadtest/follow.py's)."""


@pytest.fixture
async def client(redis_url: str, topic: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient.from_url(redis_url) as c:
        await AsyncAdmin.of(c).create_topic(topic, SHARDS)
        yield c


class Runs:
    """What a handler saw: each run's payload, its start and end (time.time())."""

    def __init__(self, fail: Callable[[Job], bool] = lambda job: False) -> None:
        self.starts: dict[Any, list[float]] = {}
        self.ends: dict[Any, float] = {}
        self._fail = fail

    def run(self, job: Job) -> None:
        self.starts.setdefault(job.payload, []).append(time.time())
        if self._fail(job):
            raise RuntimeError(f"{job.payload} fails")
        self.ends[job.payload] = time.time()

    async def arun(self, job: Job) -> None:
        self.run(job)


@pytest.fixture
async def node(redis_url: str, topic: str, client: AsyncClient) -> AsyncIterator[Scheduler]:
    node = Scheduler.from_url(redis_url, None, preload_interval_ms=100, lease_ttl_ms=3000)
    await node.start()
    try:
        yield node
    finally:
        await node.stop()


async def working(redis_url: str, topic: str, runs: Runs, sync: bool = False) -> Worker:
    worker = Worker.from_url(redis_url, topic, runs.run if sync else runs.arun, **FAST)
    await worker.start()
    return worker


async def state(client: AsyncClient, topic: str, job_id: str) -> JobState:
    return (await client.get(topic, job_id)).state


@pytest.mark.parametrize("sync", [False, True], ids=["async-handler", "sync-handler"])
async def test_a_continuation_starts_its_delay_after_the_job_it_follows_succeeds(
    redis_url: str, topic: str, client: AsyncClient, node: Scheduler, sync: bool
) -> None:
    runs = Runs()
    parent = await client.enqueue(topic, "parent", delay=0.3)
    child = await client.enqueue(topic, "child", after=parent, delay=0.2)
    info = await client.get(topic, child)
    assert (info.state, info.due_ms) == (JobState.AWAITING, WAIT_DUE_MS)
    worker = await working(redis_url, topic, runs, sync)
    try:
        await eventually(holds(lambda: "child" in runs.starts), timeout_s=10, what="the child")
    finally:
        await worker.stop()
    waited = runs.starts["child"][0] - runs.ends["parent"]
    assert 0.2 <= waited <= 0.2 + START_BOUND_S, waited
    status = node.status()  # the resolver's work, seen
    assert status["notices_heard"] >= 1 and status["released"] >= 1, status
    assert [len(v) for v in runs.starts.values()] == [1, 1]
    assert await state(client, topic, child) is JobState.SUCCEEDED


async def test_a_retry_of_the_followed_job_is_not_its_end(
    redis_url: str, topic: str, client: AsyncClient, node: Scheduler
) -> None:
    failed_once: set[str] = set()

    def fail(job: Job) -> bool:
        first = job.payload == "parent" and job.id not in failed_once
        failed_once.add(job.id)
        return first

    runs = Runs(fail)
    parent = await client.enqueue(topic, "parent")
    await client.enqueue(topic, "child", after=parent)
    worker = await working(redis_url, topic, runs)
    try:
        await eventually(holds(lambda: "child" in runs.starts), timeout_s=10, what="the child")
    finally:
        await worker.stop()
    assert len(runs.starts["parent"]) == 2
    assert runs.starts["child"][0] >= runs.ends["parent"]  # after the success, not the failure


@pytest.mark.parametrize("policy", ["cancel", "run"])
async def test_a_followed_job_dead_lettered_cancels_or_runs_its_continuation(
    redis_url: str, topic: str, client: AsyncClient, node: Scheduler, policy: str
) -> None:
    runs = Runs(lambda job: job.payload == "parent")
    parent = await client.enqueue(topic, "parent", max_attempts=1)
    child = await client.enqueue(topic, "child", after=parent, on_parent_failure=policy)
    grandchild = await client.enqueue(topic, "grandchild", after=child)
    worker = await working(redis_url, topic, runs)
    try:
        if policy == "run":
            await eventually(
                holds(lambda: "grandchild" in runs.starts), timeout_s=10, what="the chain"
            )
        else:

            async def cancelled() -> bool:
                return await state(client, topic, grandchild) is JobState.CANCELLED

            await eventually(cancelled, timeout_s=10, what="the chain cancelled")
    finally:
        await worker.stop()
    expected = JobState.SUCCEEDED if policy == "run" else JobState.CANCELLED
    assert await state(client, topic, child) is expected
    assert ("child" in runs.starts) is (policy == "run")


async def test_a_followed_job_dropped_at_its_expiry_cancels_its_continuation(
    topic: str, client: AsyncClient, node: Scheduler
) -> None:
    parent = await client.enqueue(topic, "parent", delay=0.3, expires=0.1)
    child = await client.enqueue(topic, "child", after=parent)
    anyway = await client.enqueue(topic, "anyway", after=parent, on_parent_failure="run")

    async def ended() -> bool:
        return await state(client, topic, child) is JobState.CANCELLED

    await eventually(ended, timeout_s=10, what="the continuation cancelled")
    assert await state(client, topic, parent) is JobState.EXPIRED
    assert await state(client, topic, anyway) is JobState.READY  # due, no worker to run it


async def test_a_continuation_expired_while_it_awaited_is_an_end_for_what_follows_it(
    redis_url: str, topic: str, client: AsyncClient, node: Scheduler
) -> None:
    """Released after its expiry, a continuation is dropped instead of fired; what followed
    it waited forever, never told."""
    first = await client.enqueue(topic, "first", delay=0.3)
    middle = await client.enqueue(topic, "middle", after=first, expires=0.1)
    last = await client.enqueue(topic, "last", after=middle)
    await client.enqueue(topic, "anyway", after=middle, on_parent_failure="run")
    runs = Runs()
    worker = await working(redis_url, topic, runs)
    try:

        async def told() -> bool:
            return await state(client, topic, last) is JobState.CANCELLED

        await eventually(told, timeout_s=10, what="the last link cancelled")
        await eventually(holds(lambda: "anyway" in runs.starts), timeout_s=10, what="anyway")
    finally:
        await worker.stop()
    assert await state(client, topic, middle) is JobState.EXPIRED
    assert "middle" not in runs.starts and "first" in runs.ends


async def test_a_job_moved_to_now_after_its_expiry_is_an_end_for_what_follows_it(
    topic: str, client: AsyncClient, node: Scheduler
) -> None:
    """`reschedule` to now drops a job whose expiry passed instead of firing it; what
    followed it was never told."""
    first = await client.enqueue(topic, "first", delay=600, expires=0.05)
    then = await client.enqueue(topic, "then", after=first)
    passed = time.time() + 0.1
    await eventually(holds(lambda: time.time() > passed), timeout_s=5, what="its expiry")
    await client.reschedule(topic, first, delay=0)
    assert await state(client, topic, first) is JobState.EXPIRED

    async def told() -> bool:
        return await state(client, topic, then) is JobState.CANCELLED

    await eventually(told, timeout_s=10, what="what follows it cancelled")


async def test_cancelling_a_pending_job_cancels_what_follows_it_down_the_chain(
    topic: str, client: AsyncClient, node: Scheduler
) -> None:
    a = await client.enqueue(topic, "a", delay=3600)
    b = await client.enqueue(topic, "b", after=a)
    c = await client.enqueue(topic, "c", after=b)
    assert await client.cancel(topic, a)

    async def cancelled() -> bool:
        return await state(client, topic, c) is JobState.CANCELLED

    await eventually(cancelled, timeout_s=10, what="c cancelled")
    assert await state(client, topic, b) is JobState.CANCELLED


async def test_an_awaiting_job_cancelled_never_runs_and_is_not_moved_by_reschedule(
    redis_url: str, topic: str, client: AsyncClient, node: Scheduler
) -> None:
    runs = Runs()
    parent = await client.enqueue(topic, "parent", delay=0.2)
    kept = await client.enqueue(topic, "kept", after=parent)
    gone = await client.enqueue(topic, "gone", after=parent)
    assert not await client.reschedule(topic, kept, delay=0)  # it awaits: no due time to move
    assert await client.cancel(topic, gone)
    worker = await working(redis_url, topic, runs)
    try:
        await eventually(holds(lambda: "kept" in runs.starts), timeout_s=10, what="kept")
    finally:
        await worker.stop()
    assert "gone" not in runs.starts
    assert await state(client, topic, gone) is JobState.CANCELLED
    keys = ShardKeys(topic, shard_of(gone, SHARDS))
    assert not await client.redis.hexists(keys.waiting, gone)


async def test_following_a_job_that_ended_already_hears_its_end_at_once(
    redis_url: str, topic: str, client: AsyncClient, node: Scheduler
) -> None:
    runs = Runs(lambda job: job.payload == "bad")
    good = await client.enqueue(topic, "good")
    bad = await client.enqueue(topic, "bad", max_attempts=1)
    worker = await working(redis_url, topic, runs)
    try:

        async def ended() -> bool:
            states = [await state(client, topic, j) for j in (good, bad)]
            return states == [JobState.SUCCEEDED, JobState.DEAD]

        await eventually(ended, timeout_s=10, what="both ended")
        after_good = await client.enqueue(topic, "after-good", after=good)
        after_bad = await client.enqueue(topic, "after-bad", after=bad)
        await eventually(holds(lambda: "after-good" in runs.starts), timeout_s=10, what="run")

        async def cancelled() -> bool:  # heard on its own shard, maybe a round later
            return await state(client, topic, after_bad) is JobState.CANCELLED

        await eventually(cancelled, timeout_s=10, what="the follower of the dead job cancelled")
    finally:
        await worker.stop()
    assert await state(client, topic, after_good) is JobState.SUCCEEDED


async def test_a_job_follows_one_of_another_topic_and_the_sync_client_writes_it(
    redis_url: str, topic: str, client: AsyncClient, node: Scheduler
) -> None:
    other = topic + "-o"
    runs = Runs()
    parent = await client.enqueue(other, "parent", delay=0.2)
    with Client.from_url(redis_url) as sync:
        child = sync.enqueue(topic, "child", after=(other, parent))
        tuple_too = sync.enqueue(topic, "ref", after=JobRef(other, parent, "default"))
    workers = [await working(redis_url, t, runs) for t in (topic, other)]
    try:
        await eventually(
            holds(lambda: {"child", "ref"} <= runs.starts.keys()), timeout_s=10, what="both"
        )
    finally:
        for w in workers:
            await w.stop()
    assert runs.starts["child"][0] >= runs.ends["parent"]
    assert {await state(client, topic, j) for j in (child, tuple_too)} == {JobState.SUCCEEDED}


BAD_CALLS: list[tuple[dict[str, Any], str]] = [
    ({"after": 123}, "after"),
    ({"after": ""}, "after"),
    ({"after": ("bad topic!", "x")}, "after"),
    ({"after": "x", "on_parent_failure": "ignore"}, "on_parent_failure"),
    ({"after": "x", "at": 10}, "at"),
    ({"after": "x", "job_id": "j", "replace": True}, "replace"),
    ({"after": "x", "debounce": 1, "job_id": "j"}, "after"),
    ({"after": "never-enqueued"}, "after"),
    ({"after": ("t-no-such-topic-anywhere", "x")}, "after"),
]


@pytest.mark.parametrize(("options", "parameter"), BAD_CALLS)
async def test_a_bad_after_call_names_its_parameter_and_writes_nothing(
    topic: str, client: AsyncClient, options: dict[str, Any], parameter: str
) -> None:
    await client.enqueue(topic, "x", job_id="x", delay=3600)
    before = await AsyncAdmin.of(client).stats(topic)
    with pytest.raises(InvalidArgumentError) as caught:
        await client.enqueue(topic, "p", **options)
    assert caught.value.parameter == parameter
    if options["after"] == "never-enqueued":
        assert isinstance(caught.value, UnknownJobError)
    after = await AsyncAdmin.of(client).stats(topic)
    assert after.pending == before.pending == 1


async def test_an_awaiting_job_id_taken_is_a_duplicate_and_writes_nothing_more(
    topic: str, client: AsyncClient
) -> None:
    parent = await client.enqueue(topic, "parent", delay=3600)
    await client.enqueue(topic, "first", after=parent, job_id="same")
    with pytest.raises(DuplicateJobError):
        await client.enqueue(topic, "second", after=parent, job_id="same")
    assert (await client.get(topic, "same")).payload == "first"


async def test_an_outcome_heard_before_the_waiting_write_is_kept_for_it(
    topic: str, client: AsyncClient
) -> None:
    # The edge was written, the job it follows ended and its notice was heard, and only then
    # does the waiting job's write land (a producer slow between its two writes).
    keys = ShardKeys(topic, shard_of("late", SHARDS))
    ref = wire_ref(ShardKeys(topic, shard_of("gone-by", SHARDS)), "gone-by", "default")
    notice = follow.Notice("1-0", topic, keys.shard, "late", "tok", ref, "S", "")
    heard = await client._executor.run([follow.hear(keys, [notice])])
    assert heard == [(0, 0, 0, [])]  # nobody waits yet: kept
    envelope = await _envelope(client, topic)
    record = waiting_record("tok", 0, OnFailure.CANCEL, [ref])
    deadline = int(time.time() * 1000) + 60_000
    ((placed, _),) = await client._executor.run(
        [follow.write_waiting(keys, "late", envelope, "", record, deadline)]
    )
    assert placed is follow.Waiting.FIRED
    assert await state(client, topic, "late") is JobState.READY
    assert not await client.redis.exists(keys.waiting + ":tok")


async def test_a_waiting_write_past_its_window_is_refused(topic: str, client: AsyncClient) -> None:
    keys = ShardKeys(topic, shard_of("late", SHARDS))
    record = waiting_record("tok", 0, OnFailure.CANCEL, [wire_ref(keys, "p", "default")])
    envelope = await _envelope(client, topic)
    with pytest.raises(Exception, match="deadline"):
        await client._executor.run([follow.write_waiting(keys, "late", envelope, "", record, 1)])
    assert not await client.redis.hexists(keys.jobs, "late")


async def _envelope(client: AsyncClient, topic: str) -> bytes:
    """A job's envelope as a client writes it (a job enqueued far ahead, read and cancelled)."""
    job_id = await client.enqueue(topic, "late-payload", delay=3600)
    keys = ShardKeys(topic, shard_of(job_id, SHARDS))
    envelope = await client.redis.hget(keys.jobs, job_id)
    assert await client.cancel(topic, job_id)
    assert isinstance(envelope, bytes)
    return envelope


KILLER = """
import asyncio, sys
from wheelq import Scheduler
from wheelq.runtime import crash

async def main():
    crash.arm("resolve.after_hear")
    node = Scheduler.from_url(sys.argv[1], None, preload_interval_ms=100, lease_ttl_ms=1000)
    await node.start()
    await asyncio.sleep(60)

asyncio.run(main())
"""


async def test_a_leader_killed_between_hearing_and_deleting_notices_fires_the_job_once(
    redis_url: str, topic: str, client: AsyncClient
) -> None:
    # The leader has a notice heard (the continuation fired) and dies before deleting it; the
    # next leader sends it again, and hearing it twice fires nothing more.
    runs = Runs()
    parent = await client.enqueue(topic, "parent", delay=0.5)
    await client.enqueue(topic, "child", after=parent)
    keys = ShardKeys(topic, shard_of(parent, SHARDS))
    process = await asyncio.create_subprocess_exec(sys.executable, "-c", KILLER, redis_url)
    worker = await working(redis_url, topic, runs)
    try:
        assert await asyncio.wait_for(process.wait(), 30) == -signal.SIGKILL
        assert await client.redis.xlen(keys.notices) == 1  # heard, not deleted
        await eventually(holds(lambda: "child" in runs.starts), timeout_s=10, what="the child")
        node = Scheduler.from_url(redis_url, None, preload_interval_ms=100, lease_ttl_ms=1000)
        await node.start()
        try:

            async def drained() -> bool:
                return await client.redis.xlen(keys.notices) == 0

            await eventually(drained, timeout_s=15, what="the notice sent again and deleted")
        finally:
            await node.stop()
        await worker.stop(grace=5)  # what was fired is run before the count
        assert runs.starts.keys() == {"parent", "child"}
        assert [len(v) for v in runs.starts.values()] == [1, 1]
    finally:
        await worker.stop()
        if process.returncode is None:
            os.kill(process.pid, signal.SIGKILL)
            await process.wait()
