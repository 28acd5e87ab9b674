"""The long-running `wheelq` processes: their signals, their exit, their collector policy.

The only place wheelq handles signals and ends the process: the first SIGINT/SIGTERM
starts a graceful stop, a second one cuts it short, and if the process is still there
`HARD_EXIT_S` later it leaves with ``os._exit(1)``. `settle_heap` freezes what a started
process made and makes the collector's full passes rarer (docs/architecture.md,
Performance targets: a full pass over a loaded wheel held the loop for 4-10 ms).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any, TypeVar

from wheelq.runtime.role import Role

FULL_PASS_EVERY = 100
"""Middle-generation passes per full one (CPython's default: 10)."""


def settle_heap() -> None:
    """Freeze what the process made so far and make full passes `FULL_PASS_EVERY` times
    rarer than the young ones' default rhythm."""
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_PASS_EVERY)


R = TypeVar("R")

FIRST_MESSAGE = "signal: stopping (a second signal exits at once)"
HARD_EXIT_S = 1.0
"""After a second signal, the process leaves with os._exit if it is still there this much later."""


class SignalStop:
    """The signal handler: the first signal starts `stop()`, a second calls `hurry()`, and
    `HARD_EXIT_S` later the process leaves with os._exit(1) if it is still there."""

    def __init__(
        self,
        stop: Callable[[], Awaitable[object]],
        hurry: Callable[[], None],
        logger: logging.Logger,
        first_message: str = FIRST_MESSAGE,
    ) -> None:
        self._stop = stop
        self._hurry = hurry
        self._log = logger
        self._first_message = first_message
        self.stopping: asyncio.Future[Any] | None = None
        """The stop the first signal started."""

    def install(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self)

    def __call__(self) -> None:
        if self.stopping is None:
            self._log.info(self._first_message)
            self.stopping = asyncio.ensure_future(self._stop())
            return
        self._log.warning("second signal: exiting now")
        self._hurry()
        asyncio.get_running_loop().call_later(HARD_EXIT_S, _hard_exit, self._log)


def _hard_exit(logger: logging.Logger) -> None:
    logger.error("still not stopped %.1f s after the second signal: exiting", HARD_EXIT_S)
    exit_now(1)


def exit_now(code: int) -> None:
    """Leave the process at once (threads still running handlers are not waited for)."""
    logging.shutdown()
    sys.stdout.flush()
    os._exit(code)


def run_until_signal(
    node: Role[R],
    logger: logging.Logger,
    first_message: str = FIRST_MESSAGE,
    beside: Callable[[], AbstractAsyncContextManager[object]] | None = None,
) -> R:
    """Run `node` until SIGINT or SIGTERM, stop it, return the stop's report. `beside` makes
    what runs on the same loop while the node does (the metrics server)."""

    async def main() -> R:
        on_signal = SignalStop(node.stop, node.hurry, logger, first_message)
        on_signal.install()
        async with beside() if beside is not None else nullcontext():
            # What is loaded now lives as long as the process: out of the full passes, which
            # held a 20,000-job burst back 30-40 ms.
            settle_heap()
            await node.serve()
            if on_signal.stopping is not None:
                return await on_signal.stopping  # type: ignore[no-any-return]
            return await node.stop()

    return asyncio.run(main())
