"""Bulk actions (`POST .../jobs/bulk`): which jobs, what to do, and what it did."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from wheelq.core.bulk_actions import BulkOutcome
from wheelq.core.due import MAX_SHIFT_MS
from wheelq.web.models.dead import DeadReason
from wheelq.web.models.enqueue import Due
from wheelq.web.models.fields import (
    GROUP_NAME,
    JOB_KEY,
    PRINTABLE,
    TIME_DESCRIPTION,
    WHOLE,
    Ref,
    Strict,
    Time,
)
from wheelq.web.models.wire import wire_model

BulkOutcomeModel = wire_model(BulkOutcome)


BulkActionName = Literal["cancel", "run_now", "reschedule", "replay", "purge"]
"""`BulkAction`'s values for the schema (a strict model takes no str for an enum;
tests/integration/test_bulk_actions.py holds the two together)."""


ListStateName = Literal[
    "pending", "awaiting", "retrying", "ready", "running", "succeeded", "failed", "dead"
]
"""`ListState`'s values, likewise."""


MAX_NAMED = 10_000


class BulkFilterIn(Strict):
    """Which jobs a bulk action selects: a state and, as the job lists take them, a due
    range, a consumer group, a dead letter's reason, a job key."""

    state: ListStateName
    due_after: Time | None = Field(None, description=TIME_DESCRIPTION)
    due_before: Time | None = Field(None, description=TIME_DESCRIPTION)
    group: Annotated[str, Field(**GROUP_NAME)] | None = None
    reason: DeadReason | None = None
    key: Annotated[str, Field(**JOB_KEY)] | None = Field(
        None, description="only jobs of this key (pending and retrying: the key index)"
    )


class KeyMoveIn(Strict):
    """How a key's jobs move: each `by_ms` from its own due time (either sign), or all `to`
    one time."""

    by_ms: Annotated[int, Field(ge=-MAX_SHIFT_MS, le=MAX_SHIFT_MS), WHOLE] | None = Field(
        None, description="move each job by this many ms from its due time (either sign)"
    )
    to: Time | None = Field(None, description="move every job to this time, " + TIME_DESCRIPTION)


class JobMoveIn(Due, KeyMoveIn):
    """How a job moves: to `delay_ms` from now or to `at` (neither: now); with
    ``tree=true``, every pending job of its tree `by_ms` from its own due time, or `to`."""


class KeyCancelled(Strict):
    """What a cancel by key did."""

    cancelled: int = Field(description="jobs cancelled (each with its groups' retries)")


class KeyMoved(Strict):
    """What a reschedule by key did."""

    moved: int = Field(description="jobs moved (not those that fired or changed meanwhile)")


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
