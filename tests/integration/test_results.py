"""Job results on a real server (docs/architecture.md, "Job results"): what a handler returns
is kept with the job's `S` record, and `result()` returns it, raises for a dead job, times out
cleanly, is woken by the settlement (several waiters, several groups), survives a worker
killed -9 mid-handler, and costs a handler that returns None nothing.
"""

from __future__ import annotations

import asyncio
import math
import signal
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio

from tests.support.waiting import eventually, until
from tests.support.web import serving
from tests.support.worker_proc import WorkerProcess
from tests.support.workers import Workers
from wheelq import (
    Admin,
    AsyncAdmin,
    AsyncClient,
    Client,
    InvalidArgumentError,
    Job,
    JobFailedError,
    JobState,
    ResultTimeoutError,
    UnknownGroupError,
    UnknownJobError,
    UnknownTopicError,
)
from wheelq.core.history import SEPARATOR, unpack_record
from wheelq.core.keys import ShardKeys, shard_of

pytestmark = pytest.mark.cluster_too  # on the single server and on the cluster

SHARDS = 2
FAST: dict[str, Any] = {
    "visibility_timeout_ms": 500,
    "claim_interval_ms": 100,
    "shutdown_grace_ms": 1000,
}
WOKEN_S = 10.0
"""A waiter woken by the settlement answers well within this; one that is not waits out its
timeout (60 s), so a wait that is not woken fails the test."""


@pytest.fixture
async def workers(redis_url: str, topic: str, client: AsyncClient) -> AsyncIterator[Workers]:
    pool = Workers(redis_url, topic, FAST)
    try:
        yield pool
    finally:
        await pool.close()


def keys_of(topic: str, job_id: str) -> ShardKeys:
    return ShardKeys(topic, shard_of(job_id, SHARDS))


async def record(r: redis.asyncio.Redis, topic: str, job_id: str, group: str = "default") -> Any:
    raw = await r.hget(keys_of(topic, job_id).history, job_id + SEPARATOR + group)
    return None if raw is None else unpack_record(raw)


async def waiting(r: redis.asyncio.Redis, topic: str, job_id: str) -> None:
    """Until a `result()` call has registered its wait for `job_id`."""
    waiters = keys_of(topic, job_id).waiters
    await until_async(lambda: r.zscore(waiters, job_id + SEPARATOR + "default"), "a waiter")


async def until_async(check: Any, what: str) -> None:
    async def found() -> bool:
        return await check() is not None

    await eventually(found, timeout_s=5, what=what)


# --- results ---------------------------------------------------------------------------------


async def test_result_returns_what_an_async_handler_returned(
    client: AsyncClient, workers: Workers, redis_async: redis.asyncio.Redis, topic: str
) -> None:
    async def double(job: Job) -> Any:
        return {"twice": job.payload * 2, "raw": b"\x00\xff"}

    job_id = await client.enqueue(topic, 21)
    await workers.start(double)

    assert await client.result(topic, job_id, timeout=10) == {"twice": 42, "raw": b"\x00\xff"}
    info = await client.get(topic, job_id)
    assert info.state is JobState.SUCCEEDED
    assert [(g.group, g.result) for g in info.groups] == [
        ("default", {"twice": 42, "raw": b"\x00\xff"})
    ]
    rec = await record(redis_async, topic, job_id)
    assert rec is not None and len(rec) == 8 and rec[0] == "S"


async def test_result_of_a_sync_handler_waited_for_by_the_sync_client(
    redis_url: str, client: AsyncClient, admin: AsyncAdmin, workers: Workers, topic: str
) -> None:
    job_id = await client.enqueue(topic, "abc")
    await admin.create_group(topic, "default")  # waited for before its workers start
    with Client.from_url(redis_url) as sync_client:
        waiter = asyncio.create_task(
            asyncio.to_thread(sync_client.result, topic, job_id, timeout=60)
        )
        await workers.start(lambda job: job.payload.upper())  # a def: runs on a thread
        assert await asyncio.wait_for(waiter, WOKEN_S) == "ABC"


async def test_a_handler_returning_none_adds_nothing_and_nobody_waiting_costs_no_note(
    client: AsyncClient, workers: Workers, redis_async: redis.asyncio.Redis, topic: str
) -> None:
    async def nothing(job: Job) -> None:
        return None

    worker = await workers.start(nothing)
    ids = [await client.enqueue(topic, i) for i in range(6)]
    await until(lambda: worker.status()["acked"] == 6, what="every job acked")

    for job_id in ids:
        rec = await record(redis_async, topic, job_id)
        assert rec is not None and rec[0] == "S" and len(rec) == 7, rec  # as before results
        assert await client.result(topic, job_id, timeout=0) is None
    for shard in range(SHARDS):
        keys = ShardKeys(topic, shard)
        assert await redis_async.exists(keys.done) == 0, "a note written with nobody waiting"


async def test_a_waiter_is_woken_by_the_ack_and_so_is_every_other(
    client: AsyncClient,
    admin: AsyncAdmin,
    workers: Workers,
    redis_async: redis.asyncio.Redis,
    topic: str,
) -> None:
    job_id = await client.enqueue(topic, 5)
    await admin.create_group(topic, "default")
    waits = [asyncio.create_task(client.result(topic, job_id, timeout=60)) for _ in range(3)]
    await waiting(redis_async, topic, job_id)
    await workers.start(lambda job: job.payload + 1)

    assert await asyncio.wait_for(asyncio.gather(*waits), WOKEN_S) == [6, 6, 6]


async def test_a_result_is_per_group(
    client: AsyncClient,
    admin: AsyncAdmin,
    workers: Workers,
    redis_async: redis.asyncio.Redis,
    topic: str,
) -> None:
    job_id = await client.enqueue(topic, 1)
    await admin.create_group(topic, "b")
    in_b = asyncio.create_task(client.result(topic, job_id, group="b", timeout=60))
    await workers.start(lambda job: "from a", group="a")
    assert await client.result(topic, job_id, group="a", timeout=10) == "from a"
    assert not in_b.done()
    await workers.start(lambda job: "from b", group="b")
    assert await asyncio.wait_for(in_b, WOKEN_S) == "from b"


async def test_result_raises_with_the_dead_letters_reason_for_a_dead_job(
    client: AsyncClient, admin: AsyncAdmin, workers: Workers, topic: str
) -> None:
    async def broken(job: Job) -> None:
        raise RuntimeError("the disk is full")

    job_id = await client.enqueue(topic, 1, max_attempts=1)
    await admin.create_group(topic, "default")
    waiter = asyncio.create_task(client.result(topic, job_id, timeout=60))
    await workers.start(broken)

    with pytest.raises(JobFailedError) as failed:
        await asyncio.wait_for(waiter, WOKEN_S)
    assert failed.value.state == "dead" and failed.value.reason == "failed"
    assert "the disk is full" in str(failed.value) and failed.value.dead_entry_id
    (dead,) = await admin.dead_letters(topic)
    assert dead.entry_id == failed.value.dead_entry_id


async def test_a_waiter_of_a_job_cancelled_before_it_ran_raises_at_once(
    client: AsyncClient, admin: AsyncAdmin, redis_async: redis.asyncio.Redis, topic: str
) -> None:
    job_id = await client.enqueue(topic, 1, delay=3600)
    await admin.create_group(topic, "default")
    waiter = asyncio.create_task(client.result(topic, job_id, timeout=60))
    await waiting(redis_async, topic, job_id)
    assert await client.cancel(topic, job_id)

    with pytest.raises(JobFailedError) as cancelled:
        await asyncio.wait_for(waiter, WOKEN_S)
    assert cancelled.value.state == "cancelled" and cancelled.value.reason is None


@pytest.mark.parametrize("body", ["def", "async def"])
async def test_a_result_over_result_max_bytes_fails_the_job_once_naming_the_setting(
    client: AsyncClient,
    workers: Workers,
    redis_async: redis.asyncio.Redis,
    topic: str,
    body: str,
) -> None:
    """A result that cannot be kept dead-letters its job at once, with attempts left: the
    handler would do its work again to come to the same value."""
    big = await client.enqueue(topic, 100, max_attempts=3)
    odd = await client.enqueue(topic, 1, max_attempts=3)
    runs: list[str] = []

    def kept(job: Job) -> Any:
        runs.append(job.id)
        return "x" * job.payload if job.payload > 1 else object()

    async def handler(job: Job) -> Any:
        return kept(job)

    await workers.start(kept if body == "def" else handler, result_max_bytes=64)

    with pytest.raises(JobFailedError) as too_large:
        await client.result(topic, big, timeout=10)
    assert "result_max_bytes=64" in str(too_large.value.error), too_large.value.error
    assert "got 102" in str(too_large.value.error)
    with pytest.raises(JobFailedError) as not_msgpack:
        await client.result(topic, odd, timeout=10)
    assert "msgpack-serialisable" in str(not_msgpack.value.error)
    for job_id in (big, odd):
        rec = await record(redis_async, topic, job_id)
        assert rec is not None and rec[0] == "D", "a result that cannot be kept is no success"
    assert sorted(runs) == sorted([big, odd]), runs  # each ran once, with 2 attempts left
    assert "attempt 1 of 3, not retried: " in str(too_large.value.error)


async def test_result_times_out_cleanly(
    client: AsyncClient, admin: AsyncAdmin, redis_async: redis.asyncio.Redis, topic: str
) -> None:
    job_id = await client.enqueue(topic, 1, delay=3600)
    await admin.create_group(topic, "default")

    with pytest.raises(ResultTimeoutError) as late:
        await client.result(topic, job_id, timeout=0.2)
    assert late.value.state == JobState.PENDING
    assert isinstance(late.value, TimeoutError)
    keys = keys_of(topic, job_id)
    assert 0 < await redis_async.pttl(keys.waiters) <= 61_000, "a wait leaves nothing forever"
    with pytest.raises(ResultTimeoutError):
        await client.result(topic, job_id, timeout=0)  # looks only


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("timeout", {"timeout": -1}),
        ("timeout", {"timeout": math.nan}),
        ("timeout", {"timeout": math.inf}),
        ("timeout", {"timeout": 86_401}),
        ("timeout", {"timeout": "5"}),
        ("group", {"group": ""}),
    ],
)
async def test_bad_arguments_get_a_typed_error_and_write_nothing(
    client: AsyncClient, redis_async: redis.asyncio.Redis, topic: str, name: str, kwargs: Any
) -> None:
    job_id = await client.enqueue(topic, 1, delay=3600)
    with pytest.raises(InvalidArgumentError) as bad:
        await client.result(topic, job_id, **kwargs)
    assert bad.value.parameter == name
    if name == "timeout":  # its range, or the types it takes (`wheelq.core.due.delay_ms`)
        said = str(bad.value)
        assert "<= 86400" in said or "seconds (int, float) or a timedelta" in said, said
    assert await redis_async.exists(keys_of(topic, job_id).waiters) == 0


# --- a result of a retried attempt ----------------------------------------------------------

HOUR_MS = 3_600_000


async def retrying(client: AsyncClient, topic: str, job_id: str) -> None:
    async def check() -> bool:
        return (await client.get(topic, job_id)).state is JobState.RETRYING

    await eventually(check, timeout_s=10, what=f"{job_id} to be retrying")


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_the_result_of_a_job_that_succeeded_on_a_retry_is_kept_in_every_face(
    redis_url: str,
    client: AsyncClient,
    workers: Workers,
    redis_async: redis.asyncio.Redis,
    topic: str,
    kind: str,
) -> None:
    """The `S` record held its result as msgpack bin, which the scripts cannot read: the
    lookup took the retried job for its first firing, acked with no record, so every face
    answered None and attempt 1."""

    def returned(job: Job) -> Any:
        if job.attempt == 1:
            raise RuntimeError("not yet")
        return {"attempt": job.attempt, "raw": b"\x00\xff"}

    async def returned_async(job: Job) -> Any:
        return returned(job)

    job_id = await client.enqueue(topic, 1, max_attempts=3)
    handler = returned_async if kind == "async" else returned
    await workers.start(handler, retry_base_ms=HOUR_MS, retry_jitter_pct=0)
    await retrying(client, topic, job_id)  # the retry waits an hour: the test fires it
    waiter = asyncio.create_task(client.result(topic, job_id, timeout=60))
    await waiting(redis_async, topic, job_id)
    await client.reschedule(topic, job_id, delay=0)

    expected = {"attempt": 2, "raw": b"\x00\xff"}
    assert await asyncio.wait_for(waiter, WOKEN_S) == expected
    info = await client.get(topic, job_id)
    assert (info.state, info.attempt, info.last_error) == (JobState.SUCCEEDED, 2, None)
    (group,) = info.groups
    assert (group.state, group.result, group.entry_id) == (
        JobState.SUCCEEDED,
        expected,
        info.entry_id,
    )

    def sync_faces() -> tuple[Any, int | None, Any]:
        with Client.from_url(redis_url) as sync_client:
            got = sync_client.get(topic, job_id)
            return sync_client.result(topic, job_id, timeout=0), got.attempt, got.groups[0].result

    assert await asyncio.to_thread(sync_faces) == (expected, 2, expected)

    async with serving(redis_url) as api:
        path = f"/v1/topics/{topic}/jobs/{job_id}"
        status, body, _ = await api.call("GET", f"{path}/result")
        assert (status, body["state"]) == (200, "succeeded"), body
        assert body["result"] == {"attempt": 2, "raw": {"$bytes": "AP8="}}
        status, job, _ = await api.call("GET", path)
        assert (status, job["state"], job["attempt"]) == (200, "succeeded", 2), job
        assert job["groups"][0]["result"] == body["result"]


# --- a worker killed -9 mid-handler ---------------------------------------------------------


Spawn = Callable[[dict[str, Any]], WorkerProcess]


@pytest.fixture
def spawn(redis_url: str, topic: str, tmp_path: Path) -> Iterator[Spawn]:
    """Starts worker "a" in a process of its own, doing what a behaviour of
    `tests.support.worker_proc` says; killed at teardown if it still runs."""
    procs: list[WorkerProcess] = []

    def start(behaviour: dict[str, Any]) -> WorkerProcess:
        procs.append(WorkerProcess(redis_url, topic, "a", tmp_path, behaviour, FAST))
        return procs[-1]

    try:
        yield start
    finally:
        for proc in procs:
            proc.finish()


async def test_result_waits_across_a_worker_killed_mid_handler_and_its_take_over(
    client: AsyncClient, admin: AsyncAdmin, workers: Workers, topic: str, spawn: Spawn
) -> None:
    job_id = await client.enqueue(topic, 7)
    await admin.create_group(topic, "default")
    waiter = asyncio.create_task(client.result(topic, job_id, timeout=60))
    a = spawn({"sleep_s": 30})
    await until(lambda: job_id in a.jobs("start"), timeout_s=20, what="a to start the job")
    a.signal(signal.SIGKILL)
    assert await asyncio.to_thread(a.proc.wait, 10) == -signal.SIGKILL

    async def taken_over(job: Job) -> Any:
        return {"payload": job.payload, "deliveries": job.deliveries}

    await workers.start(taken_over)
    assert await asyncio.wait_for(waiter, WOKEN_S) == {"payload": 7, "deliveries": 2}


def test_the_sync_client_times_out_too(redis_url: str, topic: str) -> None:
    with Client.from_url(redis_url) as c:
        admin = Admin.of(c)
        admin.create_topic(topic, SHARDS)
        job_id = c.enqueue(topic, 1, delay=3600)
        admin.create_group(topic, "default")
        with pytest.raises(ResultTimeoutError) as late:
            c.result(topic, job_id, timeout=0.1)
        assert late.value.state == JobState.PENDING


async def test_a_stale_workers_late_ack_leaves_the_result_of_the_first_settlement(
    client: AsyncClient, workers: Workers, topic: str, spawn: Spawn
) -> None:
    """Worker a takes the job and is SIGSTOPped; b takes it over after the visibility
    timeout and acks it with its result; a resumes and acks with its own. a's ack used to
    replace b's settled result: the first settlement stands."""
    job_id = await client.enqueue(topic, 7)
    a = spawn({"sleep_s": 1, "returns": "a"})
    await until(lambda: job_id in a.jobs("start"), timeout_s=20, what="a to start the job")
    a.signal(signal.SIGSTOP)
    try:

        async def taken_over(job: Job) -> Any:
            return {"by": "b", "attempt": job.attempt, "deliveries": job.deliveries}

        await workers.start(taken_over)
        first = {"by": "b", "attempt": 1, "deliveries": 2}
        assert await client.result(topic, job_id, timeout=WOKEN_S) == first
        settled = await client.get(topic, job_id)
    finally:
        a.signal(signal.SIGCONT)
    await until(lambda: job_id in a.jobs("finish"), timeout_s=20, what="a to finish its run")
    a.signal(signal.SIGTERM)  # its stop writes what it still holds: the late ack
    assert await asyncio.to_thread(a.proc.wait, 20) == 0, a.log_tail()
    report = a.report()
    assert report is not None and report["unsettled"] == 0, report

    assert await client.result(topic, job_id, timeout=0) == first
    info = await client.get(topic, job_id)
    (group,) = info.groups
    assert (info.state, info.attempt, group.result) == (JobState.SUCCEEDED, 1, first)
    assert (group.finished_ms, group.duration_ms) == (
        settled.groups[0].finished_ms,
        settled.groups[0].duration_ms,
    ), "the record of b's settlement was replaced"


# --- issue 43 item 14: a group that does not exist -------------------------------------------


async def test_result_of_a_group_that_does_not_exist_raises_at_once(
    client: AsyncClient, admin: AsyncAdmin, workers: Workers, topic: str
) -> None:
    done = await client.enqueue(topic, 1)
    later = await client.enqueue(topic, 2, delay=3600)
    await workers.start(lambda job: job.payload * 10)
    assert await client.result(topic, done, timeout=10) == 10
    for job_id in (done, later):
        for timeout in (0, 60):
            with pytest.raises(UnknownGroupError) as unknown:  # not after the 60 s
                await asyncio.wait_for(
                    client.result(topic, job_id, group="nope", timeout=timeout), 5
                )
            assert unknown.value.parameter == "group" and "'nope'" in str(unknown.value)
    await admin.create_group(topic, "other")  # a group made, not yet read: it waits
    with pytest.raises(ResultTimeoutError):
        await client.result(topic, later, group="other", timeout=0.1)


def test_the_sync_client_raises_at_once_for_a_group_that_does_not_exist(
    redis_url: str, topic: str
) -> None:
    with Client.from_url(redis_url) as c:
        job_id = c.enqueue(topic, 1, delay=3600)
        with pytest.raises(UnknownGroupError):
            c.result(topic, job_id, group="nope", timeout=10)


async def test_result_of_an_unknown_topic_or_job_raises_at_once_in_every_face(
    client: AsyncClient, admin: AsyncAdmin, redis_url: str, topic: str
) -> None:
    """Issue 43: an unknown topic raised ResultTimeoutError "after timeout=5 s" at once, and
    an unknown job of a known group waited out the whole timeout (HTTP: 404). Now each says
    what is unknown, at once, in the async and sync library and over HTTP."""
    await admin.create_topic(topic, SHARDS)
    await admin.create_group(topic, "default")
    asked = (
        ("no-such-topic-here", "abc", UnknownTopicError),
        (topic, "nosuchjob", UnknownJobError),
    )

    def sync_result(on: str, job_id: str) -> Any:
        with Client.from_url(redis_url) as sync_client:
            return sync_client.result(on, job_id, timeout=60)

    for on, job_id, error in asked:
        with pytest.raises(error) as raised:
            await asyncio.wait_for(client.result(on, job_id, timeout=60), WOKEN_S)
        assert "timeout" not in str(raised.value) and repr(job_id if on == topic else on) in str(
            raised.value
        ), raised.value
        with pytest.raises(error):
            await asyncio.wait_for(asyncio.to_thread(sync_result, on, job_id), WOKEN_S)
    async with serving(redis_url) as api:
        for on, job_id, _ in asked:
            path = f"/v1/topics/{on}/jobs/{job_id}/result"
            got = await asyncio.wait_for(
                api.call("GET", path, params={"wait_ms": "20000"}), WOKEN_S
            )
            assert got[0] == 404, got
