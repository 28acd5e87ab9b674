"""Payloads, job states and dead letters as JSON, for the CLI's ``--json``, the HTTP service
and callback bodies: one spelling everywhere.

A payload is whatever msgpack decoded, so not always JSON: bytes (anywhere inside it)
become ``{"$bytes": "<base64>"}``, a non-finite float ``{"$float": "nan"}``, map keys that
are not strings their JSON text, anything else ``{"$repr": "..."}``. A payload enqueued as
JSON comes back as it went in.
"""

from __future__ import annotations

import base64
import json
import math
from typing import Any

from wheelq.core.history import JobInfo
from wheelq.core.job import DeadLetter
from wheelq.core.retry import error_detail, error_line


def jsonable(value: Any) -> Any:
    """`value` (a decoded msgpack payload) as plain JSON types; see the module docstring."""
    if isinstance(value, str | int | bool) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(value, bytes | bytearray):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, dict):
        return {
            k if isinstance(k, str) else json.dumps(jsonable(k)): jsonable(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return {"$repr": repr(value)}


def dead_letter_json(dead: DeadLetter) -> dict[str, Any]:
    """A dead letter as JSON (its raw `fields` left out: the rest are read from them); its
    error as one line (`error`) and whole (`error_detail`, with the traceback; null when the
    line is all), as for every recorded error."""
    return {
        "ref": dead.ref,
        "topic": dead.topic,
        "job_id": dead.job_id,
        "reason": dead.reason,
        "group": dead.group,
        "attempt": dead.attempt,
        "max_attempts": dead.max_attempts,
        "dead_ms": dead.dead_ms,
        "source_entry": dead.source_entry,
        "error": error_line(dead.error),
        "error_detail": error_detail(dead.error),
        "payload": jsonable(dead.payload),
    }


def job_info_json(info: JobInfo) -> dict[str, Any]:
    """A `JobInfo` as JSON: its fields by name, the state as its value, groups as objects;
    each error as one line, and whole beside it (``last_error_detail``, a group's
    ``error_detail``), as `dead_letter_json` says them."""
    return {
        "id": info.id,
        "topic": info.topic,
        "state": info.state.value,
        "due_ms": info.due_ms,
        "attempt": info.attempt,
        "max_attempts": info.max_attempts,
        "enqueued_ms": info.enqueued_ms,
        "payload": jsonable(info.payload),
        "entry_id": info.entry_id,
        "fired_ms": info.fired_ms,
        "cancelled_ms": info.cancelled_ms,
        "last_error": error_line(info.last_error) or None,
        "last_error_detail": error_detail(info.last_error),
        "groups": [
            {
                **{f: jsonable(getattr(g, f)) for f in g.__dataclass_fields__},
                "error": error_line(g.error) or None,
                "error_detail": error_detail(g.error),
            }
            for g in info.groups
        ],
    }
