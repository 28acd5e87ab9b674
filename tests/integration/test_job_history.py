"""A job's whole life by id (`get()`), on real servers: every state in the order a job lives
through it, with a real worker settling it, and what trimming keeps and drops.

docs/architecture.md, "Job history". States are checked as they happen: the handler holds
each attempt on an event the test releases, and every wait polls `get()` with a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio

from tests.support.waiting import eventually
from wheelq import AsyncAdmin, AsyncClient, Job, JobInfo, JobState, Worker
from wheelq.core.keys import ShardKeys, all_shards, shard_of
from wheelq.runtime.role import executor_of
from wheelq.store import history

SHARDS = 4
GROUP = "default"
HOUR_MS = 3_600_000
FAST: dict[str, Any] = {
    "visibility_timeout_ms": 30_000,
    "claim_interval_ms": 100,
    "shutdown_grace_ms": 0,
    "retry_base_ms": HOUR_MS,  # a failed attempt stays RETRYING until the test moves it
    "retry_jitter_pct": 0,
}


class Gates:
    """The handler: each (job id, attempt) waits for the test to open it, then raises if
    told to; `started` records who began."""

    def __init__(self) -> None:
        self.opened: dict[tuple[str, int], asyncio.Event] = {}
        self.fail: set[tuple[str, int]] = set()
        self.started: list[tuple[str, int]] = []

    def gate(self, job_id: str, attempt: int) -> asyncio.Event:
        return self.opened.setdefault((job_id, attempt), asyncio.Event())

    async def __call__(self, job: Job) -> None:
        key = (job.id, job.attempt)
        self.started.append(key)
        await self.gate(*key).wait()
        if key in self.fail:
            raise RuntimeError(f"boom on attempt {job.attempt} of {job.id}")


@pytest.fixture
async def gated_worker(redis_url: str, topic: str, client: AsyncClient) -> AsyncIterator[Any]:
    gates = Gates()
    worker = Worker.from_url(redis_url, topic, gates, **FAST)
    await worker.start()
    try:
        yield gates, worker
    finally:
        for event in gates.opened.values():
            event.set()
        await worker.stop(grace_ms=0)


async def state_of(client: AsyncClient, topic: str, job_id: str, state: JobState) -> JobInfo:
    """Poll `get()` until the job is in `state`; returns that JobInfo."""

    async def check() -> JobInfo | None:
        info = await client.get(topic, job_id)
        return info if info.state is state else None

    return await eventually(check, timeout_s=10, what=f"{job_id} to be {state}")


async def redis_ms(r: redis.asyncio.Redis) -> int:
    sec, usec = await r.time()
    return int(sec) * 1000 + int(usec) // 1000


@pytest.mark.cluster_too  # on the single server and on the cluster
async def test_a_job_walks_through_every_state_and_get_reports_each(
    client: AsyncClient, gated_worker: Any, redis_async: redis.asyncio.Redis, topic: str
) -> None:
    gates, worker = gated_worker
    gates.fail.add(("walk", 1))
    t0 = await redis_ms(redis_async)

    await client.enqueue(topic, {"step": 1}, delay=3600, job_id="walk", max_attempts=3)
    info = await client.get(topic, "walk")
    assert (info.state, info.attempt, info.max_attempts, info.payload) == (
        JobState.PENDING,
        1,
        3,
        {"step": 1},
    )
    assert info.due_ms is not None and info.due_ms >= t0 + HOUR_MS
    assert info.groups == () and info.entry_id is None

    # Fired: the worker takes it at once, so READY (not delivered yet) is seen on a second
    # group that no worker reads.
    ready_key = ShardKeys(topic, shard_of("walk", SHARDS)).ready
    await redis_async.xgroup_create(ready_key, "idle", "$")
    await client.reschedule(topic, "walk", delay=0)
    running = await state_of(client, topic, "walk", JobState.RUNNING)
    by_group = {g.group: g for g in running.groups}
    assert by_group["idle"].state is JobState.READY
    run = by_group[GROUP]
    assert (run.state, run.consumer, run.deliveries) == (JobState.RUNNING, worker.consumer, 1)
    assert run.since_ms is not None and running.fired_ms is not None
    assert running.fired_ms <= run.since_ms <= await redis_ms(redis_async)
    assert (running.attempt, running.entry_id, running.payload) == (1, run.entry_id, {"step": 1})
    assert gates.started == [("walk", 1)]
    await redis_async.xgroup_destroy(ready_key, "idle")  # from here on, one group

    # Retrying: attempt 1 fails; the retry waits an hour in the sorted set.
    gates.gate("walk", 1).set()
    retrying = await state_of(client, topic, "walk", JobState.RETRYING)
    assert retrying.attempt == 2 and retrying.last_error is not None
    assert "boom on attempt 1 of walk" in retrying.last_error
    assert retrying.due_ms is not None and retrying.due_ms >= t0 + HOUR_MS
    (group,) = retrying.groups
    assert (group.group, group.state, group.entry_id) == (GROUP, JobState.RETRYING, run.entry_id)

    # Running again (attempt 2, the last error still shown), then succeeded.
    await client.reschedule(topic, "walk", delay=0)
    again = await state_of(client, topic, "walk", JobState.RUNNING)
    assert again.attempt == 2 and again.entry_id != run.entry_id
    assert again.last_error is not None and "boom on attempt 1" in again.last_error
    gates.gate("walk", 2).set()
    done = await state_of(client, topic, "walk", JobState.SUCCEEDED)
    ok = {g.group: g for g in done.groups}[GROUP]
    assert ok.state is JobState.SUCCEEDED and ok.entry_id == again.entry_id
    assert ok.finished_ms is not None and ok.duration_ms is not None and ok.duration_ms >= 0
    assert again.fired_ms is not None and again.fired_ms <= ok.finished_ms
    assert done.attempt == 2 and done.last_error is None


@pytest.mark.cluster_too  # on the single server and on the cluster
async def test_a_job_out_of_attempts_is_dead_with_its_reason_and_dead_letter(
    client: AsyncClient, admin: AsyncAdmin, gated_worker: Any, topic: str
) -> None:
    gates, _ = gated_worker
    gates.fail.add(("doomed", 1))
    gates.gate("doomed", 1).set()
    await client.enqueue(topic, "x", job_id="doomed", max_attempts=1)

    dead = await state_of(client, topic, "doomed", JobState.DEAD)
    (group,) = dead.groups
    assert (group.state, group.reason) == (JobState.DEAD, "failed")
    assert dead.last_error is not None and "boom on attempt 1 of doomed" in dead.last_error
    (letter,) = await admin.dead_letters(topic)
    assert letter.job_id == "doomed" and group.dead_entry_id == letter.entry_id


@pytest.mark.cluster_too  # on the single server and on the cluster
async def test_enqueued_ms_stays_the_enqueue_time_once_fired_dead_and_replayed(
    client: AsyncClient, admin: AsyncAdmin, gated_worker: Any, topic: str
) -> None:
    gates, _ = gated_worker
    gates.fail.add(("kept", 1))
    await client.enqueue(topic, "x", delay=3600, job_id="kept", max_attempts=1)
    pending = await client.get(topic, "kept")
    assert pending.state is JobState.PENDING and pending.enqueued_ms is not None

    await client.reschedule(topic, "kept", delay=0)
    running = await state_of(client, topic, "kept", JobState.RUNNING)
    assert running.enqueued_ms == pending.enqueued_ms  # was None once fired
    gates.gate("kept", 1).set()
    dead = await state_of(client, topic, "kept", JobState.DEAD)
    assert dead.enqueued_ms == pending.enqueued_ms

    gates.fail.clear()  # the replay runs attempt 1 again, and succeeds
    assert await admin.replay(topic) == 1
    done = await state_of(client, topic, "kept", JobState.SUCCEEDED)
    assert done.entry_id != dead.entry_id
    assert done.enqueued_ms == pending.enqueued_ms


@pytest.mark.cluster_too  # on the single server and on the cluster
async def test_cancelled_unknown_and_a_never_seen_id(client: AsyncClient, topic: str) -> None:
    await client.enqueue(topic, "x", delay=60, job_id="c")
    assert await client.cancel(topic, "c") is True
    info = await client.get(topic, "c")
    assert info.state is JobState.CANCELLED and info.cancelled_ms is not None

    # Enqueued again after the cancel: pending wins over the old cancellation.
    await client.enqueue(topic, "y", delay=60, job_id="c")
    assert (await client.get(topic, "c")).state is JobState.PENDING

    assert (await client.get(topic, "never")).state is JobState.UNKNOWN
    assert (await client.get("no-such-topic", "never")).state is JobState.UNKNOWN


@pytest.mark.cluster_too  # on the single server and on the cluster
async def test_trimming_keeps_history_within_retention_and_drops_it_after(
    client: AsyncClient, gated_worker: Any, redis_async: redis.asyncio.Redis, topic: str
) -> None:
    gates, _ = gated_worker
    for attempt_key in [("kept", 1), ("kept-too", 1)]:
        gates.gate(*attempt_key).set()
    await client.enqueue(topic, "a", job_id="kept")
    await client.enqueue(topic, "b", job_id="kept-too")
    await client.enqueue(topic, "c", delay=60, job_id="cancelled")
    await client.cancel(topic, "cancelled")
    await state_of(client, topic, "kept", JobState.SUCCEEDED)
    await state_of(client, topic, "kept-too", JobState.SUCCEEDED)
    executor = executor_of(redis_async)

    async def trim(retention_ms: int) -> int:
        calls = [history.trim(k, retention_ms, 1000, HOUR_MS) for k in all_shards(topic, SHARDS)]
        return sum(t.trimmed for t in await executor.run(calls))

    assert await trim(HOUR_MS) == 0  # within retention: nothing goes
    for job_id, state in [("kept", 1), ("kept-too", 1), ("cancelled", 0)]:
        info = await client.get(topic, job_id)
        assert info.state is (JobState.SUCCEEDED if state else JobState.CANCELLED)

    async def trimmed_and_gone() -> bool:
        # Entries fired in this ms are not older than "now - 0" yet; the records go a trim
        # round after their entries (their generation is dropped once none is left).
        await trim(0)
        return await _all_gone(client, topic)

    await eventually(trimmed_and_gone, timeout_s=5, what="every entry and record gone")
    for keys in all_shards(topic, SHARDS):
        # Both generations went: every entry they could name was trimmed (the current one
        # holds only its \x1fsince marker).
        assert await redis_async.exists(keys.history_old) == 0
        assert await redis_async.hkeys(keys.history) in ([], [b"\x1fsince"])


async def _all_gone(client: AsyncClient, topic: str) -> bool:
    infos = [await client.get(topic, j) for j in ("kept", "kept-too", "cancelled")]
    return all(i.state is JobState.UNKNOWN for i in infos)


# --- one shard per lookup ------------------------------------------------------------------


@contextlib.contextmanager
def monitored(url: str) -> Iterator[list[str]]:
    """Every command the server runs while the block runs (MONITOR, scripts' calls included)."""
    seen: list[str] = []
    conn = redis.Redis.from_url(url)
    ready = threading.Event()

    def listen() -> None:
        with conn.monitor() as m:
            ready.set()
            for command in m.listen():
                text = str(command["command"])
                if text == "ECHO wheelq-monitor-end":
                    return
                seen.append(text)

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    ready.wait(5)
    conn.ping()  # the MONITOR is on before the block runs (its own PING shows in `seen`)
    try:
        yield seen
    finally:
        redis.Redis.from_url(url).echo("wheelq-monitor-end")
        thread.join(5)
        conn.close()


async def test_a_lookup_touches_only_the_jobs_shard(
    client: AsyncClient, redis_url: str, redis_async: redis.asyncio.Redis, topic: str
) -> None:
    await client.enqueue(topic, "x", job_id="where")
    await redis_async.xgroup_create(ShardKeys(topic, 0).ready, "g1", "0", mkstream=True)
    await client.get(topic, "where")  # the shard count is cached from here on
    shard = shard_of("where", SHARDS)

    with monitored(redis_url) as seen:
        info = await client.get(topic, "where")
    assert info.state is JobState.READY

    commands = [c for c in seen if "wheelq-monitor" not in c and not c.startswith("PING")]
    tags = {tag for c in commands for tag in re.findall(r"\{([^{}]+)\}", c)}
    assert tags == {f"{topic}:{shard}"}, commands
    assert sum(c.startswith("EVALSHA") for c in commands) == 1, commands
    assert not [c for c in commands if re.match(r"(SCAN|KEYS|HGETALL|XRANGE - \+)", c)]
