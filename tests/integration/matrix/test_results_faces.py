"""Results, every face: what a worker's handler (async or ``def``) returned, or what the
callback deliverer recorded, read through each face (library sync and async, CLI, HTTP,
console); after a retry, after a take-over (the first worker killed -9, its entry reclaimed
after the visibility timeout) and after a restart of the server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis.asyncio

from tests.support import consumers
from tests.support.callback_server import ScriptedServer
from tests.support.consumers import WorkerConsumer
from tests.support.faces import Face, having, opened
from tests.support.servers import dedicated_server
from tests.support.waiting import eventually, until
from tests.support.web import Served
from tests.support.worker_proc import WorkerProcess
from tests.support.workers import Workers
from wheelq import AsyncAdmin, AsyncClient, JobState, UnknownGroupError
from wheelq.testing import ServerBinary

pytestmark = pytest.mark.cluster_too

SHARDS = 2
SINGLE_ONLY = (
    "a fault row, once per server kind: a take-over is a claim within one shard, which a "
    "cluster does not change"
)


def expected(kind: str, payload: Any) -> Any:
    """What the result is: the handler's `outcome`, or the receiver's status and answer."""
    if kind == "callbacks":
        return {"status": 200, "body": "delivered"}
    return {"echo": payload}


@pytest.mark.parametrize("kind", ["async-worker", "sync-worker", "callbacks"])
@pytest.mark.parametrize("face", having("result"), indirect=True)
async def test_a_result_reads_the_same_through_every_face(
    face: Face,
    kind: str,
    client: AsyncClient,
    pool: Workers,
    redis_async: redis.asyncio.Redis,
    receiver: ScriptedServer,
    topic: str,
) -> None:
    consumer = consumers.make(kind, pool, redis_async, topic, receiver)
    await consumer.start()
    try:
        payload = {"n": 7, "kind": kind}
        job_id = await client.enqueue(topic, payload, **consumer.enqueue_options())
        got = await client.result(topic, job_id, group=consumer.group, timeout=10)
        assert got == expected(kind, payload)
        assert await face.result(topic, job_id, consumer.group) == got
    finally:
        await consumer.stop()


@pytest.mark.parametrize("kind", ["async-worker", "sync-worker"])
async def test_the_result_of_a_job_that_succeeded_on_a_retry(
    kind: str, client: AsyncClient, pool: Workers, topic: str, redis_url: str
) -> None:
    consumer = WorkerConsumer(pool, "default", sync=kind == "sync-worker")
    await consumer.start()
    try:
        job_id = await client.enqueue(topic, {"fail": 1}, max_attempts=3)

        async def retrying() -> bool:
            return (await client.get(topic, job_id)).state is JobState.RETRYING

        await eventually(retrying, timeout_s=10, what="attempt 1 failed, a retry waiting")
        # Due at once (no scheduler here): the retry's attempt 2 runs and succeeds.
        assert await client.reschedule(topic, job_id, delay=0)
        got = await client.result(topic, job_id, timeout=5)
        assert got == {"echo": {"fail": 1}}
        async with opened("async", redis_url) as face:
            assert await face.result(topic, job_id) == got
        assert (await client.get(topic, job_id)).attempt == 2
    finally:
        await consumer.stop()


async def test_a_result_written_by_the_worker_that_took_over_from_one_killed(
    deployment: str, client: AsyncClient, pool: Workers, topic: str, redis_url: str, tmp_path: Path
) -> None:
    if deployment != "single":
        pytest.skip(SINGLE_ONLY)
    doomed = WorkerProcess(
        redis_url, topic, "doomed", tmp_path, {"poison": "x"},
        {"visibility_timeout_ms": 500, "claim_interval_ms": 100},
    )  # fmt: skip
    try:
        job_id = await client.enqueue(topic, "x")
        await until(lambda: not doomed.alive(), timeout_s=20, what="the worker killed itself")
        heir = WorkerConsumer(pool, "default", sync=True, visibility_timeout_ms=500)
        await heir.start()
        got = await client.result(topic, job_id, timeout=10)
        assert got == {"echo": "x"} and heir.handled == [job_id]
        assert doomed.jobs("start") == [job_id]  # it ran there first, then died
        await heir.stop()
    finally:
        doomed.finish()


@pytest.mark.both_servers  # the server restarted (AOF)
async def test_a_result_outlives_a_restart_of_the_server(
    server_binary: ServerBinary, topic: str
) -> None:
    """A fault row, once per server kind, on a dedicated server: results live in Redis."""
    with dedicated_server(server_binary, appendonly=True) as server:
        async with AsyncClient.from_url(server.url) as client:
            admin = AsyncAdmin.of(client)
            await admin.create_topic(topic, SHARDS)
            pool = Workers(server.url, topic, {"visibility_timeout_ms": 1000})
            try:
                consumer = WorkerConsumer(pool, "default", sync=False)
                await consumer.start()
                job_id = await client.enqueue(topic, "kept")
                assert await client.result(topic, job_id, timeout=10) == {"echo": "kept"}
            finally:
                await pool.close()
            server.restart()
        async with opened("async", server.url) as face:
            assert await face.result(topic, job_id) == {"echo": "kept"}


@pytest.mark.parametrize("face", ["async", "http"], indirect=True)
async def test_a_result_for_a_group_that_does_not_exist_is_refused_at_once(
    face: Face, face_app: Served | None, client: AsyncClient, topic: str
) -> None:
    job_id = await client.enqueue(topic, 1)
    if face_app is None:
        with pytest.raises(UnknownGroupError):
            await client.result(topic, job_id, group="nope", timeout=1)
    else:
        path = f"/v1/topics/{topic}/jobs/{job_id}/result"
        status, body, _ = await face_app.call(
            "GET", path, params={"group": "nope", "wait_ms": "1000"}
        )
        assert status == 404, body
