"""Long-lived threads for sync handlers, handing results back to the event loop in batches.

`run_in_executor` costs a future pair and a wake-up of the event loop per job. Here each
thread takes jobs from one queue, and finished jobs are collected and handed back with one
`call_soon_threadsafe` for as many as finished meanwhile, so under load the loop wakes once
per batch, not once per job. A job whose future was cancelled (its handler timed out, or
the worker is stopping) runs on in its thread; its outcome is dropped.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections import deque
from collections.abc import Callable
from typing import Any


class HandlerThreads:
    """`count` threads running `fn(arg)` for each submitted arg."""

    def __init__(self, fn: Callable[[Any], Any], count: int, name: str) -> None:
        self._fn = fn
        self._count = count
        self._name = name
        self._queue: queue.SimpleQueue[tuple[asyncio.Future[None], Any] | None] = (
            queue.SimpleQueue()
        )
        self._done: deque[tuple[asyncio.Future[None], BaseException | None]] = deque()
        self._lock = threading.Lock()
        self._notified = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._threads: list[threading.Thread] = []

    def submit(self, arg: Any) -> asyncio.Future[None]:
        """Queue `fn(arg)`; the future resolves (or fails) when it has run."""
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
            for i in range(self._count):
                thread = threading.Thread(target=self._work, name=f"{self._name}-{i}", daemon=True)
                thread.start()
                self._threads.append(thread)
        future: asyncio.Future[None] = loop.create_future()
        self._queue.put((future, arg))
        return future

    def close(self) -> None:
        """Let the threads end once the queue is empty (a running job finishes first)."""
        for _ in self._threads:
            self._queue.put(None)

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            future, arg = item
            outcome: BaseException | None = None
            try:
                self._fn(arg)
            except BaseException as exc:  # handed to the awaiting task as it is
                outcome = exc
            with self._lock:
                self._done.append((future, outcome))
                if self._notified:
                    continue
                self._notified = True
            assert self._loop is not None
            try:
                self._loop.call_soon_threadsafe(self._deliver)
            except RuntimeError:  # the loop is closed: nobody awaits these any more
                return

    def _deliver(self) -> None:
        with self._lock:
            finished = list(self._done)
            self._done.clear()
            self._notified = False
        for future, outcome in finished:
            if future.done():
                continue  # cancelled: timed out, or the worker stopped
            if outcome is None:
                future.set_result(None)
            else:
                future.set_exception(outcome)
