"""HandlerRunner with sync handlers on its own threads (no Redis): outcomes come back to the
right job, a timed-out handler's thread runs on without blocking the others, and an
exception is returned, not raised. Threads are coordinated with events, never sleeps."""

from __future__ import annotations

import asyncio
import threading

import pytest

from wheelq import HandlerTimeoutError, Job
from wheelq.runtime.handler import HandlerRunner


def job(n: int) -> Job:
    return Job(id=f"j{n}", topic="t", payload=n, due_ms=0, attempt=1, max_attempts=1)


async def test_sync_handlers_run_off_the_loop_and_each_outcome_reaches_its_job() -> None:
    loop_thread = threading.get_ident()
    ran_on: set[int] = set()

    def handler(j: Job) -> None:
        ran_on.add(threading.get_ident())
        if j.payload % 3 == 0:
            raise ValueError(f"bad {j.payload}")

    runner = HandlerRunner(handler, timeout_ms=0, threads=4)
    try:
        outcomes = await asyncio.gather(*(runner.run(job(n)) for n in range(30)))
    finally:
        runner.close()
    for n, outcome in enumerate(outcomes):
        if n % 3 == 0:
            assert isinstance(outcome, ValueError) and str(outcome) == f"bad {n}"
        else:
            assert outcome is None
    assert loop_thread not in ran_on
    assert 1 <= len(ran_on) <= 4


async def test_a_timed_out_sync_handler_runs_on_without_blocking_the_other_threads() -> None:
    release = threading.Event()
    finished = threading.Event()

    def handler(j: Job) -> None:
        if j.payload == 0:
            release.wait(timeout=30)  # stuck until the test lets it go
            finished.set()

    runner = HandlerRunner(handler, timeout_ms=100, threads=2)
    try:
        stuck = await runner.run(job(0))
        assert isinstance(stuck, HandlerTimeoutError)
        assert "handler_timeout_ms=100" in str(stuck)
        assert runner.stuck_threads == 1
        assert not finished.is_set()  # its thread runs on
        # the other thread still serves jobs, one after another
        assert await asyncio.gather(*(runner.run(job(n)) for n in range(1, 6))) == [None] * 5
    finally:
        release.set()
        runner.close()
    assert finished.wait(timeout=10)


async def test_a_cancelled_run_drops_its_outcome_quietly() -> None:
    started = threading.Event()
    release = threading.Event()

    def handler(j: Job) -> None:
        started.set()
        release.wait(timeout=30)
        raise RuntimeError("too late to matter")

    errors: list[dict[str, object]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: errors.append(ctx))
    runner = HandlerRunner(handler, timeout_ms=0, threads=1)
    task = asyncio.create_task(runner.run(job(1)))
    try:
        await asyncio.to_thread(started.wait, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        release.set()
        assert await runner.run(job(2)) is not None  # the thread is free again afterwards
    finally:
        release.set()
        runner.close()
    assert errors == []  # the dropped outcome did not blow up in the event loop
