"""``/v1/flows``: write a join; ``/v1/topics/{topic}/flows/{id}``: read a flow's children
(docs/guides/workflows.md)."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter, Request, Response

from wheelq.errors import InvalidArgumentError, PayloadTypeError
from wheelq.runtime.clock import wall_ms
from wheelq.web import as_json
from wheelq.web.models import JobIdPath, TopicPath
from wheelq.web.models.flows import ChildrenOut, FlowIn, FlowOut, ref_json
from wheelq.web.problems import RESPONSES, invalid
from wheelq.web.service import json_response, service

router = APIRouter(prefix="/v1/flows", tags=["flows"], responses=RESPONSES)
topic_router = APIRouter(prefix="/v1/topics/{topic}/flows", tags=["flows"], responses=RESPONSES)
"""A flow's reads live under its parent's topic: the token and the topic's existence are
checked as for every route of a topic (`wheelq.web.auth.needs`, `known_topic`)."""


@router.post("", status_code=201, response_model=FlowOut)
async def enqueue_flow(body: FlowIn, request: Request) -> Response:
    """Write a join: the children (on any topics), then the parent awaiting them all. 409
    when the parent's `id` is pending (nothing written)."""
    svc = service(request)
    for topic in sorted(body.topics()):  # a nested flow's too
        svc.guard.check(request, "write", topic)
    try:
        parent, children = body.specs(wall_ms())
    except (InvalidArgumentError, PayloadTypeError) as exc:
        raise invalid(exc) from None
    joined = await svc.client.enqueue_flow(parent, children, on_child_failure=body.on_child_failure)
    answer = {
        "id": joined.id,
        "parent": ref_json(joined.parent.topic, joined.parent.job_id, joined.parent.group),
        "children": [ref_json(c.topic, c.job_id, c.group) for c in joined.children],
    }
    where = f"/v1/topics/{joined.parent.topic}/flows/{quote(joined.id, safe='')}"
    return json_response(answer, 201, {"Location": where})


@topic_router.get("/{job_id:path}", response_model=ChildrenOut)
async def flow_children(topic: TopicPath, job_id: JobIdPath, request: Request) -> Response:
    """A flow's children, in the order given, each as ``GET .../jobs/{id}`` shows it; 404
    when `job_id` is no flow's parent (or its list, kept 3 days after it ran, expired)."""
    svc = service(request)
    svc.guard.check(request, "read", topic)
    found = await svc.client.children(topic, job_id)
    return json_response({"id": job_id, "topic": topic, "children": as_json(found)})
