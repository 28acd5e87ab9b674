"""Runner tasks (no Redis): async handlers' entries run one after another in a few tasks, a
runner more while a run waits, each run in its job's own context; a time limit's cancel or
a stop's reaches only the run it is meant for; the loop runs between back-to-back runs.
(docs/architecture.md, "The life of a job": Runners.)"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
from collections.abc import Awaitable, Callable
from typing import Any

from wheelq import HandlerTimeoutError, Job, current_job
from wheelq.worker.handler_runner import HandlerRunner
from wheelq.worker.runners import RUNS_BEFORE_YIELD, Runners, Waits

WAIT_S = 5

SEEN: contextvars.ContextVar[str | None] = contextvars.ContextVar("seen", default=None)


def job(n: int) -> Job:
    return Job(id=f"j{n}", topic="t", payload=n, due_ms=0, attempt=1, max_attempts=1)


class Runs:
    """A taker that runs each item through `runner` and records what came of it, and in
    which task."""

    def __init__(self, runner: HandlerRunner) -> None:
        self.runner = runner
        self.outcomes: dict[str, Any] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.done = asyncio.Event()
        self.expected = 0

    async def _run(self, item: Job, waits: Waits) -> None:
        self.outcomes[item.id] = await self.runner.run(item, waits)
        if len(self.outcomes) >= self.expected:
            self.done.set()

    def run_taken(self, item: Any, task: asyncio.Task[None], waits: Waits) -> Awaitable[None]:
        self.tasks[item.id] = task
        return self._run(item, waits)

    async def all(self, runners: Runners, jobs: list[Job]) -> None:
        self.expected += len(jobs)
        for j in jobs:
            runners.start(self, j)
        await asyncio.wait_for(self.done.wait(), WAIT_S)


async def test_handlers_that_never_wait_share_one_runner_and_each_sees_its_own_job() -> None:
    seen: list[tuple[str, str | None]] = []

    async def handler(j: Job) -> None:
        current = current_job()
        seen.append((j.id, None if current is None else current.id))

    runs, runners = Runs(HandlerRunner(handler, timeout_ms=0, threads=1)), Runners()
    await runs.all(runners, [job(n) for n in range(10)])
    assert seen == [(f"j{n}", f"j{n}") for n in range(10)]
    assert len(set(runs.tasks.values())) == 1  # no task per entry
    runners.close()


async def test_a_handlers_context_variables_end_with_its_run() -> None:
    before: dict[str, str | None] = {}

    async def handler(j: Job) -> None:
        before[j.id] = SEEN.get()  # what an earlier run on the same runner set, if it leaked
        SEEN.set(j.id)
        await asyncio.sleep(0)
        assert SEEN.get() == j.id  # its own value across its awaits

    runs, runners = Runs(HandlerRunner(handler, timeout_ms=0, threads=1)), Runners()
    await runs.all(runners, [job(n) for n in range(5)])
    assert before == {f"j{n}": None for n in range(5)}
    assert SEEN.get() is None
    runners.close()


async def test_while_a_run_waits_another_runner_starts_the_next() -> None:
    release = asyncio.Event()
    started: list[str] = []

    async def handler(j: Job) -> None:
        started.append(j.id)
        if j.id == "j0":
            await release.wait()

    runs, runners = Runs(HandlerRunner(handler, timeout_ms=0, threads=1)), Runners()
    runs.expected = 3
    for n in range(3):
        runners.start(runs, job(n))
    await asyncio.wait_for(_until(lambda: len(runs.outcomes) == 2), WAIT_S)
    assert started == ["j0", "j1", "j2"] and "j0" not in runs.outcomes  # j0 still waits
    assert runs.tasks["j1"] is not runs.tasks["j0"]
    release.set()
    await asyncio.wait_for(runs.done.wait(), WAIT_S)
    runners.close()


async def test_a_run_past_its_time_limit_fails_alone_and_its_runner_runs_the_next() -> None:
    async def handler(j: Job) -> None:
        if j.id == "j0":
            await asyncio.Event().wait()  # never set: the limit ends it
        await asyncio.sleep(0)

    runs, runners = Runs(HandlerRunner(handler, timeout_ms=50, threads=1)), Runners()
    await runs.all(runners, [job(0)])
    assert isinstance(runs.outcomes["j0"], HandlerTimeoutError)
    await runs.all(runners, [job(1), job(2)])
    assert runs.outcomes["j1"] is None and runs.outcomes["j2"] is None
    assert runs.tasks["j1"] is runs.tasks["j0"]  # the limit's cancel did not end the runner
    runners.close()


async def test_a_stop_cancels_the_waiting_run_and_close_ends_the_parked_runners() -> None:
    waiting = asyncio.Event()

    async def handler(j: Job) -> None:
        if j.id == "j1":
            waiting.set()
            await asyncio.Event().wait()

    runs, runners = Runs(HandlerRunner(handler, timeout_ms=0, threads=1)), Runners()
    await runs.all(runners, [job(0)])  # its runner parks
    parked = runs.tasks["j0"]
    runners.start(runs, job(1))  # the parked runner takes it
    await asyncio.wait_for(waiting.wait(), WAIT_S)
    assert runs.tasks["j1"] is parked
    runners.close()
    assert not parked.done()  # busy: it ends with its run
    parked.cancel()  # a stop past its grace
    await asyncio.gather(parked, return_exceptions=True)
    assert parked.cancelled() and "j1" not in runs.outcomes


async def test_back_to_back_runs_let_the_loop_run_every_so_many() -> None:
    ticks: list[int] = []
    ran = 0

    async def handler(j: Job) -> None:
        nonlocal ran
        ran += 1

    async def ticker() -> None:
        while True:
            ticks.append(ran)
            await asyncio.sleep(0)

    runs, runners = Runs(HandlerRunner(handler, timeout_ms=0, threads=1)), Runners()
    ticking = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    await runs.all(runners, [job(n) for n in range(RUNS_BEFORE_YIELD * 4)])
    ticking.cancel()
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    assert max(gaps) <= RUNS_BEFORE_YIELD, gaps  # never the whole backlog in one turn
    runners.close()


async def _until(predicate: Callable[[], bool]) -> None:
    while not predicate():
        await asyncio.sleep(0)


async def test_an_error_of_the_workers_own_is_counted_and_the_runner_goes_on() -> None:
    # Not a handler's error (that is its job's outcome): the worker's own, around the run.
    ran: list[int] = []
    done = asyncio.Event()

    class Failing:
        async def _run(self, item: int) -> None:
            if item == 1:
                raise RuntimeError("a bug of the worker's")
            ran.append(item)
            if item == 2:
                done.set()

        def run_taken(self, item: Any, task: asyncio.Task[None], waits: Waits) -> Awaitable[None]:
            return self._run(item)

    runners, taker = Runners(), Failing()
    for item in range(3):
        runners.start(taker, item)
    await asyncio.wait_for(done.wait(), WAIT_S)
    assert (ran, runners.errors) == ([0, 2], 1)
    runners.close()
