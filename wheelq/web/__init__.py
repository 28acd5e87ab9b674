"""The HTTP service (`wheelq serve`): the JSON API, pull consumers, the dashboard.

An ASGI app (FastAPI) over one `wheelq.AsyncClient`, optionally running the callback
deliverer beside it (`wheelq.callbacks`). See docs/guides/http-service.md. `as_json` and
`schedule_json` are here, without FastAPI, for the CLI's ``--json`` to import cheaply.
"""

from __future__ import annotations

import dataclasses
import functools
from enum import Enum
from typing import Any

from wheelq.core.payload import jsonable
from wheelq.core.recurring import Schedule
from wheelq.core.retry import error_detail, error_line
from wheelq.producer.operations import ShardTotal

ERRORS = ("error", "last_error")
"""The fields, in any record, that hold a recorded error. On the wire each is the error's
first line (`error_line`: "" when there is none, or null where the field may be None), and
beside it, as ``<its wire name>_detail``, the error whole when it says more than that line
(a traceback), else null. `as_json` writes them so; `models.wire_model` describes them so."""
HIDDEN = ("fields", "spool", "held")
"""Left off the wire (a dead letter's raw fields: the rest are read from them; a client's
spool; a worker's held entries, which the running job list reads)."""


@functools.cache  # as_json asks once per record it writes
def wire_fields(cls: type) -> tuple[tuple[str, str, Any], ...]:
    """(attribute, name on the wire, annotation) of each field of record `cls` on the wire:
    its dataclass fields but `HIDDEN`, named by their ``"wire"`` metadata if any, and its
    `ShardTotal` totals (int) just before the shards they sum."""
    sums = [(n, n, "int") for n, v in vars(cls).items() if isinstance(v, ShardTotal)]
    out: list[tuple[str, str, Any]] = []
    for f in dataclasses.fields(cls):
        if f.name == "shards":
            out += sums
        if f.name not in HIDDEN:
            out.append((f.name, f.metadata.get("wire", f.name), f.type))
    return tuple(out)


def as_json(value: Any) -> Any:
    """A core record (`JobInfo`, `DeadLetter`, ...) as JSON, as `models.wire_model` describes
    it: fields as `wire_fields` says, enums by value, errors as `ERRORS` says, a list or
    tuple of records record by record, anything else (payloads, results) as `jsonable`
    spells it: the one rendering of a payload, nested past its limit or not."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for name, wire, kind in wire_fields(type(value)):
            item = getattr(value, name)
            if name in ERRORS:
                line = error_line(item)
                out[wire] = line if kind == "str" else line or None
                out[f"{wire}_detail"] = error_detail(item)
            else:
                out[wire] = as_json(item)
        return out
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, list | tuple) and value and _is_record(value[0]):
        return [as_json(v) for v in value]  # records: a decoded payload never holds one
    return jsonable(value)


def _is_record(value: Any) -> bool:
    return isinstance(value, Enum) or (
        dataclasses.is_dataclass(value) and not isinstance(value, type)
    )


def schedule_json(s: Schedule, now_ms: int) -> dict[str, Any]:
    """A schedule as JSON: its rule's fields flat, the payload decoded, the next run after
    `now_ms` (None while paused or once ended), and each option its runs carry as `get()`
    shows a job's (a callback by its URL only: its headers may hold credentials)."""
    r = s.rule
    return {
        "name": s.name,
        "topic": s.topic,
        "cron": r.cron,
        "every_ms": r.every_ms,
        "tz": r.tz,
        "start_ms": r.start_ms,
        "end_ms": r.end_ms,
        "misfire": s.misfire,
        "max_catch_up": s.max_catch_up,
        "max_attempts": s.max_attempts,
        **s.run_options,
        "paused": s.paused,
        "planned_ms": s.planned_ms,
        "updated_ms": s.updated_ms,
        "next_run_ms": s.next_run_ms(now_ms),
        "payload": jsonable(s.data),
        "error": s.error,
        "declared": s.declared,
    }
