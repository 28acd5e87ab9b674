"""What ``/v1/flows`` takes and answers: a join's parent and children (docs/guides/
workflows.md)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from wheelq.core.follow import MAX_CHILDREN
from wheelq.core.options import JobSpec
from wheelq.web.models.enqueue import JobIn
from wheelq.web.models.fields import PRINTABLE
from wheelq.web.models.jobs import JobInfoModel


class FlowJobIn(JobIn):
    """One job of a flow: a job body (`JobIn`) and its topic."""

    topic: Annotated[str, Field(min_length=1, max_length=100)]
    group: Annotated[str, Field(min_length=1, max_length=200, pattern=PRINTABLE)] = Field(
        "default", description="A child's: the consumer group whose outcome of it counts."
    )

    def spec(self, now_ms: int) -> JobSpec:
        """The client's `JobSpec` (`now_ms`: see `Due.due`)."""
        item = self.item(now_ms)
        options = {n: v for n, v in item._asdict().items() if n != "payload"}
        return JobSpec(self.topic, item.payload, group=self.group, **options)


class FlowIn(BaseModel):
    """A join: `children` run as jobs do; `parent` awaits them all, then is due its
    `delay_ms` after the last one succeeded."""

    parent: FlowJobIn
    children: Annotated[list[FlowJobIn], Field(min_length=1, max_length=MAX_CHILDREN)]
    on_child_failure: Literal["fail", "ignore"] = Field(
        "fail",
        description="fail: a child dead-lettered, cancelled or expired dead-letters the "
        "parent and cancels the children still pending; ignore: it counts as ended.",
    )


class RefOut(BaseModel):
    topic: str
    id: str
    group: str


class FlowOut(BaseModel):
    """What a flow wrote: its id (the parent's), the parent and the children."""

    id: str
    parent: RefOut
    children: list[RefOut]


class ChildrenOut(BaseModel):
    """A flow's children, in the order given, each as ``GET .../jobs/{id}`` shows it."""

    id: str
    topic: str
    children: list[JobInfoModel]  # type: ignore[valid-type]


def ref_json(topic: str, job_id: str, group: str) -> dict[str, Any]:
    return {"topic": topic, "id": job_id, "group": group}
