"""Where callbacks are delivered (`wheelq.callbacks.delivery`): only topics that have had a
job with a callback get a deliverer, and only on their callbacks stream; `wheelq serve`
over hundreds of topics keeps answering and stops within its budget, and leaves nothing
behind that holds back a job's state or trimming.

Each test has a server of its own: `Deliveries` delivers for every topic of its server.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest
import redis
import redis.asyncio

from tests.support.callback_server import Reply, ScriptedServer
from tests.support.cli import start_wheelq
from tests.support.http import request
from tests.support.servers import dedicated_server, free_port
from tests.support.waiting import until
from wheelq import AsyncAdmin, AsyncClient, Callback, Job, JobState, Scheduler, Worker
from wheelq.callbacks.deliverer import Deliverer
from wheelq.callbacks.delivery import Deliveries
from wheelq.core.keys import CALLBACK_TOPICS_KEY, all_shards
from wheelq.core.settings import CallbackSettings
from wheelq.embedded import ServerBinary
from wheelq.testing import EmbeddedServer


@pytest.fixture
def own_server(server_binary: ServerBinary) -> Iterator[EmbeddedServer]:
    with dedicated_server(server_binary) as server:
        yield server


async def groups_by_stream(r: redis.asyncio.Redis, topics: list[str]) -> dict[str, set[str]]:
    """Stream key -> the names of its consumer groups, for every stream that exists."""
    out: dict[str, set[str]] = {}
    for topic in topics:
        for keys in all_shards(topic, 4):
            for key in (keys.ready, keys.callbacks):
                if await r.exists(key):
                    out[key] = {g["name"].decode() for g in await r.xinfo_groups(key)}
    return out


async def test_only_topics_with_callback_jobs_get_a_deliverer_and_only_on_their_own_stream(
    own_server: EmbeddedServer, receiver: ScriptedServer
) -> None:
    receiver.scripts["/hook"] = lambda n: Reply(200)
    topics = [f"t{i}" for i in range(20)]
    hooked = topics[:2]
    r = redis.asyncio.Redis.from_url(own_server.url)
    async with AsyncClient.from_url(own_server.url) as client:
        admin = AsyncAdmin.of(client)
        for topic in topics:
            await admin.create_topic(topic, 4)
            await client.enqueue(topic, "plain")
        sent = [
            await client.enqueue(t, "hooked", callback=Callback(receiver.url("/hook")))
            for t in hooked
        ]
        deliverer = Deliverer(CallbackSettings(), allow_private=True)
        deliveries = Deliveries(client.executor, deliverer, refresh_ms=50)
        await deliveries.start()
        try:
            await until(
                lambda: sorted(receiver.delivered()) == sorted(sent), timeout_s=20, what="both"
            )
            assert sorted(deliveries.workers) == hooked
        finally:
            await deliveries.stop()
        found = await groups_by_stream(r, topics)
        with_group = {key for key, groups in found.items() if "callbacks" in groups}
        assert with_group == {
            keys.callbacks for t in hooked for keys in all_shards(t, 4) if keys.callbacks in found
        }
        assert all(not key.endswith(":ready") for key in with_group)
    await r.aclose()


async def test_a_callback_topic_off_the_list_is_found_by_its_stream(
    own_server: EmbeddedServer, receiver: ScriptedServer
) -> None:
    """A producer that could not reach Redis to list its topic (its job went to the spool):
    the deliverer finds the topic by its callbacks stream, and lists it."""
    receiver.scripts["/hook"] = lambda n: Reply(200)
    r = redis.asyncio.Redis.from_url(own_server.url)
    async with AsyncClient.from_url(own_server.url) as client:
        admin = AsyncAdmin.of(client)
        await admin.create_topic("quiet", 4)
        sent = await client.enqueue("quiet", 1, callback=Callback(receiver.url("/hook")))
        await r.srem(CALLBACK_TOPICS_KEY, "quiet")
        deliverer = Deliverer(CallbackSettings(), allow_private=True)
        deliveries = Deliveries(client.executor, deliverer, refresh_ms=50, scan_ms=0)
        await deliveries.start()
        try:
            await until(lambda: receiver.delivered() == {sent: 1}, timeout_s=20, what="it")
        finally:
            await deliveries.stop()
        assert await r.sismember(CALLBACK_TOPICS_KEY, "quiet")
        assert (await client.get("quiet", sent)).state is JobState.SUCCEEDED
    await r.aclose()


async def test_serve_over_500_topics_answers_stops_in_budget_and_leaves_nothing_behind(
    own_server: EmbeddedServer, receiver: ScriptedServer
) -> None:
    receiver.scripts["/hook"] = lambda n: Reply(200)
    url = own_server.url
    plain = [f"p{i}" for i in range(500)]
    hooked = [f"h{i}" for i in range(20)]
    sync = redis.Redis.from_url(url)
    sync.hset("wheelq:topics", mapping={t: 4 for t in plain + hooked})
    done: list[str] = []

    async def handle(job: Job) -> None:
        done.append(job.id)

    async with AsyncClient.from_url(url) as client:
        for topic in hooked:
            await client.enqueue(topic, 1, callback=Callback(receiver.url("/hook")))
        work = [await client.enqueue("p0", i) for i in range(50)]
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = start_wheelq(
        "serve",
        "--redis-url",
        url,
        "--port",
        str(port),
        env={"WHEELQ_CALLBACKS_ALLOW_PRIVATE": "true"},
    )
    node = Scheduler.from_url(url, ["p0", *hooked])
    worker = Worker.from_url(url, "p0", handle, group="app")
    await node.start()
    await worker.start()
    try:
        await until(lambda: request("GET", f"{base}/readyz")[0] == 200, timeout_s=30, what="serve")
        await until(lambda: len(receiver.delivered()) == 20, timeout_s=30, what="20 callbacks")

        def call(i: int) -> int:
            if i % 2:
                return request("GET", f"{base}/readyz")[0]
            return request("POST", f"{base}/v1/topics/p{i}/jobs", {"payload": i})[0]

        answers = await asyncio.gather(*(asyncio.to_thread(call, i) for i in range(400)))
        assert sorted(set(answers)) == [200, 201], answers
        await until(lambda: set(work) <= set(done), timeout_s=30, what="the worker's jobs")
    finally:
        await worker.stop()
        await node.stop()
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        took_s = time.monotonic() - started
    assert proc.returncode == 0, err
    assert took_s < 10, f"serve took {took_s:.1f} s to stop over 500 topics (budget 5 s)"
    # Nothing left that holds a job's state or trimming: p0's stream has its own group only.
    for keys in all_shards("p0", 4):
        names = (
            {g["name"] for g in sync.xinfo_groups(keys.ready)} if sync.exists(keys.ready) else set()
        )
        assert names <= {b"app"}
    async with AsyncClient.from_url(url) as client:
        assert {(await client.get("p0", i)).state for i in work} == {JobState.SUCCEEDED}
    assert not any(sync.exists(keys.callbacks) for t in plain for keys in all_shards(t, 4))
    sync.close()
