"""`Role`, the shell a scheduler node and a worker share."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import redis.asyncio
import redis.asyncio.cluster

from wheelq.core.settings import RoleSettings
from wheelq.runtime import heartbeat
from wheelq.runtime.outage import StartGate, StopBudget, close
from wheelq.runtime.service import Lifecycle
from wheelq.store.executor import AsyncExecutor

R = TypeVar("R")

Connection = redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster | AsyncExecutor
"""A redis-py asyncio client, plain or cluster (or the executor ``from_url`` made)."""


def executor_of(connection: Connection) -> AsyncExecutor:
    if isinstance(connection, AsyncExecutor):
        return connection
    return AsyncExecutor(connection)  # type: ignore[arg-type]


class Role(Lifecycle, Generic[R]):
    """Base of `Scheduler` and `Worker`; closes the client on stop only if it made it."""

    def __init__(
        self,
        executor: AsyncExecutor,
        start_timeout_ms: int,
        stop_timeout_ms: int,
        log: logging.Logger,
    ) -> None:
        self._executor = executor
        self._gate = StartGate(executor, start_timeout_ms, log)
        self._stop_timeout_s = stop_timeout_ms / 1000
        self._budget: StopBudget | None = None
        self.owns_connection = False
        """Set by ``from_url``: the client is this role's, and `stop()` closes it."""
        self._beating: heartbeat.Beating | None = None

    @property
    def redis(self) -> redis.asyncio.Redis:
        """The redis-py client in use (the cluster client on a cluster, once started)."""
        return self._executor.client

    @property
    def executor(self) -> AsyncExecutor:
        """What the role's calls go through (for reads beside the role: `wheelq.metrics`)."""
        return self._executor

    @property
    def cluster(self) -> bool:
        return self._executor.cluster

    @property
    def ready(self) -> bool:
        """Started (Redis reached, every part running) and no stop begun: what a readiness
        probe asks (``/readyz`` of `wheelq.metrics.MetricsServer`)."""
        return self._gate.up

    @property
    def waiting_for_redis(self) -> str | None:
        """While `start()` waits for Redis: why (``"unreachable"``, ``"oom"``, ``"readonly"``,
        ``"busy"``, ...: `wheelq.runtime.outage.unavailable_reason`); else None."""
        return self._gate.waiting

    async def stop(self) -> R:
        raise NotImplementedError

    async def _start_through_gate(self, start: Callable[[], Awaitable[None]]) -> None:
        """`StartGate.run(start)`; a failed start closes what the role owns."""
        try:
            await self._gate.run(start)
        except BaseException:
            if self.owns_connection:
                await close(self._executor)
            raise
        if not self._gate.started and self.owns_connection:  # aborted by stop() while waiting
            await close(self._executor)  # for Redis: the wait's connection goes with it

    async def _join_processes(self, snapshot: heartbeat.Snapshot, settings: RoleSettings) -> None:
        """Put the role in its process's heartbeat record (the process list)."""
        if self._beating is None:
            self._beating = await heartbeat.join(
                self._executor, snapshot, settings.process_beat_ms, settings.process_ttl_ms
            )

    async def _leave_processes(self, budget: StopBudget | None) -> None:
        """Take the role off its process's record (the last one: the process off the list)."""
        beating, self._beating = self._beating, None
        if beating is not None:
            await beating.leave(budget)

    @property
    def process_id(self) -> str | None:
        """The id of this role's process in the process list (None: not started)."""
        return None if self._beating is None else self._beating.heartbeat.process_id

    def _stop_budget(self) -> StopBudget:
        """The budget of the stop that begins now (`hurry()` cuts it)."""
        self._budget = StopBudget(self._stop_timeout_s)
        return self._budget

    async def _stopped(self) -> None:
        """The end of every stop: no connection outlives the role, and `serve()` returns."""
        if self.owns_connection:
            await close(self._executor)
        self._gate.started = False
        self._gate.stopped.set()

    async def serve(self) -> None:
        """Start and run until `stop()` (from another task or a signal handler)."""
        await self.start()
        await self._gate.stopped.wait()

    def run(self) -> R:
        """Run until `stop()` or Ctrl-C, then stop gracefully; re-raises KeyboardInterrupt after."""
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
        """Cut a stop under way short: wait for Redis no longer than a moment."""
        if self._budget is not None:
            self._budget.cut()
