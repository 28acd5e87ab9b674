"""Debounce on a real server: `enqueue(..., job_id=k, debounce_ms=t, max_wait_ms=m)` moves the
job's due time back on each call, to t after the latest, but never past m after the first
call of the burst; the job fires once, with the latest call's payload."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
import redis

from tests.support.waiting import eventually
from wheelq import AsyncAdmin, AsyncClient, Client, Job, Scheduler, Worker
from wheelq.core.history import JobState
from wheelq.errors import InvalidArgumentError


def redis_ms(r: redis.Redis) -> int:
    sec, usec = r.time()
    return int(sec) * 1000 + int(usec) // 1000


def test_each_call_moves_the_due_time_to_debounce_after_it(
    redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    with Client.from_url(redis_url) as c:
        dues = []
        for n in range(5):
            before = redis_ms(redis_sync)
            c.enqueue(topic, n, job_id="k", debounce_ms=60_000)
            after = redis_ms(redis_sync)
            info = c.get(topic, "k")
            assert info.state is JobState.PENDING and info.payload == n
            assert before + 60_000 <= info.due_ms <= after + 60_000  # type: ignore[operator]
            dues.append(info.due_ms)
        assert dues == sorted(dues)


def test_max_wait_caps_the_due_time_at_the_first_call_plus_max_wait(
    redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    with Client.from_url(redis_url) as c:
        first = redis_ms(redis_sync)
        c.enqueue(topic, 0, job_id="k", debounce_ms=30_000, max_wait_ms=30_000)
        cap = c.get(topic, "k").due_ms
        assert cap is not None and first + 30_000 <= cap
        for n in range(1, 4):
            c.enqueue(topic, n, job_id="k", debounce_ms=30_000, max_wait_ms=30_000)
            info = c.get(topic, "k")
            assert (info.due_ms, info.payload) == (cap, n)
        # A new burst after the job is gone (cancelled here; fired alike) starts a new cap.
        assert c.cancel(topic, "k")
        c.enqueue(topic, 9, job_id="k", debounce_ms=60_000, max_wait_ms=90_000)
        assert c.get(topic, "k").due_ms >= redis_ms(redis_sync) + 59_000  # type: ignore[operator]


def test_debounce_and_max_wait_take_seconds_or_a_timedelta(
    redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    with Client.from_url(redis_url) as c:
        first = redis_ms(redis_sync)
        c.enqueue(topic, 0, job_id="k", debounce=60, max_wait=timedelta(seconds=90))
        after_first = redis_ms(redis_sync)
        due = c.get(topic, "k").due_ms
        assert due is not None and first + 60_000 <= due <= after_first + 60_000
        c.enqueue(topic, 1, job_id="k", debounce=timedelta(seconds=80), max_wait_ms=90_000)
        due = c.get(topic, "k").due_ms
        assert due is not None and first + 80_000 <= due <= redis_ms(redis_sync) + 80_000
        c.enqueue(topic, 2, job_id="k", debounce=75.5, max_wait=90)  # a float: whole ms
        due = c.get(topic, "k").due_ms
        assert due is not None and first + 75_500 <= due <= redis_ms(redis_sync) + 75_500


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"debounce_ms": 100}, "job_id"),
        ({"job_id": "k", "debounce_ms": 0}, "debounce_ms"),
        ({"job_id": "k", "debounce_ms": 1.5}, "debounce_ms"),
        ({"job_id": "k", "debounce_ms": True}, "debounce_ms"),
        ({"job_id": "k", "debounce_ms": 100, "max_wait_ms": 99}, "max_wait_ms"),
        ({"job_id": "k", "debounce_ms": 100, "delay": 5}, "delay"),
        # the seconds spellings: one per field, and seconds or a timedelta
        ({"job_id": "k", "debounce": 0.1, "debounce_ms": 100}, "debounce"),
        ({"job_id": "k", "debounce": 1, "max_wait": 2, "max_wait_ms": 2000}, "max_wait"),
        ({"job_id": "k", "debounce": float("nan")}, "debounce"),
        ({"job_id": "k", "debounce": -1}, "debounce"),
        ({"job_id": "k", "debounce": True}, "debounce"),
        ({"job_id": "k", "debounce": "5"}, "debounce"),
        ({"job_id": "k", "debounce": 1, "max_wait": timedelta(seconds=-1)}, "max_wait"),
        ({"debounce": 1}, "job_id"),
    ],
)
def test_bad_debounce_arguments_are_refused_naming_them_and_write_nothing(
    redis_url: str, topic: str, kwargs: dict, parameter: str
) -> None:
    with Client.from_url(redis_url) as c:
        with pytest.raises(InvalidArgumentError) as info:
            c.enqueue(topic, 1, **kwargs)
        assert info.value.parameter == parameter
        assert c.get(topic, "k").state is JobState.UNKNOWN


@pytest.fixture
async def scheduler(redis_url: str, topic: str) -> AsyncIterator[Scheduler]:
    node = Scheduler.from_url(redis_url, topic, preload_interval_ms=100)
    await node.start()
    yield node
    await node.stop()


async def test_a_burst_of_calls_fires_once_after_the_last_with_its_payload(
    redis_url: str, redis_sync: redis.Redis, topic: str, scheduler: Scheduler
) -> None:
    runs: list[Job] = []

    async def record(job: Job) -> None:
        runs.append(job)

    worker = Worker.from_url(redis_url, topic, record)
    await worker.start()
    try:
        async with AsyncClient.from_url(redis_url) as c:
            for n in range(20):
                last_call = redis_ms(redis_sync)  # at or before the call's own TIME
                await c.enqueue(topic, n, job_id="k", debounce_ms=300)
            await eventually(lambda: _ran(runs), timeout_s=10, what="the debounced job to run")
            # Another job after it, so a second firing of "k" would have had time to show.
            await c.enqueue(topic, "marker", job_id="marker", delay=0.5)
            await eventually(
                lambda: _ran(runs, "marker"), timeout_s=10, what="the marker job to run"
            )
    finally:
        await worker.stop()
    fired = [j for j in runs if j.id == "k"]
    assert len(fired) == 1 and fired[0].payload == 19
    assert fired[0].due_ms >= last_call + 300  # due 300 ms after the last call
    assert fired[0].fired_ms >= fired[0].due_ms  # and not early


async def _ran(runs: list[Job], job_id: str = "k") -> bool:
    return any(j.id == job_id for j in runs)


async def test_calls_that_go_on_fire_at_max_wait_after_the_first(
    redis_url: str, redis_sync: redis.Redis, topic: str, scheduler: Scheduler
) -> None:
    runs: list[Job] = []

    async def record(job: Job) -> None:
        runs.append(job)

    worker = Worker.from_url(redis_url, topic, record)
    await worker.start()
    try:
        async with AsyncClient.from_url(redis_url) as c:
            admin = AsyncAdmin.of(c)
            await admin.create_topic(topic)
            # A call every 20 ms for 1 s: never 300 ms apart, so only the max wait fires it.
            for n in range(50):
                before = redis_ms(redis_sync)
                await c.enqueue(topic, n, job_id="k", debounce_ms=300, max_wait_ms=400)
                if n == 0:
                    first, after_first = before, redis_ms(redis_sync)
                await asyncio.sleep(0.02)  # the caller's pace
            last = redis_ms(redis_sync)
            await eventually(lambda: _ran(runs), timeout_s=10, what="the first firing")
    finally:
        await worker.stop()
    fired = [j for j in runs if j.id == "k"]
    assert first + 400 <= fired[0].due_ms <= after_first + 400  # the first call's TIME + 400
    assert fired[0].fired_ms < last  # it fired while the calls went on
    assert fired[0].payload < 49  # the payload of a call before it fired, not the last
