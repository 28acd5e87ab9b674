"""Topics (`/v1/topics`): the list, stats, forecast, limits, the far tier, pause."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query
from pydantic import BaseModel, Field

from wheelq.core.far_tier import DEFAULT_HORIZON_MS, MAX_HORIZON_MS, MIN_HORIZON_MS
from wheelq.core.flow import (
    DEFAULT_CREDIT_MS,
    MAX_CREDIT_MS,
    MAX_FAIR_WEIGHTS,
    MAX_LIMIT,
    MAX_WEIGHT,
)
from wheelq.core.forecast import MAX_WINDOWS, MAX_WITHIN_S, WITHIN_S, Forecast
from wheelq.core.line import LineView
from wheelq.core.options import MAX_KEY_BYTES
from wheelq.core.pause import PauseState
from wheelq.producer.operations import TopicStats
from wheelq.web.models.fields import PRINTABLE, WHOLE, Strict
from wheelq.web.models.wire import wire_model

LimitValue = Annotated[int, Field(ge=1, le=MAX_LIMIT), WHOLE] | None

Weight = Annotated[int, Field(ge=1, le=MAX_WEIGHT), WHOLE]
WeightKey = Annotated[str, Field(min_length=1, max_length=MAX_KEY_BYTES, pattern=PRINTABLE)]


class LimitsIn(Strict):
    """The topic's backpressure limits (null or left out: no limit) and its due line's
    settings (null or left out: unchanged); with PATCH, any field left out is unchanged."""

    max_pending: LimitValue = Field(
        None, description="Most jobs waiting to fire: past it an enqueue is refused (429)."
    )
    max_ready: LimitValue = Field(
        None,
        description="Most fired jobs the slowest group has not acked: past it due jobs are "
        "held back and fire late, as workers catch up.",
    )
    priority_credit_ms: Annotated[int, Field(ge=0, le=MAX_CREDIT_MS), WHOLE] | None = Field(
        None,
        description=f"What a priority step is worth among due jobs: a job of priority p is "
        f"ordered as if due p x priority_credit_ms earlier; 0-{MAX_CREDIT_MS:,} ms "
        f"({DEFAULT_CREDIT_MS:,} until set).",
    )
    fair: bool | None = Field(
        None,
        description="true: due jobs with a key start in weighted round robin across keys; "
        "false: in order.",
    )
    fair_weights: Annotated[dict[WeightKey, Weight], Field(max_length=MAX_FAIR_WEIGHTS)] | None = (
        Field(
            None,
            description=f"Job key -> its share of the turns, 1-{MAX_WEIGHT:,} (a key not named: "
            f"1), at most {MAX_FAIR_WEIGHTS:,} keys (each 1-{MAX_KEY_BYTES} UTF-8 bytes); "
            "replaces the topic's weights ({}: clears them).",
        )
    )

    def settings(self, *, patch: bool) -> dict[str, Any]:
        """`Admin.set_limits`' keywords: with `patch`, only the fields sent; else both limits
        (left out: none) and the due line's fields sent."""
        sent = self.model_fields_set if patch else self.model_fields_set | _LIMITS
        return {name: getattr(self, name) for name in sent}


_LIMITS = {"max_pending", "max_ready"}


class LimitsOut(BaseModel):
    topic: str
    max_pending: int | None
    max_ready: int | None
    priority_credit_ms: int
    fair: bool
    fair_weights: dict[str, int]


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
