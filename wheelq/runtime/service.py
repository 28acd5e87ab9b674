"""The lifecycle every long-running piece shares: start(), stop(), async with.

A service runs one asyncio task (`_run`). `stop()` sets the stopping flag,
wakes any wait made with `sleep`, and waits for the task to end, so a
shutdown never waits out a tick or a poll interval. Given a `StopBudget`,
it waits only as long as the budget allows, then cancels the task (a call
to a Redis that does not answer would hold it forever).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Self, TypeVar

import redis.asyncio
from redis.exceptions import RedisError

from wheelq.runtime.outage import is_transient, wait_for_either

log = logging.getLogger("wheelq")

T = TypeVar("T")

CUT_S = 0.25
"""What a stop's budget shrinks to on a second signal: a last chance for calls that
answer at once (a healthy Redis), nothing for one that does not."""
HARD_EXIT_S = 1.0
"""After a second signal, `run()` leaves with os._exit if it is still there this much later."""
CLOSE_S = 1.0
"""Longest wait for a client's connections to close at the end of a stop."""


class Lifecycle:
    """``async with`` for anything with `start()` and `stop()`."""

    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> object:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


class Service(Lifecycle):
    """Base class: subclasses implement `_run()` and call `await self.sleep(s)` to wait."""

    name = "service"

    def __init__(self) -> None:
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._waiter: asyncio.Future[None] | None = None

    @property
    def stopping(self) -> bool:
        return self._stopping

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        if self._task is None:
            self._stopping = False
            self._task = asyncio.create_task(self._guarded(), name=f"wheelq-{self.name}")

    async def stop(self, budget: StopBudget | None = None) -> None:
        """Stop the task promptly and wait for it (within `budget`, then cancel it); safe to
        call twice."""
        self._stopping = True
        self.wake()
        task = self._task
        if task is not None:
            if budget is not None and not await budget.wait(task):
                task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            self._task = None

    def wake(self) -> None:
        """End the current `sleep` early (new work, or stop)."""
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def sleep(self, seconds: float | None) -> None:
        """Wait `seconds` (None: until woken); returns early on `wake()` or `stop()`."""
        if self._stopping:
            return
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiter = waiter
        handle = None
        if seconds is not None:
            handle = loop.call_later(max(0.0, seconds), _resolve, waiter)
        try:
            await waiter
        finally:
            if handle is not None:
                handle.cancel()
            self._waiter = None

    async def _guarded(self) -> None:
        try:
            await self._run()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("wheelq %s stopped on an unexpected error", self.name)
            raise

    async def _run(self) -> None:
        raise NotImplementedError


class StopBudget:
    """How long a stop may still wait for Redis (``stop_timeout_ms``), shared by its steps.

    Each step that needs Redis (release leases, hand entries on, write settlements,
    leave) is an `attempt` and gets what is left; time between steps (a worker's grace
    for running handlers) is not counted. Once a step finds Redis unreachable or the
    budget spent, later steps are skipped instead of waited for: what they would have
    done times out in Redis by itself (leases expire; pending entries are taken over
    after the visibility timeout). `undone` lists the skipped or failed steps and
    `problem` says why. `cut()` (a second signal) shrinks what is left to a moment.
    """

    def __init__(self, seconds: float) -> None:
        self._left_s = max(0.0, seconds)
        self._end: float | None = None
        self._changed = asyncio.Event()
        self._cut = False
        self.problem: str | None = None
        self.undone: list[str] = []

    def cut(self, seconds: float = CUT_S) -> None:
        """Leave at most `seconds` for the rest of the stop (a wait under way included)."""
        self._left_s = min(self._left_s, seconds)
        if self._end is not None:
            self._end = min(self._end, asyncio.get_running_loop().time() + seconds)
        self._cut = True
        self._changed.set()

    async def wait(self, future: asyncio.Future[Any]) -> bool:
        """Wait for `future` within the budget; True when it is done (`problem` set if not)."""
        loop = asyncio.get_running_loop()
        self._end = loop.time() + self._left_s
        try:
            while not future.done() and (left_s := self._end - loop.time()) > 0:
                self._changed.clear()
                await wait_for_either(future, self._changed, left_s)
        finally:
            self._left_s = max(0.0, self._end - loop.time())
            self._end = None
        if not future.done() and self.problem is None:
            self.problem = (
                "cut short by a second signal"
                if self._cut
                else "no answer from redis within stop_timeout_ms"
            )
        return future.done()

    async def attempt(self, what: str, step: Callable[[], Awaitable[T]], default: T) -> T:
        """Run `step()` within the budget; on failure, time-out or skip, note `what` in
        `undone` and return `default`."""
        if self.problem is not None:
            self.undone.append(what)
            return default
        task = asyncio.ensure_future(step())
        try:
            done = await self.wait(task)
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if done and task.exception() is None:
            return task.result()
        self.undone.append(what)
        exc = task.exception() if done else None
        if exc is not None:
            if is_transient(exc):
                self.problem = f"redis unreachable ({exc})"
            else:
                log.error("could not %s: %s: %s", what, type(exc).__name__, exc)
        return default

    def log_end(self, logger: logging.Logger, stopped: str, consequence: str) -> None:
        """Log the end of a stop: INFO `stopped` when nothing was left undone; else a
        WARNING that adds what was left undone, why, and its `consequence`."""
        if self.undone:
            logger.warning("%s; left undone: %s; %s", stopped, self.summary(), consequence)
        else:
            logger.info("%s", stopped)

    def summary(self) -> str:
        """``"release 4 leases, ... (why)"``, or ``""`` when nothing was left undone."""
        if not self.undone:
            return ""
        return f"{', '.join(self.undone)} ({self.problem or 'refused by redis'})"


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


async def close(connection: redis.asyncio.Redis) -> None:
    """Close a client's connections, waiting at most `CLOSE_S` (the server may not answer)."""
    try:
        await asyncio.wait_for(connection.aclose(), CLOSE_S)
    except (TimeoutError, RedisError, OSError) as exc:
        log.warning("closing the redis connections did not finish: %r", exc)


class SignalStop:
    """SIGINT/SIGTERM in `run()`: the first signal starts `stop()`; a second one calls
    `hurry()` (cut the stop short: handlers abandoned, Redis given `CUT_S` more) and logs
    "second signal: exiting now"; if the process is still there `HARD_EXIT_S` later, it
    leaves with os._exit(1)."""

    def __init__(
        self,
        stop: Callable[[], Awaitable[object]],
        hurry: Callable[[], None],
        logger: logging.Logger,
        first_message: str = "signal: stopping (a second signal exits at once)",
    ) -> None:
        self._stop = stop
        self._hurry = hurry
        self._log = logger
        self._first_message = first_message
        self.stopping: asyncio.Future[Any] | None = None
        """The stop the first signal started."""

    def install(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self)

    def __call__(self) -> None:
        if self.stopping is None:
            self._log.info(self._first_message)
            self.stopping = asyncio.ensure_future(self._stop())
            return
        self._log.warning("second signal: exiting now")
        self._hurry()
        asyncio.get_running_loop().call_later(HARD_EXIT_S, _hard_exit, self._log)


def _hard_exit(logger: logging.Logger) -> None:
    logger.error("still not stopped %.1f s after the second signal: exiting", HARD_EXIT_S)
    logging.shutdown()
    sys.stdout.flush()
    os._exit(1)
