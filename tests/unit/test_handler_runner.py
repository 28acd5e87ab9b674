"""HandlerRunner with sync handlers on its own threads (no Redis): outcomes come back to the
right job, a timed-out handler's thread runs on without blocking the others, and an
exception is returned, not raised. Threads are coordinated with events, never sleeps."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import msgpack
import pytest

from tests.support.waiting import eventually
from wheelq import (
    HandlerExitError,
    HandlerTimeoutError,
    InvalidArgumentError,
    InvalidHandlerError,
    Job,
    ResultTooLargeError,
    ResultTypeError,
)
from wheelq.worker.handler_runner import HandlerRunner


def holds(predicate: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return predicate()

    return check


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
        assert runner.wedged == 1
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


async def test_a_run_cancelled_before_a_thread_took_it_up_is_not_run() -> None:
    """A stop hands on what it cancels before it started: running it too would run it twice."""
    started = threading.Event()
    release = threading.Event()
    ran: list[int] = []

    def handler(j: Job) -> None:
        ran.append(j.payload)
        started.set()
        release.wait(timeout=30)

    runner = HandlerRunner(handler, timeout_ms=0, threads=1)
    first = asyncio.create_task(runner.run(job(1)))
    try:
        await asyncio.to_thread(started.wait, 10)
        queued = asyncio.create_task(runner.run(job(2)))  # waits for the only thread
        await asyncio.sleep(0)  # let it reach the thread's queue
        queued.cancel()
        with pytest.raises(asyncio.CancelledError):
            await queued
        release.set()
        assert await first is None
        assert await runner.run(job(3)) is None  # the thread went on past the cancelled one
    finally:
        release.set()
        runner.close()
    assert ran == [1, 3]


async def test_sync_runs_are_timed_on_their_thread_without_the_queue() -> None:
    """The read-ahead paces itself on how long handlers run, not on how long jobs queued
    for a thread (that grows with the read-ahead itself)."""
    started, release = threading.Event(), threading.Event()
    ran: list[float] = []

    def handler(j: Job) -> None:
        if j.payload == 1:
            started.set()
            release.wait(timeout=30)

    runner = HandlerRunner(handler, timeout_ms=0, threads=1)
    runner.time_runs(ran.append)
    try:
        runs = [asyncio.create_task(runner.run(job(n))) for n in (1, 2)]  # 2 queues behind 1
        assert await asyncio.to_thread(
            started.wait, 30
        )  # job 1 is running (a busy host is slow to start it)
        await asyncio.sleep(0.1)  # job 1 runs at least this long; job 2 waits as long
        release.set()
        assert await asyncio.gather(*runs) == [None, None]
    finally:
        release.set()
        runner.close()
    first, second = ran
    assert first >= 100
    assert second < 50, "job 2's time includes the 100 ms it queued behind job 1"


# --- timeouts start when the handler starts; wedged threads are replaced (issue 8, defect 1)


def new_handler_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    """Live handler threads started since `before` was taken."""
    return [
        t for t in threading.enumerate() if t not in before and t.name.startswith("wheelq-handler")
    ]


async def test_timed_out_threads_are_replaced_so_later_jobs_run_and_retire_when_they_return(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The issue's scenario without Redis: concurrency 2, two handlers hang past the timeout,
    then five normal jobs. The five run (on replacement threads) instead of timing out in the
    queue; once the hung handlers return, their threads retire."""
    before = set(threading.enumerate())
    release = threading.Event()
    hung = threading.Semaphore(0)

    def handler(j: Job) -> None:
        if j.payload < 0:
            hung.release()
            release.wait(timeout=30)

    runner = HandlerRunner(handler, timeout_ms=200, threads=2)
    try:
        stuck = await asyncio.gather(runner.run(job(-1)), runner.run(job(-2)))
        assert [type(e) for e in stuck] == [HandlerTimeoutError] * 2
        assert runner.wedged == 2
        assert await asyncio.gather(*(runner.run(job(n)) for n in range(5))) == [None] * 5
        assert len(new_handler_threads(before)) == 4, "2 wedged threads + 2 replacements"
        assert "2 handler threads wedged" in caplog.text
    finally:
        release.set()
    try:
        await eventually(
            holds(lambda: runner.wedged == 0 and len(new_handler_threads(before)) == 2),
            timeout_s=10,
            what="the wedged threads to return and retire (back to concurrency 2)",
        )
        assert await runner.run(job(9)) is None
    finally:
        runner.close()


async def test_a_job_queued_behind_wedged_threads_is_not_charged_a_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Past the bound (as many wedged threads as `threads`), no more threads are started: a
    job waits for a thread to come free, and its time limit only starts when it starts."""
    release = threading.Event()

    def handler(j: Job) -> None:
        if j.payload < 0:
            release.wait(timeout=30)

    runner = HandlerRunner(handler, timeout_ms=100, threads=1)
    try:
        assert isinstance(await runner.run(job(-1)), HandlerTimeoutError)
        assert isinstance(await runner.run(job(-2)), HandlerTimeoutError)  # on the replacement
        assert runner.wedged == 2
        assert "more than the 1 the pool replaces" in caplog.text
        queued = asyncio.create_task(runner.run(job(1)))
        done, _ = await asyncio.wait({queued}, timeout=0.4)  # 4x the limit, spent queued
        assert not done, f"a job that never started ended with {queued.result()!r}"
        release.set()
        assert await queued is None
        await eventually(holds(lambda: runner.wedged == 0), timeout_s=10, what="wedged -> 0")
    finally:
        release.set()
        runner.close()


async def test_threads_start_on_demand_not_all_at_once() -> None:
    before = set(threading.enumerate())
    runner = HandlerRunner(lambda j: None, timeout_ms=0, threads=10_000)
    try:
        assert await runner.run(job(1)) is None
        assert await runner.run(job(2)) is None
        assert len(new_handler_threads(before)) == 1
        assert await asyncio.gather(*(runner.run(job(n)) for n in range(3, 8))) == [None] * 5
        assert 1 <= len(new_handler_threads(before)) <= 5
    finally:
        runner.close()


# --- SystemExit / KeyboardInterrupt from a handler (defect 4) -------------------------------


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("exc", [SystemExit(3), KeyboardInterrupt()], ids=["exit", "interrupt"])
async def test_a_handler_raising_systemexit_or_keyboardinterrupt_fails_its_run(
    kind: str, exc: BaseException, caplog: pytest.LogCaptureFixture
) -> None:
    def sync_handler(j: Job) -> None:
        if j.payload == 1:
            raise exc

    async def async_handler(j: Job) -> None:
        sync_handler(j)

    runner = HandlerRunner(
        sync_handler if kind == "sync" else async_handler, timeout_ms=0, threads=1
    )
    try:
        error = await runner.run(job(1))
        assert isinstance(error, HandlerExitError)
        assert error.__cause__ is exc
        assert type(exc).__name__ in str(error) and "failed attempt" in str(error)
        assert f"handler raised {type(exc).__name__}" in caplog.text
        assert await runner.run(job(2)) is None  # the runner goes on
    finally:
        runner.close()


# --- what a handler may be and return (defect 5) ----------------------------------------------


async def _agen(j: Job) -> AsyncIterator[None]:
    yield None


def _gen(j: Job) -> Iterator[None]:
    yield None


class _AsyncGenCall:
    async def __call__(self, j: Job) -> AsyncIterator[None]:
        yield None


class _GenCall:
    def __call__(self, j: Job) -> Iterator[None]:
        yield None


def _no_args() -> None:
    pass


def _two_args(j: Job, other: int) -> None:
    pass


@pytest.mark.parametrize(
    ("handler", "says"),
    [
        (None, "callable"),
        ("module:function", "callable"),
        (_agen, "async generator"),
        (_gen, "generator"),
        (_AsyncGenCall(), "async generator"),
        (_GenCall(), "generator"),
        (_no_args, "one argument"),
        (_two_args, "one argument"),
    ],
    ids=["none", "str", "async-gen", "gen", "async-gen-call", "gen-call", "no-args", "two-args"],
)
def test_handlers_that_would_never_run_are_refused_at_construction(handler: Any, says: str) -> None:
    with pytest.raises(InvalidHandlerError, match=says) as caught:
        HandlerRunner(handler, timeout_ms=0, threads=1)
    assert caught.value.parameter == "handler"
    assert isinstance(caught.value, TypeError) and isinstance(caught.value, InvalidArgumentError)
    assert "a function taking one wheelq.Job" in str(caught.value)


@pytest.mark.parametrize(
    "handler",
    [
        lambda j: None,
        lambda j, extra=1: None,
        lambda *args: None,
        print,
        functools.partial(_two_args, other=1),
    ],
    ids=["lambda", "defaulted", "varargs", "builtin", "partial"],
)
def test_plain_handlers_are_accepted(handler: Any) -> None:
    HandlerRunner(handler, timeout_ms=0, threads=1).close()


@pytest.mark.parametrize("made", [_gen, _agen], ids=["generator", "async-generator"])
async def test_a_sync_handler_returning_a_generator_fails_its_run(made: Any) -> None:
    def handler(j: Job) -> Any:  # a plain function, so it passes the check at construction
        return made(j)

    runner = HandlerRunner(handler, timeout_ms=0, threads=1)
    try:
        error = await runner.run(job(1))
    finally:
        runner.close()
    assert isinstance(error, InvalidHandlerError)
    assert "its body never ran" in str(error)


async def test_with_result_max_bytes_0_a_returned_value_succeeds_and_is_ignored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runner = HandlerRunner(lambda j: j.payload * 2, timeout_ms=0, threads=1)
    try:
        assert await asyncio.gather(runner.run(job(1)), runner.run(job(2))) == [None, None]
    finally:
        runner.close()
    assert caplog.text.count("return value is ignored") == 1


async def test_a_sync_handler_returning_a_coroutine_has_it_run() -> None:
    ran: list[int] = []

    async def body(j: Job) -> None:
        ran.append(j.payload)

    def handler(j: Job) -> Awaitable[None]:
        return body(j)

    runner = HandlerRunner(handler, timeout_ms=0, threads=1)
    try:
        assert await runner.run(job(7)) is None
    finally:
        runner.close()
    assert ran == [7]


async def test_a_closed_runner_runs_jobs_again_on_new_threads() -> None:
    """A worker can be stopped (which closes its runner) and started again."""
    before = set(threading.enumerate())
    runner = HandlerRunner(lambda j: None, timeout_ms=0, threads=2)
    try:
        assert await asyncio.gather(runner.run(job(1)), runner.run(job(2))) == [None, None]
        runner.close()
        assert await asyncio.gather(runner.run(job(3)), runner.run(job(4))) == [None, None]
        await eventually(
            holds(lambda: len(new_handler_threads(before)) <= 2),
            timeout_s=10,
            what="the first threads to end",
        )
    finally:
        runner.close()


async def outcomes(body: Callable[[Job], Any], kind: str, *payloads: int) -> list[Any]:
    """What runs of `body` (as a ``def`` or an ``async def`` handler) came to, in order."""

    async def async_handler(j: Job) -> Any:
        return body(j)

    handler = body if kind == "def" else async_handler
    runner = HandlerRunner(handler, timeout_ms=0, threads=1, result_max_bytes=64)
    try:
        return list(await asyncio.gather(*(runner.run(job(n)) for n in payloads)))
    finally:
        runner.close()


@pytest.mark.parametrize("kind", ["def", "async def"])
async def test_a_result_comes_back_encoded_and_none_comes_back_as_none(kind: str) -> None:
    def body(j: Job) -> Any:
        return None if j.payload == 0 else {"n": j.payload, "b": b"\x00"}

    kept, nothing = await outcomes(body, kind, 1, 0)
    assert kept == msgpack.packb({"n": 1, "b": b"\x00"}, use_bin_type=True)
    assert nothing is None


@pytest.mark.parametrize("kind", ["def", "async def"])
async def test_a_result_too_large_or_not_msgpack_is_the_runs_failure(kind: str) -> None:
    def body(j: Job) -> Any:
        return "x" * 100 if j.payload == 1 else {1, 2}

    large, odd = await outcomes(body, kind, 1, 2)
    assert isinstance(large, ResultTooLargeError)
    assert "result_max_bytes=64" in str(large) and "got 102" in str(large)
    assert isinstance(odd, ResultTypeError) and isinstance(odd, TypeError)


class Raised(Exception):
    pass


async def came_to(handler: Callable[[Job], Awaitable[Any]], timeout_ms: int) -> Any:
    """One run of `handler` with `timeout_ms`: its outcome, an error as (type, message)."""
    runner = HandlerRunner(handler, timeout_ms=timeout_ms, threads=1, result_max_bytes=64)
    try:
        outcome = await runner.run(job(1))
    finally:
        runner.close()
    return (type(outcome), str(outcome)) if isinstance(outcome, BaseException) else outcome


def raising(exc: BaseException) -> Callable[[Job], Awaitable[Any]]:
    async def handler(j: Job) -> Any:
        raise exc

    return handler


def returning(value: Any) -> Callable[[Job], Awaitable[Any]]:
    async def handler(j: Job) -> Any:
        return value

    return handler


@pytest.mark.parametrize(
    "handler",
    [
        returning(None),
        returning({"n": 1}),
        returning("x" * 100),
        returning({1, 2}),
        raising(Raised("boom")),
        raising(TimeoutError("its own")),
        raising(SystemExit(3)),
        raising(KeyboardInterrupt()),
    ],
)
async def test_an_async_run_without_a_limit_comes_to_what_one_never_reached_comes_to(
    handler: Callable[[Job], Awaitable[Any]],
) -> None:
    # without a limit the run skips the timeout context (docs/architecture.md, "Fast paths")
    assert await came_to(handler, 0) == await came_to(handler, 3_600_000)
