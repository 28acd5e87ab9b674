"""Topics (`/v1/topics`): the list, stats, forecast, limits, the far tier, pause."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query
from pydantic import BaseModel, Field

from wheelq.core.far_tier import DEFAULT_HORIZON_MS, MAX_HORIZON_MS, MIN_HORIZON_MS
from wheelq.core.flow import MAX_LIMIT
from wheelq.core.forecast import MAX_WINDOWS, MAX_WITHIN_S, WITHIN_S, Forecast
from wheelq.core.line import LineView
from wheelq.core.pause import PauseState
from wheelq.producer.operations import TopicStats
from wheelq.web.models.fields import WHOLE, Strict
from wheelq.web.models.wire import wire_model

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


TopicStatsModel = wire_model(TopicStats)


ForecastModel = wire_model(Forecast)


LineModel = wire_model(LineView)


PauseStateModel = wire_model(PauseState)


class TopicOut(BaseModel):
    topic: str
    shards: int


class TopicsOut(BaseModel):
    topics: list[TopicOut]
    next: str | None = None


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
