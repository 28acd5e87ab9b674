"""`wheelq.current_job()` as the handler runner sets it (no Redis): the running job in a sync
handler (on its thread), an async one (in its task) and a sync wrapper returning a coroutine,
traced or not, with a time limit or without; each of several concurrent runs sees its own job;
a handler thread keeps no job after its run; outside a run it raises `NoCurrentJobError`.
Threads and tasks are coordinated with events, never sleeps. (docs/guides/tasks.md, "The
job's context"; the worker against Redis: tests/integration/test_job_context.py.)
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

import wheelq
from tests.support.tracing import Spans
from wheelq import HandlerTimeoutError, Job, NoCurrentJobError, current_job, outbox
from wheelq.core.context import job_or_none, running
from wheelq.runtime import tracing
from wheelq.worker.handler_runner import HandlerRunner


def job(n: int) -> Job:
    return Job(id=f"j{n}", topic="t", payload=n, due_ms=0, attempt=1, max_attempts=1)


def kinds(seen: list[tuple[Job, Job]]) -> dict[str, Callable[[Job], Any]]:
    """A handler of each kind, each recording (its argument, `current_job()`) into `seen`."""

    def sync(j: Job) -> None:
        seen.append((j, current_job()))

    async def async_(j: Job) -> None:
        await asyncio.sleep(0)  # resumed: still its job
        seen.append((j, current_job()))

    def wrapper(j: Job) -> Any:  # a sync function returning a coroutine (a decorator's)
        return async_(j)

    return {"sync": sync, "async": async_, "sync returning a coroutine": wrapper}


@pytest.mark.parametrize("kind", ["sync", "async", "sync returning a coroutine"])
@pytest.mark.parametrize("timeout_ms", [0, 60_000])
@pytest.mark.parametrize("traced_run", [False, True])
async def test_a_handler_sees_its_job_as_the_current_job(
    kind: str, timeout_ms: int, traced_run: bool, request: pytest.FixtureRequest
) -> None:
    if traced_run:
        spans: Spans = request.getfixturevalue("traced")
    seen: list[tuple[Job, Job]] = []
    runner = HandlerRunner(
        kinds(seen)[kind],
        timeout_ms=timeout_ms,
        threads=2,
        tracing=tracing.load() if traced_run else None,
    )
    try:
        assert await asyncio.gather(*(runner.run(job(n)) for n in range(4))) == [None] * 4
    finally:
        runner.close()
    assert sorted(j.id for j, _ in seen) == ["j0", "j1", "j2", "j3"]
    assert all(current is j for j, current in seen), seen
    if traced_run:
        assert len(spans.named("process t")) == 4  # the traced path ran
    assert job_or_none() is None  # nothing leaked into the caller's context


async def test_concurrent_async_handlers_each_see_their_own_job() -> None:
    """Every run is in flight at once (each waits for all to start), then each reads its job
    again: one run's job never shows in another's task."""
    count = 8
    arrived = 0
    everyone = asyncio.Event()
    seen: dict[str, tuple[str, str]] = {}

    async def handler(j: Job) -> None:
        nonlocal arrived
        before = current_job().id
        arrived += 1
        if arrived == count:
            everyone.set()
        await everyone.wait()
        seen[j.id] = (before, current_job().id)

    runner = HandlerRunner(handler, timeout_ms=60_000, threads=1)
    assert await asyncio.gather(*(runner.run(job(n)) for n in range(count))) == [None] * count
    assert seen == {f"j{n}": (f"j{n}", f"j{n}") for n in range(count)}


async def test_concurrent_sync_handlers_on_threads_each_see_their_own_job() -> None:
    count = 4
    everyone = threading.Barrier(count, timeout=10)
    seen: dict[str, tuple[str, str]] = {}

    def handler(j: Job) -> None:
        before = current_job().id
        everyone.wait()  # all `count` runs are on their threads at once
        seen[j.id] = (before, current_job().id)

    runner = HandlerRunner(handler, timeout_ms=0, threads=count)
    try:
        assert await asyncio.gather(*(runner.run(job(n)) for n in range(count))) == [None] * count
    finally:
        runner.close()
    assert seen == {f"j{n}": (f"j{n}", f"j{n}") for n in range(count)}


@pytest.mark.parametrize("outcome", ["returns", "raises", "runs over"])
async def test_a_handler_thread_keeps_no_job_after_its_run(outcome: str) -> None:
    """The thread that ran a job, given other work next (the worker's shared pool runs
    whatever is submitted), sees no current job: nothing stale from the run before."""
    release = threading.Event()

    def handler(j: Job) -> None:
        if outcome == "raises":
            raise ValueError("boom")
        if outcome == "runs over":
            release.wait(timeout=30)

    runner = HandlerRunner(handler, timeout_ms=100 if outcome == "runs over" else 0, threads=1)
    pool = runner._pool
    assert pool is not None
    try:
        result = await runner.run(job(1))
        assert (result is None) == (outcome == "returns"), result
        release.set()  # the wedged thread returns, and takes the next run
        after = await pool.submit(None, lambda _: job_or_none())
        if outcome != "runs over":  # one thread: the same one ran the job
            assert pool.threads == 1
        assert after is None, after
    finally:
        release.set()
        runner.close()


async def test_a_handler_past_its_time_limit_still_sees_its_own_job() -> None:
    """A sync handler that ran over runs on, wedged, on its thread; when it goes on it still
    sees its job, while the job after it (on the replacement thread) sees its own."""
    release = threading.Event()
    returned = threading.Event()
    seen: list[tuple[str, str]] = []

    def handler(j: Job) -> None:
        if j.payload == 0:
            release.wait(timeout=30)
        seen.append((j.id, current_job().id))
        if j.payload == 0:
            returned.set()

    runner = HandlerRunner(handler, timeout_ms=100, threads=1)
    try:
        assert isinstance(await runner.run(job(0)), HandlerTimeoutError)
        assert await runner.run(job(1)) is None  # on the replacement thread
        release.set()
        assert await asyncio.to_thread(returned.wait, 10)
    finally:
        release.set()
        runner.close()
    assert seen == [("j1", "j1"), ("j0", "j0")]


async def test_an_async_handler_past_its_time_limit_leaves_no_job_behind() -> None:
    async def slow(j: Job) -> None:
        await asyncio.Event().wait()

    runner = HandlerRunner(slow, timeout_ms=10, threads=1)
    assert isinstance(await runner.run(job(1)), HandlerTimeoutError)
    assert job_or_none() is None


def test_outside_a_job_current_job_raises_a_lookup_error_saying_so() -> None:
    with pytest.raises(NoCurrentJobError) as raised:
        current_job()
    assert isinstance(raised.value, LookupError) and isinstance(raised.value, wheelq.WheelqError)
    assert "no job is running" in str(raised.value)
    assert "current_job()" in str(raised.value)
    assert job_or_none() is None


def test_running_sets_the_job_for_the_block_only() -> None:
    with running(job(1)) as j:
        assert current_job() is j
        with running(job(2)):
            assert current_job().id == "j2"
        assert current_job() is j
    assert job_or_none() is None


def test_once_without_a_job_outside_one_raises_before_touching_the_connection() -> None:
    with pytest.raises(NoCurrentJobError):
        outbox.once(object())


async def test_aonce_without_a_job_outside_one_raises_before_touching_the_connection() -> None:
    with pytest.raises(NoCurrentJobError):
        await outbox.aonce(object())
