"""Jobs once enqueued: a job looked up, the job lists, a job's result (`GET .../result`)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query
from pydantic import BaseModel, Field

from wheelq.core.history import JobInfo
from wheelq.core.job_list import ListedJob
from wheelq.web.models.fields import GROUP_NAME
from wheelq.web.models.wire import wire_model

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


JobInfoModel = wire_model(JobInfo)


ListedJobModel = wire_model(ListedJob)


class JobListOut(BaseModel):
    jobs: list[ListedJobModel]  # type: ignore[valid-type]
    next: str | None = None
    """The `cursor` of the next page; None on the last."""
