"""Waiting for a condition with a deadline: the suite's only way to wait (no bare sleeps)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

POLL_S = 0.02


async def eventually(check: Callable[[], Awaitable[T]], *, timeout_s: float, what: str) -> T:
    """Poll `check` until it returns a truthy value; fail the test after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(POLL_S)


def eventually_sync(check: Callable[[], T], *, timeout_s: float, what: str) -> T:
    """Blocking `eventually`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(POLL_S)


async def until(predicate: Callable[[], object], *, timeout_s: float = 5, what: str) -> None:
    """`eventually` for a plain (not awaitable) condition on state the test can read."""

    async def check() -> bool:
        return bool(predicate())

    await eventually(check, timeout_s=timeout_s, what=what)
