"""A topic's consumer groups (`/v1/topics/{t}/groups`)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from wheelq.admin.groups import GroupStats
from wheelq.web.models.fields import PRINTABLE, Strict
from wheelq.web.models.wire import wire_model

GroupStatsModel = wire_model(GroupStats)


class ConsumerGroupsOut(BaseModel):
    topic: str
    groups: list[GroupStatsModel]  # type: ignore[valid-type]


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
