"""What ``/v1/flows`` takes and answers: a join's parent and children (docs/guides/
workflows.md)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Discriminator, Field, Tag

from wheelq.core.follow import MAX_CHILDREN
from wheelq.core.options import FlowSpec, JobSpec
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


def _kind(value: Any) -> str:
    """A flow's child is a flow of its own when it has ``children``, else a job."""
    if isinstance(value, dict):
        return "flow" if "children" in value else "job"
    return "flow" if isinstance(value, FlowIn) else "job"


class FlowIn(BaseModel):
    """A join: `children` run as jobs do (a child with `parent` and `children` of its own is
    a flow, written first, that counts as one child); `parent` awaits them all, then is
    due its `delay_ms` after the last one succeeded."""

    parent: FlowJobIn
    children: Annotated[
        list[
            Annotated[
                Annotated[FlowJobIn, Tag("job")] | Annotated[FlowIn, Tag("flow")],
                Discriminator(_kind),
            ]
        ],
        Field(min_length=1, max_length=MAX_CHILDREN),
    ]
    on_child_failure: Literal["fail", "ignore"] = Field(
        "fail",
        description="fail: a child dead-lettered, cancelled or expired dead-letters the "
        "parent and cancels the children still pending; ignore: it counts as ended.",
    )

    def topics(self) -> set[str]:
        """Every topic the flow writes on, its nested flows' too."""
        found = {self.parent.topic}
        for child in self.children:
            found |= child.topics() if isinstance(child, FlowIn) else {child.topic}
        return found

    def specs(self, now_ms: int) -> tuple[JobSpec, list[JobSpec | FlowSpec]]:
        """The client's parent and children (`now_ms`: see `Due.due`)."""
        children: list[JobSpec | FlowSpec] = []
        for child in self.children:
            if isinstance(child, FlowIn):
                parent, kids = child.specs(now_ms)
                children.append(FlowSpec(parent, kids, on_child_failure=child.on_child_failure))
            else:
                children.append(child.spec(now_ms))
        return self.parent.spec(now_ms), children


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
