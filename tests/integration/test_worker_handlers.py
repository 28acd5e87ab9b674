"""Workers against a real server, on what handlers do to them (issue 8): sync handlers that
hang past `handler_timeout_ms` (the pool replaces their threads, later jobs are not charged
a timeout), handlers that raise SystemExit or KeyboardInterrupt, handlers refused at
construction or failed for returning a generator, and threads started on demand.

Hanging sync handlers wait on a `threading.Event` the test sets at its end.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio

from tests.integration import test_worker
from tests.integration.test_worker import FAST, Workers, holds, pending
from tests.support.waiting import eventually
from wheelq import AsyncAdmin, AsyncClient, EnqueueItem, InvalidHandlerError, Job, Worker
from wheelq.worker.in_flight import InFlightSet

pytestmark = pytest.mark.cluster_too  # on the single server and on the cluster

# test_worker.py's fixture of workers stopped at teardown (`client` is the shared topic client).
workers = test_worker.workers


def handler_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("wheelq-handler")}


# --- defect 1: hanging sync handlers and handler_timeout_ms ---------------------------------


async def test_jobs_after_hanging_sync_handlers_run_instead_of_timing_out_in_the_queue(
    client: AsyncClient,
    admin: AsyncAdmin,
    workers: Workers,
    redis_async: redis.asyncio.Redis,
    topic: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The issue's scenario: concurrency 2, handler_timeout_ms 500, two jobs that hang, then
    five normal ones. The five used to wait behind the stuck threads and be dead-lettered as
    timeouts without ever starting."""
    before = handler_threads()
    release = threading.Event()
    hanging: list[str] = []
    ran: list[str] = []
    lock = threading.Lock()

    def handler(job: Job) -> None:
        with lock:
            (hanging if job.payload == "hang" else ran).append(job.id)
        if job.payload == "hang":
            release.wait(timeout=60)

    worker = await workers.start(handler, concurrency=2, handler_timeout_ms=500)
    try:
        hang = [await client.enqueue(topic, "hang", max_attempts=1) for _ in range(2)]
        await eventually(holds(lambda: len(hanging) == 2), timeout_s=10, what="2 hung handlers")
        normal = [await client.enqueue(topic, i, max_attempts=1) for i in range(5)]

        await eventually(
            holds(lambda: worker.status()["acked"] == 5), timeout_s=10, what="the 5 normal jobs"
        )

        async def both_dead() -> list[Any] | None:
            letters = await admin.dead_letters(topic)
            return letters if len(letters) >= 2 else None

        dead = await eventually(both_dead, timeout_s=10, what="the hung jobs' dead letters")
        assert sorted(ran) == sorted(normal)
        assert sorted(d.job_id or "" for d in dead) == sorted(hang), "a normal job timed out"
        assert all("HandlerTimeoutError" in d.error for d in dead)
        status = worker.status()
        assert (status["handled"], status["failed"], status["wedged"]) == (5, 2, 2)
        # Threads start as needed: one replacement may have run all five normal jobs.
        new_threads = len(handler_threads() - before)
        assert 3 <= new_threads <= 4, "2 wedged threads and 1 or 2 replacements"
        assert "2 handler threads wedged" in caplog.text
    finally:
        release.set()
    await eventually(
        holds(lambda: worker.status()["wedged"] == 0 and len(handler_threads() - before) == 2),
        timeout_s=10,
        what="the wedged threads to return and retire",
    )
    assert await pending(redis_async, topic) == 0


async def test_a_worker_starts_handler_threads_on_demand(
    client: AsyncClient, workers: Workers, topic: str
) -> None:
    before = handler_threads()
    worker = await workers.start(lambda job: None, concurrency=10_000)
    await client.enqueue(topic, "one")
    await eventually(holds(lambda: worker.status()["acked"] == 1), timeout_s=10, what="the job")
    assert len(handler_threads() - before) == 1


# --- defect 4: SystemExit and KeyboardInterrupt from a handler ------------------------------


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("raised", [SystemExit, KeyboardInterrupt], ids=["exit", "interrupt"])
async def test_a_handler_raising_systemexit_or_keyboardinterrupt_fails_that_attempt(
    client: AsyncClient,
    admin: AsyncAdmin,
    workers: Workers,
    redis_async: redis.asyncio.Redis,
    topic: str,
    kind: str,
    raised: type[BaseException],
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[Any] = []

    def body(job: Job) -> None:
        seen.append(job.payload)
        if job.payload == "exit":
            raise raised(3)

    async def async_body(job: Job) -> None:
        body(job)

    worker = await workers.start(body if kind == "sync" else async_body)
    job_id = await client.enqueue(topic, "exit", max_attempts=1)
    (letter,) = await eventually(
        lambda: admin.dead_letters(topic), timeout_s=10, what="the job's dead letter"
    )
    assert letter.job_id == job_id and letter.reason == "failed"
    assert f"HandlerExitError: handler raised {raised.__name__}(3)" in letter.error

    after = await client.enqueue(topic, "fine")
    await eventually(holds(lambda: worker.status()["acked"] == 1), timeout_s=10, what="the next")
    status = worker.status()
    assert (status["failed"], status["handled"], status["running"]) == (1, 1, 0)
    assert seen == ["exit", "fine"] and after
    assert f"handler raised {raised.__name__}(3) on job {job_id}" in caplog.text
    assert "never retrieved" not in caplog.text
    assert await pending(redis_async, topic) == 0


# --- defect 5: handlers refused when the worker is made ----------------------------------------


async def _agen(job: Job) -> AsyncIterator[None]:
    yield None


async def test_an_async_generator_handler_is_refused_when_the_worker_is_made(
    redis_url: str, redis_async: redis.asyncio.Redis, topic: str
) -> None:
    with pytest.raises(InvalidHandlerError, match="async generator function") as caught:
        Worker.from_url(redis_url, topic, _agen, **FAST)
    assert caught.value.parameter == "handler"
    assert await redis_async.keys(f"*{topic}*") == []


async def test_a_handler_returning_a_generator_fails_its_attempt(
    client: AsyncClient, admin: AsyncAdmin, workers: Workers, topic: str
) -> None:
    def handler(job: Job) -> Any:
        return _agen(job)

    await workers.start(handler)
    await client.enqueue(topic, "x", max_attempts=1)
    (letter,) = await eventually(
        lambda: admin.dead_letters(topic), timeout_s=10, what="the job's dead letter"
    )
    assert "InvalidHandlerError" in letter.error and "its body never ran" in letter.error


# --- sync handlers: the read-ahead queued to the threads (wheelq.worker.in_flight) ----------


async def test_a_stop_hands_on_the_jobs_queued_to_sync_threads_and_they_run_once(
    client: AsyncClient, workers: Workers, redis_async: redis.asyncio.Redis
) -> None:
    gate = threading.Event()
    ran_in_a: list[Any] = []

    def handler(job: Job) -> None:
        ran_in_a.append(job.payload)
        if job.payload != "warm-up":
            gate.wait(timeout=30)  # the first two hold both threads; the rest queue behind

    a = await workers.start(handler, concurrency=2, read_ahead_ms=1000)
    try:
        await client.enqueue_many(a.topic, [EnqueueItem(payload="warm-up") for _ in range(20)])
        await eventually(holds(lambda: a.status()["acked"] == 20), timeout_s=10, what="warm-up")
        assert a.status()["read_ahead"] > 50, "fast jobs: the read-ahead is queued to threads"
        ids = await client.enqueue_many(a.topic, [EnqueueItem(payload=n) for n in range(50)])
        await eventually(holds(lambda: a.status()["held"] == 50), timeout_s=10, what="all held")
        await eventually(holds(lambda: len(ran_in_a) == 22), timeout_s=10, what="2 running")

        report = await a.stop(grace_ms=0)
    finally:
        gate.set()  # the two running finish in their threads, their outcomes dropped
    assert (report.abandoned, report.handed_on) == (50, 50)
    ran_later: list[Any] = []
    b = await workers.start(lambda job: ran_later.append(job.payload), concurrency=10)
    await eventually(holds(lambda: b.status()["acked"] == 50), timeout_s=10, what="b runs all")
    gated_in_a = [p for p in ran_in_a if p != "warm-up"]
    assert len(gated_in_a) == 2, "a job cancelled before a thread took it up ran anyway"
    assert sorted(ran_later) == list(range(50)), "every job handed on ran once more"
    assert await pending(redis_async, a.topic) == 0
    assert len(ids) == 50


# --- an error of the worker's own, not a handler's ------------------------------------------


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_an_error_of_the_workers_own_is_counted_and_its_job_runs_again(
    kind: str,
    client: AsyncClient,
    workers: Workers,
    redis_async: redis.asyncio.Redis,
    topic: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A run that raises past the handler (here: settling its outcome, the first time) was
    logged and nothing else (a sync handler's, by asyncio as a callback's error): now
    `status()` counts it, and the entry, left pending, is taken over after the visibility
    timeout and runs again."""
    settle = InFlightSet._settle
    failed: list[str] = []

    def settle_failing_once(self: InFlightSet, held: Any, *args: Any) -> bool:
        if not failed:
            failed.append(held.job.id)
            raise RuntimeError("a bug of the worker's own")
        return settle(self, held, *args)

    monkeypatch.setattr(InFlightSet, "_settle", settle_failing_once)
    ran: list[str] = []

    async def async_handler(job: Job) -> None:
        ran.append(job.id)

    def sync_handler(job: Job) -> None:
        ran.append(job.id)

    worker = await workers.start(async_handler if kind == "async" else sync_handler)
    job_id = await client.enqueue(topic, "once")
    await eventually(
        holds(lambda: worker.status()["acked"] == 1), timeout_s=10, what="run again, acked"
    )
    assert (failed, ran) == ([job_id], [job_id, job_id])
    assert worker.status()["internal_errors"] == 1
    assert "a bug of the worker's own" in caplog.text
    assert await pending(redis_async, topic) == 0
