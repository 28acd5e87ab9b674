"""A task: a typed function run later as a wheelq job; its calls and their handles
(docs/guides/tasks.md).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, TypeVar, Unpack

from wheelq.admin import payload_checks
from wheelq.core.due import At, Delay
from wheelq.core.job import Job
from wheelq.core.options import (
    TaskCallOptions,
    takes,
    validate_max_attempts,
    validate_priority,
)
from wheelq.core.retry import Fail, RetryPolicy
from wheelq.errors import InvalidArgumentError
from wheelq.outbox.enqueue import aenqueue as outbox_aenqueue
from wheelq.outbox.enqueue import enqueue as outbox_enqueue
from wheelq.tasks.codec import TaskCodec
from wheelq.tasks.handle import Clients, Enqueued, TaskHandle
from wheelq.tasks.signature import Signature
from wheelq.worker.worker import Route

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class TaskConfig:
    """A task's own settings (`App.task`'s options), over the client's and the worker's."""

    max_attempts: int | None = None
    """Runs before a failing job of its topic is dead-lettered, however the job was written
    (None: each job's own, the client's default unless a call gave one)."""
    timeout_ms: int | None = None
    """A run longer than this fails (0: no limit; None: the worker's ``handler_timeout_ms``)."""
    retry: RetryPolicy | None = None
    """Its backoff (None: the worker's ``retry_*`` settings)."""
    keep_result: bool = True
    """Keep the return value for `TaskHandle.result`."""
    result_ttl_ms: int | None = None
    """How long a result stays fetchable after its run (None: as long as the job's history
    record, the scheduler's ``retention_ms`` at most)."""
    priority: int | None = None
    """Its jobs' priority when a call gives none (None: the job's default, 5)."""

    def __post_init__(self) -> None:
        if self.max_attempts is not None:
            validate_max_attempts(self.max_attempts)
        if self.priority is not None:
            validate_priority(self.priority)
        if self.retry is not None and not isinstance(self.retry, RetryPolicy):
            raise InvalidArgumentError(
                "retry", f"retry must be a wheelq.RetryPolicy or None, got {self.retry!r:.60}"
            )
        if not isinstance(self.keep_result, bool):
            raise InvalidArgumentError(
                "result", f"result must be a bool, got {self.keep_result!r:.40}"
            )


class TaskCall(Generic[P, R]):
    """Ways to enqueue a task: now, in a while, at a time; blocking or awaited (the ``a``
    forms). Each checks the arguments against the function's annotations first (an
    `InvalidArgumentError` naming the parameter, and nothing enqueued) and returns the
    job's `TaskHandle`."""

    def __init__(self, task: Task[P, R], options: TaskCallOptions, outbox: Any = None) -> None:
        self._task = task
        max_attempts = options.get("max_attempts")
        own = task.config.max_attempts
        if own is not None and max_attempts is not None and max_attempts != own:
            raise InvalidArgumentError(
                "max_attempts",
                f"task {task.name} has max_attempts={own} of its own, which its worker applies "
                f"to every job of its topic; got max_attempts={max_attempts} for one call "
                "(give a task no max_attempts to set it per call)",
            )
        self._outbox = outbox
        fields: dict[str, Any] = dict(options)
        if outbox is not None:
            if fields.pop("ack", None) is not None:
                raise InvalidArgumentError(
                    "ack", "ack is the relay's with outbox= (its [relay] ack setting)"
                )
            fields["settings"] = task.app.client_settings
        if fields.get("priority") is None and task.config.priority is not None:
            fields["priority"] = task.config.priority  # the task's, unless the call's
        self._enqueue_options = fields | {
            "max_attempts": own if max_attempts is None else max_attempts
        }
        """`Client.enqueue`'s (or `outbox.enqueue`'s) keywords of every call: made once."""

    def s(self, *args: P.args, **kwargs: P.kwargs) -> Signature[R]:
        """This call with its arguments checked and encoded, not enqueued: a link of a
        chain (``f.s(1).then(g.s(2), delay=5).enqueue()``) or a part of a flow
        (`App.flow`; docs/guides/workflows.md)."""
        if self._outbox is not None:
            raise InvalidArgumentError(
                "outbox", "a chain or a flow is written to Redis: enqueue it without outbox="
            )
        payload, options = self._job(args, kwargs)
        return Signature(self._task, payload, options)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> TaskHandle[R]:
        """Enqueue a run due now."""
        return self._send(None, None, args, kwargs)

    def enqueue_in(self, delay: Delay, /, *args: P.args, **kwargs: P.kwargs) -> TaskHandle[R]:
        """Enqueue a run due `delay` from now: seconds (int or float) or a timedelta."""
        return self._send(delay, None, args, kwargs)

    def enqueue_at(self, when: At, /, *args: P.args, **kwargs: P.kwargs) -> TaskHandle[R]:
        """Enqueue a run due at `when`: an aware datetime or epoch seconds (past: now)."""
        return self._send(None, when, args, kwargs)

    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> TaskHandle[R]:
        """`enqueue`, awaited."""
        return await self._asend(None, None, args, kwargs)

    async def aenqueue_in(
        self, delay: Delay, /, *args: P.args, **kwargs: P.kwargs
    ) -> TaskHandle[R]:
        """`enqueue_in`, awaited."""
        return await self._asend(delay, None, args, kwargs)

    async def aenqueue_at(self, when: At, /, *args: P.args, **kwargs: P.kwargs) -> TaskHandle[R]:
        """`enqueue_at`, awaited."""
        return await self._asend(None, when, args, kwargs)

    def _job(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        return self._task.codec.encode(args, kwargs), self._enqueue_options

    def _send(
        self, delay: Delay | None, at: At | None, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> TaskHandle[R]:
        payload, options = self._job(args, kwargs)
        task = self._task
        if (eager := task.app.eager_mode) is not None:
            return eager.send(Enqueued(task, payload, options, delay, at, self._outbox))
        if self._outbox is not None:
            job_id = outbox_enqueue(
                self._outbox, task.topic, payload, delay=delay, at=at, **options
            )
        else:
            job_id = task.app.client.enqueue(task.topic, payload, delay=delay, at=at, **options)
        return TaskHandle(task, job_id)

    async def _asend(
        self, delay: Delay | None, at: At | None, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> TaskHandle[R]:
        payload, options = self._job(args, kwargs)
        task = self._task
        if (eager := task.app.eager_mode) is not None:
            return await eager.asend(Enqueued(task, payload, options, delay, at, self._outbox))
        if self._outbox is not None:
            conn = self._outbox
            job_id = await outbox_aenqueue(conn, task.topic, payload, delay=delay, at=at, **options)
        else:
            client = task.app.aclient
            job_id = await client.enqueue(task.topic, payload, delay=delay, at=at, **options)
        return TaskHandle(task, job_id)


class Task(TaskCall[P, R]):
    """A function made a task by `App.task`: calling it runs it here and now; `enqueue`,
    `enqueue_in` and `enqueue_at` (and their awaited ``a`` forms) run it later in a worker
    of the app (`wheelq run`), and `options` sets per-call options.

    Its job is an ordinary wheelq job on `topic` whose payload is the map of its arguments
    (`TaskCodec`), so any language can enqueue it over HTTP.
    """

    def __init__(
        self, app: Clients, fn: Callable[P, Any], *, name: str, topic: str, config: TaskConfig
    ) -> None:
        self.app, self.fn, self.name, self.topic = app, fn, name, topic
        self.config = config
        super().__init__(self, TaskCallOptions())  # reads `config`
        self.codec = TaskCodec(fn, name)
        payload_checks.register(topic, self.codec)  # `Admin.schedule` on its topic checks
        self.is_async = inspect.iscoroutinefunction(fn)
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Any:
        """Run the function here and now (not as a job)."""
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Task {self.name} on topic {self.topic!r}>"

    @takes(TaskCallOptions)
    def options(self, *, outbox: Any = None, **options: Unpack[TaskCallOptions]) -> TaskCall[P, R]:
        """The enqueue forms with these options, each as `Client.enqueue`'s (`max_attempts`
        only for a task without its own: a task's applies to every job of its topic).

        Args:
            outbox: Your database connection (psycopg, SQLAlchemy, Django; async ones for
                the ``a`` forms): the job is written in its transaction, as
                `wheelq.outbox.enqueue` does, and exists only if that commits (a relay then
                places it; docs/guides/outbox.md); then no `ack`.
        """
        return TaskCall(self, options, outbox)

    def route(self) -> Route:
        """What its worker runs its topic with: its `handler`, and its own time limit,
        backoff and `max_attempts` over the worker's (and, for `max_attempts`, over the
        job's own, so a job of its topic however written gets the task's)."""
        c = self.config
        return Route(self.handler(), c.timeout_ms, c.retry, c.max_attempts, c.result_ttl_ms)

    def handler(self) -> Callable[[Job], Any]:
        """The worker's handler of this task's jobs: decodes the payload into the function's
        arguments (a payload that does not fit is dead-lettered at once: `Fail`), runs the
        function, and returns its result as plain values (kept when `keep_result`; one
        that cannot be kept or does not fit the return annotation fails the run with
        `ResultTypeError`, which is never retried: the function does not run again)."""
        codec, keep = self.codec, self.config.keep_result
        fn: Callable[..., Any] = self.fn

        def arguments(job: Job) -> dict[str, Any]:
            try:
                return codec.decode(job.payload)
            except InvalidArgumentError as exc:
                raise Fail(f"the payload does not fit the task: {exc}") from exc

        if self.is_async:

            async def run_async(job: Job) -> Any:
                value = await fn(**arguments(job))
                return codec.encode_result(value) if keep else None

            run_async.__name__ = run_async.__qualname__ = self.name
            return run_async

        def run(job: Job) -> Any:
            value = fn(**arguments(job))
            return codec.encode_result(value) if keep else None

        run.__name__ = run.__qualname__ = self.name
        return run
