"""The console's ``/ui/processes``: every live process with its roles and what they are doing,
read as ``GET /v1/processes`` reads it (docs/architecture.md, "Processes")."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from wheelq.web import api_processes, ui

router = APIRouter(prefix="/ui", include_in_schema=False, route_class=ui.PageRoute)


@router.get("/processes")
async def processes_page(request: Request, refresh: ui.Refresh = None) -> Response:
    found = await api_processes.processes_of(request)
    return ui.render(request, "processes.html", processes=found, refresh=refresh)
