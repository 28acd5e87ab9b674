"""Run a module as ``__main__`` with its stop signals handled at the worst moment, every time.

Usage: python -m tests.support.signal_race MODULE ARGS...

Python runs a signal's handler on the main thread between two bytecodes, so it may run
while that thread is inside ``threading.Event.wait`` holding the Event's lock (a plain,
non-reentrant one): a handler that calls ``set()`` on that Event then waits for that lock
for ever. A real process is inside that window only now and then (2 of 640 small
processes hung on a SIGTERM; a chaos-soak producer did not exit: issue 43 item 19).

Here the handlers the module installs for SIGINT and SIGTERM run, as Python would run
them, on the main thread, but always inside its next wait: in `threading.Event.wait` with a
timeout, which holds the Event's lock for the whole wait (a real one holds it for a moment
at each end), or in `select.select`. A signal sent at any time is thus handled with the
Event's lock held when the process waits for its stop on an Event, and with no lock at all
when it waits on `wheelq.cli.signals.SignalFlag` (a pipe and ``select``).
"""

from __future__ import annotations

import contextlib
import runpy
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, ClassVar

STOPS = {signal.SIGINT, signal.SIGTERM}
Handler = Callable[[int, FrameType | None], Any]

_event_wait = threading.Event.wait
_select = select.select
_signal = signal.signal


class _Held:
    """The stop handlers held back until the main thread waits, and whether it does now."""

    pending: ClassVar[list[tuple[Handler, int]]] = []
    waiting = False


def _deferred(handler: Handler) -> Handler:
    def run(signum: int, frame: FrameType | None) -> None:
        if _Held.waiting:
            handler(signum, frame)
        else:
            _Held.pending.append((handler, signum))

    return run


def _install(sig: int, handler: Any) -> Any:
    if sig in STOPS and callable(handler):
        return _signal(sig, _deferred(handler))
    return _signal(sig, handler)


@contextlib.contextmanager
def _handled_here() -> Iterator[None]:
    """Run the stop handlers held back so far, and any that comes until the block ends."""
    if not _main_thread():
        yield
        return
    _Held.waiting = True
    try:
        while _Held.pending:
            handler, signum = _Held.pending.pop(0)
            handler(signum, None)
        yield
    finally:
        _Held.waiting = False


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _wait_holding_the_lock(self: threading.Event, timeout: float | None = None) -> bool:
    if timeout is None or not _main_thread():
        return _event_wait(self, timeout)
    with self._cond, _handled_here():  # type: ignore[attr-defined]
        if not self.is_set():
            time.sleep(timeout)
        return self.is_set()


def _select_handling(*args: Any) -> Any:
    with _handled_here():
        return _select(*args)


def main() -> None:
    module, sys.argv = sys.argv[1], sys.argv[1:]
    signal.signal = _install
    threading.Event.wait = _wait_holding_the_lock  # type: ignore[method-assign]
    select.select = _select_handling
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
