"""Sends the calls made in one event-loop turn together, one batch per key."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Generic, TypeVar

from wheelq.store.call import Call
from wheelq.store.executor import Executor

T = TypeVar("T")
R = TypeVar("R")

Waiting = tuple[T, "asyncio.Future[R]"]  # An item and the future its caller awaits.


class TurnBatch(Generic[T, R]):
    """Gathers the items of one event-loop turn by key and sends each batch with `send`."""

    def __init__(
        self,
        send: Callable[[Any, list[Waiting[T, R]]], Awaitable[None]],
        split: Callable[[list[Waiting[T, R]]], list[list[Waiting[T, R]]]] = lambda w: [w],
    ) -> None:
        self._send, self._split = send, split
        self._waiting: dict[Hashable, list[Waiting[T, R]]] = {}
        self._scheduled = False
        self._tasks: set[asyncio.Task[None]] = set()
        self.batches = 0
        self.items = 0

    async def submit(self, item: T, key: Hashable = None) -> R:
        """`item`'s answer (or its error), sent with the others of this turn and `key`."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[R] = loop.create_future()
        self._waiting.setdefault(key, []).append((item, done))
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._flush)
        return await done

    def _flush(self) -> None:
        self._scheduled = False
        waiting, self._waiting = self._waiting, {}
        for key, items in waiting.items():
            for batch in self._split(items):
                self.batches += 1
                self.items += len(batch)
                task = asyncio.create_task(self._run(key, batch))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _run(self, key: Hashable, batch: list[Waiting[T, R]]) -> None:
        try:
            await self._send(key, batch)
        except BaseException as exc:
            for _, done in batch:
                if not done.done():
                    done.set_exception(exc)
            if not isinstance(exc, Exception):
                raise


class CallBatch(TurnBatch[Call[Any], Any]):
    """Single Redis calls of one turn as one pipeline: one round trip per turn."""

    def __init__(self, executor: Executor) -> None:
        super().__init__(self._pipeline)
        self._executor = executor

    async def call(self, call: Call[R]) -> R:
        """`call`'s parsed reply (or its error)."""
        reply: R = await self.submit(call)
        return reply

    async def _pipeline(self, _: Hashable, batch: list[Waiting[Call[Any], Any]]) -> None:
        replies = await self._executor.run([c for c, _ in batch], return_exceptions=True)
        for (_, done), reply in zip(batch, replies, strict=True):
            if done.done():
                continue  # its caller was cancelled
            if isinstance(reply, BaseException):
                done.set_exception(reply)
            else:
                done.set_result(reply)
