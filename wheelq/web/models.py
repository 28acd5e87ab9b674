"""The JSON bodies of the HTTP API, as pydantic models: what the OpenAPI document shows and
what requests are checked against before anything is done (bad input changes nothing)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import math
import textwrap
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal, get_args, get_origin, get_type_hints

from fastapi import Path, Query
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    create_model,
)

from wheelq.core.bulk_actions import BulkOutcome
from wheelq.core.callback import MAX_URL_CHARS, TIMEOUT_MS_RANGE
from wheelq.core.due import MAX_DELAY_MS, latest_at_ms, utc_text
from wheelq.core.events import MAX_AGE_MS, MAX_LEN, EventsConfig
from wheelq.core.far_tier import DEFAULT_HORIZON_MS, MAX_HORIZON_MS, MIN_HORIZON_MS
from wheelq.core.flow import MAX_LIMIT
from wheelq.core.forecast import MAX_WINDOWS, MAX_WITHIN_S, WITHIN_S, Forecast
from wheelq.core.history import JobInfo
from wheelq.core.job import DeadLetter
from wheelq.core.job_list import ListedJob
from wheelq.core.keys import MAX_TOPIC_LENGTH
from wheelq.core.options import MAX_ATTEMPTS_LIMIT
from wheelq.core.pause import PauseState
from wheelq.core.recurring import (
    MAX_CATCH_UP,
    MAX_EVERY_MS,
    MAX_MS,
    MIN_EVERY_MS,
    Misfire,
)
from wheelq.errors import InvalidArgumentError, InvalidDelayError
from wheelq.producer.admin import DEFAULT_CATCH_UP
from wheelq.producer.groups import GroupStats
from wheelq.producer.items import EnqueueItem
from wheelq.producer.operations import TopicStats
from wheelq.web import ERRORS, wire_fields

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MIN_AT_MS = 978_307_200_000
"""2001-01-01T00:00:00Z in ms: the least number `at` takes. Any number below is refused, as
it reads as seconds (epoch seconds stay below it until the year 32971), and a due time in
2000 or before means now anyway (omit `at`)."""
AT_DESCRIPTION = (
    "When the job is due: epoch milliseconds (ms since 1970-01-01T00:00:00Z, from "
    f"{MIN_AT_MS} = 2001-01-01, as a number below can only be seconds, to ten years from "
    "now), or an RFC 3339 time with an offset (at most ten years from now; a past one means "
    "now)."
)


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
GroupPath = Annotated[
    str, Path(**GROUP_NAME, description="A consumer group: 1-200 printable characters")
]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class CallbackIn(Strict):
    """Where the deliverer POSTs the job when it is due."""

    url: Annotated[str, Field(min_length=1, max_length=MAX_URL_CHARS)]
    headers: dict[str, str] | None = None
    timeout_ms: (
        Annotated[int, Field(ge=TIMEOUT_MS_RANGE[0], le=TIMEOUT_MS_RANGE[1]), WHOLE] | None
    ) = None


class Due(Strict):
    """When: `delay_ms` from now or `at` (an RFC 3339 time with an offset, or epoch ms);
    neither means now."""

    delay_ms: Annotated[int, Field(ge=0, le=MAX_DELAY_MS), WHOLE] | None = Field(
        None, description="When the job is due: milliseconds from now, up to ten years."
    )
    at: Int | Annotated[str, Field(max_length=64)] | None = Field(
        None, description=AT_DESCRIPTION, json_schema_extra={"minimum": MIN_AT_MS}
    )

    def due(self, now_ms: int) -> tuple[timedelta | None, datetime | None]:
        """(delay, at) as the client takes them, exact to the ms; `at` bounded by `now_ms`
        (the client's clock, as `latest_at_ms` reads it)."""
        if self.delay_ms is not None and self.at is not None:
            raise InvalidDelayError("at", "give delay_ms or at, not both")
        delay = None if self.delay_ms is None else timedelta(milliseconds=self.delay_ms)
        if self.at is None:
            return delay, None
        latest = latest_at_ms(now_ms)
        if isinstance(self.at, int):
            if not MIN_AT_MS <= self.at <= latest:
                raise _at_ms_out_of_range(self.at, latest)
            return None, _EPOCH + timedelta(milliseconds=self.at)
        at = rfc3339(self.at)
        if at is None:
            raise InvalidDelayError(
                "at",
                "at must be epoch ms or an RFC 3339 time with an offset like "
                f"2026-11-23T12:00:00.250Z, got {self.at!r}",
            )
        if at > _EPOCH + timedelta(milliseconds=latest):
            raise InvalidDelayError(
                "at", f"at must be at most ten years from now ({utc_text(latest)}), got {self.at!r}"
            )
        return None, at


def rfc3339(text: str) -> datetime | None:
    """An RFC 3339 time with an offset (``2026-11-23T12:00:00.250Z``); None for anything
    else (a date alone, a time without an offset)."""
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        return None
    return at if at.tzinfo is not None and "T" in text.upper() else None


def _at_ms_out_of_range(at: int, latest: int) -> InvalidDelayError:
    hint = ""
    if MIN_AT_MS <= at * 1000 <= latest:
        hint = f"; {at} looks like seconds: send {at * 1000}"
    return InvalidDelayError(
        "at",
        f"at is epoch ms (milliseconds since 1970-01-01T00:00:00Z) and must be in "
        f"[{MIN_AT_MS}, {latest}] (2001-01-01T00:00:00Z to ten years from now, "
        f"{utc_text(latest)}), got {at}{hint}",
    )


class JobIn(Due):
    """One job to enqueue."""

    payload: Annotated[JsonValue, AfterValidator(_finite)] = Field(
        ...,
        description="Any JSON value, lists and objects nested at most 100 levels deep "
        "(MAX_PAYLOAD_DEPTH); the job's payload.",
    )
    id: Annotated[str, Field(min_length=1, max_length=256, pattern=PRINTABLE)] | None = None
    max_attempts: Annotated[int, Field(ge=1, le=MAX_ATTEMPTS_LIMIT), WHOLE] | None = None
    replace: bool = False
    callback: CallbackIn | None = None
    key: Annotated[str, Field(min_length=1, max_length=256, pattern=PRINTABLE)] | None = Field(
        None, description="The job's key: what workers' flow limits count per key."
    )
    ordered: bool = Field(
        False, description="With key: the key's jobs run one at a time, in due order."
    )

    def item(self, now_ms: int) -> EnqueueItem:
        """The client's item (`now_ms`: see `Due.due`)."""
        delay, at = self.due(now_ms)
        callback = None if self.callback is None else self.callback.model_dump(exclude_none=True)
        return EnqueueItem(
            payload=self.payload,
            delay=delay,
            at=at,
            job_id=self.id,
            max_attempts=self.max_attempts,
            replace=self.replace,
            traceparent=None,
            callback=callback,
            key=self.key,
            ordered=self.ordered,
        )


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


class ScheduleIn(Strict):
    """A recurring schedule: what each run carries, and when runs fall (exactly one of
    `cron` and `every_ms`)."""

    payload: Annotated[JsonValue, AfterValidator(_finite)] = Field(
        ..., description="Any JSON value, nested at most 100 levels deep; what every run carries."
    )
    cron: Annotated[str, Field(min_length=1, max_length=200)] | None = Field(
        None, description="Five cron fields read in `tz` ('30 2 * * *'), or '@daily' and the like."
    )
    every_ms: Annotated[int, Field(ge=MIN_EVERY_MS, le=MAX_EVERY_MS), WHOLE] | None = Field(
        None,
        description="An interval: runs at start + k * every_ms (from the epoch without start).",
    )
    tz: Annotated[str, Field(min_length=1, max_length=64)] = Field(
        "UTC", description="The IANA zone `cron` is read in ('Europe/Berlin')."
    )
    start: Time | None = Field(
        None, description=f"No run before this: {TIME_DESCRIPTION}, at most ten years from now."
    )
    end: Time | None = Field(
        None, description=f"No run after this: {TIME_DESCRIPTION}, at most ten years from now."
    )
    misfire: Misfire = Field(
        "once",
        description="Runs missed while no scheduler ran: once runs the latest now, all the "
        "latest max_catch_up in order, skip none.",
    )
    max_catch_up: Annotated[int, Field(ge=1, le=MAX_CATCH_UP), WHOLE] = DEFAULT_CATCH_UP
    max_attempts: Annotated[int, Field(ge=1, le=MAX_ATTEMPTS_LIMIT), WHOLE] | None = None
    callback: CallbackIn | None = None


class ScheduleOut(BaseModel):
    """A schedule as stored: its rule, state and next run (a callback by its URL only)."""

    name: str
    topic: str
    cron: str | None
    every_ms: int | None
    tz: str
    start_ms: int
    end_ms: int | None
    misfire: Misfire
    max_catch_up: int
    max_attempts: int
    callback: str | None
    paused: bool
    planned_ms: int = Field(description="Runs up to this ms have been written as jobs.")
    updated_ms: int
    next_run_ms: int | None = Field(
        description="None while paused, once it has ended, or when its record cannot be read."
    )
    payload: Any = None
    error: str | None = Field(
        None,
        description="Why the stored record cannot be read (one written by hand or by an older "
        "wheelq); such a schedule never runs. None for every other schedule.",
    )


class SchedulesOut(BaseModel):
    topic: str
    schedules: list[ScheduleOut]


LimitValue = Annotated[int, Field(ge=1, le=MAX_LIMIT), WHOLE] | None


class LimitsIn(Strict):
    """The topic's backpressure limits; null (or left out): no limit."""

    max_pending: LimitValue = Field(
        None, description="Most jobs waiting to fire: past it an enqueue is refused (429)."
    )
    max_ready: LimitValue = Field(
        None,
        description="Most fired jobs the slowest group has not acked: past it due jobs are "
        "held back and fire late, as workers catch up.",
    )


class LimitsOut(BaseModel):
    topic: str
    max_pending: int | None
    max_ready: int | None


class FarTierIn(Strict):
    """The topic's far horizon (docs/architecture.md, "The far tier")."""

    horizon_ms: Annotated[int, Field(ge=0, le=MAX_HORIZON_MS), WHOLE] | None = Field(
        description=f"Jobs due further ahead than this are kept compactly until they come "
        f"within it: 0 (no far tier) or {MIN_HORIZON_MS:,}-{MAX_HORIZON_MS:,} ms; null: the "
        f"default, {DEFAULT_HORIZON_MS:,}."
    )


class FarTierOut(BaseModel):
    topic: str
    horizon_ms: int
    """0: no far tier."""
    jobs: int
    """Jobs kept in the far tier now."""


class EventsOnIn(Strict):
    """What the topic's events streams keep; one left out (or null) keeps its value (the
    defaults when events were off)."""

    max_len: Annotated[int, Field(ge=MAX_LEN[0], le=MAX_LEN[1]), WHOLE] | None = Field(
        None, description="Events kept per shard (100-10,000,000; default 100,000)."
    )
    max_age_ms: Annotated[int, Field(ge=MAX_AGE_MS[0], le=MAX_AGE_MS[1]), WHOLE] | None = Field(
        None, description="Events older than this are trimmed (a minute to a year; default a day)."
    )


class BatchIn(Strict):
    jobs: Annotated[list[JobIn], Field(min_length=1)]


MAX_RESULT_WAIT_MS = 30_000
"""The longest long-poll of ``GET .../result`` (``wait_ms``)."""
ResultWait = Annotated[
    int,
    Query(
        ge=0,
        le=MAX_RESULT_WAIT_MS,
        description="How long to wait for the outcome, ms (0-30000; 0: look only)",
    ),
]
GroupQuery = Annotated[
    str,
    Query(**GROUP_NAME, description="The consumer group whose outcome is wanted (1-200 chars)"),
]


class ResultOut(BaseModel):
    """One group's outcome of a job's latest run (``GET .../result``)."""

    id: str
    topic: str
    group: str
    state: str = Field(
        description="succeeded (200); else (202) the group's state when the wait ended: "
        "pending, ready, running, retrying"
    )
    result: Any = Field(
        default=None,
        description="succeeded: what the handler returned (spelled as a payload is); else null",
    )


class Enqueued(BaseModel):
    id: str
    topic: str
    due_ms: int


class BatchItemOut(BaseModel):
    """One job of a batch: its `status` (201 enqueued, 409 an existing id)."""

    status: int
    id: str
    topic: str
    due_ms: int | None = None
    detail: str | None = None


class BatchOut(BaseModel):
    results: list[BatchItemOut]


ERROR_LINE = (
    "the error in one line: a handler's exception as its type and message, or the message "
    "of a Retry or Fail it raised, or why the job could not run"
)
ERROR_DETAIL = "the error whole: its line, then the traceback (null when the line is all)"


def _field_docs(cls: type[Any]) -> dict[str, str]:
    """`cls`'s attribute docstrings, by field."""
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body  # type: ignore[attr-defined]
    docs = {}
    for a, b in itertools.pairwise(body):
        match a, b:
            case (
                ast.AnnAssign(target=ast.Name(id=name)) | ast.Assign(targets=[ast.Name(id=name)]),
                ast.Expr(value=ast.Constant(value=str(doc))),
            ):
                docs[name] = inspect.cleandoc(doc)
    return docs


def wire_model(cls: type) -> type[BaseModel]:
    """The pydantic model of `cls` as `as_json` writes it (for the OpenAPI document), its
    fields described by their docstrings."""
    fields = wire_fields(cls)
    # Only the fields on the wire: a hidden one's type may be imported for type checking only.
    shown = {"__module__": cls.__module__, "__annotations__": {n: t for n, _, t in fields}}
    hints = get_type_hints(type(cls.__name__, (), shown))
    docs = _field_docs(cls)
    spec: dict[str, Any] = {}
    for name, wire, _ in fields:
        kind = hints[name]
        args: tuple[Any, ...] = get_args(kind)
        if get_origin(kind) in (tuple, list) and isinstance(args[0], type):
            if dataclasses.is_dataclass(args[0]):  # records: GroupInfo, ShardStats
                kind = list[wire_model(args[0])]  # type: ignore[misc]
            else:  # plain values (topic names): a JSON list
                kind = list.__class_getitem__(args[0])
        # Every field required: an answer always carries each one.
        spec[wire] = (kind, Field(description=ERROR_LINE if name in ERRORS else docs.get(name)))
        if name in ERRORS:
            spec[f"{wire}_detail"] = (str | None, Field(description=ERROR_DETAIL))
    model: type[BaseModel] = create_model(cls.__name__, __doc__=cls.__doc__, **spec)
    return model


JobInfoModel = wire_model(JobInfo)
DeadLetterModel = wire_model(DeadLetter)
ListedJobModel = wire_model(ListedJob)
BulkOutcomeModel = wire_model(BulkOutcome)
TopicStatsModel = wire_model(TopicStats)
ForecastModel = wire_model(Forecast)
GroupStatsModel = wire_model(GroupStats)
PauseStateModel = wire_model(PauseState)
EventsConfigModel = wire_model(EventsConfig)


class TopicOut(BaseModel):
    topic: str
    shards: int


class TopicsOut(BaseModel):
    topics: list[TopicOut]
    next: str | None = None


class ConsumerGroupsOut(BaseModel):
    topic: str
    groups: list[GroupStatsModel]  # type: ignore[valid-type]


class JobListOut(BaseModel):
    jobs: list[ListedJobModel]  # type: ignore[valid-type]
    next: str | None = None
    """The `cursor` of the next page; None on the last."""


BulkActionName = Literal["cancel", "run_now", "reschedule", "replay", "purge"]
"""`BulkAction`'s values for the schema (a strict model takes no str for an enum;
tests/integration/test_bulk_actions.py holds the two together)."""
ListStateName = Literal["pending", "retrying", "ready", "running", "succeeded", "failed", "dead"]
"""`ListState`'s values, likewise."""
MAX_NAMED = 10_000


class BulkFilterIn(Strict):
    """Which jobs a bulk action selects: a state and, as the job lists take them, a due
    range, a consumer group, a dead letter's reason."""

    state: ListStateName
    due_after: Time | None = Field(None, description=TIME_DESCRIPTION)
    due_before: Time | None = Field(None, description=TIME_DESCRIPTION)
    group: Annotated[str, Field(**GROUP_NAME)] | None = None
    reason: DeadReason | None = None


class BulkIn(Strict):
    """An action on many jobs: by `filter`, `ids` (with `filter.state`), `refs`, or a dry
    run's `selection`."""

    action: BulkActionName
    filter: BulkFilterIn | None = None
    ids: (
        Annotated[
            list[Annotated[str, Field(min_length=1, max_length=256, pattern=PRINTABLE)]],
            Field(min_length=1, max_length=MAX_NAMED),
        ]
        | None
    ) = None
    refs: Annotated[list[Ref], Field(min_length=1, max_length=MAX_NAMED)] | None = None
    selection: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    dry_run: bool = False
    at: Time | None = Field(None, description="reschedule: the new due time, " + TIME_DESCRIPTION)
    shift_ms: Annotated[int, WHOLE] | None = Field(
        None, description="reschedule: move each job by this many ms from its due time"
    )


class DeadListOut(BaseModel):
    dead: list[DeadLetterModel]  # type: ignore[valid-type]
    next: str | None = None
    """The `after` of the next page; None on the last."""


def _within_schema(schema: dict[str, Any]) -> None:
    """What ``within`` accepts, for the OpenAPI document: whole seconds in a bounded range.
    Its values arrive as text and `within_text` checks them, so that a bad one is said as
    the library and the CLI say it."""
    description = schema.get("description")
    schema.clear()
    schema.update(
        type="array",
        items={"type": "integer", "minimum": 1, "maximum": MAX_WITHIN_S},
        minItems=1,
        maxItems=MAX_WINDOWS,
        description=description,
    )


WithinQuery = Annotated[
    list[str] | None,
    Query(
        description=(
            f"A window, in seconds from now: repeat it for more (1 to {MAX_WINDOWS}, each in "
            f"[1, {MAX_WITHIN_S}]; default {', '.join(map(str, WITHIN_S))})"
        ),
        json_schema_extra=_within_schema,
    ),
]
"""``within`` of ``GET /v1/topics/{topic}/forecast``: ``?within=10&within=60``."""


DeadReason = Literal["failed", "deliveries", "malformed"]
"""`Reason`'s values, spelled out for the schema (a strict model takes no str for an enum);
tests/unit/test_dead.py checks that they are the same."""


class RefsIn(Strict):
    """Dead letters by `refs`, or `all` of them, or all of a `reason` and/or `group` (refs
    or all, as the schema says)."""

    model_config = ConfigDict(
        json_schema_extra={
            "oneOf": [
                {
                    "required": ["refs"],
                    "properties": {
                        "refs": {"minItems": 1, "type": "array"},
                        "all": {"const": False},
                        "reason": {"type": "null"},
                        "group": {"type": "null"},
                    },
                },
                {
                    "required": ["all"],
                    "properties": {"all": {"const": True}, "refs": {"type": "null"}},
                },
            ]
        }
    )

    refs: Annotated[list[Ref], Field(max_length=10_000)] | None = None
    all: bool = False
    reason: DeadReason | None = Field(default=None, description="with all: only this reason's")
    group: Annotated[str, Field(**GROUP_NAME)] | None = Field(
        default=None, description="with all: only this consumer group's"
    )


class CountOut(BaseModel):
    count: int


class ReplayOut(CountOut):
    skipped: int = Field(
        description="Dead letters asked for that cannot be replayed and stay: malformed ones "
        "(reason malformed) and those whose payload nests past 100 levels."
    )


class PullIn(Strict):
    max: Annotated[int, Field(ge=1, le=1000), WHOLE] = 10
    wait_ms: Annotated[int, Field(ge=0, le=30_000), WHOLE] = 0
    consumer: Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[!-~]+$")] = "http"
    create: bool = Field(
        default=False,
        description="create the group when missing (only where the service allows it: "
        "[serve] pull_creates_groups; else 422)",
    )


class GroupIn(Strict):
    name: Annotated[
        str,
        Field(
            min_length=1,
            max_length=200,
            pattern=PRINTABLE,
            description="the group's name: 1-200 printable characters",
        ),
    ]
    start: Annotated[
        str,
        Field(
            pattern="^(earliest|now)$",
            description="where the new group starts: every job still in the stream "
            "(earliest), or the jobs fired from now on (now)",
        ),
    ] = "earliest"


class GroupCreatedOut(BaseModel):
    group: str
    created: bool = Field(description="false: it existed already (nothing changed)")
    shards: int = Field(description="shards it was created on now")


class PulledJob(BaseModel):
    id: str
    topic: str
    payload: Any = Field(
        None,
        description="The payload as enqueued (one stored nested past 100 levels, by an older "
        "version, is dead-lettered as malformed instead of handed out).",
    )
    due_ms: int
    attempt: int
    max_attempts: int
    deliveries: int
    receipt: str


class PullOut(BaseModel):
    jobs: list[PulledJob]
    paused: Literal["topic", "group"] | None = Field(
        None,
        description="Only while paused: what is (the topic as a whole, or the group on its "
        "own); no job is handed out until it is resumed.",
    )


class ReceiptsIn(Strict):
    receipts: Annotated[list[str], Field(min_length=1, max_length=10_000)]


class NackIn(ReceiptsIn):
    delay_ms: Annotated[int, Field(ge=0, le=30 * 86_400_000), WHOLE] | None = None


class ReceiptResult(BaseModel):
    """What settling one receipt did (in the order they were sent)."""

    status: int = Field(..., description="200 settled now or before; 409 a stale receipt.")
    outcome: str = Field(
        ...,
        description="acked, retried, dead_lettered; cancelled: nacked after its job was "
        "cancelled, so settled and never retried; settled_before (a no-op); stale: its job "
        "was taken over by a later pull after the visibility timeout, so only that pull's "
        "receipt settles it (nothing was changed).",
    )


class AckOut(BaseModel):
    acked: int
    results: list[ReceiptResult]


class NackOut(BaseModel):
    retried: int
    dead_lettered: int
    cancelled: int = Field(0, description="Nacked after the job was cancelled: not retried.")
    results: list[ReceiptResult]
