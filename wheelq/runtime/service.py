"""Supervised parts of a role (docs/architecture.md, "Service lifecycle")."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Self

from wheelq.core.clock import Clock
from wheelq.runtime.outage import Outage, StopBudget

DEFAULT_MAX_PAUSE_MS = 2000


class Lifecycle:
    """``async with``: enter awaits `start()`, leave awaits `stop()`."""

    async def start(self) -> None:
        return None

    async def stop(self) -> object:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


@dataclass(frozen=True, slots=True)
class PartStopped:
    """What `Service.stop()` stopped: the part, whether in time, and its failures."""

    name: str
    in_time: bool
    failures: int
    last_error: str | None


class Service(Lifecycle):
    """Base of a part: runs `step()` in a loop; one that raises is logged, counted, retried."""

    name = "service"  # Key in ``status()["parts"]``.
    title = "service"  # Name in log lines.

    def __init__(
        self,
        clock: Clock,
        log: logging.Logger,
        *,
        max_pause_ms: int = DEFAULT_MAX_PAUSE_MS,
        title: str | None = None,
    ) -> None:
        self.clock = clock
        self.log = log
        if title is not None:
            self.title = title
        self._outage = Outage(
            log,
            self.title,
            cap_s=max_pause_ms / 1000,
            clock=lambda: clock.now_ms() / 1000,
        )
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._waiter: asyncio.Future[None] | None = None
        self._pausing = False
        self._woken = False
        """A `wake()` came while no `sleep` was under way: the next one returns at once."""
        self._reported = False
        """Set by `failed()`: a step that reported a failure it caught does not reset the count."""
        self.failures = 0  # Failed steps since the last one that returned.
        self.last_error: str | None = None

    @property
    def stopping(self) -> bool:
        return self._stopping

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def status(self) -> dict[str, object]:
        """``{"running", "failures", "last_error"}``: what a health check looks at."""
        return {"running": self.running, "failures": self.failures, "last_error": self.last_error}

    async def start(self) -> None:
        if self._task is None:
            self._stopping = False
            self._task = asyncio.create_task(self._loop(), name=f"wheelq-{self.name}")

    async def stop(self, budget: StopBudget | None = None) -> PartStopped:
        """Stop the task and wait for it (within `budget`, then cancel it); safe twice."""
        self._stopping = True
        self._resolve_waiter()
        task = self._task
        in_time = True
        if task is not None:
            if budget is not None and not await budget.wait(task):
                task.cancel()
                in_time = False
            await asyncio.gather(task, return_exceptions=True)
            self._task = None
        return PartStopped(self.name, in_time, self.failures, self.last_error)

    async def step(self) -> float | None:
        """One round of work; returns seconds until the next round (None: until `wake()`)."""
        raise NotImplementedError

    async def first_wait(self) -> float | None:
        """Seconds before the first step (default 0: at once)."""
        return 0.0

    def wake(self) -> None:
        """End the current `sleep` early, or the next one if a step is running."""
        if self._pausing:
            return
        if self._waiter is None:
            self._woken = True
        else:
            self._resolve_waiter()

    async def sleep(self, seconds: float | None) -> None:
        """Wait `seconds` (None: until woken); returns early on `wake()` or `stop()`."""
        if self._stopping or self._woken:
            self._woken = False
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

    def failed(self, exc: BaseException) -> float:
        """Count and log a failure; returns the pause before the next try."""
        self.failures += 1
        self._reported = True
        self.last_error = f"{type(exc).__name__}: {exc}"[:500]
        return self._outage.failed(exc)

    def still_failing(self) -> None:
        """Keep the failure count through a step that did not retry what failed."""
        self._reported = True

    def succeeded(self) -> None:
        """Note a round that worked: ends the count (and an outage, with one INFO line)."""
        if self.failures:
            self.failures = 0
            self.last_error = None
        self._outage.ok()

    async def _loop(self) -> None:
        wait_s = await self.first_wait()
        if wait_s != 0:
            await self.sleep(wait_s)
        while not self._stopping:
            self._reported = False
            try:
                wait_s = await self.step()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the part lives on: logged, paused, retried
                await self._pause(self.failed(exc))
                wait_s = 0
            else:
                if not self._reported and (self.failures or self._outage.failures):
                    self.succeeded()
            if wait_s == 0:
                await asyncio.sleep(0)  # a step with nothing to await must not starve the loop
            else:
                await self.sleep(wait_s)

    async def _pause(self, seconds: float) -> None:
        self._pausing = True
        self._woken = False
        try:
            await self.sleep(seconds)
        finally:
            self._pausing = False

    def _resolve_waiter(self) -> None:
        if self._waiter is not None:
            _resolve(self._waiter)


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
