"""A task's job once enqueued: its handle (`TaskHandle`), and the call eager mode runs in its
place (`Enqueued`, `EagerMode`; docs/guides/tasks.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

import msgspec

from wheelq.admin.admin import Admin
from wheelq.admin.async_admin import AsyncAdmin
from wheelq.core.due import At, Delay
from wheelq.core.history import JobInfo, JobState
from wheelq.core.job import Job
from wheelq.core.settings import ClientSettings
from wheelq.errors import MalformedJobError, UnknownGroupError
from wheelq.producer.async_client import AsyncClient
from wheelq.producer.client import Client
from wheelq.tasks.codec import TaskCodec, spelled

R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)

DEFAULT_RESULT_TIMEOUT_S = 30.0


class Clients(Protocol):
    """What a task asks of its app (`wheelq.App`): the clients it enqueues and waits with,
    and the consumer group whose results it waits for."""

    @property
    def client(self) -> Client: ...
    @property
    def aclient(self) -> AsyncClient: ...
    @property
    def group(self) -> str: ...
    @property
    def eager_mode(self) -> EagerMode | None: ...

    client_settings: ClientSettings


class TaskLike(Protocol[R_co]):
    """What a handle, a signature and eager mode ask of a task (`wheelq.tasks.task.Task`)."""

    @property
    def topic(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def app(self) -> Clients: ...
    @property
    def codec(self) -> TaskCodec: ...
    @property
    def is_async(self) -> bool: ...
    def handler(self) -> Callable[[Job], Any]: ...


class Enqueued(NamedTuple):
    """One call of an enqueue form, its arguments encoded: what eager mode runs."""

    task: TaskLike[Any]
    payload: Any
    options: dict[str, Any]
    delay: Delay | None
    at: At | None
    outbox: Any


class EagerMode(Protocol):
    """How a task enqueues in eager mode (`wheelq.tasks.eager`, `App.eager`): validated
    and encoded as for Redis, then run inline; the handle says what became of it."""

    def send(self, call: Enqueued) -> TaskHandle[Any]: ...
    async def asend(self, call: Enqueued) -> TaskHandle[Any]: ...
    def skip(self, call: Enqueued, state: JobState, error: str) -> TaskHandle[Any]: ...


class TaskHandle(Generic[R]):
    """A task's enqueued job: its `id`, and the calls about it (blocking, or awaited in
    the ``a`` forms)."""

    def __init__(self, task: TaskLike[R], job_id: str) -> None:
        self.task = task
        self.id = job_id
        self.topic = task.topic

    def __repr__(self) -> str:
        return f"<TaskHandle {self.task.name} {self.id}>"

    def result(self, timeout: float = DEFAULT_RESULT_TIMEOUT_S) -> R:
        """The function's return value, as its annotation's type, once the job succeeded:
        waits up to `timeout` seconds (`ResultTimeoutError`); `JobFailedError` once it is
        dead-lettered or cancelled (see `Client.result`); `MalformedJobError`, naming the
        task and the job, for a kept result that does not fit the return annotation."""
        app = self.task.app
        try:
            value = app.client.result(self.topic, self.id, group=app.group, timeout=timeout)
        except UnknownGroupError:  # no worker of the app has started yet: wait for one
            Admin.of(app.client).create_group(self.topic, app.group)
            value = app.client.result(self.topic, self.id, group=app.group, timeout=timeout)
        return self._typed(value)

    async def aresult(self, timeout: float = DEFAULT_RESULT_TIMEOUT_S) -> R:
        """`result`, awaited."""
        app = self.task.app
        client = app.aclient
        try:
            value = await client.result(self.topic, self.id, group=app.group, timeout=timeout)
        except UnknownGroupError:
            await AsyncAdmin.of(client).create_group(self.topic, app.group)
            value = await client.result(self.topic, self.id, group=app.group, timeout=timeout)
        return self._typed(value)

    def cancel(self) -> bool:
        """Cancel the job if it is still pending; False when it is not (see `Client.cancel`)."""
        return self.task.app.client.cancel(self.topic, self.id)

    async def acancel(self) -> bool:
        """`cancel`, awaited."""
        return await self.task.app.aclient.cancel(self.topic, self.id)

    def reschedule(self, *, delay: Delay | None = None, at: At | None = None) -> bool:
        """Move the pending job to a new due time; False when it is not pending."""
        return self.task.app.client.reschedule(self.topic, self.id, delay=delay, at=at)

    async def areschedule(self, *, delay: Delay | None = None, at: At | None = None) -> bool:
        """`reschedule`, awaited."""
        return await self.task.app.aclient.reschedule(self.topic, self.id, delay=delay, at=at)

    def info(self) -> JobInfo:
        """Where the job is in its life (`Client.get`)."""
        return self.task.app.client.get(self.topic, self.id)

    async def ainfo(self) -> JobInfo:
        """`info`, awaited."""
        return await self.task.app.aclient.get(self.topic, self.id)

    def _typed(self, value: Any) -> R:
        task = self.task
        try:
            typed: R = task.codec.decode_result(value)
        except msgspec.ValidationError as exc:  # kept by a worker of another code version
            raise MalformedJobError(
                self.topic,
                self.id,
                f"its result does not fit task {task.name}'s return annotation "
                f"{spelled(task.codec.returns)}: {exc}",
            ) from None
        return typed
