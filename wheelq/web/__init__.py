"""The HTTP service (`wheelq serve`): the JSON API, pull consumers, the dashboard.

An ASGI app (FastAPI) over one `wheelq.AsyncClient`, optionally running the callback
deliverer beside it (`wheelq.callbacks`). See README, "HTTP service". `as_json` is here,
without FastAPI, for the CLI's ``--json`` to import cheaply.
"""

from __future__ import annotations

import dataclasses
from enum import Enum
from typing import Any

from wheelq.core.job import jsonable
from wheelq.core.retry import error_detail, error_line

ERRORS = ("error", "last_error")
"""Recorded errors: on the wire as their line, and whole beside it (``<name>_detail``)."""
HIDDEN = ("fields",)
"""Left off the wire (a dead letter's raw fields: the rest are read from them)."""


def as_json(value: Any) -> Any:
    """A core record (`JobInfo`, `DeadLetter`, ...) as JSON, as `models.wire_model` describes
    it: fields by name, enums by value, payloads as `jsonable` spells them, errors as
    `ERRORS` says."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if f.name in ERRORS:
                line = error_line(item)
                out[f.name] = line if f.type == "str" else line or None
                out[f"{f.name}_detail"] = error_detail(item)
            elif f.name not in HIDDEN:
                out[f.name] = as_json(item)
        return out
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, list | tuple):
        return [as_json(v) for v in value]
    return jsonable(value)
