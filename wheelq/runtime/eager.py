"""Eager tasks: on Python 3.12 and later, a coroutine's first step runs at once, inside its
own Task, and the Task goes through the event loop only if the coroutine suspends.

A worker starts one coroutine per job. A no-op or quick handler finishes without ever
waiting, and a trip through the event loop's ready queue costs more than the handler.
Started eagerly (``asyncio.Task(..., eager_start=True)``), such a job is settled before
`start` returns; the Task is current while it runs, so `asyncio.current_task()`,
`asyncio.timeout()` and cancellation mean what they always mean.

Python 3.11 has no eager start, and one cannot be had safely outside asyncio (the first
step would run with the caller's task as the current one, so a handler's
`asyncio.timeout()` would cancel the caller): there each job is an ordinary Task.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

EAGER = sys.version_info >= (3, 12)


def start(coro: Coroutine[Any, Any, T], name: str | None = None) -> asyncio.Task[T]:
    """`coro` as a Task, its first step run at once where the Python has eager tasks."""
    loop = asyncio.get_running_loop()
    if EAGER:
        task: asyncio.Task[T] = asyncio.Task(coro, loop=loop, name=name, eager_start=True)  # type: ignore[call-arg,unused-ignore]
        return task
    return loop.create_task(coro, name=name)
