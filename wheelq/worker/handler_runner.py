"""Running a user's handler: sync on threads, async as a task, with an optional time limit.

A handler is a function taking one `wheelq.Job`, ``def`` or ``async def``; its return
value is ignored (a sync one may return an awaitable, which is run to its end). Handlers
that would never run their body (generator and async generator functions) or that take
other arguments are refused when the worker is made (`check_handler`).

`HandlerRunner.run(job)` never raises the handler's exception: it returns it (or None on
success), so the worker decides retry or dead letter in one place. `SystemExit`,
`KeyboardInterrupt` and other `BaseException`s from a handler come back as a
`HandlerExitError`: a failed attempt like any other, and the worker goes on. Cancellation
(a worker stopping at once) does propagate.

With tracing (`wheelq.runtime.tracing`, the ``otel`` extra), each run is inside a
``process <topic>`` span, current in the task or on the thread that runs the handler; the
runner picks the traced or the plain call once, when it is made.

Time limits start when the handler starts. An async handler that runs over is cancelled; a
sync one cannot be, so its thread runs on *wedged* and the pool starts a replacement, up to
as many wedged threads as `threads` (see `wheelq.worker.handler_threads`).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

from wheelq.core.job import Job
from wheelq.errors import HandlerExitError, HandlerTimeoutError, InvalidHandlerError
from wheelq.runtime.tracing import Tracing
from wheelq.worker.handler_threads import HandlerThreads, RanOver

log = logging.getLogger(__name__)

Handler = Callable[[Job], Any] | Callable[[Job], Awaitable[Any]]

ACCEPTED = "a function taking one wheelq.Job (def or async def) and returning None"


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


class HandlerRunner:
    """Runs one handler; `threads` is a sync handler's concurrency; with `tracing`, each run
    in a process span of consumer group `group`."""

    def __init__(
        self,
        handler: Handler,
        *,
        timeout_ms: int,
        threads: int,
        tracing: Tracing | None = None,
        group: str = "",
    ) -> None:
        self.handler = check_handler(handler)
        self.is_async = is_async(handler)
        self.timeout_s = timeout_ms / 1000 if timeout_ms > 0 else None
        self._tracing = tracing
        self._group = group
        self._await: Callable[[Job], Awaitable[Any]] = (
            self.handler if tracing is None else self._await_traced
        )
        self._pool = (
            None
            if self.is_async
            else HandlerThreads(
                self._call if tracing is None else self._call_traced,
                threads,
                "wheelq-handler",
                timeout_s=self.timeout_s,
                limit=2 * threads,  # at most `threads` wedged ones are replaced
            )
        )
        self._warned_result = False

    def time_runs(self, ran: Callable[[float], None]) -> None:
        """Tell `ran` how long each sync run took on its thread (ms), queueing left out;
        async runs are timed by the caller."""
        if self._pool is not None:
            self._pool.ran = ran

    @property
    def wedged(self) -> int:
        """Threads still running a sync handler that ran over its time limit."""
        return 0 if self._pool is None else self._pool.wedged

    def submit(self, job: Job) -> asyncio.Future[None]:
        """A sync handler's run of `job`, queued to its threads; `outcome` reads the future
        once done. (The worker runs sync jobs so, without a task per job.)"""
        assert self._pool is not None, "submit is for sync handlers"
        return self._pool.submit(job)

    def outcome(self, job: Job, done: asyncio.Future[None]) -> Exception | None:
        """What the finished (not cancelled) run `done` of `job` raised (None: success)."""
        exc = done.exception()
        if exc is None:
            return None
        if isinstance(exc, RanOver):
            return self._ran_over(job)
        if isinstance(exc, Exception):
            return exc
        raise exc  # not raised by a handler: `_call` turns those into HandlerExitError

    async def run(self, job: Job) -> Exception | None:
        """Run the handler on `job`; returns the exception it raised (None: success)."""
        if self._pool is not None:
            done = self.submit(job)
            with contextlib.suppress(Exception):  # read by `outcome`; a cancel goes through
                await done
            return self.outcome(job, done)
        # No time limit: no timeout context either (it costs more than a no-op handler).
        deadline = None if self.timeout_s is None else asyncio.timeout(self.timeout_s)
        try:
            if deadline is None:
                await self._await(job)
            else:
                async with deadline:
                    await self._await(job)
            return None
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

    async def _await_traced(self, job: Job) -> None:
        assert self._tracing is not None
        if not self._tracing.active:
            await self.handler(job)
            return
        with self._tracing.process(job, self._group):
            await self.handler(job)

    def _call_traced(self, job: Job) -> None:
        assert self._tracing is not None
        if not self._tracing.active:
            self._call(job)
            return
        with self._tracing.process(job, self._group):
            self._call(job)

    def _call(self, job: Job) -> None:
        """A sync handler's run, on its thread."""
        try:
            result = self.handler(job)
            if result is None:
                return
            if inspect.isawaitable(result):  # a sync wrapper around a coroutine function
                asyncio.run(_await(result))
            elif inspect.isgenerator(result) or inspect.isasyncgen(result):
                raise InvalidHandlerError(
                    "handler",
                    f"handler must be {ACCEPTED}; it returned {result!r}, so its body never ran",
                )
            elif not self._warned_result:
                self._warned_result = True
                log.warning(
                    "handler returned %.80r; its return value is ignored (this is said once)",
                    result,
                )
        except Exception:
            raise
        except BaseException as exc:  # SystemExit, KeyboardInterrupt, ...
            raise _exited(exc, job) from exc

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


async def _await(awaitable: Awaitable[Any]) -> None:
    await awaitable
