"""An enqueue inside a ``send <topic>`` span, when tracing is on (`wheelq.runtime.tracing`).

`Producer.enqueue` and `Producer.enqueue_many` go through `sending`: without the ``otel``
extra it hands back the operation itself, so the untraced path has no extra step. With it,
the span is opened before the operation validates anything and ended when it returns or
raises, so it covers the call's validation, its round trips and a spool's write; its context
is the traceparent the call's jobs carry (a job's own `traceparent` wins).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from wheelq.core.job import validate_traceparent
from wheelq.runtime.tracing import Tracing
from wheelq.store.executor import Call

Write = Generator[list[Call[Any]], list[Any], list[str]]


def sending(
    tracing: Tracing | None,
    topic: str,
    parent: str | None,
    write: Callable[[str | None], Write],
    *,
    batch: bool,
) -> Write:
    """`write(traceparent)`, inside a send span on `topic` when `tracing` is on.

    Args:
        tracing: The process's tracing; None: `write(None)` as it is.
        topic: The topic (the span's destination).
        parent: The caller's own traceparent (`enqueue`'s), the span's parent; None: the
            current span. Validated before anything is sent.
        write: Makes the operation, given the traceparent its jobs carry by default; it
            returns the ids it wrote.
        batch: From `enqueue_many`: the span counts the jobs instead of naming one.

    Raises:
        InvalidArgumentError: `parent` is not a valid traceparent (with tracing on; without,
            `write` checks each job's).
    """
    if tracing is None:
        return write(None)
    if not tracing.active:  # no span to open: the traceparent a send span would have had
        return write(validate_traceparent(parent) or tracing.inject())
    return _traced(tracing, topic, parent, write, batch)


def _traced(
    tracing: Tracing,
    topic: str,
    parent: str | None,
    write: Callable[[str | None], Write],
    batch: bool,
) -> Write:
    span = tracing.send(topic, validate_traceparent(parent))
    try:
        ids = yield from write(tracing.traceparent(span))
    except Exception as exc:
        tracing.failed(span, exc)
        raise
    except BaseException:  # closed early (a cancelled caller): no outcome to record
        span.end()
        raise
    tracing.sent(span, ids, batch)
    return ids
