"""Driving a sans-I/O operation: send each list of calls it yields, give it the replies.

A round trip that raises is thrown into the operation, so an operation can handle a
failure (the breaker's `guarded` and the spool's router do); one that does not is ended by
it as before. The operation is closed when the driver stops early (a cancelled task, a
KeyboardInterrupt), so its ``finally`` and ``except GeneratorExit`` run at once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from wheelq.store.executor import Call

if TYPE_CHECKING:
    from wheelq.producer.operations import Op

T = TypeVar("T")


def drive_sync(op: Op[T], send: Callable[[list[Call[Any]]], list[Any]]) -> T:
    """Run `op` to its end with the blocking `send` (an executor's ``run``)."""
    try:
        calls = next(op)
        while True:
            try:
                replies = send(calls)
            except Exception as exc:
                calls = op.throw(exc)
            else:
                calls = op.send(replies)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    finally:
        op.close()


async def drive_async(op: Op[T], send: Callable[[list[Call[Any]]], Awaitable[list[Any]]]) -> T:
    """Run `op` to its end with the awaitable `send`."""
    try:
        calls = next(op)
        while True:
            try:
                replies = await send(calls)
            except Exception as exc:
                calls = op.throw(exc)
            else:
                calls = op.send(replies)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    finally:
        op.close()
