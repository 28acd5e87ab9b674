"""Payload checks by topic: what a schedule's payload must fit, registered by the code that
runs the topic (a task registers its codec's check, `wheelq.tasks`), consulted by
`Admin.schedule` in the same process (docs/architecture.md, "Schedules").

The admin is a lower layer than tasks, so it cannot look a task up; a task registers here
instead. Only the process that imported the task's module knows it: a schedule made over
HTTP or the CLI of another process is not checked here, and its runs that do not fit are
dead-lettered by the worker.
"""

from __future__ import annotations

import weakref
from typing import Any, Protocol


class PayloadCheck(Protocol):
    """Reads a payload as its topic's code would, raising `InvalidArgumentError` naming the
    argument that does not fit (`wheelq.tasks.codec.TaskCodec.decode`)."""

    def decode(self, payload: Any) -> Any: ...


_CHECKS: weakref.WeakValueDictionary[str, PayloadCheck] = weakref.WeakValueDictionary()
"""Each topic's check, held as long as its owner (a task's codec) lives."""


def register(topic: str, check: PayloadCheck) -> None:
    """Check every schedule's payload on `topic` with `check` (the latest registered wins)."""
    _CHECKS[topic] = check


def check(topic: str, payload: Any) -> None:
    """Raise what `topic`'s check raises for `payload` (as a run would read it); nothing when
    no check is registered for it in this process."""
    found = _CHECKS.get(topic)
    if found is not None:
        found.decode(payload)
