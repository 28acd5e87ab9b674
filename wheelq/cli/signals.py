"""SIGINT/SIGTERM for the `wheelq scheduler` and `wheelq worker` commands.

The only place wheelq handles signals and ends the process: the first signal
starts a graceful stop, a second one cuts it short, and if the process is
still there `HARD_EXIT_S` later it leaves with ``os._exit(1)``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any, TypeVar

from wheelq.cli import heap
from wheelq.runtime.role import Role

R = TypeVar("R")

FIRST_MESSAGE = "signal: stopping (a second signal exits at once)"
HARD_EXIT_S = 1.0
"""After a second signal, the process leaves with os._exit if it is still there this much later."""


class SignalStop:
    """SIGINT/SIGTERM in `run()`: the first signal starts `stop()`; a second one calls
    `hurry()` (cut the stop short: handlers abandoned, Redis given `CUT_S` more) and logs
    "second signal: exiting now"; if the process is still there `HARD_EXIT_S` later, it
    leaves with os._exit(1)."""

    def __init__(
        self,
        stop: Callable[[], Awaitable[object]],
        hurry: Callable[[], None],
        logger: logging.Logger,
        first_message: str = "signal: stopping (a second signal exits at once)",
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
    """Run `node` in the foreground until SIGINT or SIGTERM, then stop it gracefully; a
    second signal calls `hurry()`. Returns the stop's report. `beside` makes what runs on
    the same loop for as long as the node does, entered before it starts and left after
    it stopped (the metrics server)."""

    async def main() -> R:
        on_signal = SignalStop(node.stop, node.hurry, logger, first_message)
        on_signal.install()
        async with beside() if beside is not None else nullcontext():
            # Everything loaded so far (modules, classes, the node) lives as long as the
            # process: out of the cyclic collector's full passes, which otherwise scan it
            # all again every few seconds under load and hold the loop for tens of ms (a
            # scheduler node's 20,000-job burst fired 30-40 ms later for it); and those
            # passes rarer (wheelq.cli.heap).
            heap.settle()
            await node.serve()
            if on_signal.stopping is not None:
                return await on_signal.stopping  # type: ignore[no-any-return]
            return await node.stop()

    return asyncio.run(main())
