"""Threads for sync handlers: started on demand, results handed back to the loop in batches.

`run_in_executor` costs a future pair and a wake-up of the event loop per job. Here each
thread takes jobs from one queue, and finished jobs are collected and handed back with one
`call_soon_threadsafe` for as many as finished meanwhile, so under load the loop wakes once
per batch, not once per job.

- **On demand.** A thread is started only when a job is submitted and every thread is
  taken (so ``concurrency=10000`` with one job starts one thread), up to `limit`.
- **Time limits start when the job starts.** A job's clock starts when a thread takes it
  up (a job waiting in the queue is never charged); its future fails with `RanOver` once it
  has run `timeout_s`. A thread cannot be stopped: it runs on, *wedged*, its outcome
  dropped. The thread records its start time, and the loop checks it when the limit is due,
  so this costs no extra wake-up per job.
- **Wedged threads are replaced.** A wedged thread does not count against `count`: new jobs
  get new threads, up to `limit` threads in all. When a wedged thread's handler finally
  returns and the pool has more than `count` threads besides the wedged ones, it retires.
- A job whose future was cancelled (the worker is stopping) before a thread took it up is
  not run; one already running runs on in its thread, its outcome dropped.
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
from collections import deque
from collections.abc import Callable
from time import monotonic  # see _Run.started: why not the worker's Clock
from typing import Any


class RanOver(Exception):
    """A job ran past the pool's time limit; its thread runs on, wedged, until it returns."""


class _Run:
    """One submitted job. `started` and `ended` are written by its thread, `waiting` and
    `ran_over` by the loop (`ended` and `ran_over` under the pool's lock)."""

    __slots__ = ("arg", "ended", "future", "ran_ms", "ran_over", "started", "timer", "waiting")

    def __init__(self, future: asyncio.Future[None], arg: Any) -> None:
        self.future = future
        self.arg = arg
        self.started: float | None = None
        """`time.monotonic()` when its thread took it up. Time limits are measured on the
        clock the event loop's timers (`call_later`) run on, which is `time.monotonic`:
        the thread stamps the start and the loop's timer compares against it, so both
        must read that clock, not the worker's injected `Clock` (a test's `ManualClock`
        cannot drive a running thread or a loop timer)."""
        self.ended = False
        self.ran_ms: float | None = None
        """How long `fn` ran on its thread (None: it did not run)."""
        self.waiting = False
        """Its limit came due before it started: its thread arms the limit when it starts."""
        self.ran_over = False
        self.timer: asyncio.TimerHandle | None = None


class HandlerThreads:
    """Runs `fn(arg)` for each submitted arg on up to `count` threads at once (plus
    replacements of wedged ones, `limit` threads in all), each run limited to `timeout_s`
    (None: no limit)."""

    def __init__(
        self,
        fn: Callable[[Any], Any],
        count: int,
        name: str,
        *,
        timeout_s: float | None = None,
        limit: int | None = None,
    ) -> None:
        self._fn = fn
        self.count = count
        self.limit = max(count, limit or count)
        self._name = name
        self._timeout_s = timeout_s
        self._queue: queue.SimpleQueue[_Run | None] = queue.SimpleQueue()
        self._done: deque[tuple[_Run, BaseException | None]] = deque()
        self._lock = threading.Lock()
        self._notified = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._numbers = itertools.count()
        self._unsettled = 0
        """Runs submitted whose outcome has not come back to the loop yet (loop only)."""
        self.ran: Callable[[float], None] | None = None
        """Told, on the loop, how long each run took on its thread (ms): its own time, not
        the time it queued (the worker's read-ahead paces itself on it)."""
        self.threads = 0
        """Live threads (changed under the lock)."""
        self.wedged = 0
        """Threads still running a job that ran over its limit (changed under the lock)."""

    def submit(self, arg: Any) -> asyncio.Future[None]:
        """Queue `fn(arg)`; the future resolves (or fails) when it has run, or fails with
        `RanOver` when it has run `timeout_s`."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        run = _Run(loop.create_future(), arg)
        self._unsettled += 1
        threads = self.threads  # every thread is taken and there is room: one more
        if (
            self._unsettled > threads
            and threads - self.wedged < self.count
            and threads < self.limit
        ):
            self._start_thread()
        self._queue.put(run)
        if self._timeout_s is not None:
            run.timer = loop.call_later(self._timeout_s, self._check, run)
        return run.future

    def close(self) -> None:
        """Let the threads end once the queue is empty (a running job finishes first). Jobs
        submitted afterwards get new threads (a worker may be started again)."""
        with self._lock:
            closing, self.threads = self.threads, 0
        for _ in range(closing):
            self._queue.put(None)

    def _start_thread(self) -> None:
        with self._lock:
            self.threads += 1
        name = f"{self._name}-{next(self._numbers)}"
        threading.Thread(target=self._work, name=name, daemon=True).start()

    def _work(self) -> None:
        while (run := self._queue.get()) is not None:
            outcome: BaseException | None = None
            if not run.future.cancelled():  # else given up before it started: not run
                run.started = monotonic()
                if run.waiting:  # its limit came due while it queued: the clock starts now
                    self._call_soon(self._check, run)
                try:
                    self._fn(run.arg)
                except BaseException as exc:  # handed to the awaiting task as it is
                    outcome = exc
                run.ran_ms = (monotonic() - run.started) * 1000
            if not self._finished(run, outcome):
                return

    def _finished(self, run: _Run, outcome: BaseException | None) -> bool:
        """Hand `run`'s outcome to the loop; False when this thread should end (it retires,
        or the loop is closed)."""
        with self._lock:
            run.ended = True
            if run.ran_over:
                self.wedged -= 1
            retire = self.threads - self.wedged > self.count and self._queue.empty()
            if retire:
                self.threads -= 1
            self._done.append((run, outcome))
            notify = not self._notified
            self._notified = True
        if notify and not self._call_soon(self._deliver):
            return False
        return not retire

    def _call_soon(self, callback: Callable[..., None], *args: Any) -> bool:
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:  # the loop is closed: nobody awaits these any more
            return False
        return True

    def _check(self, run: _Run) -> None:
        """On the loop, when `run`'s limit may be due: fail its future if it ran over."""
        assert self._timeout_s is not None and self._loop is not None
        if run.future.done():
            return
        if run.started is None:
            run.waiting = True
            if run.started is None:  # read again: its thread may have just taken it up
                return
        left = run.started + self._timeout_s - monotonic()
        if left > 0:
            run.timer = self._loop.call_later(left, self._check, run)
            return
        with self._lock:
            if run.ended:
                return  # it finished in time; its outcome is on its way
            run.ran_over = True
            self.wedged += 1
        run.future.set_exception(RanOver())

    def _deliver(self) -> None:
        with self._lock:
            finished = list(self._done)
            self._done.clear()
            self._notified = False
        self._unsettled -= len(finished)
        ran = self.ran
        for run, outcome in finished:
            if ran is not None and run.ran_ms is not None:
                ran(run.ran_ms)
            if run.timer is not None:
                run.timer.cancel()
            future = run.future
            if future.done():
                continue  # ran over its limit, or cancelled: the worker stopped
            if outcome is None:
                future.set_result(None)
            else:
                future.set_exception(outcome)
