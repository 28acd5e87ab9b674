"""The long-running `wheelq` processes: their signals (stop, hurry, hard exit), their exit
and their collector policy (docs/architecture.md, "Performance targets").
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any, TypeVar

from wheelq.runtime.role import Role

FULL_PASS_EVERY = 100  # middle-generation passes per full one (CPython's default: 10)


def settle_heap() -> None:
    """Freeze what the process made so far and make full collections rarer."""
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_PASS_EVERY)


R = TypeVar("R")

FIRST_MESSAGE = "signal: stopping (a second signal exits at once)"
HARD_EXIT_S = 1.0  # after a second signal, os._exit if the process is still there


class SignalStop:
    """First signal: `stop()`; second: `hurry()`; `HARD_EXIT_S` later: os._exit(1)."""

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


class SignalFlag:
    """Raised by a signal, waited for by a loop on the main thread, without a lock.

    For a blocking process (no event loop): ``flag = SignalFlag(signal.SIGTERM)``, then
    ``while not flag.wait(0.05): ...``. The handler only notes the signal and writes a
    byte to a pipe that `wait` sleeps on, so it can run anywhere. A handler that calls
    `threading.Event.set` cannot: Python runs handlers on the main thread between two
    bytecodes, possibly inside that thread's own ``Event.wait`` while it holds the Event's
    lock (a plain, non-reentrant one), and `set` then waits for that lock for ever (issue
    43 item 19: a producer did not exit after SIGTERM).
    """

    POLL_S = 0.1
    """Longest sleep of `wait` between looks at the flag: a signal that the kernel hands
    to another thread runs its handler on the main thread only once that thread wakes."""

    def __init__(self, *signals: int) -> None:
        """Install the handler for `signals` (default SIGINT and SIGTERM)."""
        self.received: int | None = None
        """The last signal received; None until one is."""
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._before = {
            sig: signal.signal(sig, self._handle)
            for sig in signals or (signal.SIGINT, signal.SIGTERM)
        }

    def _handle(self, signum: int, _frame: object) -> None:
        self.received = signum
        with contextlib.suppress(OSError):  # full: a byte is there already
            os.write(self._write, b"!")

    def is_set(self) -> bool:
        return self.received is not None

    def wait(self, timeout_s: float | None = None) -> bool:
        """Sleep until a signal came or `timeout_s` passed (None: no limit); returns
        `is_set()`."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not self.is_set():
            left = self.POLL_S if deadline is None else deadline - time.monotonic()
            if left <= 0:
                break
            select.select([self._read], [], [], min(left, self.POLL_S))
        return self.is_set()

    def close(self) -> None:
        """Put back the handlers there were before and close the pipe."""
        for sig, handler in self._before.items():
            signal.signal(sig, handler)
        os.close(self._read)
        os.close(self._write)


TERMINATED = 128 + signal.SIGTERM
"""The exit status of a command that SIGTERM ended before it took the signal itself."""


@contextlib.contextmanager
def exit_on_sigterm() -> Iterator[None]:
    """While the block runs, SIGTERM ends the process as its default action would (status
    `TERMINATED`), but by raising `SystemExit`, so ``finally`` blocks run; a command that
    stops gracefully installs its own handler over this one. As PID 1 in a container the
    kernel gives no default action to a signal without a handler: without this, a command
    not yet running its stop handler (importing, reading its settings) or with none
    (`wheelq demo`) would ignore ``podman stop`` and Kubernetes until their SIGKILL."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers (a test calling `main` in a thread)
        return
    before = signal.getsignal(signal.SIGTERM)
    if before is not signal.SIG_DFL:  # someone has a handler already (an embedding program)
        yield
        return
    signal.signal(signal.SIGTERM, _terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def _terminated(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


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
    """Run `node` (and `beside` on its loop) until SIGINT or SIGTERM; returns the stop's report."""

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
