"""A job's callback travels with it on a real server: through the enqueue, the emit, a retry
and a replay, to `Job.callback` in the deliverer's stream (never to the topic's own groups);
and what a handler can say besides raising: `Fail` dead-letters at once, `Defer` puts the
job back without counting an attempt."""

from __future__ import annotations

import pytest
import redis.asyncio

from tests.integration import test_worker
from tests.integration.test_worker import Workers, holds
from tests.support.waiting import eventually
from wheelq import (
    AsyncAdmin,
    AsyncClient,
    Callback,
    Defer,
    Fail,
    InvalidArgumentError,
    Job,
    Scheduler,
)
from wheelq.core.keys import CALLBACKS, all_shards

pytestmark = pytest.mark.cluster_too  # on the single server and on the cluster

SHARDS = test_worker.SHARDS
workers = test_worker.workers
scheduler = test_worker.scheduler

HOOK = Callback("https://hooks.example.com/due?x=1", {"Authorization": "Bearer t"}, 2500)


async def test_a_callback_reaches_the_handler_through_a_retry_and_a_replay(
    client: AsyncClient, admin: AsyncAdmin, workers: Workers, scheduler: Scheduler, topic: str
) -> None:
    seen: list[tuple[int, Callback | None]] = []

    async def handler(job: Job) -> None:
        seen.append((job.attempt, job.callback))
        if job.attempt < 2:
            raise RuntimeError("first attempt fails")
        raise Fail("and the second for good")

    await workers.start(handler, retry_base_ms=1, retry_max_ms=1, stream=CALLBACKS)
    job_id = await client.enqueue(topic, {"n": 1}, callback=HOOK, max_attempts=5)
    letters = await eventually(
        lambda: admin.dead_letters(topic), timeout_s=10, what="the job's dead letter"
    )
    assert [a for a, _ in seen] == [1, 2], "Fail dead-lettered later than at once"
    assert all(cb == HOOK for _, cb in seen)
    assert letters[0].job_id == job_id
    assert "not retried" in letters[0].error and "for good" in letters[0].error

    assert await admin.replay(topic) == 1
    # The replay runs as attempt 1 and fails again, so more runs follow: look at the third.
    await eventually(holds(lambda: len(seen) >= 3), timeout_s=10, what="the replayed run")
    assert seen[2] == (1, HOOK), "a replay lost the callback"


async def test_jobs_with_a_callback_fire_into_their_own_stream_and_no_other_group_runs_them(
    client: AsyncClient,
    workers: Workers,
    scheduler: Scheduler,
    redis_async: redis.asyncio.Redis,
    topic: str,
) -> None:
    plain: list[str] = []
    delivered: list[str] = []

    async def run(job: Job) -> None:
        plain.append(job.id)

    async def deliver(job: Job) -> None:
        delivered.append(job.id)

    await workers.start(run, group="app")
    await workers.start(deliver, group="callbacks", stream=CALLBACKS)
    # Every path into a stream: fired now at enqueue, emitted when due, rescheduled to now.
    hooked = [
        await client.enqueue(topic, 1, callback=HOOK),
        await client.enqueue(topic, 2, callback=HOOK, delay=0.05),
        await client.enqueue(topic, 3, callback=HOOK, delay=600),
    ]
    assert await client.reschedule(topic, hooked[2], delay=0)
    own = [await client.enqueue(topic, 4), await client.enqueue(topic, 5, delay=0.05)]
    await eventually(
        holds(lambda: sorted(delivered) == sorted(hooked) and sorted(plain) == sorted(own)),
        timeout_s=10,
        what="each job run by its own group",
    )
    states = [(await client.get(topic, i)).state.value for i in hooked + own]
    assert states == ["succeeded"] * 5
    # A group that joins the topic's stream late has its jobs to run, not the callbacks'.
    for keys in all_shards(topic, SHARDS):
        await redis_async.xgroup_create(keys.ready, "late", "0")
    states = [(await client.get(topic, i)).state.value for i in hooked + own]
    assert states == ["succeeded"] * 3 + ["ready"] * 2
    # The topic's own stream holds none of them, and only the deliverer reads theirs.
    for keys in all_shards(topic, SHARDS):
        for _, fields in await redis_async.xrange(keys.ready):
            assert b"callback" not in fields
        groups = {g["name"] for g in await redis_async.xinfo_groups(keys.ready)}
        assert groups == {b"app", b"late"}, "a deliverer group on the topic's own stream"


async def test_a_job_without_a_callback_has_none(
    client: AsyncClient, workers: Workers, redis_async: redis.asyncio.Redis, topic: str
) -> None:
    seen: list[Job] = []

    async def handler(job: Job) -> None:
        seen.append(job)

    await workers.start(handler)
    await client.enqueue(topic, 1)
    await eventually(holds(lambda: len(seen) == 1), timeout_s=10, what="the job")
    assert seen[0].callback is None


async def test_defer_runs_the_job_again_without_counting_an_attempt(
    client: AsyncClient, admin: AsyncAdmin, workers: Workers, scheduler: Scheduler, topic: str
) -> None:
    attempts: list[int] = []

    async def handler(job: Job) -> None:
        attempts.append(job.attempt)
        if len(attempts) <= 3:
            raise Defer(0.001, "endpoint busy")

    worker = await workers.start(handler)
    await client.enqueue(topic, 1, max_attempts=1)
    await eventually(holds(lambda: len(attempts) == 4), timeout_s=10, what="4 runs")
    assert attempts == [1, 1, 1, 1], "a deferral counted as an attempt"
    await eventually(holds(lambda: worker.status()["acked"] == 1), timeout_s=10, what="the ack")
    assert await admin.dead_letters(topic) == [], "a deferred job with 1 attempt died"


@pytest.mark.parametrize(
    ("callback", "field"),
    [
        ("ftp://example.com/x", "callback.url"),
        ("https://user:pw@example.com/", "callback.url"),
        ({"url": "https://example.com/", "timeout_ms": 0}, "callback.timeout_ms"),
        ({"url": "https://example.com/", "headers": {"Wheelq-Id": "x"}}, "callback.headers"),
        ({"url": "https://example.com/", "headers": {"X": "a\r\nB: c"}}, "callback.headers"),
        ({"url": "https://example.com/", "retries": 3}, "callback.retries"),
        (42, "callback"),
    ],
)
async def test_a_bad_callback_is_refused_and_nothing_is_written(
    client: AsyncClient, admin: AsyncAdmin, topic: str, callback: object, field: str
) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        await client.enqueue(topic, 1, job_id="j", callback=callback)  # type: ignore[arg-type]
    assert raised.value.parameter == field
    stats = await admin.stats(topic)
    assert stats is not None and stats.pending == 0
