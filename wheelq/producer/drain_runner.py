"""The loop around the spool's `Drain`: a thread for `Client`, a task for `AsyncClient`.

Both wait until the spool has something to replay (an enqueue spooled jobs, or the client
found jobs in the file when it opened it), then step until it is empty, pausing with
backoff after a failed step. Stopping wakes any wait and leaves the rows it did not replay
in the file, for the next client on it: a step cut off after it was sent is safe to repeat
(see `wheelq.producer.drain`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from wheelq.producer.breaker import Breaker
from wheelq.producer.drain import Drain
from wheelq.producer.drive import drive_async, drive_sync
from wheelq.producer.operations import Producer
from wheelq.producer.spool import Spool
from wheelq.producer.spooler import Spooler
from wheelq.runtime.clock import WallClock
from wheelq.store.executor import Call

SendSync = Callable[[list[Call[Any]]], list[Any]]
SendAsync = Callable[[list[Call[Any]]], Awaitable[list[Any]]]
R = TypeVar("R", "DrainThread", "DrainTask")
CLOSE_WAIT_S = 5.0  # how long close() waits for the thread once the connections are closed


def attach_spool(
    producer: Producer,
    breaker: Breaker,
    path: str | os.PathLike[str] | None,
    runner: Callable[[Drain], R],
) -> R | None:
    """Open the spool at `path` and route `producer`'s enqueues through it; returns the
    drain's runner (`DrainThread` or `DrainTask`, made by `runner`). None: no spool.

    Raises:
        SpoolLockedError: Another client has the file open.
        SpoolError: It cannot be used as a spool.
    """
    if path is None:
        return None
    clock = WallClock()
    spool = Spool(path)
    made = runner(Drain(spool, producer, breaker, clock))
    producer.spooler = Spooler(spool, clock, made.wake)
    return made


class DrainThread:
    """The sync client's drain: a daemon thread, started at once. `send` sends a round
    with ``return_exceptions=True``."""

    def __init__(self, drain: Drain, send: SendSync) -> None:
        self.drain = drain
        self._send = send
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="wheelq-spool-drain", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Something was spooled."""
        self._wake.set()

    def close(self, disconnect: Callable[[], None]) -> None:
        """Stop the loop and close the spool. `disconnect` closes the client's connections:
        it ends a step waiting on Redis (and is called again after, for a connection the
        step may have opened meanwhile)."""
        self._stopping.set()
        self._wake.set()
        disconnect()
        self._thread.join(CLOSE_WAIT_S)
        disconnect()
        self.drain.spool.close()

    def _loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.clear()
            if not self.drain.pending():
                self._wake.wait()
                continue
            try:
                drive_sync(self.drain.step(), self._send)
            except Exception as exc:
                if self._stopping.is_set():
                    return  # the close cut the step short: what is left stays in the file
                self._stopping.wait(self.drain.failed(exc))
            else:
                self.drain.succeeded()


class DrainTask:
    """The async client's drain: a task on the loop the client is used on, started by
    `start()` (from a coroutine: the client starts it at its first call or ``async with``)."""

    def __init__(self, drain: Drain, send: SendAsync) -> None:
        self.drain = drain
        self._send = send
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the task on the running loop, unless it runs already."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._loop(), name="wheelq-spool-drain"
            )

    def wake(self) -> None:
        """Something was spooled."""
        self._wake.set()

    async def close(self) -> None:
        """Cancel the task, in a step or not, wait for it to end, and close the spool.

        The loop also checks a stop flag: a cancellation that a redis-py call swallows (it
        can turn one into a connection error) still ends it."""
        self._stopping.set()
        self._wake.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.drain.spool.close()

    async def _loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.clear()
            if not self.drain.pending():
                await self._wake.wait()
                continue
            try:
                await drive_async(self.drain.step(), self._send)
            except Exception as exc:
                if self._stopping.is_set():
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), self.drain.failed(exc))
            else:
                self.drain.succeeded()
