"""What a scheduler node and a worker share around their parts.

Each owns (or borrows) one Redis client, waits for Redis when it starts
(`StartGate`), stops within a `StopBudget`, and runs in the foreground with
`run()`. The parts differ; this shell is written once here.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Generic, TypeVar

import redis.asyncio

from wheelq.runtime.lifecycle import StartGate, StopBudget, close
from wheelq.runtime.service import Lifecycle

R = TypeVar("R")


class Role(Lifecycle, Generic[R]):
    """Base of `Scheduler` and `Worker`: `stop()` returns their report type `R`.

    Args:
        connection: The Redis client; closed by `stop()` only when `owns_connection`
            (``from_url`` made it).
        start_timeout_ms: How long `start()` waits for a Redis not up yet.
        stop_timeout_ms: How long a stop may wait for Redis in all.
        log: The role's logger.
    """

    def __init__(
        self,
        connection: redis.asyncio.Redis,
        start_timeout_ms: int,
        stop_timeout_ms: int,
        log: logging.Logger,
    ) -> None:
        self.redis = connection
        self._gate = StartGate(connection, start_timeout_ms, log)
        self._stop_timeout_s = stop_timeout_ms / 1000
        self._budget: StopBudget | None = None
        self.owns_connection = False
        """Set by ``from_url``: the client is this role's, and `stop()` closes it."""

    async def stop(self) -> R:
        raise NotImplementedError

    def _stop_budget(self) -> StopBudget:
        """The budget of the stop that begins now (`hurry()` cuts it)."""
        self._budget = StopBudget(self._stop_timeout_s)
        return self._budget

    async def _stopped(self) -> None:
        """The end of every stop, whatever happened: no connection outlives the role, and
        `serve()` returns."""
        if self.owns_connection:
            await close(self.redis)
        self._gate.started = False
        self._gate.stopped.set()

    async def serve(self) -> None:
        """Start and run until `stop()` (from another task or a signal handler)."""
        await self.start()
        await self._gate.stopped.wait()

    def run(self) -> R:
        """Run in the foreground until `stop()` or Ctrl-C, then stop gracefully (within
        ``stop_timeout_ms``) and return the stop's report; after a Ctrl-C,
        KeyboardInterrupt is raised once stopped. The library installs no signal
        handlers: the `wheelq` commands also stop on SIGTERM."""
        return asyncio.run(self._serve_then_stop())

    async def _serve_then_stop(self) -> R:
        try:
            await self.serve()
        except asyncio.CancelledError:
            pass  # Ctrl-C: the graceful stop below, then asyncio.run raises KeyboardInterrupt
        except BaseException:
            await self.stop()
            raise
        return await self.stop()

    def hurry(self) -> None:
        """Cut a stop under way short: whatever it still waits for Redis for, it waits no
        longer than a moment."""
        if self._budget is not None:
            self._budget.cut()
