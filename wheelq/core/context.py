"""The running job of this task or thread: `current_job()` inside a handler or a task,
sync or async (docs/guides/tasks.md, "The job's context").

One `ContextVar` holds it. The worker sets it around each handler call (on the handler's
thread for a sync one, in its task for an async one); eager mode sets it around each
inline run. A coroutine or thread a handler starts on its own sees it only if it copies
the context (`asyncio.create_task` and `asyncio.to_thread` do).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from wheelq.core.job import Job
from wheelq.errors import NoCurrentJobError

CURRENT: ContextVar[Job | None] = ContextVar("wheelq_current_job", default=None)
"""The job whose handler runs in this context; None outside one."""


def current_job() -> Job:
    """The `Job` whose handler or task is running here: its `id`, `topic`, `group`,
    `attempt`, `max_attempts`, `due_ms`, `enqueued_ms` and `key`.

    Raises:
        NoCurrentJobError: Called outside a handler or task run by a worker (or by
            `App.eager`).
    """
    job = CURRENT.get()
    if job is None:
        raise NoCurrentJobError(
            "current_job() is only for code a worker (or App.eager) runs as a job's handler "
            "or task; no job is running in this context"
        )
    return job


def job_or_none() -> Job | None:
    """The running job, or None outside one."""
    return CURRENT.get()


@contextmanager
def running(job: Job) -> Iterator[Job]:
    """Make `job` the current job inside the block (the worker's and eager mode's)."""
    token = CURRENT.set(job)
    try:
        yield job
    finally:
        CURRENT.reset(token)
