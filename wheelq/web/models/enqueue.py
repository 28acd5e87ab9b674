"""What `POST .../jobs` and `POST .../jobs/batch` take and answer: a job, when it is due
(`Due`), its callback."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal, cast

from pydantic import AfterValidator, BaseModel, Field, JsonValue

from wheelq.core.callback import MAX_URL_CHARS, TIMEOUT_MS_RANGE
from wheelq.core.due import MAX_DELAY_MS, latest_at_ms, utc_text
from wheelq.core.follow import job_ref
from wheelq.core.options import KINDS, MAX_ATTEMPTS_LIMIT, OPTIONS, ItemOptions, Option
from wheelq.errors import InvalidArgumentError, InvalidDelayError
from wheelq.producer.items import EnqueueItem
from wheelq.web.models.fields import _EPOCH, PRINTABLE, WHOLE, Int, Strict, _finite, rfc3339

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


def option_fields(
    namespace: dict[str, Any], options: Iterable[Option], *, shown: bool = False
) -> None:
    """Give a model (its class body's `namespace`) a field for each of `options`, in the
    table's words: one a body may give (each the table gives a JSON type, `Option.http`) or,
    `shown`, each stored one as `get()` shows it (`Kind.shown`)."""
    for o in options:
        if shown and o.kind is not None:
            namespace["__annotations__"][o.name] = KINDS[o.kind].shown
            namespace[o.name] = Field(description=o.doc)
        elif not shown and o.http is not None:
            namespace["__annotations__"][o.name] = f"{o.http.__name__} | None"
            namespace[o.name] = Field(None, description=o.doc)


def given_options(body: BaseModel, options: Iterable[Option]) -> dict[str, Any]:
    """The fields of `option_fields` a body gives (its others are None)."""
    given = {o.name: getattr(body, o.name, None) for o in options if o.http is not None}
    return {n: v for n, v in given.items() if v is not None}


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


class AfterIn(Strict):
    """The job a job follows (docs/guides/workflows.md): due its `delay_ms` after that job
    succeeds in `group`."""

    topic: Annotated[str, Field(min_length=1, max_length=100)] | None = Field(
        None, description="The followed job's topic; default the topic of the request."
    )
    id: Annotated[str, Field(min_length=1, max_length=256, pattern=PRINTABLE)]
    group: Annotated[str, Field(min_length=1, max_length=200, pattern=PRINTABLE)] = Field(
        "default", description="The consumer group whose outcome of it counts."
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
    expires_ms: Annotated[int, Field(ge=0, le=MAX_DELAY_MS), WHOLE] | None = Field(
        None,
        description="Until when the job may start: milliseconds from now (as delay_ms), up "
        "to ten years; a job not started by then is dropped as expired, never run.",
    )
    option_fields(locals(), OPTIONS)  # then each option the table gives a JSON field: key, ...
    after: AfterIn | None = Field(
        None,
        description="Run this job its delay_ms after that job succeeds (one job a request: "
        "not in a batch); it awaits, due nowhere, until then.",
    )
    on_parent_failure: Literal["cancel", "run"] | None = Field(
        None,
        description="With after: what the job does if the job it follows is dead-lettered, "
        "cancelled or expired (default cancel).",
    )

    def follows(self, topic: str) -> dict[str, Any]:
        """`Client.enqueue`'s ``after`` and ``on_parent_failure`` (none: {})."""
        if self.after is None:
            if self.on_parent_failure is not None:
                raise InvalidArgumentError("on_parent_failure", "on_parent_failure needs after")
            return {}
        ref = job_ref((self.after.topic or topic, self.after.id, self.after.group), topic)
        return {"after": ref, "on_parent_failure": self.on_parent_failure or "cancel"}

    def item(self, now_ms: int) -> EnqueueItem:
        """The client's item (`now_ms`: see `Due.due`)."""
        delay, at = self.due(now_ms)
        callback = None if self.callback is None else self.callback.model_dump(exclude_none=True)
        options = ItemOptions(
            delay=delay,
            at=at,
            job_id=self.id,
            max_attempts=self.max_attempts,
            replace=self.replace,
            callback=callback,
            expires=None if self.expires_ms is None else timedelta(milliseconds=self.expires_ms),
            **cast(ItemOptions, given_options(self, OPTIONS)),
        )
        return EnqueueItem(payload=self.payload, **options)


class BatchIn(Strict):
    jobs: Annotated[list[JobIn], Field(min_length=1)]


class Enqueued(BaseModel):
    id: str
    topic: str
    due_ms: int | None = Field(description="When it is due (Redis ms); null while it awaits.")


class BatchItemOut(BaseModel):
    """One job of a batch: its `status` (201 enqueued, 409 an existing id)."""

    status: int
    id: str
    topic: str
    due_ms: int | None = None
    detail: str | None = None


class BatchOut(BaseModel):
    results: list[BatchItemOut]
