"""Eager mode (`App.eager`): every task enqueued in the block runs inline, at once, in the
caller's thread, whatever its delay, with no Redis (docs/guides/testing.md, "Eager mode").

What stays as it is in Redis: a call's arguments are checked by the task's codec and the job
is validated and encoded by the producer's own code (`validate_item`: the same msgpack, the
same ``max_payload_bytes`` and depth limits, the same options checks), so a call that fails
to enqueue fails the same way, with the same error; the handler is the worker's
(`Task.handler`: the payload decoded back from msgpack into the annotated types); a result is
kept as a worker keeps it (`encode_result` under the app's worker ``result_max_bytes``) and
read back by `TaskHandle.result`'s typing, so `result()` returns the same value, or raises
`JobFailedError` for a job that died.

What differs: attempts run one after the other with no backoff and no sleep (a `Retry`'s
delay and the task's ``retry`` policy are not waited for; `Fail` and a result that cannot be
kept end it at once, as in a worker; `Defer` runs it again without counting, up to
`MAX_DEFERRALS` times); the task's ``timeout`` is not enforced (the run is the caller's
own); a ``KeyboardInterrupt`` or ``SystemExit`` raised by the task propagates to the caller
rather than failing the attempt. `wheelq.current_job()` is the attempt's `Job` in each run:
its ``attempt``, ``max_attempts``, ``due_ms`` (when it would have been due) and the id
given with ``options(job_id=...)``.

A task enqueued with ``options(outbox=conn)`` runs once that transaction commits, never if
it rolls back (`wheelq.outbox.on_commit`); until then (and for ever after a rollback) its
handle's `result()` waits up to its timeout and raises `ResultTimeoutError`, as a job whose
row never reached Redis does.

Eager mode is per context (a `ContextVar`), not app-wide: tests running in parallel threads
(or in asyncio tasks) each choose for themselves, and a worker thread of the same process
keeps enqueuing into Redis. A thread started inside the block does not inherit it unless it
runs in a copy of the context (``contextvars.copy_context().run``, as ``asyncio.to_thread``
and asgiref's ``sync_to_async`` do).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from wheelq.core.callback import Callback
from wheelq.core.context import running
from wheelq.core.due import At, Delay
from wheelq.core.history import JobInfo, JobState
from wheelq.core.job import Envelope, Job
from wheelq.core.payload import decode_payload, encode_result
from wheelq.core.retry import RetryPolicy, after_failure
from wheelq.core.settings import WorkerSettings
from wheelq.errors import EagerModeError, JobFailedError, ResultError, ResultTimeoutError
from wheelq.outbox.on_commit import aon_commit, on_commit
from wheelq.producer.durability import check_ack
from wheelq.producer.items import EncodeBatch, EnqueueItem, validate_item
from wheelq.runtime.clock import WallClock
from wheelq.tasks.handle import DEFAULT_RESULT_TIMEOUT_S, EagerMode, Enqueued, TaskHandle

R = TypeVar("R")

MAX_DEFERRALS = 100
"""Runs a job's `Defer`s may add in eager mode before it is failed (a worker would wait each
deferral out; inline, a task that always defers would loop for ever)."""

_APPS: ContextVar[tuple[object, ...]] = ContextVar("wheelq_eager_apps", default=())
"""The apps in eager mode in this context, innermost last (one per `eager` block)."""

_CLOCK = WallClock()
_POLICY = RetryPolicy()  # its delays are not waited for: only `after_failure`'s verdict counts


@contextmanager
def eager(app: object) -> Iterator[None]:
    """`App.eager`: `app`'s tasks run inline inside the block (nested blocks nest)."""
    token = _APPS.set((*_APPS.get(), app))
    try:
        yield
    finally:
        _APPS.reset(token)


def active(app: object) -> bool:
    """Whether `app` is in eager mode in this context."""
    apps = _APPS.get()
    return bool(apps) and any(a is app for a in apps)


def send(call: Enqueued) -> TaskHandle[Any]:
    """A sync enqueue form in eager mode: the job validated and encoded, then run now (with
    ``outbox``: once its transaction commits)."""
    task = call.task
    if task.is_async and _loop_running():
        raise EagerModeError(
            f"{task.name} is an async def task, and the sync enqueue forms cannot run it "
            "inline inside a running event loop: await the `a` form (aenqueue, aenqueue_in, "
            "aenqueue_at) there"
        )
    job = _Job(call)
    if call.outbox is None:
        job.run()
    else:
        on_commit(call.outbox, job.run_committed)
    return EagerHandle(job)


async def asend(call: Enqueued) -> TaskHandle[Any]:
    """An awaited enqueue form in eager mode: as `send`, an async task awaited on the
    caller's loop."""
    job = _Job(call)
    if call.outbox is None:
        await job.arun()
    else:
        await aon_commit(call.outbox, job.run_committed)
    return EagerHandle(job)


def skip(call: Enqueued, state: JobState, error: str) -> TaskHandle[Any]:
    """A job of a chain or a flow that never runs in eager mode (its predecessor failed):
    validated and encoded as `send` does, then ended in `state` (cancelled, dead) unrun."""
    job = _Job(call)
    job.state, job.error = state, error
    job.done.set()
    return EagerHandle(job)


class _Mode:
    """`send`, `asend` and `skip` as the `EagerMode` a task asks its app for
    (`App.eager_mode`)."""

    send = staticmethod(send)
    asend = staticmethod(asend)
    skip = staticmethod(skip)


MODE: EagerMode = _Mode()


class _Job:
    """One eager job: its first attempt's `Job`, then what became of it."""

    def __init__(self, call: Enqueued) -> None:
        task = call.task
        fields = dict(call.options)
        settings = fields.pop("settings", None) or task.app.client_settings  # the outbox's
        ack = fields.pop("ack", None)
        if ack is not None:
            check_ack(ack)
        batch = EncodeBatch(_CLOCK.now_ms())
        item = EnqueueItem(payload=call.payload, delay=call.delay, at=call.at, **fields)
        write = validate_item(settings, item, batch)
        envelope = Envelope.unpack(write.envelope)
        due = write.due
        self.task, self.id, self.group = task, write.id, task.app.group
        self.enqueued_ms = envelope.enqueued_ms
        self.max_result_bytes = _result_max_bytes(task.app)
        self.first = Job(
            id=write.id,
            topic=task.topic,
            payload=decode_payload(envelope.payload),
            due_ms=batch.now_ms + due.value_ms if due.kind == "delay" else due.value_ms,
            attempt=1,
            max_attempts=envelope.max_attempts,
            traceparent=envelope.traceparent or None,
            callback=Callback.unpack(envelope.callback) if envelope.callback else None,
            key=envelope.key or None,
            ordered=envelope.ordered,
            enqueued_ms=envelope.enqueued_ms,
            expires=envelope.expires or None,
            priority=envelope.priority,
        )
        self.state = JobState.PENDING
        self.attempt = 0
        self.value: Any = None
        self.error: str | None = None
        self.done = threading.Event()
        self._handler: Callable[[Job], Any] = task.handler()

    # --- running -----------------------------------------------------------------------

    def run(self) -> None:
        """Every attempt, here (an async task's in a loop of its own: `asyncio.run`)."""
        for job in self._attempts():
            with running(job):
                try:
                    result = self._handler(job)
                    if inspect.isawaitable(result):
                        result = asyncio.run(_awaited(result))
                except Exception as exc:
                    self._failed(job, exc)
                    continue
            self._succeeded(job, result)

    async def arun(self) -> None:
        """Every attempt, here: an async task's awaited on the running loop."""
        for job in self._attempts():
            with running(job):
                try:
                    result = self._handler(job)
                    if inspect.isawaitable(result):
                        result = await result
                except Exception as exc:
                    self._failed(job, exc)
                    continue
            self._succeeded(job, result)

    def run_committed(self) -> None:
        """Run once the outbox's transaction committed: an async task on the loop running
        here if there is one (the commit of an async session), else as `run` does."""
        if self.task.is_async and _loop_running():
            self._scheduled = asyncio.get_running_loop().create_task(self.arun())
        else:
            self.run()

    def _attempts(self) -> Iterator[Job]:
        """Each attempt's `Job`, until one succeeds or the job dies (the caller records
        each run's outcome before asking for the next)."""
        job, deferrals = self.first, 0
        while True:
            if job.expires is not None and job.expires <= _CLOCK.now_ms():
                self.state, self.error = JobState.EXPIRED, "expired"  # never run, as in Redis
                self.done.set()
                return
            self.state, self.attempt = JobState.RUNNING, job.attempt
            yield job
            if self.state is not JobState.RETRYING:
                return
            if not self._counts:
                deferrals += 1
                if deferrals > MAX_DEFERRALS:
                    self._dead(f"deferred more than {MAX_DEFERRALS} times in eager mode")
                    return
            job = dataclasses.replace(job, attempt=job.attempt + self._counts, group=self.group)

    def _failed(self, job: Job, exc: Exception) -> None:
        outcome = after_failure(job.attempt, job.max_attempts, exc, _POLICY, 0.0)
        self.error, self._counts = outcome.error, outcome.counts
        if outcome.dead:
            self._dead(outcome.error)
        else:
            self.state = JobState.RETRYING

    def _succeeded(self, job: Job, result: Any) -> None:
        if result is not None and self.max_result_bytes:
            try:  # kept as a worker keeps it, and read back as `result()` reads it
                result = decode_payload(encode_result(result, self.max_result_bytes))
            except ResultError as exc:  # the run failed, and is not run again
                self._failed(job, exc)
                return
        else:
            result = None
        self.state, self.value, self.error = JobState.SUCCEEDED, result, None
        self.done.set()

    def _dead(self, error: str) -> None:
        self.state, self.error = JobState.DEAD, error
        self.done.set()

    _counts = True
    """Whether the last failed run counted as an attempt (False: a `Defer`)."""
    _scheduled: asyncio.Task[None] | None = None
    """An async task's run after an async session's commit, on its loop."""

    # --- what the handle reads ----------------------------------------------------------

    def outcome(self, timeout_s: float) -> Any:
        """The kept result, waiting up to `timeout_s` for a run still to come."""
        if not self.done.wait(max(timeout_s, 0)):
            raise ResultTimeoutError(
                self.task.topic, self.id, self.group, round(timeout_s * 1000), self.state.value
            )
        return self._settled()

    async def aoutcome(self, timeout_s: float) -> Any:
        """`outcome`, awaited (an async task's run after an async commit, on this loop)."""
        if not self.done.is_set():
            await asyncio.to_thread(self.done.wait, max(timeout_s, 0))
        return self.outcome(0)

    def _settled(self) -> Any:
        if self.state is JobState.SUCCEEDED:
            return self.value
        if self.state is JobState.EXPIRED:
            raise JobFailedError(
                self.task.topic, self.id, self.group, JobState.EXPIRED.value, "expired", None
            )
        if self.state is JobState.CANCELLED:
            raise JobFailedError(
                self.task.topic, self.id, self.group, JobState.CANCELLED.value, None, self.error
            )
        raise JobFailedError(
            self.task.topic, self.id, self.group, JobState.DEAD.value, "failed", self.error
        )

    def info(self) -> JobInfo:
        first = self.first
        return JobInfo(
            id=self.id,
            topic=first.topic,
            state=self.state,
            due_ms=first.due_ms,
            attempt=self.attempt or None,
            max_attempts=first.max_attempts,
            enqueued_ms=self.enqueued_ms,
            payload=first.payload,
            last_error=self.error,
            payload_kept=True,
        )


class EagerHandle(TaskHandle[R]):
    """The handle of a job run in eager mode: what became of it, with no Redis. It cannot
    be cancelled or moved (it ran, or waits only for its transaction): `cancel` and
    `reschedule` return False, as for a job that is no longer pending."""

    def __init__(self, job: _Job) -> None:
        super().__init__(job.task, job.id)
        self._job = job

    def result(self, timeout: float = DEFAULT_RESULT_TIMEOUT_S) -> R:
        """As `TaskHandle.result`: at once once it ran; for a job enqueued with outbox=, waits
        up to `timeout` for its transaction to commit (`ResultTimeoutError` while pending,
        as after a rollback)."""
        return self._typed(self._job.outcome(timeout))

    async def aresult(self, timeout: float = DEFAULT_RESULT_TIMEOUT_S) -> R:
        """`result`, awaited."""
        return self._typed(await self._job.aoutcome(timeout))

    def cancel(self) -> bool:
        return False

    async def acancel(self) -> bool:
        return False

    def reschedule(self, *, delay: Delay | None = None, at: At | None = None) -> bool:
        return False

    async def areschedule(self, *, delay: Delay | None = None, at: At | None = None) -> bool:
        return False

    def info(self) -> JobInfo:
        """Where the job is: ``succeeded`` or ``dead`` once run, ``pending`` while its
        outbox transaction is open; its payload, attempts and last error."""
        return self._job.info()

    async def ainfo(self) -> JobInfo:
        return self._job.info()


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _result_max_bytes(app: Any) -> int:
    """The ``result_max_bytes`` the app's workers keep results under."""
    settings = getattr(app, "worker_settings", None) or WorkerSettings()
    return int(settings.result_max_bytes)
