"""``/v1/processes``: the live scheduler nodes, workers, services and relays, each with its
roles and what they are doing (docs/architecture.md, "Processes")."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel

from wheelq.core.process import ProcessInfo
from wheelq.web import as_json
from wheelq.web.auth import Token
from wheelq.web.models import wire_model
from wheelq.web.problems import RESPONSES
from wheelq.web.service import json_response, service

router = APIRouter(prefix="/v1/processes", tags=["processes"], responses=RESPONSES)

ProcessInfoModel = wire_model(ProcessInfo)


class ProcessesOut(BaseModel):
    processes: list[ProcessInfoModel]  # type: ignore[valid-type]


def visible(token: Token | None, process: ProcessInfo) -> bool:
    """Whether `token` may see `process`: a token limited to some topics sees the processes
    whose every topic it covers (none of a process that serves all, or none)."""
    if token is None or not token.topics:
        return True
    return bool(process.topics) and all(token.covers(t) for t in process.topics)


async def processes_of(request: Request) -> list[ProcessInfo]:
    """The live processes the request's token may see, by role, host and pid."""
    svc = service(request)
    token = svc.guard.check(request, "read")
    return [p for p in await svc.admin.processes() if visible(token, p)]


@router.get("", response_model=ProcessesOut)
async def list_processes(request: Request) -> Response:
    """Every live process (its last beat younger than its ttl): host, pid, version, start,
    beat age, and per role its topics, groups, slots, jobs in flight, handled and failed
    counts, and a scheduler node's led shards with their lease ages. A process killed
    leaves the list when its record expires; one stopped, at once."""
    found = await processes_of(request)
    return json_response({"processes": [as_json(p) for p in found]})
