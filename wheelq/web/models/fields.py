"""The parts every resource's models are built of: names and ids as the server checks them,
whole numbers, times (`Time`, `as_time`), and `Strict`, the base of every request body."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import Path
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, JsonValue

from wheelq.core.due import utc_text
from wheelq.core.keys import MAX_TOPIC_LENGTH
from wheelq.core.recurring import MAX_MS
from wheelq.errors import InvalidArgumentError

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _printable_pattern() -> str:
    """A JSON Schema pattern of the strings `str.isprintable` accepts, as this Python's
    Unicode data says (what the server checks ids, keys and groups against), so that
    the OpenAPI document admits exactly those."""
    flags = [c.isprintable() for c in map(chr, range(0x110000))]
    ranges, start = [], None
    for code, printable in enumerate([*flags, True]):
        if not printable and start is None:
            start = code
        elif printable and start is not None:
            low, high = start, code - 1
            start = None
            # A pattern cannot name a surrogate (nor can a str from UTF-8 hold one).
            low = 0xE000 if 0xD800 <= low <= 0xDFFF else low
            high = 0xD7FF if 0xD800 <= high <= 0xDFFF else high
            if low <= high:
                ranges.append(_char(low) if low == high else f"{_char(low)}-{_char(high)}")
    return f"^[^{''.join(ranges)}]+$"


def _char(code: int) -> str:
    return f"\\u{code:04X}" if code <= 0xFFFF else f"\\U{code:08X}"


PRINTABLE = _printable_pattern()
"""1 or more printable characters (`str.isprintable`: no control, format, separator other
than space, private-use or unassigned character)."""


def _whole(value: object) -> object:
    """A float without a fraction (``300000.0``) as the int it is: JSON has one number type,
    and JSON Schema's ``integer`` admits it."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


WHOLE = BeforeValidator(_whole)


Int = Annotated[int, WHOLE]
"""An integer, written with or without ``.0``. A bounded one is
``Annotated[int, Field(ge=..., le=...), WHOLE]``: with the bounds before the validator,
pydantic writes them as JSON Schema's ``minimum`` and ``maximum`` (after it, as ``ge``
and ``le``, which no OpenAPI client reads)."""


def _finite(value: JsonValue) -> JsonValue:
    """`value` if every number in it is finite (RFC 8259), else a ValueError naming where."""
    todo: list[tuple[str, object]] = [("", value)]
    while todo:
        where, item = todo.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise ValueError(
                f"payload{where} is {item!r}, which JSON (RFC 8259) cannot carry: numbers must "
                "be finite (no NaN, Infinity, or past the double range such as 1e400)"
            )
        if isinstance(item, dict):
            todo.extend((f"{where}.{k}", v) for k, v in item.items())
        elif isinstance(item, list):
            todo.extend((f"{where}[{i}]", v) for i, v in enumerate(item))
    return value


TopicPath = Annotated[
    str,
    Path(
        pattern=rf"^[A-Za-z0-9_.\-]{{1,{MAX_TOPIC_LENGTH}}}$",
        description="A topic name: 1-100 of A-Z a-z 0-9 _ . -",
    ),
]


JobIdPath = Annotated[
    str,
    Path(
        min_length=1,
        max_length=256,
        pattern=PRINTABLE,
        description="A job id: 1-256 printable characters (at most 256 UTF-8 bytes)",
    ),
]


REF_PATTERN = r"^[0-9]{1,4}/[0-9]{1,20}-[0-9]{1,20}$"
"""A dead letter's ref: ``shard/ms-seq``."""


Ref = Annotated[str, Field(max_length=50, pattern=REF_PATTERN)]


GROUP_NAME: dict[str, Any] = {"min_length": 1, "max_length": 200, "pattern": PRINTABLE}
"""A consumer group's name, in a path or a query: 1-200 printable characters."""

JOB_KEY: dict[str, Any] = {"min_length": 1, "max_length": 256, "pattern": PRINTABLE}
"""A job's key in a query or a filter: 1-256 printable characters (at most 256 UTF-8 bytes:
`validate_key` checks the bytes)."""


GroupPath = Annotated[
    str, Path(**GROUP_NAME, description="A consumer group: 1-200 printable characters")
]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


def rfc3339(text: str) -> datetime | None:
    """An RFC 3339 time with an offset (``2026-11-23T12:00:00.250Z``); None for anything
    else (a date alone, a time without an offset)."""
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        return None
    return at if at.tzinfo is not None and "T" in text.upper() else None


Time = Int | Annotated[str, Field(max_length=64)]


TIME_DESCRIPTION = "epoch milliseconds, or an RFC 3339 time with an offset"


def as_time(name: str, value: int | str | None, latest_ms: int = MAX_MS) -> datetime | None:
    """A `Time` as the aware datetime the client takes, at most `latest_ms`;
    InvalidArgumentError naming `name` and the range."""
    if value is None:
        return None
    at = rfc3339(value) if isinstance(value, str) else None
    if isinstance(value, int) and 0 <= value <= latest_ms:
        try:
            at = _EPOCH + timedelta(milliseconds=value)
        except OverflowError:  # past the years a datetime holds
            at = None
    try:
        last = _EPOCH + timedelta(milliseconds=latest_ms)
    except OverflowError:  # MAX_MS: past the years a datetime holds
        last = datetime.max.replace(tzinfo=UTC)
    try:
        if at is not None and not _EPOCH <= at <= last:
            at = None
    except OverflowError:  # 9999-12-31T23:00:00-05:00: past the years a datetime holds
        at = None
    if at is None:
        until = "" if latest_ms == MAX_MS else f" ({utc_text(latest_ms)}: ten years from now)"
        raise InvalidArgumentError(
            name,
            f"{name} must be epoch ms in [0, {latest_ms}]{until} or an RFC 3339 time with an "
            f"offset in that range like 2026-11-23T12:00:00Z, got {value!r:.80}",
        )
    return at
