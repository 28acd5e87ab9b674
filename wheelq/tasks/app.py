"""`App`: typed function tasks on one Redis, their clients, and the roles that run them
(docs/guides/tasks.md; docs/architecture.md, "Tasks").
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import sys
import threading
import weakref
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import Any, ParamSpec, Protocol, Self, TypedDict, TypeVar, Unpack, overload

from wheelq.admin.schedules import SyncReport
from wheelq.core.due import Delay, delay_ms, duration_ms
from wheelq.core.keys import validate_group, validate_topic
from wheelq.core.options import RunOptions, takes
from wheelq.core.retry import RetryPolicy
from wheelq.core.settings import ClientSettings, SchedulerSettings, WorkerSettings
from wheelq.errors import InvalidArgumentError, InvalidTopicError
from wheelq.producer.async_client import AsyncClient
from wheelq.producer.client import Client
from wheelq.scheduler.scheduler import Scheduler
from wheelq.tasks import eager, periodic
from wheelq.tasks.handle import EagerMode, TaskHandle
from wheelq.tasks.periodic import DEFAULT_CATCH_UP, Periodic
from wheelq.tasks.signature import Flow, Signature, eager_flow, flow_specs
from wheelq.tasks.task import Task, TaskConfig
from wheelq.worker.handler_runner import Handler
from wheelq.worker.worker import Routable, Route, Worker

P = ParamSpec("P")
R = TypeVar("R")

_NOT_TOPIC = re.compile(r"[^A-Za-z0-9_.-]+")


class TaskDecorator(Protocol):
    """What ``@app.task(...)`` with options returns: it makes a function a `Task`."""

    @overload
    def __call__(self, fn: Callable[P, Coroutine[Any, Any, R]], /) -> Task[P, R]: ...
    @overload
    def __call__(self, fn: Callable[P, R], /) -> Task[P, R]: ...


class TaskOptions(TypedDict, total=False):
    """`App.task`'s options, as its docstring says them."""

    name: str | None
    topic: str | None
    max_attempts: int | None
    timeout: float | timedelta | None
    retry: RetryPolicy | None
    result: bool
    result_ttl: float | timedelta | None
    priority: int | None


class App:
    """Tasks of one application on one Redis: declare them with `task`, enqueue them from
    anywhere, run them with ``wheelq run MODULE:APP`` (a scheduler node and a worker of
    every task in one process) or with `worker` and `scheduler` apart.

    Args:
        url: The Redis URL (``redis://``, ``rediss://`` for TLS, with ``user:password@``;
            any node of a cluster).
        group: The consumer group the app's workers read in, and whose results handles
            wait for.
        client: `ClientSettings` of the app's clients (defaults when None).
        worker: `WorkerSettings` of `worker()` and ``wheelq run`` (defaults when None).
        scheduler: `SchedulerSettings` of `scheduler()` and ``wheelq run``.
        redis_options: Extra keyword arguments for `redis.Redis.from_url`.
        cluster: None: find out; True or False: say so.

    Raises:
        InvalidArgumentError: A bad group, setting or `cluster`.
    """

    def __init__(
        self,
        url: str,
        *,
        group: str = "default",
        client: ClientSettings | None = None,
        worker: WorkerSettings | None = None,
        scheduler: SchedulerSettings | None = None,
        redis_options: Mapping[str, Any] | None = None,
        cluster: bool | None = None,
    ) -> None:
        if cluster is not None and not isinstance(cluster, bool):
            raise InvalidArgumentError(
                "cluster", f"cluster must be a bool or None, got {cluster!r}"
            )
        self.url = url
        self.group = validate_group(group)
        self.client_settings = client or ClientSettings()
        self.worker_settings = worker or WorkerSettings()
        self.scheduler_settings = scheduler or SchedulerSettings()
        self.redis_options = dict(redis_options or {})
        self.cluster = cluster
        self.tasks: dict[str, Task[Any, Any]] = {}
        """Every task of the app, by name."""
        self.periodics: dict[str, Periodic] = {}
        """Every periodic task declared (`periodic`), by schedule name."""
        self._client: Client | None = None
        self._aclients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncClient] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        group: str = "default",
        redis_options: Mapping[str, Any] | None = None,
        cluster: bool | None = None,
        **client_settings: Any,
    ) -> Self:
        """An app on the Redis at `url`; `client_settings` are fields of `ClientSettings`."""
        settings = ClientSettings.from_kwargs(client_settings)
        return cls(url, group=group, client=settings, redis_options=redis_options, cluster=cluster)

    def __repr__(self) -> str:
        return f"<App {len(self.tasks)} tasks, group {self.group!r}>"

    # --- tasks ----------------------------------------------------------------------------

    @overload
    def task(self, fn: Callable[P, Coroutine[Any, Any, R]], /) -> Task[P, R]: ...
    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...
    @overload
    def task(self, fn: None = None, /, **options: Unpack[TaskOptions]) -> TaskDecorator: ...

    def task(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        topic: str | None = None,
        max_attempts: int | None = None,
        timeout: float | timedelta | None = None,
        retry: RetryPolicy | None = None,
        result: bool = True,
        result_ttl: float | timedelta | None = None,
        priority: int | None = None,
    ) -> Any:
        """Make a ``def`` or ``async def`` a task: ``@app.task`` or ``@app.task(...)``.

        Args:
            name: The task's name (default: the function's module and qualified name).
            topic: Its topic (default: its name, as a topic may spell it); fixed once jobs
                are enqueued, as a worker reads the topic the producer wrote.
            max_attempts: Runs before a failing job is dead-lettered (1-1000), applied by
                its worker to every job of its topic, however written (a plain client, HTTP,
                the outbox); default: each job's own (the client's ``default_max_attempts``,
                or `Task.options`').
            timeout: Seconds (or a timedelta) a run may take before it fails (default the
                worker's ``handler_timeout_ms``; 0: no limit).
            retry: The backoff of its retries (default the worker's ``retry_*``).
            result: Keep the return value for `TaskHandle.result` (False: keep none).
            result_ttl: How long a result stays fetchable after its run, seconds or a
                timedelta (1 ms to ten years; Celery's ``result_expires``); default: as long
                as the job's history record, the scheduler's ``retention_ms`` (3 days) at
                most. Past it, `TaskHandle.result` raises `UnknownJobError`.
            priority: Its jobs' priority (0-9, higher first; docs/guides/priority.md) when
                a call gives none (`Task.options`' ``priority=``); default 5.

        Raises:
            InvalidArgumentError: A bad option, a name or topic another task has, or a
                function a task cannot be (``*args``, ``**kwargs``, positional-only
                parameters; annotations that do not resolve).
        """
        config = TaskConfig(
            max_attempts=max_attempts,
            timeout_ms=None if timeout is None else delay_ms(timeout, "timeout", 86_400_000),
            retry=retry,
            keep_result=result,
            result_ttl_ms=_result_ttl_ms(result_ttl, result),
            priority=priority,
        )

        def make(function: Callable[..., Any]) -> Task[Any, Any]:
            if not callable(function):
                raise InvalidArgumentError(
                    "fn", f"a task is a def or async def, got {type(function).__name__}"
                )
            task_name = name or _default_name(function)
            task_topic = _topic(topic, task_name)
            clash = self.tasks.get(task_name) or next(
                (t for t in self.tasks.values() if t.topic == task_topic), None
            )
            if clash is not None:
                raise InvalidArgumentError(
                    "name" if clash.name == task_name else "topic",
                    f"task {task_name} would share {'name' if clash.name == task_name else 'topic'}"
                    f" with {clash!r}: give it its own name= or topic=",
                )
            made: Task[Any, Any] = Task(
                self, function, name=task_name, topic=task_topic, config=config
            )
            self.tasks[task_name] = made
            return made

        return make if fn is None else make(fn)

    def chosen(self, names: Iterable[str] | None = None) -> list[Task[Any, Any]]:
        """The tasks named (by task name or topic), or every task; InvalidArgumentError for
        a name the app has no task of."""
        if names is None:
            return list(self.tasks.values())
        by_topic = {t.topic: t for t in self.tasks.values()}
        out: list[Task[Any, Any]] = []
        for wanted in names:
            task = self.tasks.get(wanted) or by_topic.get(wanted)
            if task is None:
                known = ", ".join(sorted(self.tasks)) or "none"
                raise InvalidArgumentError(
                    "tasks", f"the app has no task or topic {wanted!r}; its tasks: {known}"
                )
            if task not in out:
                out.append(task)
        return out

    # --- eager mode -----------------------------------------------------------------------

    def eager(self) -> AbstractContextManager[None]:
        """``with app.eager():`` runs every task of the app enqueued inside the block inline,
        at once, in this thread, whatever its delay, with no Redis: for tests (Celery's
        ``task_always_eager``). Arguments and results pass through the same checks and
        encoding as in Redis, so `TaskHandle.result` returns the same value or raises
        `JobFailedError`; retries run one after the other without waiting; a task enqueued
        with ``options(outbox=conn)`` runs once that transaction commits. Per context, not
        app-wide (`wheelq.tasks.eager`); blocks nest. docs/guides/testing.md, "Eager mode".
        """
        return eager.eager(self)

    @property
    def is_eager(self) -> bool:
        """Whether the app is in eager mode in this context (thread, asyncio task)."""
        return eager.active(self)

    @property
    def eager_mode(self) -> EagerMode | None:
        """How its tasks enqueue in eager mode when the app is in it here, else None."""
        return eager.MODE if eager.active(self) else None

    # --- flows (wheelq.tasks.signature) ----------------------------------------------------

    def flow(
        self,
        parent: Signature[R],
        children: Sequence[Signature[Any] | Flow[Any]],
        *,
        delay: Delay = 0,
        on_child_failure: str = "fail",
    ) -> TaskHandle[R]:
        """A join of task calls (`Client.enqueue_flow`): `children` (``f.s(...)``, on any of
        the app's tasks, or a `wheelq.tasks.Flow` of them: a flow inside) run as jobs do;
        `parent` runs `delay` after the last one succeeded,
        and reads their results with `children` (docs/guides/workflows.md). In eager mode
        the children run inline, then the parent (or, under ``"fail"`` after a failed
        child, it ends dead unrun). Returns the parent's handle."""
        head, specs, policy = flow_specs(parent, list(children), on_child_failure, delay)
        if (eager := self.eager_mode) is not None:
            return eager_flow(eager, parent, list(children), policy)
        joined = self.client.enqueue_flow(head, specs, on_child_failure=policy.value)
        return TaskHandle(parent.task, joined.id)

    async def aflow(
        self,
        parent: Signature[R],
        children: Sequence[Signature[Any] | Flow[Any]],
        *,
        delay: Delay = 0,
        on_child_failure: str = "fail",
    ) -> TaskHandle[R]:
        """`flow`, awaited."""
        head, specs, policy = flow_specs(parent, list(children), on_child_failure, delay)
        if (eager := self.eager_mode) is not None:
            return eager_flow(eager, parent, list(children), policy)
        joined = await self.aclient.enqueue_flow(head, specs, on_child_failure=policy.value)
        return TaskHandle(parent.task, joined.id)

    # --- periodic tasks (wheelq.tasks.periodic) ------------------------------------------

    @takes(RunOptions, payload=False)
    def periodic(
        self,
        task: Task[Any, Any],
        *,
        every: float | timedelta | None = None,
        cron: str | None = None,
        tz: str = "UTC",
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
        name: str | None = None,
        misfire: str = "once",
        max_catch_up: int = DEFAULT_CATCH_UP,
        **options: Unpack[RunOptions],
    ) -> Periodic:
        """Declare `task` run on a schedule with `args` and `kwargs`: ``wheelq run`` (or
        `sync_periodic`) makes the stored schedules match the declarations when it starts.

        Each run is a job of the task with the id ``<name>@<occurrence ms>``, written once
        whatever scheduler nodes run or die (`Admin.schedule`'s schedules, marked declared).

        Args:
            task: A task of this app.
            every: An interval in seconds (int, float) or a timedelta, 0.1 s to 366 days
                (runs at multiples of it from the Unix epoch); or
            cron: five cron fields read in `tz` (``"30 2 * * *"``, ``"@daily"``).
            tz: The IANA zone of `cron`.
            args: The task's positional arguments; and
            kwargs: its keyword arguments, checked against its annotations now.
            name: The schedule's name (default the task's; required for a second
                declaration of one task), 1-100 characters from [A-Za-z0-9_.:-].
            misfire: Runs missed while no scheduler ran: "once" runs the latest of them,
                "all" the latest `max_catch_up` in order, "skip" none.
            max_catch_up: 1-10,000 (for misfire="all").

        Raises:
            InvalidArgumentError: Naming the parameter: a task of another app, a bad
                every, cron, tz, misfire, name or option, or an argument that does not fit
                the task's annotations; nothing is declared.
        """
        declared = periodic.declare(
            self, task, every=every, cron=cron, tz=tz, args=args, kwargs=kwargs, name=name,
            misfire=misfire, max_catch_up=max_catch_up, options=options,
        )  # fmt: skip
        self.periodics[declared.name] = declared
        return declared

    def sync_periodic(self) -> SyncReport:
        """Make the stored schedules match the declarations (`periodic`): add the new ones,
        update the changed ones (an unchanged one keeps its state and its runs written
        ahead), remove the ones declared earlier on the app's topics and no longer declared
        (never one made with `Admin.schedule`). ``wheelq run`` calls it at start (with or
        without ``--no-scheduler``); call it yourself when you run `worker` and `scheduler`.
        Safe when several processes call it at once: each change is written once."""
        return periodic.sync(self)

    async def async_sync_periodic(self) -> SyncReport:
        """`sync_periodic`, awaited."""
        return await periodic.async_sync(self)

    # --- clients --------------------------------------------------------------------------

    @property
    def client(self) -> Client:
        """The app's blocking client, made on first use (thread-safe, shared)."""
        client = self._client
        if client is None:
            with self._lock:
                client = self._client
                if client is None:
                    client = self._client = Client.from_url(url=self.url, **self._connect())
        return client

    @property
    def aclient(self) -> AsyncClient:
        """The app's asyncio client on the running event loop, made on first use there."""
        loop = asyncio.get_running_loop()
        client = self._aclients.get(loop)
        if client is None:
            client = self._aclients[loop] = AsyncClient.from_url(self.url, **self._connect())
        return client

    def _connect(self) -> dict[str, Any]:
        settings = _as_kwargs(self.client_settings)
        return {"redis_options": self.redis_options, "cluster": self.cluster, **settings}

    def close(self) -> None:
        """Close the blocking client (an asyncio one closes with `aclose` on its loop)."""
        client, self._client = self._client, None
        if client is not None:
            client.close()

    async def aclose(self) -> None:
        """Close the running loop's asyncio client and the blocking one."""
        client = self._aclients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()
        self.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        """Make the running loop's asyncio client now; the exit closes it (`aclose`)."""
        self.aclient  # noqa: B018 (the property makes it)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # --- roles ----------------------------------------------------------------------------

    def worker(
        self,
        tasks: Iterable[str] | None = None,
        *,
        settings: WorkerSettings | None = None,
        consumer: str | None = None,
        handlers: Mapping[str, Routable] | None = None,
        around: Callable[[Handler], Handler] | None = None,
    ) -> Worker:
        """A worker of `tasks` (names or topics; None: every task), each task's jobs run by
        its function with its own time limit, backoff and attempts (`Task.route`), sharing
        the worker's slots.

        Args:
            tasks: The tasks to run, by name or topic (None: every task).
            settings: The worker's settings (None: the app's).
            consumer: The worker's consumer name (None: made up).
            handlers: Plain topics to run too, each with its handler (a function taking a
                `wheelq.Job`, or a `Route`): ``wheelq run --topic TOPIC=MODULE:HANDLER``.
            around: Given each handler (the tasks' and `handlers`'), returns the one the
                worker runs instead, sync for sync and async for async (Django's commands
                close stale database connections around each job with it).

        Raises:
            InvalidArgumentError: The app has no task and no `handlers` were given, none of
                a name in `tasks`, or a topic of `handlers` is a task's topic.
        """
        chosen = self.chosen(tasks)
        plain = dict(handlers or {})
        self._check_plain(plain, "handlers")
        if not chosen and not plain:
            raise InvalidArgumentError("tasks", "the app has no task: decorate one with @app.task")
        routes = {t.topic: t.route() for t in chosen}
        routes |= {t: h if isinstance(h, Route) else Route(h) for t, h in plain.items()}
        if around is not None:
            routes = {
                t: dataclasses.replace(r, handler=around(r.handler)) for t, r in routes.items()
            }
        fields = _as_kwargs(settings or self.worker_settings)
        return Worker.from_url(
            self.url,
            list(routes),
            routes,
            group=self.group,
            redis_options=self.redis_options,
            cluster=self.cluster,
            consumer=consumer,
            **fields,
        )

    def scheduler(
        self,
        tasks: Iterable[str] | None = None,
        *,
        settings: SchedulerSettings | None = None,
        topics: Iterable[str] = (),
    ) -> Scheduler:
        """A scheduler node leading the topics of `tasks` (None: every task's) and the plain
        `topics` (those `worker`'s ``handlers`` run).

        Raises:
            InvalidArgumentError: None of a name in `tasks`, or a topic of `topics` is not a
                topic name or is a task's topic.
        """
        plain = list(dict.fromkeys(topics))
        self._check_plain(plain, "topics")
        led = [t.topic for t in self.chosen(tasks)] + plain
        fields = _as_kwargs(settings or self.scheduler_settings)
        return Scheduler.from_url(
            self.url, led, redis_options=self.redis_options, cluster=self.cluster, **fields
        )

    def _check_plain(self, topics: Iterable[str], parameter: str) -> None:
        """Raise InvalidArgumentError (naming `parameter`) for a topic of `topics` that is
        not a topic name, or that is a task's (its jobs are the task's, run by the task)."""
        tasks = {t.topic: t.name for t in self.tasks.values()}
        for topic in topics:
            try:
                validate_topic(topic)
            except InvalidTopicError as exc:
                raise InvalidArgumentError(parameter, f"{parameter}: {exc}") from None
            if topic in tasks:
                raise InvalidArgumentError(
                    parameter,
                    f"{parameter} must be topics of no task: {topic!r} is task "
                    f"{tasks[topic]!r}'s topic, its jobs run by the task",
                )


def _as_kwargs(settings: object) -> dict[str, Any]:
    """A settings dataclass as the keyword settings ``from_url`` takes."""
    return {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)}  # type: ignore[arg-type]


def _result_ttl_ms(result_ttl: object, keep: object) -> int | None:
    if result_ttl is not None and keep is False:
        raise InvalidArgumentError("result_ttl", "result_ttl needs result=True: none is kept")
    return duration_ms(result_ttl, None, name="result_ttl", alias="result_ttl_ms", min_ms=1)


def _default_name(fn: Callable[..., Any]) -> str:
    """``module.qualname``; a function of ``__main__`` is named after the module it was run
    as (``python -m app.tasks``) or its file, so producer and worker agree."""
    module = getattr(fn, "__module__", None) or "tasks"
    if module == "__main__":
        main = sys.modules.get("__main__")
        spec = getattr(main, "__spec__", None)
        if spec is not None and spec.name:
            module = spec.name
        else:
            path = getattr(main, "__file__", None) or "main"
            module = path.rsplit("/", 1)[-1].removesuffix(".py")
    qualname = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", "task")
    return f"{module}.{qualname}".replace(".<locals>", "")


def _topic(topic: str | None, name: str) -> str:
    if topic is not None:
        try:
            return validate_topic(topic)
        except InvalidTopicError as exc:
            raise InvalidArgumentError("topic", str(exc)) from None
    spelled = _NOT_TOPIC.sub("_", name).strip("._-") or "task"
    return spelled[-100:]
