"""Dead letters by reason, every face: dead letters made by real consumers (a worker with an
async handler and one with a ``def`` handler failing their last attempt: "failed"; an HTTP
pull consumer that stops holding its batch, taken over past ``max_deliveries``:
"deliveries"), then listed, replayed and purged by reason through each face (library sync
and async, CLI, HTTP, console forms as the filtered page offers them). Malformed dead
letters (entries the workers could not decode) are never replayed, by any face: a replay
skips them and says so, one named is refused, and they stay.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

import pytest
import redis

from tests.integration import test_worker
from tests.integration.test_web_dashboard import get
from tests.support.cli import run_wheelq
from tests.support.consumers import PullConsumer, WorkerConsumer
from tests.support.faces import Face, having
from tests.support.waiting import eventually
from tests.support.web import Served, assert_problem, serving
from tests.support.workers import Workers
from wheelq import (
    Admin,
    AsyncAdmin,
    AsyncClient,
    Flow,
    InvalidArgumentError,
    Job,
    Scheduler,
)
from wheelq.core.job import Field
from wheelq.core.keys import ShardKeys
from wheelq.core.settings import WorkerSettings

pytestmark = pytest.mark.cluster_too

SHARDS = 2
JOBS = 2
scheduler = test_worker.scheduler  # retries and key deferrals come back through it
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture
async def served(redis_url: str) -> AsyncIterator[Served]:
    """The app, its pulled entries taken over (and dead past one delivery) fast."""
    settings = WorkerSettings(visibility_timeout_ms=300, claim_interval_ms=100, max_deliveries=1)
    async with serving(redis_url, worker_settings=settings) as app:
        yield app


async def made_dead(
    client: AsyncClient, pool: Workers, served: Served, topic: str
) -> dict[str, set[str]]:
    """`JOBS` jobs that fail every attempt, dead in groups "async" and "sync" (failed) and
    "pull" (deliveries); the refs by reason."""
    puller = PullConsumer(served, topic, "pull")
    puller.hold = True
    workers = [WorkerConsumer(pool, "async", sync=False), WorkerConsumer(pool, "sync", sync=True)]
    for consumer in [*workers, puller]:
        await consumer.start()
    try:
        for _ in range(JOBS):
            await client.enqueue(topic, {"fail": 9}, max_attempts=1)

        async def all_dead() -> dict[str, set[str]] | None:
            page = await AsyncAdmin.of(client).dead_letters(topic, 1000)
            if len(page) < 3 * JOBS:
                return None
            return {r: {d.ref for d in page if d.reason == r} for r in ("failed", "deliveries")}

        dead = await eventually(all_dead, timeout_s=15, what="the dead letters")
        assert (len(dead["failed"]), len(dead["deliveries"])) == (2 * JOBS, JOBS), dead
        return dead
    finally:
        for consumer in [*workers, puller]:
            await consumer.stop()


@pytest.mark.parametrize("face", having("replay"), indirect=True)
async def test_dead_letters_are_listed_replayed_and_purged_by_reason_through_every_face(
    face: Face,
    client: AsyncClient,
    admin: AsyncAdmin,
    pool: Workers,
    served: Served,
    topic: str,
) -> None:
    dead = await made_dead(client, pool, served, topic)
    assert await face.dead(topic, "failed") == dead["failed"]
    assert await face.dead(topic, "deliveries") == dead["deliveries"]

    assert await face.replay(topic, "deliveries") == (JOBS, 0)
    assert {d.ref for d in await admin.dead_letters(topic, 1000)} == dead["failed"]
    assert await face.purge(topic, "failed") == 2 * JOBS
    stats = await admin.stats(topic)
    assert stats is not None and stats.dead == 0


@pytest.mark.parametrize("face", having("replay"), indirect=True)
async def test_a_replayed_keyed_job_keeps_its_entry_and_waits_for_its_key_through_every_face(
    face: Face,
    client: AsyncClient,
    admin: AsyncAdmin,
    pool: Workers,
    scheduler: Scheduler,
    topic: str,
) -> None:
    """Bug: replay.lua rebuilt the job's envelope field by field and left out its key and
    ordered flag: the replayed job ran beside its key's running job, as a keyless one."""
    hold = asyncio.Event()
    seen: list[Job] = []

    async def handle(job: Job) -> None:
        seen.append(job)
        if job.payload == "hold":
            await hold.wait()
        elif not hold.is_set():
            raise RuntimeError("fails until the key's other job is let go")

    worker = await pool.start(handle, group="keyed", flow=Flow(key_concurrency=1))
    gate = worker.lanes[0].in_flight.gate
    assert gate is not None
    job_id = await client.enqueue(
        topic, "once", traceparent=TRACEPARENT, max_attempts=2, key="customer-1", ordered=True
    )

    async def dead() -> bool:
        return len(await admin.dead_letters(topic, 10)) == 1

    await eventually(dead, timeout_s=15, what="the keyed job's dead letter")
    (letter,) = await admin.dead_letters(topic, 10)
    assert (letter.reason, letter.attempt) == ("failed", 2), letter  # what is replayed below
    await client.enqueue(topic, "hold", key="customer-1", ordered=True)

    async def holding() -> bool:
        return any(j.payload == "hold" for j in seen)

    await eventually(holding, timeout_s=15, what="the key's other job running")
    deferred = gate.deferred
    replayed = await face.replay(topic, "failed")
    assert replayed == (1, 0), (replayed, await admin.dead_letters(topic, 10))

    def runs() -> list[Job]:
        return [j for j in seen if j.id == job_id]

    async def waited_or_ran() -> bool:
        return gate.deferred > deferred or len(runs()) > 2

    await eventually(waited_or_ran, timeout_s=15, what="the replayed job read")
    assert len(runs()) == 2, "the replayed job ran while its key's other job held the key"
    hold.set()

    async def replayed() -> bool:
        return len(runs()) == 3

    await eventually(replayed, timeout_s=15, what="the replayed job run once the key is free")
    job = runs()[-1]
    fired = (job.key, job.ordered, job.traceparent, job.max_attempts, job.attempt, job.group)
    assert fired == ("customer-1", True, TRACEPARENT, 2, 1, "keyed")


async def test_the_filtered_dead_letter_page_offers_only_actions_that_keep_its_filter(
    client: AsyncClient, pool: Workers, served: Served, topic: str
) -> None:
    await made_dead(client, pool, served, topic)
    html, _ = await get(served, f"/ui/topics/{topic}/dead?reason=failed")
    every = [f for f in re.findall(r"<form[^>]*>.*?</form>", html, re.DOTALL) if 'name="all"' in f]
    assert len(every) == 2, every  # replay all matching, purge all matching
    for form in every:
        assert re.search(r'name="reason" value="failed"', form), form  # the filter goes along


async def made_malformed(
    client: AsyncClient, pool: Workers, r: redis.Redis, topic: str
) -> set[str]:
    """An undecodable entry in each shard's ready stream, dead-lettered as malformed by a
    worker with an async handler and one with a ``def`` handler; their refs."""
    await AsyncAdmin.of(client).create_topic(topic, SHARDS)
    workers = [WorkerConsumer(pool, "async", sync=False), WorkerConsumer(pool, "sync", sync=True)]
    for consumer in workers:
        await consumer.start()
    try:
        for shard in range(SHARDS):  # as a foreign writer could: no due time, no msgpack
            fields = {Field.ID: f"bad-{shard}", Field.DUE: "x", Field.PAYLOAD: b"\xc1"}
            r.xadd(ShardKeys(topic, shard).ready, fields)

        async def all_dead() -> set[str] | None:
            page = await AsyncAdmin.of(client).dead_letters(topic, 1000, reason="malformed")
            return {d.ref for d in page} if len(page) == 2 * SHARDS else None

        return await eventually(all_dead, timeout_s=15, what="the malformed dead letters")
    finally:
        for consumer in workers:
            await consumer.stop()


def ready_lengths(r: redis.Redis, topic: str) -> list[int]:
    return [r.xlen(ShardKeys(topic, shard).ready) for shard in range(SHARDS)]


@pytest.mark.parametrize("face", having("replay"), indirect=True)
async def test_a_replay_through_every_face_skips_malformed_dead_letters_and_says_so(
    face: Face, client: AsyncClient, pool: Workers, redis_sync: redis.Redis, topic: str
) -> None:
    """Bug: every face answered "replayed 4" and put them back in the stream, where a worker
    dead-lettered each again as malformed (docs/reference/wire-format.md: they cannot be)."""
    malformed = await made_malformed(client, pool, redis_sync, topic)
    before = ready_lengths(redis_sync, topic)
    assert await face.replay(topic, "malformed") == (0, 2 * SHARDS)
    assert await face.dead(topic, "malformed") == malformed  # they stay
    assert ready_lengths(redis_sync, topic) == before  # nothing went back to the streams


async def test_a_malformed_dead_letter_named_is_refused_by_every_face(
    client: AsyncClient,
    admin: AsyncAdmin,
    pool: Workers,
    served: Served,
    redis_url: str,
    redis_sync: redis.Redis,
    topic: str,
) -> None:
    """Bug: a malformed dead letter named by its ref was replayed (and died again); the
    console offered a replay button on its row."""
    malformed = await made_malformed(client, pool, redis_sync, topic)
    ref = sorted(malformed)[0]
    with pytest.raises(InvalidArgumentError, match="malformed") as info:
        await admin.replay(topic, [ref])
    assert info.value.parameter == "refs"
    sync_admin = Admin.from_url(redis_url)
    with sync_admin, pytest.raises(InvalidArgumentError, match="malformed"):
        await asyncio.to_thread(sync_admin.replay, topic, [ref])
    got = await served.call("POST", f"/v1/topics/{topic}/dead/replay", {"refs": [ref]})
    assert_problem(got, 422, "refs")
    done = await asyncio.to_thread(
        run_wheelq, "dlq", "replay", topic, ref, "--redis-url", redis_url
    )
    assert done.returncode == 2 and "malformed" in done.stderr, done
    html, _ = await get(served, f"/ui/topics/{topic}/dead")
    rows = re.findall(r'<tr data-ref="([^"]+)">(.*?)</tr>', html, re.DOTALL)
    assert {r for r, _ in rows} == malformed
    assert all("/replay" not in row for _, row in rows), "a replay button on a malformed row"
    assert {d.ref for d in await admin.dead_letters(topic, 1000)} == malformed
