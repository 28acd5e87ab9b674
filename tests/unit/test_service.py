"""The supervised loop of `wheelq.runtime.service.Service`, driven by a part whose every step
takes its outcome from the test: failures counted and shown in `status()` while they last,
cancellation passing through, pauses after failures that `wake()` cannot cut short but
`stop()` can, and a `wake()` during a step that is not lost.

Each step waits on a queue the test fills, so the state between two steps is stable and the
test reads it without racing the loop. Failure pauses are 10 ms at most.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from tests.support.waiting import until
from wheelq.core.clock import ManualClock
from wheelq.runtime.outage import StopBudget
from wheelq.runtime.service import PartStopped, Service

LONG_S = 3600.0
LOOP_TURNS = 20
"""Turns of the event loop given to a part that must *not* take another step: each turn
runs every callback that is ready, so a step woken early would have started by then."""


@dataclass(frozen=True)
class Reported:
    """An outcome: the step reports `error` with `failed()` itself and returns 0."""

    error: Exception


Outcome = float | None | BaseException | Reported


class Scripted(Service):
    """A part whose step n takes the n-th outcome the test puts in `outcomes`."""

    name = "scripted"
    title = "scripted part"

    def __init__(self, max_pause_ms: int = 10) -> None:
        super().__init__(ManualClock(), logging.getLogger(__name__), max_pause_ms=max_pause_ms)
        self.outcomes: asyncio.Queue[Outcome] = asyncio.Queue()
        self.steps = 0
        self.task: asyncio.Task[object] | None = None

    async def step(self) -> float | None:
        self.steps += 1
        self.task = asyncio.current_task()
        outcome = await self.outcomes.get()
        if isinstance(outcome, BaseException):
            raise outcome
        if isinstance(outcome, Reported):
            self.failed(outcome.error)
            return 0.0
        return outcome

    async def stop(self, budget: StopBudget | None = None) -> PartStopped:
        """Stop; a step waiting for its outcome ends as if cancelled (stop() waits for a
        running step, and a step that returned would reset the count)."""
        self.outcomes.put_nowait(asyncio.CancelledError())
        return await super().stop(budget)


class LongPauses(Scripted):
    """A part whose pause after a failed step is an hour."""

    def failed(self, exc: BaseException) -> float:
        super().failed(exc)
        return LONG_S


async def turns() -> None:
    for _ in range(LOOP_TURNS):
        await asyncio.sleep(0)


async def test_failures_count_while_steps_raise_and_reset_when_one_returns() -> None:
    part = Scripted()
    await part.start()
    try:
        for n in (1, 2, 3):
            part.outcomes.put_nowait(ValueError(f"boom {n}"))
            await until(lambda n=n: part.steps == n + 1, what=f"the try after failure {n}")
            assert part.status() == {
                "running": True,
                "failures": n,
                "last_error": f"ValueError: boom {n}",
            }
        part.outcomes.put_nowait(0.0)
        await until(lambda: part.steps == 5, what="the step after the one that returned")
        assert part.status() == {"running": True, "failures": 0, "last_error": None}
    finally:
        stopped = await part.stop()
    assert stopped == PartStopped("scripted", True, 0, None)


async def test_stop_reports_the_failures_of_a_part_that_is_still_failing() -> None:
    part = Scripted()
    await part.start()
    part.outcomes.put_nowait(KeyError("lost"))
    await until(lambda: part.steps == 2, what="the try after the failure")
    assert await part.stop() == PartStopped("scripted", True, 1, "KeyError: 'lost'")
    assert part.status()["running"] is False


async def test_a_failure_the_step_reports_itself_counts_until_a_clean_step() -> None:
    part = Scripted()
    await part.start()
    try:
        part.outcomes.put_nowait(Reported(ValueError("shard 3 refused")))
        await until(lambda: part.steps == 2, what="the step after the reported failure")
        part.outcomes.put_nowait(Reported(ValueError("shard 3 refused again")))
        await until(lambda: part.steps == 3, what="the step after the second one")
        assert part.status() == {
            "running": True,
            "failures": 2,
            "last_error": "ValueError: shard 3 refused again",
        }
        part.outcomes.put_nowait(0.0)
        await until(lambda: part.steps == 4, what="the step after a clean one")
        assert part.failures == 0 and part.last_error is None
    finally:
        await part.stop()


async def test_cancelled_error_raised_by_a_step_ends_the_part_uncounted() -> None:
    part = Scripted()
    await part.start()
    part.outcomes.put_nowait(asyncio.CancelledError())
    await until(lambda: not part.running, what="the part to end")
    assert part.steps == 1 and part.failures == 0
    assert await part.stop() == PartStopped("scripted", True, 0, None)


async def test_cancelling_the_part_mid_step_ends_it_uncounted() -> None:
    part = Scripted()
    await part.start()
    await until(lambda: part.task is not None, what="the first step")
    assert part.task is not None
    part.task.cancel()
    await until(lambda: not part.running, what="the part to end")
    assert part.steps == 1 and part.failures == 0


async def test_wake_does_not_cut_a_failure_pause_short_but_stop_does() -> None:
    part = LongPauses()
    await part.start()
    part.outcomes.put_nowait(ConnectionError("refused"))
    await until(lambda: part.failures == 1, what="the failure")
    part.wake()
    await turns()
    assert part.steps == 1, "wake() ended the pause after a failure"
    stopped = await asyncio.wait_for(part.stop(), timeout=5)  # the pause is an hour
    assert stopped == PartStopped("scripted", True, 1, "ConnectionError: refused")
    assert part.steps == 1


async def test_a_wake_during_a_step_is_not_lost() -> None:
    part = Scripted()
    await part.start()
    try:
        # Without a wake, a step that returns None is followed by none.
        await until(lambda: part.steps == 1, what="the first step")
        part.outcomes.put_nowait(None)
        await turns()
        assert part.steps == 1
        part.wake()
        await until(lambda: part.steps == 2, what="the step a wake asks for")

        # A wake while step 2 runs: its None must not wait for another wake.
        part.wake()
        part.outcomes.put_nowait(None)
        await until(lambda: part.steps == 3, what="the step after a wake that came mid-step")
    finally:
        await part.stop()


async def test_wake_ends_a_wait_at_once_and_stop_ends_the_part_from_a_long_wait() -> None:
    part = Scripted()
    await part.start()
    await until(lambda: part.steps == 1, what="the first step")
    part.outcomes.put_nowait(LONG_S)
    await turns()
    part.wake()
    await until(lambda: part.steps == 2, what="the step the wake asks for")
    part.outcomes.put_nowait(LONG_S)
    await turns()
    stopped = await asyncio.wait_for(part.stop(), timeout=5)
    assert stopped.in_time and part.steps == 2
