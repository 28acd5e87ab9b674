"""Trace context: the W3C traceparent a job carries, version 00 (tracestate is not carried)."""

from __future__ import annotations

import re

from wheelq.errors import (
    InvalidArgumentError,
)

# --- trace context: a W3C traceparent, version 00 (tracestate is not carried)

_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16
SAMPLED = 0x01
"""The trace-flags bit saying the caller may have recorded its span."""


def validate_traceparent(traceparent: object) -> str | None:
    """`traceparent` if it is None or a valid version-00 traceparent, else InvalidArgumentError."""
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
    """``(trace id, span id, flags)`` of a valid traceparent, else None; never raises."""
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
    """The version-00 traceparent of a span context (ids as ints, as OpenTelemetry has them)."""
    return f"00-{trace_id:032x}-{span_id:016x}-{flags & 0xFF:02x}"
