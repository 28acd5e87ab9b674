"""Schedules, every face: a schedule paused and resumed through each face (library sync and
async, CLI, HTTP, console form) reads the same through each; the scheduler honours the pause
(no run fires while a witness job, due a second later, does) and runs it again on resume,
for workers with async and ``def`` handlers; out-of-range times are refused in every face.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.integration import test_worker
from tests.support.consumers import WorkerConsumer
from tests.support.faces import Face, having
from tests.support.waiting import until
from tests.support.web import Served
from tests.support.workers import Workers
from wheelq import AsyncAdmin, AsyncClient, InvalidArgumentError, Scheduler

pytestmark = pytest.mark.cluster_too

SHARDS = test_worker.SHARDS  # the scheduler fixture waits for it to lead that many shards
scheduler = test_worker.scheduler
HOUR_MS = 3_600_000
FAR = "9999-12-31T23:59:59Z"


@pytest.mark.parametrize("face", having("pause_schedule"), indirect=True)
async def test_a_schedule_paused_and_resumed_through_every_face_reads_the_same_in_each(
    face: Face, client: AsyncClient, admin: AsyncAdmin, topic: str
) -> None:
    await admin.schedule("hourly", topic, {"n": 1}, every_ms=HOUR_MS)
    await face.pause_schedule("hourly", topic)
    found = await admin.get_schedule("hourly", topic)
    assert found is not None and found.paused
    assert await face.schedule_paused("hourly", topic)
    await face.resume_schedule("hourly", topic)
    assert not await face.schedule_paused("hourly", topic)
    found = await admin.get_schedule("hourly", topic)
    assert found is not None and not found.paused


@pytest.mark.parametrize("kind", ["async-worker", "sync-worker"])
async def test_a_paused_schedule_fires_nothing_and_runs_again_on_resume(
    kind: str,
    client: AsyncClient,
    admin: AsyncAdmin,
    pool: Workers,
    scheduler: Scheduler,
    topic: str,
) -> None:
    consumer = WorkerConsumer(pool, "default", sync=kind == "sync-worker")
    await consumer.start()
    try:
        await admin.schedule("often", topic, "run", every_ms=200)
        await until(lambda: len(consumer.handled) >= 2, timeout_s=10, what="two runs")
        await admin.pause_schedule("often", topic)
        ran = len(consumer.handled)
        witness = await client.enqueue(topic, "witness", delay=timedelta(seconds=1))
        await until(lambda: witness in consumer.handled, timeout_s=10, what="the witness ran")
        # A run already fired when the pause came may still start: at most one.
        assert len([j for j in consumer.handled if j != witness]) <= ran + 1
        await admin.resume_schedule("often", topic)
        before = len(consumer.handled)
        await until(lambda: len(consumer.handled) >= before + 2, timeout_s=10, what="runs again")
    finally:
        await consumer.stop()


@pytest.mark.parametrize("face", ["async", "http"], indirect=True)
async def test_an_out_of_range_schedule_time_is_refused_in_every_face(
    face: Face, face_app: Served | None, client: AsyncClient, admin: AsyncAdmin, topic: str
) -> None:
    if face_app is None:
        with pytest.raises(InvalidArgumentError):
            await admin.schedule("far", topic, 1, every_ms=1000, start=FAR)
    else:
        body: dict[str, Any] = {"payload": 1, "every_ms": 1000, "start": FAR}
        status, answer, _ = await face_app.call("PUT", f"/v1/topics/{topic}/schedules/far", body)
        assert status == 422, answer
    assert await admin.get_schedule("far", topic) is None
