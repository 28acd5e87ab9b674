"""Job events: what a topic's events streams keep (`POST .../events/on`,
`GET .../events/config`)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from wheelq.core.events import MAX_AGE_MS, MAX_LEN, EventsConfig
from wheelq.web.models.fields import WHOLE, Strict
from wheelq.web.models.wire import wire_model


class EventsOnIn(Strict):
    """What the topic's events streams keep; one left out (or null) keeps its value (the
    defaults when events were off)."""

    max_len: Annotated[int, Field(ge=MAX_LEN[0], le=MAX_LEN[1]), WHOLE] | None = Field(
        None, description="Events kept per shard (100-10,000,000; default 100,000)."
    )
    max_age_ms: Annotated[int, Field(ge=MAX_AGE_MS[0], le=MAX_AGE_MS[1]), WHOLE] | None = Field(
        None, description="Events older than this are trimmed (a minute to a year; default a day)."
    )


EventsConfigModel = wire_model(EventsConfig)
