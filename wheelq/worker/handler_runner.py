"""Running a user's handler (sync on threads, async as a task); what it came to is returned:
its exception, or its result encoded for the job's record (`Outcome`)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import itertools
import logging
import threading
import types
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Generator, Sequence
from dataclasses import dataclass
from time import monotonic  # see _Run.started: why not the worker's Clock
from types import EllipsisType
from typing import Any, NoReturn, TypeVar, cast

from wheelq.core.context import CURRENT
from wheelq.core.job import Job
from wheelq.core.payload import encode_result
from wheelq.errors import HandlerExitError, HandlerTimeoutError, InvalidHandlerError, ResultError
from wheelq.runtime.tracing import Tracing
from wheelq.worker.slots import TurnQueue

log = logging.getLogger(__name__)

T = TypeVar("T")


class RanOver(Exception):
    """A job ran past the pool's time limit; its thread runs on, wedged, until it returns."""


@dataclass(slots=True, eq=False)
class _Run:
    """One submitted job."""

    future: asyncio.Future[Any]
    fn: Callable[[Any], Any]
    arg: Any
    lane: int
    timeout_s: float | None
    """Its time limit (None: none)."""
    started: float | None = None
    """`time.monotonic()` when a thread took it up (loop timers run on that clock)."""
    ended: bool = False
    ran_ms: float | None = None
    """How long `fn` ran on its thread (None: it did not run)."""
    waiting: bool = False
    """Its limit came due before it started: its thread arms the limit when it starts."""
    ran_over: bool = False
    timer: asyncio.TimerHandle | None = None


class HandlerThreads:
    """Runs `fn(arg)` on up to `count` threads (`limit` with wedged ones).

    The runs of several lanes (a worker's topics) can share the threads: each thread takes
    its next run from the lane whose turn it is, by `weights` or `strict` priority
    (`wheelq.worker.slots.TurnQueue`), so queued runs start in the worker's weighted order.
    """

    def __init__(
        self,
        fn: Callable[[Any], Any] | None,
        count: int,
        name: str,
        *,
        timeout_s: float | None = None,
        limit: int | None = None,
        weights: Sequence[int] = (1,),
        strict: bool = False,
    ) -> None:
        self._fn = fn  # What `submit` runs when given no fn.
        self.count = count
        self.limit = max(count, limit or count)
        self._name = name
        self._timeout_s = timeout_s
        self._queue: TurnQueue[_Run] = TurnQueue(weights, strict=strict)
        self._done: deque[tuple[_Run, BaseException | None, Any]] = deque()
        self._lock = threading.Lock()
        self._notified = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._numbers = itertools.count()
        self._unsettled = 0
        """Runs submitted whose outcome has not come back to the loop yet (loop only)."""
        self.ran: Callable[[float], None] | None = None
        """Told on the loop each run's own time on its thread (ms), for the read-ahead."""
        self.threads = 0  # Live threads (changed under the lock).
        self.wedged = 0
        """Threads still running a job that ran over its limit (changed under the lock)."""
        self.wedged_in = [0] * len(weights)  # `wedged`, by lane (changed under the lock)
        self._runs: dict[asyncio.Future[Any], _Run] = {}
        """Each run by its future, until the future is done (loop only)."""

    def submit(
        self,
        arg: Any,
        fn: Callable[[Any], Any] | None = None,
        lane: int = 0,
        timeout_s: float | EllipsisType | None = ...,
    ) -> asyncio.Future[Any]:
        """Queue `fn(arg)` on `lane`; the future has what it returned, or fails with what it
        raised (`RanOver` after `timeout_s`: the pool's unless given, None for no limit)."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        fn = fn or self._fn
        assert fn is not None, "a pool made without a fn runs the fn given to submit"
        limit = self._timeout_s if timeout_s is ... else timeout_s
        run = _Run(loop.create_future(), fn, arg, lane, limit)
        self._unsettled += 1
        threads = self.threads  # every thread is taken and there is room: one more
        if (
            self._unsettled > threads
            and threads - self.wedged < self.count
            and threads < self.limit
        ):
            self._start_thread()
        self._runs[run.future] = run
        run.future.add_done_callback(self._runs.pop)
        self._queue.put(run, lane)
        if limit is not None:
            run.timer = loop.call_later(limit, self._check, run)
        return run.future

    def running_ms(self, future: asyncio.Future[Any]) -> float | None:
        """How long the run of `future` has run on its thread; None: queued, not started
        (or done)."""
        run = self._runs.get(future)
        started = None if run is None else run.started
        return None if started is None else (monotonic() - started) * 1000

    def close(self) -> None:
        """Let the threads end once the queue is empty (a running job finishes first)."""
        with self._lock:
            closing, self.threads = self.threads, 0
        for _ in range(closing):
            self._queue.wake()

    def _start_thread(self) -> None:
        with self._lock:
            self.threads += 1
        name = f"{self._name}-{next(self._numbers)}"
        threading.Thread(target=self._work, name=name, daemon=True).start()

    def _work(self) -> None:
        while (run := self._queue.get()) is not None:
            outcome: BaseException | None = None
            value: Any = None
            if not run.future.cancelled():  # else given up before it started: not run
                run.started = monotonic()
                if run.waiting:  # its limit came due while it queued: the clock starts now
                    self._call_soon(self._check, run)
                try:
                    value = run.fn(run.arg)
                except BaseException as exc:  # handed to the awaiting task as it is
                    outcome = exc
                run.ran_ms = (monotonic() - run.started) * 1000
            if not self._finished(run, outcome, value):
                return

    def _finished(self, run: _Run, outcome: BaseException | None, value: Any) -> bool:
        """Hand `run`'s outcome to the loop; False when this thread should end."""
        with self._lock:
            run.ended = True
            if run.ran_over:
                self.wedged -= 1
                self.wedged_in[run.lane] -= 1
            retire = self.threads - self.wedged > self.count and self._queue.empty()
            if retire:
                self.threads -= 1
            self._done.append((run, outcome, value))
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
        assert run.timeout_s is not None and self._loop is not None
        if run.future.done():
            return
        if run.started is None:
            run.waiting = True
            if run.started is None:  # read again: its thread may have just taken it up
                return
        left = run.started + run.timeout_s - monotonic()
        if left > 0:
            run.timer = self._loop.call_later(left, self._check, run)
            return
        with self._lock:
            if run.ended:
                return  # it finished in time; its outcome is on its way
            run.ran_over = True
            self.wedged += 1
            self.wedged_in[run.lane] += 1
        run.future.set_exception(RanOver())

    def _deliver(self) -> None:
        with self._lock:
            finished = list(self._done)
            self._done.clear()
            self._notified = False
        self._unsettled -= len(finished)
        ran = self.ran
        for run, outcome, value in finished:
            if ran is not None and run.ran_ms is not None:
                ran(run.ran_ms)
            if run.timer is not None:
                run.timer.cancel()
            future = run.future
            if future.done():
                continue  # ran over its limit, or cancelled: the worker stopped
            if outcome is None:
                future.set_result(value)
            else:
                future.set_exception(outcome)


Handler = Callable[[Job], Any] | Callable[[Job], Awaitable[Any]]

ACCEPTED = "a function taking one wheelq.Job (def or async def)"

Outcome = Exception | bytes | None
"""What a run came to: the exception it raised (or that stands for it), else its result as
msgpack, or None when it returned None (a success that adds nothing to its record)."""


def is_async(handler: Handler) -> bool:
    """True for ``async def`` functions and objects with an ``async def __call__``."""
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None)  # noqa: B004 (a callable object's method)
    )


def check_handler(handler: object) -> Handler:
    """Return `handler` if it can run jobs.

    Raises:
        InvalidHandlerError: It is not callable, is a generator or async generator function
            (its body would never run), or cannot be called with one argument.
    """
    if not callable(handler):
        _refuse(f"got {handler!r}, which is not callable")
    call = getattr(handler, "__call__", None)  # noqa: B004 (a callable object's method)
    for fn in (handler, call):
        if inspect.isasyncgenfunction(fn):
            _refuse(f"got the async generator function {handler!r}: its body would never run")
        if inspect.isgeneratorfunction(fn):
            _refuse(f"got the generator function {handler!r}: its body would never run")
    try:
        signature = inspect.signature(handler)
    except (TypeError, ValueError):  # some builtins have none: let them be
        return handler
    try:
        signature.bind(None)
    except TypeError as exc:
        _refuse(f"got {handler!r}, which cannot be called with one argument ({exc})")
    return handler


def _refuse(why: str) -> NoReturn:
    raise InvalidHandlerError("handler", f"handler must be {ACCEPTED}; {why}")


def handler_threads(
    threads: int, timeout_ms: int, weights: Sequence[int] = (1,), *, strict: bool = False
) -> HandlerThreads:
    """The threads sync handlers run on: `threads` of them (and up to as many more, each
    replacing one wedged past `timeout_ms`), shared by lanes of these `weights`."""
    return HandlerThreads(
        None,
        threads,
        "wheelq-handler",
        timeout_s=timeout_ms / 1000 if timeout_ms > 0 else None,
        limit=2 * threads,  # at most `threads` wedged ones are replaced
        weights=weights,
        strict=strict,
    )


class HandlerRunner:
    """Runs one handler, on `threads` threads if sync, in a span when `tracing`; keeps what
    it returns up to `result_max_bytes` (0: ignored, with a warning said once).

    A sync handler runs on `pool` when given (a worker's threads, shared by its topics, as
    its lane `lane`: `handler_threads`), else on threads of its own."""

    def __init__(
        self,
        handler: Handler,
        *,
        timeout_ms: int,
        threads: int,
        tracing: Tracing | None = None,
        group: str = "",
        result_max_bytes: int = 0,
        pool: HandlerThreads | None = None,
        lane: int = 0,
    ) -> None:
        self.handler = check_handler(handler)
        self.is_async = is_async(handler)
        self.timeout_s = timeout_ms / 1000 if timeout_ms > 0 else None
        self._tracing = tracing
        self._group = group
        self._result_max_bytes = result_max_bytes
        # An async handler (`is_async`: an ``async def``, or an object with one as its
        # ``__call__``) returns a coroutine.
        self._await: Callable[[Job], Coroutine[Any, Any, Any]] = (
            cast(Callable[[Job], Coroutine[Any, Any, Any]], self.handler)
            if tracing is None
            else self._await_traced
        )
        self._call_fn = self._call if tracing is None else self._call_traced
        self._lane = lane if pool is not None else 0
        self._pool = None if self.is_async else pool or handler_threads(threads, timeout_ms)
        self._warned_result = False

    def time_runs(self, ran: Callable[[float], None]) -> None:
        """Tell `ran` each sync run's time on its thread (ms)."""
        if self._pool is not None:
            self._pool.ran = ran

    @property
    def wedged(self) -> int:
        """Threads still running a sync handler that ran over its time limit."""
        return 0 if self._pool is None else self._pool.wedged_in[self._lane]

    def running_ms(self, submitted: asyncio.Future[Any]) -> float | None:
        """How long a `submit`ted run has run on its thread; None: queued, not started."""
        return None if self._pool is None else self._pool.running_ms(submitted)

    def submit(self, job: Job) -> asyncio.Future[Any]:
        assert self._pool is not None, "submit is for sync handlers"
        return self._pool.submit(job, self._call_fn, self._lane, self.timeout_s)

    def outcome(self, job: Job, done: asyncio.Future[Any]) -> Outcome:
        """What the finished (not cancelled) run `done` of `job` came to."""
        exc = done.exception()
        if exc is None:
            kept: bytes | None = done.result()  # encoded on the handler's thread
            return kept
        if isinstance(exc, RanOver):
            return self._ran_over(job)
        if isinstance(exc, Exception):
            return exc
        raise exc  # not raised by a handler: `_call` turns those into HandlerExitError

    async def run(self, job: Job, waits: Callable[[bool], None] | None = None) -> Outcome:
        """Run the handler on `job`; returns what the run came to (`Outcome`). An async
        handler's waits are told to `waits` (True as it waits, False as it goes on)."""
        if self._pool is not None:
            done = self.submit(job)
            with contextlib.suppress(Exception):  # read by `outcome`; a cancel goes through
                await done
            return self.outcome(job, done)
        # No time limit: no timeout context either (it costs more than a no-op handler).
        deadline = None if self.timeout_s is None else asyncio.timeout(self.timeout_s)
        # The job's own context, as a task of its own would give it: `current_job()`
        # (core.context), and what the handler sets in its context variables ends with it.
        context = contextvars.copy_context()
        context.run(CURRENT.set, job)
        try:
            if deadline is None:
                value = await in_context(context, self._await(job), waits)
            else:
                async with deadline:
                    value = await in_context(context, self._await(job), waits)
            if value is None:
                return None
            return self._kept(value)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not (deadline is not None and isinstance(exc, TimeoutError) and deadline.expired()):
                return exc
        except BaseException as exc:  # SystemExit, KeyboardInterrupt, ...
            return _exited(exc, job)
        return self._ran_over(job)

    def _ran_over(self, job: Job) -> HandlerTimeoutError:
        ms = (self.timeout_s or 0) * 1000
        pool = self._pool
        if pool is None:
            log.warning("handler ran over %.0f ms on job %s; it was cancelled", ms, job.id)
        else:
            log.warning(
                "handler ran over %.0f ms on job %s; its thread runs on (%d handler threads "
                "wedged; up to %d are replaced)",
                ms,
                job.id,
                pool.wedged,
                pool.limit - pool.count,
            )
            if pool.wedged > pool.limit - pool.count:
                log.error(
                    "%d handler threads are wedged in handlers that ran over %.0f ms, more than "
                    "the %d the pool replaces: only %d handlers can run at once (concurrency "
                    "%d) until they return",
                    pool.wedged,
                    ms,
                    pool.limit - pool.count,
                    max(0, pool.limit - pool.wedged),
                    pool.count,
                )
        return HandlerTimeoutError(f"handler ran over handler_timeout_ms={ms:.0f}")

    async def _await_traced(self, job: Job) -> Any:
        assert self._tracing is not None
        if not self._tracing.active:
            return await self.handler(job)
        with self._tracing.process(job, self._group):
            return await self.handler(job)

    def _call_traced(self, job: Job) -> bytes | None:
        assert self._tracing is not None
        if not self._tracing.active:
            return self._call(job)
        with self._tracing.process(job, self._group):
            return self._call(job)

    def _call(self, job: Job) -> bytes | None:
        """On a handler thread: run it, `job` the current job meanwhile (`current_job()`,
        core.context; reset after, so the thread keeps no stale job); its result encoded
        (raised: what failed the run)."""
        current = CURRENT.set(job)
        try:
            result = self.handler(job)
            if result is None:
                return None
            if inspect.isawaitable(result):  # a sync wrapper around a coroutine function
                result = asyncio.run(_await(result))
                if result is None:
                    return None
            elif inspect.isgenerator(result) or inspect.isasyncgen(result):
                raise InvalidHandlerError(
                    "handler",
                    f"handler must be {ACCEPTED}; it returned {result!r}, so its body never ran",
                )
            kept = self._kept(result)
            if isinstance(kept, Exception):
                raise kept
            return kept
        except Exception:
            raise
        except BaseException as exc:  # SystemExit, KeyboardInterrupt, ...
            raise _exited(exc, job) from exc
        finally:
            CURRENT.reset(current)

    def _kept(self, result: Any) -> bytes | ResultError | None:
        """A result as its job's record keeps it, or the error that fails the run instead."""
        if not self._result_max_bytes:
            if not self._warned_result:
                self._warned_result = True
                log.warning(
                    "handler returned %.80r; its return value is ignored (result_max_bytes=0; "
                    "this is said once)",
                    result,
                )
            return None
        try:
            return encode_result(result, self._result_max_bytes)
        except ResultError as exc:
            return exc

    def close(self) -> None:
        """Let the threads go; a wedged sync handler keeps its thread until it returns."""
        if self._pool is not None:
            self._pool.close()


def _exited(exc: BaseException, job: Job) -> HandlerExitError:
    log.warning(
        "handler raised %s on job %s: counted as a failed attempt; the worker goes on",
        _name(exc),
        job.id,
    )
    error = HandlerExitError(
        f"handler raised {_name(exc)}; it counts as a failed attempt (the worker goes on)"
    )
    error.__cause__ = exc
    return error


def _name(exc: BaseException) -> str:
    return f"{type(exc).__name__}({', '.join(map(repr, exc.args))})"


async def _await(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


@types.coroutine
def in_context(
    context: contextvars.Context,
    coro: Coroutine[Any, Any, T],
    waits: Callable[[bool], None] | None = None,
) -> Generator[Any, Any, T]:
    """Await `coro` with each of its steps run in `context`, in the task awaiting this.

    A worker's runner task runs one job after another (`wheelq.worker.in_flight`): each
    job's handler gets a context of its own, as a task of its own would give it, so the
    context variables a handler sets do not reach the next job. What the task sends or
    throws in (a cancel) goes on to `coro`, and what `coro` yields (the future it waits
    for) goes up to the task, unchanged; `waits` is told as `coro` waits (True) and goes
    on (False).
    """
    step: Callable[[Any], Any] = coro.send
    value: Any = None
    while True:
        try:
            signal = context.run(step, value)
        except StopIteration as done:
            return cast(T, done.value)
        if waits is not None:
            waits(True)
        try:
            value, step = (yield signal), coro.send
        except GeneratorExit:  # closed unfinished: close the handler's coroutine too
            coro.close()
            raise
        except BaseException as exc:  # thrown in by the task (a cancel): on to the handler
            value, step = exc, coro.throw
        if waits is not None:
            waits(False)
