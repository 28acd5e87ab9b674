"""OpenTelemetry spans (docs/architecture.md, "Roles and layers")."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from wheelq.core.job import Job
from wheelq.core.trace import format_traceparent, parse_traceparent

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, SpanContext, Tracer, TracerProvider

SYSTEM = "wheelq"  # ``messaging.system`` of every span.
TRACER_NAME = "wheelq"

RECHECK_S = 1.0  # How often `Tracing.active` looks for a global tracer provider set since.

_UNLOADED: Any = object()
_loaded: Tracing | None = _UNLOADED


def load() -> Tracing | None:
    """The process's `Tracing`; None when ``opentelemetry-api`` is not installed."""
    global _loaded  # noqa: PLW0603 (one import per process)
    if _loaded is _UNLOADED:
        try:
            _loaded = Tracing()
        except ImportError:
            _loaded = None
    return _loaded


def inject() -> str | None:
    """The current span's W3C traceparent, or None."""
    tracing = load()
    return None if tracing is None else tracing.inject()


class Tracing:
    """Opens spans on the ``wheelq`` tracer of `provider` (None: the global one)."""

    def __init__(self, provider: TracerProvider | None = None) -> None:
        from opentelemetry import context, trace  # noqa: PLC0415 (the optional extra)

        self._trace = trace
        self._context = context
        self._tracer: Tracer = trace.get_tracer(TRACER_NAME, tracer_provider=provider)
        self._given = provider is not None
        self._records_nothing = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
        self._active = False
        self._checked_s = -RECHECK_S

    @property
    def active(self) -> bool:
        """Whether spans are recorded (a global provider is looked up at most every `RECHECK_S`)."""
        if self._given:
            return True
        now = time.monotonic()
        if now - self._checked_s >= RECHECK_S:
            provider = self._trace.get_tracer_provider()
            self._active = not isinstance(provider, self._records_nothing)
            self._checked_s = now
        return self._active

    def inject(self) -> str | None:
        return _traceparent(self._trace.get_current_span().get_span_context())

    def traceparent(self, span: Span) -> str | None:
        return _traceparent(span.get_span_context())

    def send(self, topic: str, parent: str | None) -> Span:
        """Start a ``send <topic>`` span under `parent` or the current span."""
        context = None if parent is None else self._remote(parent)[0]
        return self._tracer.start_span(
            f"send {topic}",
            context=context,
            kind=self._trace.SpanKind.PRODUCER,
            attributes={
                "messaging.system": SYSTEM,
                "messaging.operation.type": "send",
                "messaging.operation.name": "send",
                "messaging.destination.name": topic,
            },
        )

    def sent(self, span: Span, ids: list[str], batch: bool) -> None:
        """End a send span that wrote `ids` (`batch`: from `enqueue_many`)."""
        if batch:
            span.set_attribute("messaging.batch.message_count", len(ids))
        elif ids:
            span.set_attribute("messaging.message.id", ids[0])
        span.end()

    def failed(self, span: Span, error: BaseException) -> None:
        _record(self._trace, span, error)
        span.end()

    @contextmanager
    def process(self, job: Job, group: str) -> Iterator[None]:
        """A ``process <topic>`` span around a handler's run; records what it raised."""
        context, link = self._remote(job.traceparent)
        span = self._tracer.start_span(
            f"process {job.topic}",
            context=context,
            kind=self._trace.SpanKind.CONSUMER,
            links=None if link is None else [self._trace.Link(link)],
            attributes={
                "messaging.system": SYSTEM,
                "messaging.operation.type": "process",
                "messaging.operation.name": "process",
                "messaging.destination.name": job.topic,
                "messaging.destination.partition.id": str(job.shard),
                "messaging.message.id": job.id,
                "messaging.consumer.group.name": group,
                "wheelq.job.attempt": job.attempt,
                "wheelq.job.deliveries": job.deliveries,
                "wheelq.job.due_ms": job.due_ms,
                "wheelq.job.fired_ms": job.fired_ms if job.entry_id else 0,
            },
        )
        token = self._context.attach(self._trace.set_span_in_context(span))
        try:
            yield
        except BaseException as exc:  # SystemExit in a sync handler, a timeout's cancel
            _record(self._trace, span, exc)
            raise
        finally:
            self._context.detach(token)
            span.end()

    def _remote(self, traceparent: str | None) -> tuple[Context, SpanContext | None]:
        """The remote context of `traceparent` and its span context; (empty, None) if invalid."""
        parsed = parse_traceparent(traceparent)
        if parsed is None:
            return self._context.Context(), None
        trace_id, span_id, flags = parsed
        remote = self._trace.SpanContext(
            trace_id, span_id, is_remote=True, trace_flags=self._trace.TraceFlags(flags)
        )
        span = self._trace.NonRecordingSpan(remote)
        return self._trace.set_span_in_context(span, self._context.Context()), remote


def _traceparent(context: SpanContext) -> str | None:
    if not context.is_valid:
        return None
    return format_traceparent(context.trace_id, context.span_id, context.trace_flags)


def _record(trace: Any, span: Span, error: BaseException) -> None:
    if isinstance(error, asyncio.CancelledError):
        why = "cancelled: the handler ran over handler_timeout_ms, or the worker stopped"
    else:
        why = f"{type(error).__name__}: {error}"
        span.record_exception(error)
    span.set_status(trace.Status(trace.StatusCode.ERROR, why))
