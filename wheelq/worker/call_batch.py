"""Single calls from many tasks, sent together: every call made in one turn of the event loop
goes to Redis in one pipeline (one round trip, one connection), whoever made it.

A worker's flow gate makes one or two small calls per job, from as many tasks as it holds
jobs; sent one by one they cost a round trip and a pooled connection each, and a few hundred
held jobs run the pool dry. Batched, they cost one round trip per loop turn.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

from wheelq.store.executor import Call, Executor

T = TypeVar("T")


class CallBatch:
    """Sends the calls made in one event-loop turn as one pipeline.

    Args:
        executor: Where the pipelines go.
    """

    def __init__(self, executor: Executor) -> None:
        self._executor = executor
        self._pending: list[tuple[Call[Any], asyncio.Future[Any]]] = []
        self._scheduled = False
        self.round_trips = 0

    async def call(self, call: Call[T]) -> T:
        """`call`'s parsed reply (or its error), sent with the others of this loop turn."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[T] = loop.create_future()
        self._pending.append((call, done))
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(lambda: asyncio.ensure_future(self._flush()))
        return await done

    async def _flush(self) -> None:
        batch, self._pending, self._scheduled = self._pending, [], False
        self.round_trips += 1
        try:
            replies = await self._executor.run([c for c, _ in batch], return_exceptions=True)
        except BaseException as exc:
            for _, done in batch:
                if not done.done():
                    done.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for (_, done), reply in zip(batch, replies, strict=True):
            if done.done():
                continue  # its caller was cancelled
            if isinstance(reply, BaseException):
                done.set_exception(reply)
            else:
                done.set_result(reply)
