"""``/v1/topics/{topic}/schedules``: a topic's recurring schedules (list, get, create or
update, pause, resume, delete), as `Admin.schedule` and its kin do them
(docs/guides/schedules.md)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, Response

from wheelq.core.due import latest_at_ms
from wheelq.core.recurring import MAX_NAME
from wheelq.errors import InvalidArgumentError
from wheelq.web import schedule_json
from wheelq.web.models import ScheduleIn, ScheduleOut, SchedulesOut, TopicPath, as_time
from wheelq.web.problems import RESPONSES, ProblemError, invalid
from wheelq.web.service import any_topic, json_response, service

router = APIRouter(prefix="/v1/topics", tags=["schedules"], responses=RESPONSES)

NamePath = Annotated[
    str,
    Path(
        pattern=rf"^[A-Za-z0-9_.:\-]{{1,{MAX_NAME}}}$",
        description=f"A schedule's name: 1-{MAX_NAME} of A-Z a-z 0-9 _ . : -",
    ),
]


@router.get("/{topic}/schedules", response_model=SchedulesOut)
async def list_schedules(topic: TopicPath, request: Request) -> Response:
    """The topic's schedules, by name, each with its next run."""
    svc = service(request)
    svc.guard.check(request, "read", topic)
    now = svc.clock.now_ms()
    found = await svc.admin.schedules(topic)
    return json_response({"topic": topic, "schedules": [schedule_json(s, now) for s in found]})


@router.get("/{topic}/schedules/{name}", response_model=ScheduleOut)
async def get_schedule(topic: TopicPath, name: NamePath, request: Request) -> Response:
    """One schedule; 404 if the topic has none of that name."""
    svc = service(request)
    svc.guard.check(request, "read", topic)
    found = await svc.admin.get_schedule(name, topic)
    if found is None:
        raise _missing(topic, name)
    return json_response(schedule_json(found, svc.clock.now_ms()))


@router.put(
    "/{topic}/schedules/{name}",
    response_model=ScheduleOut,
    responses={201: {"description": "Created", "model": ScheduleOut}},
)
@any_topic
async def put_schedule(
    topic: TopicPath, name: NamePath, body: ScheduleIn, request: Request
) -> Response:
    """Create the schedule (201), or update it (200) from its first run not yet written.
    Each run is an ordinary job ``<name>@<occurrence ms>``, written by a scheduler node
    shortly before it is due. The topic is created if new."""
    svc = service(request)
    svc.guard.check(request, "write", topic)
    latest = latest_at_ms(svc.clock.now_ms())  # as the client checks: ten years on at most
    start, end = as_time("start", body.start, latest), as_time("end", body.end, latest)
    options = body.run_options()
    callback = options.get("callback")
    if callback is not None:
        try:
            svc.check_callback(callback)
        except InvalidArgumentError as exc:
            raise invalid(exc) from None
    existed = await svc.admin.get_schedule(name, topic) is not None
    made = await svc.admin.schedule(
        name, topic, body.payload, cron=body.cron, every_ms=body.every_ms, tz=body.tz,
        start=start, end=end, misfire=body.misfire, max_catch_up=body.max_catch_up, **options,
    )  # fmt: skip
    if callback is not None:
        svc.deliver(topic)
    return json_response(schedule_json(made, svc.clock.now_ms()), 200 if existed else 201)


@router.post("/{topic}/schedules/{name}/pause", response_model=ScheduleOut)
async def pause_schedule(topic: TopicPath, name: NamePath, request: Request) -> Response:
    """Stop writing runs and cancel the ones written ahead; 404 if there is no such schedule."""
    return await _change(request, topic, name, "pause")


@router.post("/{topic}/schedules/{name}/resume", response_model=ScheduleOut)
async def resume_schedule(topic: TopicPath, name: NamePath, request: Request) -> Response:
    """Run again from now on (runs that fell while paused are skipped)."""
    return await _change(request, topic, name, "resume")


@router.delete("/{topic}/schedules/{name}", status_code=204)
async def delete_schedule(topic: TopicPath, name: NamePath, request: Request) -> Response:
    """Remove the schedule and cancel its runs written ahead; 404 if there was none."""
    svc = service(request)
    svc.guard.check(request, "write", topic)
    if not await svc.admin.unschedule(name, topic):
        raise _missing(topic, name)
    return Response(status_code=204)


async def _change(request: Request, topic: str, name: str, change: str) -> Response:
    svc = service(request)
    svc.guard.check(request, "write", topic)
    call = svc.admin.pause_schedule if change == "pause" else svc.admin.resume_schedule
    if not await call(name, topic):
        raise _missing(topic, name)
    found = await svc.admin.get_schedule(name, topic)
    if found is None:  # removed in between
        raise _missing(topic, name)
    return json_response(schedule_json(found, svc.clock.now_ms()))


def _missing(topic: str, name: str) -> ProblemError:
    return ProblemError(
        404, "not-found", "Not found", f"no schedule {name!r} on topic {topic!r}", field="name"
    )
