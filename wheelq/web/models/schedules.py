"""Recurring schedules (`/v1/topics/{t}/schedules`): a rule as given, and as stored."""

from __future__ import annotations

from typing import Annotated, Any, cast

from pydantic import AfterValidator, BaseModel, Field, JsonValue

from wheelq.admin.admin import DEFAULT_CATCH_UP
from wheelq.core.options import MAX_ATTEMPTS_LIMIT, RUN, RunOptions
from wheelq.core.recurring import MAX_CATCH_UP, MAX_EVERY_MS, MIN_EVERY_MS, Misfire
from wheelq.web.models.enqueue import CallbackIn, given_options, option_fields
from wheelq.web.models.fields import TIME_DESCRIPTION, WHOLE, Strict, Time, _finite


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
    option_fields(locals(), RUN)  # then each run option the table gives a JSON field: key, ...

    def run_options(self) -> RunOptions:
        """What each run carries, as `Admin.schedule` takes it."""
        callback = None if self.callback is None else self.callback.model_dump(exclude_none=True)
        return RunOptions(
            max_attempts=self.max_attempts,
            callback=callback,
            **cast(RunOptions, given_options(self, RUN)),
        )


class ScheduleOut(BaseModel):
    """A schedule as stored: its rule, state, next run, and the options its runs carry as
    a job's view shows them (a callback by its URL only)."""

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
    option_fields(locals(), RUN, shown=True)  # each option its runs carry: callback (its URL), ...
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
    declared: str = Field(
        "",
        description="The task that declared it in code (app.periodic), which `wheelq run` "
        "keeps as declared and removes once no longer declared; empty for one made by hand "
        "(this API, the CLI, Admin.schedule).",
    )


class SchedulesOut(BaseModel):
    topic: str
    schedules: list[ScheduleOut]
