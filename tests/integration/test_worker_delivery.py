"""Which entries reach a group's handler, and what it is told about them (issue 8): a new
group starts at the oldest retained entry ("earliest", the default) or at the next one
("now"), an existing group is never moved; an entry taken over from a worker that died
reaches the handler with `Job.deliveries` counting its deliveries, and each take-over and
dead letter for deliveries is logged at INFO.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
import redis.asyncio

from tests.integration import test_worker
from tests.integration.test_worker import SHARDS, Recorder, Workers, holds, pending
from tests.support.waiting import eventually
from wheelq import AsyncAdmin, AsyncClient, EnqueueItem, InvalidArgumentError, Job, Worker
from wheelq.core.keys import ShardKeys, all_shards, shard_of
from wheelq.worker.read_ahead import READ_AHEAD_MAX

pytestmark = pytest.mark.cluster_too  # on the single server and on the cluster

# test_worker.py's fixture of workers stopped at teardown (`client` is the shared topic client).
workers = test_worker.workers


# --- defect 15: where a new group starts -------------------------------------------------------


async def test_a_group_started_now_skips_jobs_fired_before_it_and_runs_later_ones(
    client: AsyncClient, workers: Workers, redis_async: redis.asyncio.Redis, topic: str
) -> None:
    old = [await client.enqueue(topic, f"old-{i}") for i in range(4)]
    early: list[str] = []
    late: list[str] = []
    we = await workers.start(lambda job: early.append(job.id), group="early", start="earliest")
    wl = await workers.start(lambda job: late.append(job.id), group="late", start="now")
    new = [await client.enqueue(topic, f"new-{i}") for i in range(4)]

    await eventually(
        holds(lambda: we.status()["acked"] == 8 and wl.status()["acked"] == 4),
        timeout_s=10,
        what="each group to run its jobs",
    )
    assert sorted(early) == sorted(old + new)
    assert sorted(late) == sorted(new), "the group started 'now' ran jobs fired before it"
    assert await pending(redis_async, topic, "late") == 0


async def test_start_now_never_moves_an_existing_group(
    client: AsyncClient, workers: Workers, topic: str
) -> None:
    first = await workers.start(lambda job: None)
    await first.stop()
    waiting = [await client.enqueue(topic, i) for i in range(3)]
    ran: list[str] = []
    worker = await workers.start(lambda job: ran.append(job.id), start="now")
    await eventually(holds(lambda: worker.status()["acked"] == 3), timeout_s=10, what="the 3")
    assert sorted(ran) == sorted(waiting)


@pytest.mark.parametrize("start", ["latest", "", "$", None, 0, ["now"]])
def test_start_must_be_earliest_or_now(redis_url: str, topic: str, start: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="start must be 'earliest' or 'now'") as caught:
        Worker.from_url(redis_url, topic, lambda job: None, start=start)
    assert caught.value.parameter == "start"


# --- defect 16: deliveries -----------------------------------------------------------------


async def test_a_taken_over_job_reaches_the_handler_with_its_delivery_count(
    client: AsyncClient,
    admin: AsyncAdmin,
    workers: Workers,
    redis_async: redis.asyncio.Redis,
    topic: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="wheelq.worker")
    r = redis_async
    for keys in all_shards(topic, SHARDS):
        await r.xgroup_create(keys.ready, "default", "0", mkstream=True)

    async def read_by_a_worker_that_died(job_id: str, deliveries: int) -> tuple[int, str]:
        """Deliver the job's entry to a consumer that then vanished; returns (shard, entry)."""
        keys = ShardKeys(topic, shard_of(job_id, SHARDS))
        ((_, [(entry, _)]),) = await r.xreadgroup("default", "died", {keys.ready: ">"}, count=10)
        await r.xclaim(
            keys.ready, "default", "died", 0, [entry], idle=60_000, retrycount=deliveries
        )
        return keys.shard, entry.decode()

    stalled = await client.enqueue(topic, "stalled")
    shard, entry = await read_by_a_worker_that_died(stalled, 1)
    poison = next(i for i in (f"p-{n}" for n in range(100)) if shard_of(i, SHARDS) != shard)
    await client.enqueue(topic, "poison", job_id=poison)
    poison_shard, _ = await read_by_a_worker_that_died(poison, 3)

    rec = Recorder(r)
    worker = await workers.start(rec, max_deliveries=3)
    fresh = await client.enqueue(topic, "fresh")
    await eventually(holds(lambda: worker.status()["acked"] == 2), timeout_s=10, what="2 jobs")

    (taken,) = rec.of(stalled)
    assert (taken.deliveries, taken.attempt, taken.entry_id) == (2, 1, entry)
    assert [j.deliveries for j in rec.of(fresh)] == [1]
    # The poison's shard may be swept after both acks: wait for its dead letter too.
    (letter,) = await eventually(
        lambda: admin.dead_letters(topic), timeout_s=10, what="the poison's dead letter"
    )
    assert (letter.job_id, letter.reason) == (poison, "deliveries")
    infos = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.INFO]
    assert f"took over 1 entries of {topic}/{shard} from idle workers" in infos
    assert (
        f"dead-lettered 1 entries of {topic}/{poison_shard} after more than max_deliveries=3 "
        "deliveries" in infos
    )
    assert await pending(r, topic) == 0


def test_a_job_has_one_delivery_unless_told_otherwise() -> None:
    job = Job(id="j", topic="t", payload=None, due_ms=0, attempt=1, max_attempts=1)
    assert job.deliveries == 1


# --- read-ahead: how many entries a worker holds beyond its slots (wheelq.worker.read_ahead) ---


async def test_a_worker_busy_with_slow_jobs_leaves_the_rest_to_an_idle_worker(
    client: AsyncClient, workers: Workers, redis_async: redis.asyncio.Redis, topic: str
) -> None:
    async def slow(job: Job) -> None:
        await asyncio.sleep(1.0)  # simulated work

    a_runs = Recorder(redis_async, slow)
    a = await workers.start(a_runs, concurrency=2, consumer="a")
    await client.enqueue_many(topic, [EnqueueItem(payload="warm-up") for _ in range(2)])
    await eventually(holds(lambda: a.status()["acked"] == 2), timeout_s=10, what="a's warm-up")
    assert a.status()["read_ahead"] == 0, "1-second jobs, 2 slots: nothing to read ahead"

    ids = await client.enqueue_many(topic, [EnqueueItem(payload=n) for n in range(20)])
    b_runs = Recorder(redis_async)
    await workers.start(b_runs, concurrency=20, consumer="b")
    await eventually(
        holds(lambda: set(ids) <= set(a_runs.ids()) | set(b_runs.ids())),
        timeout_s=15,
        what="every job to run",
    )
    # a holds its 2 slots' worth plus at most one entry per shard from a read in progress;
    # hoarding would have taken all 20 before b started.
    assert len(set(ids) & set(b_runs.ids())) >= 20 - 2 - SHARDS - 2
    await eventually(
        holds(lambda: a.status()["acked"] == 2 + len(set(ids) & set(a_runs.ids()))),
        timeout_s=10,
        what="a's last jobs",
    )
    assert await pending(redis_async, topic) == 0


async def test_a_worker_with_fast_jobs_reads_ahead_of_its_slots(
    client: AsyncClient, workers: Workers, redis_async: redis.asyncio.Redis, topic: str
) -> None:
    release = asyncio.Event()

    async def held_after_warm_up(job: Job) -> None:
        if job.payload != "warm-up":
            await release.wait()

    worker = await workers.start(held_after_warm_up, concurrency=2)
    await client.enqueue_many(topic, [EnqueueItem(payload="warm-up") for _ in range(20)])
    await eventually(holds(lambda: worker.status()["acked"] == 20), timeout_s=10, what="warm-up")
    assert worker.status()["read_ahead"] == READ_AHEAD_MAX  # runs of a few µs: the most

    ids = await client.enqueue_many(topic, [EnqueueItem(payload=n) for n in range(400)])
    # 2 run, held by the test; every other one is read ahead (none of it waits in Redis).
    await eventually(
        holds(lambda: worker.status()["held"] == len(ids)), timeout_s=10, what="all 400 held"
    )
    assert worker.status()["running"] == 2
    release.set()
    await eventually(
        holds(lambda: worker.status()["acked"] == 20 + len(ids)), timeout_s=10, what="all run"
    )
    assert await pending(redis_async, topic) == 0
