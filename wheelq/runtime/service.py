"""The lifecycle every long-running piece shares: start(), stop(), async with.

A service runs one asyncio task (`_run`). `stop()` sets the stopping flag,
wakes any wait made with `sleep`, and waits for the task to end, so a
shutdown never waits out a tick or a poll interval.
"""

from __future__ import annotations

import asyncio
import logging
from types import TracebackType
from typing import Self

log = logging.getLogger("wheelq")


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

    async def stop(self) -> None:
        """Stop the task promptly and wait for it; safe to call twice."""
        self._stopping = True
        self.wake()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
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


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
