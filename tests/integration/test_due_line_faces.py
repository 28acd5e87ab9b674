"""The due line's order as each face that starts jobs sees it (docs/architecture.md, "The due
line"): a sync handler, an async handler, an HTTP pull consumer and a callback receiver each
see priority-9 jobs pass a priority-0 backlog, and a key due during another key's flood wait
about one turn, not the flood. The order is decided where jobs enter the stream, so every
face that reads the stream in order starts them in it; test_due_line.py holds the rules'
own tests, test_due_line_faults.py the order through kill -9s."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import pytest

from tests.integration import test_backpressure
from tests.support.callback_server import Reply, ScriptedServer
from tests.support.waiting import eventually
from tests.support.web import serving
from wheelq import AsyncAdmin, AsyncClient, EnqueueItem, Job, Scheduler, Worker
from wheelq.callbacks.deliverer import Deliverer
from wheelq.callbacks.delivery import delivery_worker
from wheelq.core.settings import CallbackSettings, WorkerSettings

# test_backpressure's: a scheduler node leading the topic, stopped at teardown
scheduler = test_backpressure.scheduler

FACES = ["sync-handler", "async-handler", "pull", "callback"]
WORK_S = 0.002
"""Each job's work on every face: slower than the jobs come due, so a backlog forms."""

Started = list[tuple[str, int]]
"""(key or "", priority) of each job, in the order the face started them."""


@asynccontextmanager
async def consuming(
    face: str, redis_url: str, topic: str, receiver: ScriptedServer, started: Started
) -> AsyncIterator[dict[str, Any]]:
    """The face started on `topic`, one job at a time, appending to `started` as each job
    starts (its key and priority as the face shows them, checked against the payload's copy);
    yields the options each job is enqueued with (a callback's URL)."""

    def note(key: str | None, priority: int, payload: dict[str, Any]) -> None:
        started.append(shown(key, priority, payload))

    async with AsyncExitStack() as stack:
        if face in ("sync-handler", "async-handler"):

            def sync_handler(job: Job) -> None:
                note(job.key, job.priority, job.payload)
                time.sleep(WORK_S)

            async def async_handler(job: Job) -> None:
                note(job.key, job.priority, job.payload)
                await asyncio.sleep(WORK_S)

            handler: Callable[[Job], Any] = (
                sync_handler if face == "sync-handler" else async_handler
            )
            worker = Worker.from_url(redis_url, topic, handler, concurrency=1)
            await worker.start()
            stack.push_async_callback(worker.stop)
            yield {}
        elif face == "pull":
            served = await stack.enter_async_context(serving(redis_url))
            path = f"/v1/topics/{topic}/groups/pullers"
            status, body, _ = await served.call(
                "POST", f"/v1/topics/{topic}/groups", {"name": "pullers"}
            )
            assert status == 201, body
            task = asyncio.create_task(_pull(served.call, path, note))
            stack.callback(task.cancel)
            yield {}
        else:

            def answer(n: int) -> Reply:
                return Reply(204, delay_s=WORK_S)

            receiver.scripts["/hook"] = answer
            deliverer = Deliverer(CallbackSettings(concurrency=1), allow_private=True)
            stack.push_async_callback(deliverer.aclose)
            client = AsyncClient.from_url(redis_url)
            stack.push_async_callback(client.aclose)
            worker = delivery_worker(client.executor, topic, deliverer, WorkerSettings())
            await worker.start()
            stack.push_async_callback(worker.stop)
            yield {"callback": receiver.url("/hook")}


async def _pull(call: Any, path: str, note: Callable[[str | None, int, Any], None]) -> None:
    """An HTTP pull consumer: one job a pull, its work, then its ack."""
    while True:
        status, body, _ = await call("POST", f"{path}/pull", {"max": 1, "wait_ms": 100})
        assert status == 200, body
        for job in body["jobs"]:
            note(job["key"], job["priority"], job["payload"])
            await asyncio.sleep(WORK_S)
            status, acked, _ = await call("POST", f"{path}/ack", {"receipts": [job["receipt"]]})
            assert status == 200 and acked["acked"] == 1, acked


async def each_started(started: Started, receiver: ScriptedServer, face: str, jobs: int) -> None:
    """Wait until the face has started `jobs` jobs."""

    async def all_started() -> bool:
        return len(callback_keys(started, receiver, face)) >= jobs

    await eventually(all_started, timeout_s=60, what="every job to start")


def callback_keys(started: Started, receiver: ScriptedServer, face: str) -> Started:
    """What the callback face started: the receiver's hits, in arrival order."""
    if face != "callback":
        return started
    return [shown(h.json["key"], h.json["priority"], h.json["payload"]) for h in receiver.hits]


def shown(key: str | None, priority: int, payload: dict[str, Any]) -> tuple[str, int]:
    """A job's key ('' for none) and priority as a face shows them, which must be those it
    was enqueued with (its payload carries a copy)."""
    assert (key or "", priority) == (payload["key"], payload["priority"]), (key, priority, payload)
    return key or "", priority


@pytest.mark.cluster_too
@pytest.mark.parametrize("face", FACES)
async def test_priority_9_due_during_a_backlog_passes_it_on_every_face(
    redis_url: str, topic: str, scheduler: Scheduler, receiver: ScriptedServer, face: str
) -> None:
    """300 jobs of priority 0 due at once, then 10 of priority 9 due 50 ms later: each face
    starts all ten while most of the backlog still waits (without priorities, after it)."""
    started: Started = []
    async with AsyncClient.from_url(redis_url) as c:
        await AsyncAdmin.of(c).create_topic(topic, 1)
        async with consuming(face, redis_url, topic, receiver, started) as options:
            backlog = [
                EnqueueItem(payload={"key": "", "priority": 0}, delay=0.3, priority=0, **options)
                for _ in range(300)
            ]
            urgent = [
                EnqueueItem(payload={"key": "", "priority": 9}, delay=0.35, priority=9, **options)
                for _ in range(10)
            ]
            ids = await c.enqueue_many(topic, backlog) + await c.enqueue_many(topic, urgent)
            await each_started(started, receiver, face, len(ids))
    order = callback_keys(started, receiver, face)
    assert len(order) == len(ids), "a job started twice"
    last_9 = max(i for i, (_, p) in enumerate(order) if p == 9)
    assert last_9 < 150, f"the tenth priority-9 job started {last_9}th: behind the backlog"


@pytest.mark.cluster_too
@pytest.mark.parametrize("face", FACES)
async def test_a_key_due_during_a_flood_waits_about_one_turn_on_every_face(
    redis_url: str, topic: str, scheduler: Scheduler, receiver: ScriptedServer, face: str
) -> None:
    """One key's 400 jobs due at once, then another key's 10 due 50 ms later, on a topic with
    fair shares: each face starts the ten in turns with the flood (without fair shares,
    after all 400)."""
    started: Started = []
    async with AsyncClient.from_url(redis_url) as c:
        admin = AsyncAdmin.of(c)
        await admin.create_topic(topic, 1)
        await admin.set_limits(topic, fair=True)
        async with consuming(face, redis_url, topic, receiver, started) as options:
            flood = [
                EnqueueItem(payload={"key": "a", "priority": 5}, delay=0.3, key="a", **options)
                for _ in range(400)
            ]
            other = [
                EnqueueItem(payload={"key": "b", "priority": 5}, delay=0.35, key="b", **options)
                for _ in range(10)
            ]
            ids = await c.enqueue_many(topic, flood) + await c.enqueue_many(topic, other)
            await each_started(started, receiver, face, len(ids))
    order = callback_keys(started, receiver, face)
    assert len(order) == len(ids), "a job started twice"
    last_b = max(i for i, (key, _) in enumerate(order) if key == "b")
    assert last_b < 200, f"the tenth 'b' job started {last_b}th: behind the flood"
