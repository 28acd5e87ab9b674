"""Dead letters (`/v1/topics/{t}/dead`): pages of them, and which ones a replay or
purge takes."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from wheelq.core.job import DeadLetter
from wheelq.web.models.fields import GROUP_NAME, Ref, Strict
from wheelq.web.models.wire import wire_model

DeadLetterModel = wire_model(DeadLetter)


class DeadListOut(BaseModel):
    dead: list[DeadLetterModel]  # type: ignore[valid-type]
    next: str | None = None
    """The `after` of the next page; None on the last."""


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
