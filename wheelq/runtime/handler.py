"""Running a user's handler: sync in a thread pool, async as a task, with an optional timeout.

`HandlerRunner.run(job)` never raises the handler's exception: it returns
it (or None on success), so the worker decides retry or dead letter in one
place. Cancellation (a worker stopping at once) does propagate.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from wheelq.core.job import Job
from wheelq.errors import HandlerTimeoutError
from wheelq.runtime.threads import HandlerThreads

log = logging.getLogger("wheelq.worker")

Handler = Callable[[Job], Any] | Callable[[Job], Awaitable[Any]]


def is_async(handler: Handler) -> bool:
    """True for ``async def`` functions and objects with an ``async def __call__``."""
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None)  # noqa: B004 (a callable object's method)
    )


class HandlerRunner:
    """Runs one handler; `threads` sizes the pool of a sync handler."""

    def __init__(self, handler: Handler, *, timeout_ms: int, threads: int) -> None:
        if not callable(handler):
            raise TypeError(f"handler must be callable, got {handler!r}")
        self.handler = handler
        self.is_async = is_async(handler)
        self.timeout_s = timeout_ms / 1000 if timeout_ms > 0 else None
        self._pool = (
            None if self.is_async else HandlerThreads(self._call, threads, "wheelq-handler")
        )
        self.stuck_threads = 0
        """Sync handler runs that timed out and are still running in their thread."""

    async def run(self, job: Job) -> Exception | None:
        """Run the handler on `job`; returns the exception it raised (None: success)."""
        deadline = asyncio.timeout(self.timeout_s)
        try:
            async with deadline:
                if self._pool is None:
                    await self.handler(job)
                else:
                    # on a timeout the thread cannot be stopped: it runs on, its outcome dropped
                    await self._pool.submit(job)
            return None
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not (isinstance(exc, TimeoutError) and deadline.expired()):
                return exc
        ms = (self.timeout_s or 0) * 1000
        if self._pool is not None:
            self.stuck_threads += 1
            log.warning("handler ran over %.0f ms on job %s; its thread runs on", ms, job.id)
        return HandlerTimeoutError(f"handler ran over handler_timeout_ms={ms:.0f}")

    def _call(self, job: Job) -> None:
        result = self.handler(job)
        if inspect.isawaitable(result):  # a sync wrapper around a coroutine function
            asyncio.run(_await(result))

    def close(self) -> None:
        """Let the threads go; a stuck sync handler keeps its thread until it returns."""
        if self._pool is not None:
            self._pool.close()


async def _await(awaitable: Awaitable[Any]) -> None:
    await awaitable
