"""``/v1/topics``: the topics, one topic's stats and forecast, dropping it, its limits and far
horizon, pause
and resume, its consumer groups (create, list, delete) and its dead letters (list, replay,
purge)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from wheelq.admin.async_admin import AsyncAdmin
from wheelq.core.flow import TopicLimits
from wheelq.core.forecast import WITHIN_S, within_text
from wheelq.core.keys import MAX_GROUP_CHARS
from wheelq.core.retry import Reason
from wheelq.errors import (
    GroupBusyError,
    GroupNotFoundError,
    TopicNotEmptyError,
    UnknownGroupError,
)
from wheelq.store.groups import GROUP_LANES
from wheelq.web import api_pull, as_json
from wheelq.web.models import (
    GROUP_NAME,
    REF_PATTERN,
    ConsumerGroupsOut,
    CountOut,
    DeadListOut,
    FarTierIn,
    FarTierOut,
    ForecastModel,
    GroupCreatedOut,
    GroupIn,
    GroupPath,
    LimitsIn,
    LimitsOut,
    LineModel,
    PauseStateModel,
    RefsIn,
    ReplayOut,
    TopicPath,
    TopicsOut,
    TopicStatsModel,
    WithinQuery,
)
from wheelq.web.problems import RESPONSES, ProblemError
from wheelq.web.service import any_topic, json_response, service

router = APIRouter(prefix="/v1/topics", tags=["topics"], responses=RESPONSES)

Limit = Annotated[int | None, Query(ge=1, le=1000, description="page size")]


@router.get("", response_model=TopicsOut)
async def list_topics(
    request: Request,
    limit: Limit = None,
    after: Annotated[str | None, Query(max_length=100, description="the last topic seen")] = None,
) -> Response:
    """The topics the token covers, by name, a page at a time."""
    rows, after_next, _ = await topics_page(request, after, limit)
    return json_response(
        {"topics": [{"topic": n, "shards": s} for n, s in rows], "next": after_next}
    )


async def topics_page(
    request: Request, after: str | None, limit: int | None
) -> tuple[list[tuple[str, int]], str | None, int]:
    """A page of (topic, shards) the request's token may read, by name, the `after` of
    the next page (None on the last) and how many there are in all."""
    svc = service(request)
    token = svc.guard.check(request, "read")
    page = limit or svc.settings.page_limit
    names = sorted(
        (name, shards)
        for name, shards in (await svc.admin.topics()).items()
        if token is None or token.covers(name)
    )
    rows = [(n, s) for n, s in names if after is None or n > after][:page]
    more = len(rows) == page and rows[-1][0] != names[-1][0]
    return rows, rows[-1][0] if more else None, len(names)


@router.get("/{topic}", response_model=TopicStatsModel)
async def topic_stats(topic: TopicPath, request: Request) -> Response:
    """The topic's backlog: pending (waiting for their time), ready (fired, not yet
    delivered), in flight, in stream (not yet trimmed) and dead, in all and by shard."""
    svc = service(request)
    svc.guard.check(request, "read", topic)
    stats = await svc.admin.stats(topic)
    if stats is None:
        raise ProblemError(404, "not-found", "Not found", f"no topic {topic!r}")
    return json_response(as_json(stats))


@router.get("/{topic}/forecast", response_model=ForecastModel)
async def topic_forecast(
    topic: TopicPath, request: Request, within: WithinQuery = None
) -> Response:
    """How many of the topic's jobs come due within each `within` window (seconds from
    now, on the Redis clock; by default 10, 60 and 300), overdue ones not fired yet and
    pending retries included, and its ready work (fired, not yet delivered, as the topic's
    stats count it): what to autoscale workers on. 422 naming `within` for a bad window."""
    svc = service(request)
    svc.guard.check(request, "read", topic)
    windows = WITHIN_S if within is None else within_text(within)
    return json_response(as_json(await svc.admin.forecast(topic, windows)))


@router.get("/{topic}/line", response_model=LineModel)
async def topic_line(topic: TopicPath, request: Request) -> Response:
    """The topic's due line (docs/architecture.md, "The due line"): the due jobs waiting
    there for room in the streams, the backlog by priority of those that go next (a bounded
    sample from the head of each lane) and the keys furthest behind. 404 for an unknown
    topic."""
    svc = service(request)
    svc.guard.check(request, "read", topic)
    return json_response(as_json(await svc.admin.line(topic)))


@router.delete("/{topic}", status_code=204)
async def drop_topic(
    topic: TopicPath,
    request: Request,
    force: Annotated[
        bool, Query(description="drop it even while jobs are pending or not yet acked")
    ] = False,
) -> Response:
    """Drop the topic: every key of every shard, its schedules and its pauses; stop its
    workers first. 409 while a job is pending or a fired one not acked, unless
    `force=true`; 404 if there is no such topic."""
    svc = service(request)
    svc.guard.check(request, "write", topic)
    try:
        dropped = await svc.admin.drop_topic(topic, force=force)
    except TopicNotEmptyError as exc:
        detail = exc.explain("?force=true")
        raise ProblemError(409, "topic-not-empty", "Topic holds jobs", detail) from None
    if not dropped:
        raise ProblemError(404, "not-found", "Not found", f"no topic {topic!r}", field="topic")
    return Response(status_code=204)


@router.get("/{topic}/limits", response_model=LimitsOut)
async def get_limits(topic: TopicPath, request: Request) -> Response:
    """The topic's backpressure limits (null: none) and its due line's settings: priority
    credit and fair shares (docs/guides/flow-control.md)."""
    svc = service(request)
    svc.guard.check(request, "read", topic)
    return _limits(topic, await svc.admin.limits(topic))


@router.put("/{topic}/limits", response_model=LimitsOut)
@any_topic
async def put_limits(topic: TopicPath, body: LimitsIn, request: Request) -> Response:
    """Set both limits (one left out or null: no limit), kept per shard as
    ``ceil(limit / shards)``, and the due line's settings sent (one left out or null:
    unchanged); the topic is created if new."""
    return await _set_limits(topic, body, request, patch=False)


@router.patch("/{topic}/limits", response_model=LimitsOut)
@any_topic
async def patch_limits(topic: TopicPath, body: LimitsIn, request: Request) -> Response:
    """Change the settings sent, leaving the others as they are (a limit sent as null: no
    limit; a due line's setting sent as null: unchanged); the topic is created if new."""
    return await _set_limits(topic, body, request, patch=True)


async def _set_limits(topic: str, body: LimitsIn, request: Request, *, patch: bool) -> Response:
    svc = service(request)
    svc.guard.check(request, "write", topic)
    return _limits(topic, await svc.admin.set_limits(topic, **body.settings(patch=patch)))


def _limits(topic: str, limits: TopicLimits) -> Response:
    return json_response({"topic": topic, **asdict(limits)})


@router.get("/{topic}/far", response_model=FarTierOut)
async def get_far(topic: TopicPath, request: Request) -> Response:
    """The topic's far horizon and the jobs kept beyond it (docs/architecture.md, "The far
    tier")."""
    svc = service(request)
    svc.guard.check(request, "read", topic)
    return await _far(svc.admin, topic)


@router.put("/{topic}/far", response_model=FarTierOut)
@any_topic
async def put_far(topic: TopicPath, body: FarTierIn, request: Request) -> Response:
    """Set the far horizon (null: the default, an hour; 0: no far tier, and its jobs are
    moved back into the sorted set); the topic is created if new."""
    svc = service(request)
    svc.guard.check(request, "write", topic)
    await svc.admin.set_far_horizon(topic, body.horizon_ms)
    return await _far(svc.admin, topic)


async def _far(admin: AsyncAdmin, topic: str) -> Response:
    stats = await admin.stats(topic)
    if stats is None:
        raise ProblemError(404, "not-found", "Not found", f"no topic {topic!r}", field="topic")
    out = {"topic": topic, "horizon_ms": stats.far_horizon_ms, "jobs": stats.far}
    return json_response(out)


PauseGroup = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=MAX_GROUP_CHARS,
        description="one consumer group (default: the whole topic, every group)",
    ),
]


@router.post("/{topic}/pause", response_model=PauseStateModel)
async def pause(topic: TopicPath, request: Request, group: PauseGroup = None) -> Response:
    """Pause the topic (every group, those created later too) or one `group`: within a
    second its workers take no new jobs; running ones finish. Firing goes on: jobs wait in
    the stream until resumed. Answers what is paused of the topic now; 404 for an unknown
    topic or group."""
    return await _change_pause(request, topic, group, resume=False)


@router.post("/{topic}/resume", response_model=PauseStateModel)
async def resume(topic: TopicPath, request: Request, group: PauseGroup = None) -> Response:
    """Resume the topic and every group paused on its own, or one `group` (422 while the
    topic itself is paused). Answers what is still paused; resuming what runs changes
    nothing; 404 for an unknown topic or group."""
    return await _change_pause(request, topic, group, resume=True)


async def _change_pause(request: Request, topic: str, group: str | None, resume: bool) -> Response:
    svc = service(request)
    svc.guard.check(request, "write", topic)
    change = svc.admin.resume if resume else svc.admin.pause
    try:
        state = await change(topic, group)
    except UnknownGroupError as exc:
        raise ProblemError(404, "not-found", "Not found", str(exc), field="group") from None
    return json_response(as_json(state))


@router.get("/{topic}/groups", response_model=ConsumerGroupsOut)
async def list_groups(topic: TopicPath, request: Request) -> Response:
    """The topic's consumer groups, by stream then name: consumers, in flight (delivered, not
    acked), ready (fired, not yet delivered to the group) and idle time, in all and by
    shard."""
    svc = service(request)
    svc.guard.check(request, "read", topic)
    found = await svc.admin.groups(topic)
    if found is None:
        raise ProblemError(404, "not-found", "Not found", f"no topic {topic!r}", field="topic")
    return json_response({"topic": topic, "groups": as_json(found)})


@router.post(
    "/{topic}/groups",
    response_model=GroupCreatedOut,
    status_code=201,
    responses={200: {"model": GroupCreatedOut, "description": "The group existed already"}},
)
async def create_group(topic: TopicPath, body: GroupIn, request: Request) -> Response:
    """Create a consumer group on every shard (a pull consumer's; a worker creates its own):
    201, or 200 when it existed. 409 when the topic has `[serve] max_groups_per_topic`
    groups; 404 for an unknown topic."""
    svc = service(request)
    svc.guard.check(request, "write", topic)
    made = await api_pull.create_group(svc, topic, body.name, body.start)
    out = {"group": made.name, "created": made.created, "shards": made.shards}
    return json_response(out, status=201 if made.created else 200)


@router.delete("/{topic}/groups/{group}", status_code=204)
async def delete_group(
    topic: TopicPath,
    group: GroupPath,
    request: Request,
    force: Annotated[
        bool, Query(description="delete it even with entries in flight (dropped for it)")
    ] = False,
    stream: Annotated[
        str,
        Query(
            pattern=f"^({'|'.join(GROUP_LANES)})$",
            description="the stream the group reads (callbacks: the service's deliverer)",
        ),
    ] = "ready",
) -> Response:
    """Delete a consumer group on every shard. Its unacked entries then no longer hold back
    trimming nor a job's state; stop its workers first (a running one creates it again).
    409 while it has entries in flight (delivered, not acked) unless `force=true`; 404 if
    no shard has it."""
    svc = service(request)
    svc.guard.check(request, "write", topic)
    try:
        await svc.admin.delete_group(topic, group, stream=stream, force=force)
    except GroupNotFoundError as exc:
        field = "topic" if exc.known is None else "group"
        raise ProblemError(404, "not-found", "Not found", str(exc), field=field) from None
    except GroupBusyError as exc:
        raise ProblemError(
            409, "group-busy", "Entries in flight", exc.explain("?force=true"), field="group"
        ) from None
    return Response(status_code=204)


ReasonQuery = Annotated[Reason | None, Query(description="only the dead letters of this reason")]
GroupFilter = Annotated[
    str | None, Query(**GROUP_NAME, description="only the dead letters of this consumer group")
]


@router.get("/{topic}/dead", response_model=DeadListOut)
async def list_dead(
    topic: TopicPath,
    request: Request,
    limit: Limit = None,
    after: Annotated[
        str | None, Query(max_length=50, pattern=REF_PATTERN, description="the last ref seen")
    ] = None,
    reason: ReasonQuery = None,
    group: GroupFilter = None,
) -> Response:
    """Dead letters, oldest first, a page at a time (`next` is the following page's
    `after`), of one `reason` and/or `group` when asked. A filtered page reads through
    100,000 dead letters at most, so it may hold fewer than `limit` and still have a
    `next`."""
    svc = service(request)
    svc.guard.check(request, "read", topic)
    page = limit or svc.settings.page_limit
    rows = await svc.admin.dead_letters(topic, page, after=after, reason=reason, group=group)
    return json_response({"dead": [as_json(d) for d in rows], "next": rows.next})


@router.post("/{topic}/dead/replay", response_model=ReplayOut)
async def replay_dead(topic: TopicPath, body: RefsIn, request: Request) -> Response:
    """Run dead letters again: the given `refs`, or `all` (of a `reason` and/or `group`
    when given); the count replayed, and the count `skipped`: malformed dead letters (and
    those nested past 100 levels) cannot be replayed and stay. A malformed one named in
    `refs` is a 422 naming `refs`, and nothing is replayed."""
    svc = service(request)
    svc.guard.check(request, "write", topic)
    refs = _refs(body.refs, body.all, body.reason, body.group)
    count = await svc.admin.replay(topic, refs, reason=body.reason, group=body.group)
    return json_response({"count": count, "skipped": count.skipped})


@router.delete("/{topic}/dead", response_model=CountOut)
async def purge_dead(
    topic: TopicPath,
    request: Request,
    ref: Annotated[
        list[Annotated[str, Query(max_length=50, pattern=REF_PATTERN)]] | None,
        Query(max_length=100, description="refs to purge (at most 100 a request)"),
    ] = None,
    every: Annotated[bool, Query(alias="all", description="purge every dead letter")] = False,
    reason: ReasonQuery = None,
    group: GroupFilter = None,
) -> Response:
    """Delete dead letters for good: the given `ref`s, or `all` (of a `reason` and/or
    `group` when given); the count deleted."""
    svc = service(request)
    svc.guard.check(request, "write", topic)
    refs = _refs(ref, every, reason, group)
    count = await svc.admin.purge_dead(topic, refs, reason=reason, group=group)
    return json_response({"count": count})


def _refs(
    refs: list[str] | None, every: bool, reason: str | None, group: str | None
) -> list[str] | None:
    if bool(refs) == every:
        raise ProblemError(
            422,
            "invalid-argument",
            "Invalid argument",
            "give refs (a non-empty list) or all=true, not both",
            field="refs",
        )
    if refs and (reason is not None or group is not None):
        field = "reason" if reason is not None else "group"
        raise ProblemError(
            422,
            "invalid-argument",
            "Invalid argument",
            f"{field} filters all=true; with refs the dead letters are already chosen",
            field=field,
        )
    return None if every else refs
