"""Periodic tasks declared in code (`App.periodic`), checked at declaration, and the sync that
makes the stored schedules match them when the app starts (``wheelq run``, `App.sync_periodic`;
docs/guides/tasks.md, "Periodic tasks"; docs/architecture.md, "Schedules").

A declaration is a recurring schedule (`wheelq.core.recurring.Schedule`) on its task's topic
whose payload is the task's arguments, marked with the task's name (`Schedule.declared`):
the sync adds, updates and removes only schedules so marked, on the app's topics.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from wheelq.admin.admin import Admin
from wheelq.admin.async_admin import AsyncAdmin
from wheelq.admin.schedules import SyncReport, record
from wheelq.core.options import RunOptions
from wheelq.core.recurring import Schedule, interval_ms, validate_name
from wheelq.core.settings import ClientSettings
from wheelq.errors import InvalidArgumentError, RedisUnavailableError
from wheelq.producer.async_client import AsyncClient
from wheelq.producer.client import Client
from wheelq.runtime.clock import WallClock
from wheelq.tasks.task import Task

DEFAULT_CATCH_UP = 100
RETRY_FIRST_S = 0.5
RETRY_MAX_S = 30.0
"""The pauses between tries of a start's sync while Redis is unreachable (doubling)."""


class Declaring(Protocol):
    """What declaring and syncing ask of an app (`wheelq.App`)."""

    @property
    def client(self) -> Client: ...
    @property
    def aclient(self) -> AsyncClient: ...

    client_settings: ClientSettings
    tasks: dict[str, Task[Any, Any]]
    periodics: dict[str, Periodic]


@dataclass(frozen=True, slots=True)
class Periodic:
    """One declaration: a task run on a schedule, its arguments encoded and checked."""

    task: Task[Any, Any]
    name: str
    """The schedule's name; each run is the job ``<name>@<occurrence ms>``."""
    cron: str | None
    every_ms: int | None
    tz: str
    payload: dict[str, Any]
    """The task's arguments, as its codec wrote them."""
    misfire: str
    max_catch_up: int
    options: RunOptions

    def record(self, settings: ClientSettings, now_ms: int) -> Schedule:
        """The schedule as stored, marked declared by its task."""
        return record(
            settings, now_ms, self.name, self.task.topic, self.payload, cron=self.cron,
            every_ms=self.every_ms, tz=self.tz, misfire=self.misfire,
            max_catch_up=self.max_catch_up, options=self.options, declared=self.task.name,
        )  # fmt: skip


def declare(
    app: Declaring,
    task: object,
    *,
    every: object,
    cron: object,
    tz: object,
    args: object,
    kwargs: object,
    name: object,
    misfire: object,
    max_catch_up: object,
    options: RunOptions,
) -> Periodic:
    """Check a declaration whole (`App.periodic`'s arguments) and return it; nothing is
    declared when it raises.

    Raises:
        InvalidArgumentError: Naming the parameter: a task not of `app`, not exactly one of
            `every` and `cron`, a bad `tz`, `misfire`, `name` (or one already declared),
            option, or an argument that does not fit the task's annotations.
    """
    owner: object = getattr(task, "app", None)
    if not isinstance(task, Task) or owner is not app:
        raise InvalidArgumentError(
            "task", f"task must be a task of this app (made with @app.task), got {task!r:.60}"
        )
    if (every is None) == (cron is None):
        raise InvalidArgumentError("every", "pass exactly one of every= (seconds) and cron=")
    if not isinstance(args, tuple | list):
        raise InvalidArgumentError("args", f"args must be a tuple, got {args!r:.40}")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise InvalidArgumentError("kwargs", f"kwargs must be a dict or None, got {kwargs!r:.40}")
    if name is None:
        name = task.name
        if any(p.task is task for p in app.periodics.values()):
            raise InvalidArgumentError(
                "name", f"task {task.name} is declared periodic already: give each its own name="
            )
    validate_name(name)
    assert isinstance(name, str)
    if name in app.periodics:
        raise InvalidArgumentError(
            "name", f"a periodic task named {name!r} is declared already: give another name="
        )
    own = task.config.max_attempts
    given = options.get("max_attempts")
    if own is not None and given is not None and given != own:
        raise InvalidArgumentError(
            "max_attempts",
            f"task {task.name} has max_attempts={own} of its own, which its worker applies "
            f"to every job of its topic; got max_attempts={given}",
        )
    run_options: RunOptions = {**options, "max_attempts": own if given is None else given}
    if options.get("priority") is None and task.config.priority is not None:
        run_options["priority"] = task.config.priority  # the task's, unless its own
    payload = task.codec.encode(tuple(args), dict(kwargs or {}))
    declared = Periodic(
        task, name, cron, interval_ms(every, None), tz, payload, misfire,  # type: ignore[arg-type]
        max_catch_up, run_options,  # type: ignore[arg-type]
    )  # fmt: skip
    declared.record(app.client_settings, 0)  # the rule, the zone, the options: checked now
    return declared


def records(app: Declaring) -> tuple[set[str], list[Schedule]]:
    """The topics a sync of `app` covers (every task's) and its declarations as records."""
    now_ms = WallClock.now_ms()
    topics = {t.topic for t in app.tasks.values()}
    return topics, [p.record(app.client_settings, now_ms) for p in app.periodics.values()]


def sync(app: Declaring) -> SyncReport:
    """Make the stored schedules match `app`'s declarations (`App.sync_periodic`)."""
    topics, declared = records(app)
    return Admin.of(app.client).sync_schedules(topics, declared)


async def async_sync(app: Declaring) -> SyncReport:
    """`sync`, awaited (`App.async_sync_periodic`)."""
    topics, declared = records(app)
    return await AsyncAdmin.of(app.aclient).sync_schedules(topics, declared)


def start_sync(app: Declaring, log: logging.Logger) -> SyncReport | None:
    """`sync` at an app's start (``wheelq run``, ``manage.py wheelq run``), each change
    logged. With Redis unreachable, the process starts all the same (its roles ride the
    outage out) and the sync is retried on a thread of its own until it is done: None."""
    try:
        report = sync(app)
    except RedisUnavailableError as exc:
        log.error("periodic tasks not synced yet (%s): retrying until redis answers", exc)
        thread = threading.Thread(target=_retry, args=(app, log), name="periodic-sync")
        thread.daemon = True  # nothing to finish: the next start syncs again
        thread.start()
        return None
    _log(report, log)
    return report


def _retry(app: Declaring, log: logging.Logger) -> None:
    pause_s = RETRY_FIRST_S
    while True:
        time.sleep(pause_s)
        try:
            report = sync(app)
        except RedisUnavailableError:
            pause_s = min(pause_s * 2, RETRY_MAX_S)
            continue
        except Exception:  # never a silent end: said, and tried again
            log.exception("periodic tasks not synced: retrying in %.0f s", pause_s)
            pause_s = min(pause_s * 2, RETRY_MAX_S)
            continue
        _log(report, log)
        return


def _log(report: SyncReport, log: logging.Logger) -> None:
    for what, names in (
        ("added", report.added),
        ("updated", report.updated),
        ("removed", report.removed),
    ):
        if names:
            log.info("periodic tasks %s: %s", what, ", ".join(names))
