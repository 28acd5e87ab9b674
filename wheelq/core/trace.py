"""W3C trace context in a job: the ``traceparent`` it carries from enqueue to its handler.

A traceparent (https://www.w3.org/TR/trace-context/#traceparent-header) names the span a
job was enqueued in::

    00-<trace id: 32 hex>-<parent span id: 16 hex>-<trace flags: 2 hex>
    00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01

wheelq writes only version ``00``, lower-case hex, ids not all zero (the W3C's rules for a
valid one); its ``tracestate`` is not carried. The producer validates a traceparent the
caller passes (`validate_traceparent`); readers parse what they find leniently
(`parse_traceparent`), since a job must never fail on its trace.
"""

from __future__ import annotations

import re

from wheelq.errors import InvalidArgumentError

_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16

SAMPLED = 0x01
"""The trace-flags bit saying the caller may have recorded its span."""


def validate_traceparent(traceparent: object) -> str | None:
    """Return `traceparent` if it is None or a valid W3C version-00 traceparent.

    Raises:
        InvalidArgumentError: Otherwise (also a ValueError), naming ``traceparent``.
    """
    if traceparent is None:
        return None
    if isinstance(traceparent, str) and parse_traceparent(traceparent) is not None:
        return traceparent
    raise InvalidArgumentError(
        "traceparent",
        "traceparent must be a W3C traceparent '00-<trace id: 32 hex>-<span id: 16 hex>-"
        f"<flags: 2 hex>' in lower case, ids not all zero, or None; got {traceparent!r:.80}",
    )


def parse_traceparent(traceparent: str | None) -> tuple[int, int, int] | None:
    """``(trace id, span id, trace flags)`` of a valid traceparent; None for anything else
    (None, empty, another version, malformed). Never raises."""
    if not traceparent:
        return None
    match = _TRACEPARENT.fullmatch(traceparent)
    if match is None:
        return None
    trace_id, span_id, flags = match.groups()
    if trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return None
    return int(trace_id, 16), int(span_id, 16), int(flags, 16)


def format_traceparent(trace_id: int, span_id: int, flags: int) -> str:
    """The version-00 traceparent of a span context (ids as ints, as OpenTelemetry has
    them)."""
    return f"00-{trace_id:032x}-{span_id:016x}-{flags & 0xFF:02x}"
