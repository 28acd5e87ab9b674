"""Starting and stopping a scheduler node or a worker: waiting for Redis, bounded stops.

`StartGate` is what `start()` does before anything else: PING with backoff until
Redis answers, ``start_timeout_ms`` runs out, or `stop()` aborts the wait.
`StopBudget` is what a stop may still spend waiting for Redis
(``stop_timeout_ms``), shared by its steps, so a stop is bounded even when Redis
does not answer. `close` closes a client's connections without hanging.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis.asyncio
from redis.exceptions import RedisError

from wheelq.errors import RedisUnavailableError, UnsupportedServerError
from wheelq.runtime.outage import Backoff, address, is_transient, wait_for_either
from wheelq.store import nodes
from wheelq.store.executor import AsyncExecutor

log = logging.getLogger(__name__)

T = TypeVar("T")

MIN_REDIS = (7, 0)
"""The oldest server a role starts on: its scripts use SPUBLISH (Redis 7.0, Valkey 7.2)."""

MIN_PING_WAIT_S = 1.0
"""start(): each PING may take this long even when less of start_timeout_ms is left."""
CUT_S = 0.25
"""What a stop's budget shrinks to on a second signal: a last chance for calls that
answer at once (a healthy Redis), nothing for one that does not."""
CLOSE_S = 1.0
"""Longest wait for a client's connections to close at the end of a stop."""


class StartGate:
    """What `start()` and `stop()` of a scheduler node or a worker share.

    `run(start)` waits for Redis (PING with backoff, logging once when it begins to
    wait and once when it got through), then runs `start`. Only transient errors
    (refused, reset, timed out, still loading) are waited out, for up to
    ``start_timeout_ms``; any other fails at once. `abort()`, from `stop()`,
    ends a wait under way at once and waits for a start under way to end. `stopped` is
    set when the start failed or was aborted, and by the owner when it has stopped.

    Once Redis answers, it asks the executor to find out whether the server is a
    cluster node (`AsyncExecutor.resolve`), so the start sees the client it will use, and
    refuses a server older than `MIN_REDIS` with `UnsupportedServerError`.

    Args:
        executor: What the PINGs go through; its client's server is waited for.
        timeout_ms: Longest wait (``start_timeout_ms``); 0: one try, failing at once.
        log: Where the two log lines go.
    """

    def __init__(self, executor: AsyncExecutor, timeout_ms: int, log: logging.Logger):
        self._executor = executor
        self._timeout_s = timeout_ms / 1000
        self._log = log
        self._aborted = asyncio.Event()
        self._ready: asyncio.Event | None = None
        self.started = False
        """True from `run()` on; back to False when the start fails or is aborted, and
        when the owner begins to stop."""
        self.stopped = asyncio.Event()

    async def run(self, start: Callable[[], Awaitable[None]]) -> None:
        """Wait for Redis, then `start()`; nothing if started already, and nothing more
        when `abort()` ends the wait.

        Raises:
            RedisUnavailableError: Only transient errors for ``start_timeout_ms``; the
                last one is its cause.
            UnsupportedServerError: The server is older than `MIN_REDIS`.
            InvalidArgumentError: A plain client was given for a cluster node.
            redis.exceptions.RedisError: Any other error (wrong password, ...), at once.
        """
        if self.started:
            return
        self.started = True
        self.stopped = asyncio.Event()
        self._ready = asyncio.Event()
        self._aborted.clear()
        try:
            if await self._wait():
                await self._executor.resolve()
                await self._check_version()
                await start()
                return
            self.started = False
            self.stopped.set()
        except BaseException:
            self.started = False
            self.stopped.set()
            raise
        finally:
            self._ready.set()

    async def _check_version(self) -> None:
        (version,) = await self._executor.run([nodes.server_version()])
        if version < MIN_REDIS:
            where = address(self._executor.client)
            raise UnsupportedServerError(
                f"the server at {where} is Redis {'.'.join(map(str, version))}; wheelq needs "
                f"Redis >= {'.'.join(map(str, MIN_REDIS))} or Valkey >= 7.2 (sharded pub/sub)"
            )

    async def abort(self) -> bool:
        """End a wait for Redis under way at once, and wait for the start to end; returns
        `started`."""
        self._aborted.set()
        if self._ready is not None:
            await self._ready.wait()
        return self.started

    async def _wait(self) -> bool:
        loop = asyncio.get_running_loop()
        began = loop.time()
        deadline = began + self._timeout_s
        backoff = Backoff()
        where = address(self._executor.client)
        waited = False
        while True:
            ping: asyncio.Future[Any] = asyncio.ensure_future(self._executor.run([nodes.ping()]))
            timeout_s = max(MIN_PING_WAIT_S, deadline - loop.time())
            await wait_for_either(ping, self._aborted, timeout_s)
            if not ping.done() or self._aborted.is_set():
                ping.cancel()
                await asyncio.gather(ping, return_exceptions=True)
                if self._aborted.is_set():
                    return False
            if not ping.cancelled() and ping.exception() is None:
                if waited:
                    self._log.info("redis at %s reachable after %.1f s", where, loop.time() - began)
                return True
            exc = _failure(ping)
            if not is_transient(exc):
                raise exc
            left_s = deadline - loop.time()
            if left_s <= 0:
                raise RedisUnavailableError(
                    f"redis at {where} not reachable within start_timeout_ms="
                    f"{self._timeout_s * 1000:.0f} ({exc})"
                ) from exc
            if not waited:
                waited = True
                self._log.warning(
                    "redis at %s not reachable (%s), retrying for up to %g s",
                    where,
                    exc,
                    self._timeout_s,
                )
            never = loop.create_future()  # the pause: only the time or abort() ends it
            await wait_for_either(never, self._aborted, min(left_s, backoff.next_s()))
            if self._aborted.is_set():
                return False


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


async def close(connection: redis.asyncio.Redis | AsyncExecutor) -> None:
    """Close a client's (or an executor's clients') connections, waiting at most `CLOSE_S`
    (the server may not answer)."""
    try:
        await asyncio.wait_for(connection.aclose(), CLOSE_S)
    except (TimeoutError, RedisError, OSError) as exc:
        log.warning("closing the redis connections did not finish: %r", exc)


def _failure(ping: asyncio.Future[Any]) -> BaseException:
    if ping.cancelled():  # it took longer than the time that was left
        return TimeoutError("no answer to PING in time")
    exc = ping.exception()
    assert exc is not None
    return exc
