"""Pull consumers over HTTP: a pull, its jobs, and the acks and nacks of their receipts."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from wheelq.web.models.fields import WHOLE, Strict


class PullIn(Strict):
    max: Annotated[int, Field(ge=1, le=1000), WHOLE] = 10
    wait_ms: Annotated[int, Field(ge=0, le=30_000), WHOLE] = 0
    consumer: Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[!-~]+$")] = "http"
    create: bool = Field(
        default=False,
        description="create the group when missing (only where the service allows it: "
        "[serve] pull_creates_groups; else 422)",
    )


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
    priority: int = Field(
        5, description="0-9, higher first: the job's priority (5 when it was given none)."
    )
    key: str | None = Field(None, description="The key it was enqueued with; null without one.")
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
