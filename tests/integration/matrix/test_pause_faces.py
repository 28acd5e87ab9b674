"""Pause and resume, every face: set through each write face (library sync and async, CLI,
HTTP, console), for the topic or for groups, and held by each consumer (worker with an
async handler, worker with a sync handler, the callback deliverer, an HTTP pull consumer);
read back through each read face; and outliving a restart of the server and of a worker.
"""

from __future__ import annotations

import contextlib
from collections import Counter

import pytest
import redis.asyncio

from tests.support.callback_server import ScriptedServer
from tests.support.consumers import CallbackConsumer, Consumer, PullConsumer, WorkerConsumer
from tests.support.faces import Face, having
from tests.support.servers import dedicated_server
from tests.support.waiting import eventually
from tests.support.web import Served
from tests.support.workers import Workers
from wheelq import AsyncAdmin, AsyncClient, RedisUnavailableError
from wheelq.testing import ServerBinary

pytestmark = pytest.mark.cluster_too

SHARDS = 2
JOBS = 3
PAUSED_WITHIN_S = 5.0


async def in_stream(client: AsyncClient, topic: str, group: str) -> tuple[int, int]:
    """(undelivered, in flight) of `group`."""
    stats = {g.name: g for g in await AsyncAdmin.of(client).groups(topic) or []}
    return (stats[group].ready, stats[group].in_flight) if group in stats else (0, 0)


async def enqueue_for(client: AsyncClient, topic: str, consumers: list[Consumer]) -> list[str]:
    """`JOBS` plain jobs and `JOBS` callback jobs (the deliverer's), due now."""
    plain = [await client.enqueue(topic, n) for n in range(JOBS)]
    calls = {}
    for c in consumers:
        calls.update(c.enqueue_options())
    hooked = [await client.enqueue(topic, n, **calls) for n in range(JOBS)] if calls else []
    return plain + hooked


def jobs_of(consumer: Consumer, ids: list[str]) -> list[str]:
    """The ids `consumer` must run: the callback jobs for the deliverer, the others else."""
    half = ids[:JOBS], ids[JOBS:]
    return half[1] if isinstance(consumer, CallbackConsumer) else half[0]


@pytest.mark.parametrize("target", ["topic", "groups"])
@pytest.mark.parametrize("face", having("pause"), indirect=True)
async def test_a_pause_set_through_each_face_holds_workers_of_both_handler_kinds_and_callbacks(
    face: Face,
    target: str,
    client: AsyncClient,
    pool: Workers,
    redis_async: redis.asyncio.Redis,
    receiver: ScriptedServer,
    topic: str,
) -> None:
    asynchronous = WorkerConsumer(pool, "async", sync=False)
    running: list[Consumer] = [
        asynchronous,
        WorkerConsumer(pool, "sync", sync=True),
        CallbackConsumer(redis_async, topic, receiver),
    ]
    # Paused as groups: the sync worker's and the deliverer's, the async worker the witness
    # that the jobs were there to take (test_pause.py pauses an async worker's group).
    held = running if target == "topic" else running[1:]
    witness = None if target == "topic" else asynchronous
    try:
        for consumer in running:
            await consumer.start()
        if target == "topic":
            await face.pause(topic)
        for consumer in held if target == "groups" else []:
            await face.pause(topic, consumer.group)
        # Read back on the ready stream's groups (the callbacks group: the read-face rows).
        assert await face.held(topic, {"async", "sync"}) == {
            c.group for c in held if isinstance(c, WorkerConsumer)
        }

        async def all_paused() -> bool:
            return all([await c.paused() for c in held])

        try:
            await eventually(all_paused, timeout_s=PAUSED_WITHIN_S, what="every consumer paused")
        except AssertionError as exc:  # say which: a pause message missed, or slow
            late = [c.kind for c in held if not await c.paused()]
            raise AssertionError(f"{exc}; not paused yet: {late}") from None
        ids = await enqueue_for(client, topic, held)

        async def waiting() -> bool:
            return all([await in_stream(client, topic, c.group) == (JOBS, 0) for c in held]) and (
                witness is None or Counter(witness.handled) == Counter(ids[:JOBS])
            )

        await eventually(waiting, timeout_s=10, what="the jobs fired and waiting")
        assert {c.kind: c.handled for c in held} == {c.kind: [] for c in held}

        if target == "topic":
            await face.resume(topic)
        for consumer in held if target == "groups" else []:
            await face.resume(topic, consumer.group)

        async def each_ran_once() -> bool:
            return all(Counter(c.handled) == Counter(jobs_of(c, ids)) for c in held)

        await eventually(each_ran_once, timeout_s=10, what="each consumer ran its jobs once")
    finally:
        for consumer in running:
            await consumer.stop()


@pytest.mark.parametrize("target", ["topic", "group"])
async def test_a_pause_holds_an_http_pull_consumer(
    target: str, client: AsyncClient, admin: AsyncAdmin, served: Served, topic: str
) -> None:
    puller = PullConsumer(served, topic, "pull")
    await admin.create_group(topic, "pull")
    await admin.pause(topic, None if target == "topic" else "pull")
    ids = [await client.enqueue(topic, n) for n in range(JOBS)]

    async def fired() -> bool:
        return await in_stream(client, topic, "pull") == (JOBS, 0)

    await eventually(fired, timeout_s=10, what="the jobs fired")
    assert [j["id"] for j in await puller.pull_once(wait_ms=0)] == []
    assert await in_stream(client, topic, "pull") == (JOBS, 0)
    await admin.resume(topic, None if target == "topic" else "pull")

    async def pulled() -> bool:
        puller.ran += [j["id"] for j in await puller.pull_once(wait_ms=100)]
        return Counter(puller.handled) == Counter(ids)

    await eventually(pulled, timeout_s=10, what="the jobs pulled after resume")


@pytest.mark.parametrize(
    ("face", "stream"),
    [(name, "ready") for name in having("held")] + [(name, "callbacks") for name in having("held")],
    indirect=["face"],
)
async def test_a_pause_reads_the_same_through_every_face(
    face: Face,
    stream: str,
    client: AsyncClient,
    admin: AsyncAdmin,
    redis_async: redis.asyncio.Redis,
    receiver: ScriptedServer,
    topic: str,
) -> None:
    deliverer = CallbackConsumer(redis_async, topic, receiver)
    if stream == "callbacks":
        await deliverer.start()  # its group, on the callbacks stream
    g, h = ("callbacks", "h") if stream == "callbacks" else ("g", "h")
    try:
        for group in {g, h} - {"callbacks"}:
            await admin.create_group(topic, group)
        await admin.pause(topic, g)
        assert await face.held(topic, {g, h}) == {g}
        await admin.pause(topic)
        assert await face.held(topic, {g, h}) == {g, h}
        await admin.resume(topic)
        assert await face.held(topic, {g, h}) == set()
    finally:
        await deliverer.stop()


@pytest.mark.both_servers  # the server restarted (AOF)
async def test_a_pause_outlives_a_restart_of_the_server_and_of_its_worker(
    server_binary: ServerBinary, topic: str
) -> None:
    """A fault row, once per server kind, on a dedicated server of its own: the pause lives
    in Redis, so this row is about the server's persistence and the workers' reconnection,
    which a cluster does not change."""
    with dedicated_server(server_binary, appendonly=True) as server:
        async with AsyncClient.from_url(server.url) as client:
            admin = AsyncAdmin.of(client)
            await admin.create_topic(topic, SHARDS)
            pool = Workers(
                server.url, topic, {"visibility_timeout_ms": 1000, "claim_interval_ms": 100}
            )
            paused = WorkerConsumer(pool, "held", sync=True)
            witness = WorkerConsumer(pool, "witness", sync=False)
            try:
                await paused.start()
                await witness.start()
                await admin.pause(topic, "held")
                await eventually(paused.paused, timeout_s=PAUSED_WITHIN_S, what="paused")
                server.restart()
                ids: list[str] = []

                async def enqueued() -> bool:  # the client's first call may meet a closed socket
                    with contextlib.suppress(RedisUnavailableError):
                        while len(ids) < JOBS:
                            ids.append(await client.enqueue(topic, len(ids)))
                    return len(ids) == JOBS

                await eventually(enqueued, timeout_s=10, what="enqueued after the restart")

                async def witnessed() -> bool:
                    return Counter(witness.handled) == Counter(ids)

                await eventually(witnessed, timeout_s=15, what="the witness ran the jobs")
                await paused.stop()
                restarted = WorkerConsumer(pool, "held", sync=False)
                await restarted.start()
                assert await restarted.paused()
                assert paused.handled == [] and restarted.handled == []
                assert await in_stream(client, topic, "held") == (JOBS, 0)
                await admin.resume(topic, "held")

                async def ran() -> bool:
                    return Counter(restarted.handled) == Counter(ids)

                await eventually(ran, timeout_s=10, what="the jobs ran after resume")
            finally:
                await pool.close()
