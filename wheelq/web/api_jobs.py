"""``/v1/topics/{topic}/jobs``: list by state, enqueue (one or a batch), look up, cancel,
reschedule, wait for a result (long-polls on `wheelq.web.result_waits`); the fast path of
the enqueue straight from ASGI, whose single enqueues the `wheelq.web.coalescer` sends
together (docs/architecture.md, "HTTP service", "Job results", "Job lists")."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Query, Request, Response
from pydantic import ValidationError
from starlette.types import Receive, Scope, Send

from wheelq.core.bulk_actions import BulkOutcome
from wheelq.core.due import due_spec
from wheelq.core.history import JobState
from wheelq.core.job_list import LIST_STATES, MAX_LIST_LIMIT, ListState
from wheelq.core.payload import jsonable
from wheelq.core.retry import Reason
from wheelq.errors import (
    DuplicateJobError,
    InvalidArgumentError,
    JobFailedError,
    PayloadTypeError,
    ResultTimeoutError,
    TopicFullError,
    UnknownGroupError,
    UnknownJobError,
)
from wheelq.producer.items import EnqueueItem
from wheelq.runtime.clock import wall_ms
from wheelq.web import as_json
from wheelq.web.models import (
    GROUP_NAME,
    JOB_KEY,
    TIME_DESCRIPTION,
    BatchIn,
    BatchOut,
    BulkFilterIn,
    BulkIn,
    BulkOutcomeModel,
    Enqueued,
    GroupQuery,
    JobIdPath,
    JobIn,
    JobInfoModel,
    JobListOut,
    JobMoveIn,
    KeyCancelled,
    KeyMoved,
    KeyMoveIn,
    ResultOut,
    ResultWait,
    TopicPath,
    as_time,
)
from wheelq.web.problems import (
    RESPONSES,
    ProblemError,
    deep_body_problem,
    invalid,
    is_json,
    problem_of,
    validation_problem,
)
from wheelq.web.service import WebService, any_topic, json_bytes, json_response, service

router = APIRouter(prefix="/v1/topics/{topic}/jobs", tags=["jobs"], responses=RESPONSES)


def checked_item(svc: WebService, topic: str, job: JobIn, prefix: str = "") -> EnqueueItem:
    """The client's item for `job`, its callback checked for its form and, unless allowed,
    against private targets (its host as the deliverer's HTTP client connects to it)."""
    try:
        item = job.item(wall_ms())  # the client's clock: the one its own check of `at` reads
        if item.callback is not None:
            svc.check_callback(item.callback)
    except (InvalidArgumentError, PayloadTypeError) as exc:
        raise invalid(exc, prefix) from None
    return item


def delivering(svc: WebService, topic: str, items: list[EnqueueItem]) -> None:
    """Jobs with callbacks were enqueued on `topic`: have them delivered from now on."""
    if any(item.callback is not None for item in items):
        svc.deliver(topic)


def due_ms(svc: WebService, item: EnqueueItem) -> int:
    """When the job is due, on the Redis clock (a delay counts from about now)."""
    now_ms = svc.clock.now_ms()
    due = due_spec(item.delay, item.at, now_ms=now_ms)
    return due.value_ms if due.kind == "at" else now_ms + due.value_ms


ListStateQuery = Annotated[
    ListState,
    Query(description="the state listed: " + ", ".join(LIST_STATES)),
]
TimeQuery = Annotated[str | None, Query(max_length=64, description=TIME_DESCRIPTION)]


@router.get("", response_model=JobListOut)
async def list_jobs(
    topic: TopicPath,
    request: Request,
    state: ListStateQuery,
    limit: Annotated[int | None, Query(ge=1, le=MAX_LIST_LIMIT, description="page size")] = None,
    cursor: Annotated[
        str | None, Query(max_length=4096, description="the `next` of the page before")
    ] = None,
    due_after: TimeQuery = None,
    due_before: TimeQuery = None,
    group: Annotated[
        str | None, Query(**GROUP_NAME, description="only rows of this consumer group")
    ] = None,
    reason: Annotated[Reason | None, Query(description="dead: only this reason")] = None,
    priority: Annotated[
        int | None, Query(ge=0, le=9, description="only jobs of this priority (0-9)")
    ] = None,
    key: Annotated[
        str | None,
        Query(**JOB_KEY, description="only jobs of this key (pending, retrying: the key index)"),
    ] = None,
) -> Response:
    """The topic's jobs in one `state`, a page at a time (`next` is the following page's
    `cursor`): pending and retrying (by due time; `due_after` <= due < `due_before`), ready,
    running (per group), succeeded and failed (newest first), dead. A page may hold fewer
    than `limit` rows and still have a `next`: it stopped where the rows one request may
    read past ran out. A filter that matches nothing is an empty page."""
    svc = service(request)
    svc.guard.check(request, "read", topic)
    page = await svc.admin.jobs(
        topic,
        state,
        limit or svc.settings.page_limit,
        cursor=cursor,
        due_after=as_time("due_after", _time(due_after)),
        due_before=as_time("due_before", _time(due_before)),
        group=group,
        reason=None if reason is None else str(reason),
        priority=priority,
        key=key,
    )
    return json_response({"jobs": [as_json(r) for r in page], "next": page.next})


KeyQuery = Annotated[str, Query(**JOB_KEY, description="the key whose jobs are acted on")]


@router.delete("", response_model=KeyCancelled)
async def cancel_key(topic: TopicPath, key: KeyQuery, request: Request) -> Response:
    """Cancel every pending job of `key` (each with its groups' retries; those due and
    waiting on the due line too), found through the topic's key index; how many."""
    svc = service(request)
    svc.guard.check(request, "write", topic)
    return json_response({"cancelled": await svc.client.cancel(topic, key=key)})


@router.patch("", response_model=KeyMoved)
async def reschedule_key(
    topic: TopicPath, key: KeyQuery, move: KeyMoveIn, request: Request
) -> Response:
    """Move every pending job of `key`: each `by_ms` from its own due time, or all `to` one
    time; how many moved (one that fired or was written again meanwhile is left alone)."""
    svc = service(request)
    svc.guard.check(request, "write", topic)
    by, to = _shift_or_time(move)
    moved = await svc.client.reschedule(topic, key=key, by=by, to=to)
    return json_response({"moved": moved})


def _shift_or_time(move: KeyMoveIn) -> tuple[timedelta | None, datetime | None]:
    """A move of many jobs (a key's, a tree's) as `reschedule` takes it: `by` a shift or
    `to` a time, exactly one of them (else 422 naming ``by_ms``)."""
    if (move.by_ms is None) == (move.to is None):
        raise invalid(InvalidArgumentError("by_ms", "give by_ms (a shift) or to (a time)"))
    by = None if move.by_ms is None else timedelta(milliseconds=move.by_ms)
    return by, as_time("to", move.to)


def _time(value: str | None) -> int | str | None:
    """A query's time: epoch ms when it is all digits, else the RFC 3339 text."""
    return int(value) if value is not None and value.isascii() and value.isdigit() else value


@router.post("", status_code=201, response_model=Enqueued)
@any_topic
async def enqueue(topic: TopicPath, job: JobIn, request: Request) -> Response:
    """Enqueue one job; 409 when a job of that `id` is pending (unless `replace`)."""
    svc = service(request)
    svc.guard.check(request, "write", topic)
    body, where = await enqueue_one(svc, topic, job)
    return json_response(body, 201, {"Location": where})


async def enqueue_one(svc: WebService, topic: str, job: JobIn) -> tuple[dict[str, Any], str]:
    """Enqueue `job` (with whatever else comes this loop turn): the answer and Location."""
    item = checked_item(svc, topic, job)
    try:
        follows = job.follows(topic)
    except InvalidArgumentError as exc:
        raise invalid(exc) from None
    if follows:  # a job that follows another: two writes of its own, no batching
        options = {n: v for n, v in item._asdict().items() if n != "payload"}
        job_id = await svc.client.enqueue(topic, item.payload, **follows, **options)
        delivering(svc, topic, [item])
        awaiting: dict[str, Any] = {"id": job_id, "topic": topic, "due_ms": None}
        return awaiting, f"/v1/topics/{topic}/jobs/{quote(job_id, safe='')}"
    job_id = await svc.coalescer.enqueue(topic, item)
    delivering(svc, topic, [item])
    body = {"id": job_id, "topic": topic, "due_ms": due_ms(svc, item)}
    return body, f"/v1/topics/{topic}/jobs/{quote(job_id, safe='')}"


BULK_SLICE = 10_000
"""Jobs one bulk request acts on at most; more: the answer's `selection` goes on."""


@router.post("/bulk", response_model=BulkOutcomeModel)
async def bulk_action(topic: TopicPath, body: BulkIn, request: Request) -> Response:
    """Act on many jobs: cancel, run_now, reschedule (`at` or `shift_ms`) pending or
    retrying ones, replay or purge dead letters; chosen by `filter`, by `ids` (with
    `filter.state`) or `refs`, or a dry run's `selection`. A dry run answers how many match
    (`matched`) and a `selection` that acts on exactly those; an act answers how many it
    `acted` on and how many had `changed` meanwhile (moved on, rescheduled or enqueued again
    under their id: left alone). One request acts on 10,000 jobs at most: `remaining` and
    `selection` say how to go on."""
    svc = service(request)
    svc.guard.check(request, "write", topic)
    f = body.filter
    try:
        outcome = await _bulk(svc, topic, body, f)
    except InvalidArgumentError as exc:
        if exc.parameter in FILTER_FIELDS:  # named as the body spells it
            raise InvalidArgumentError(f"filter.{exc.parameter}", str(exc)) from None
        raise
    return json_response(as_json(outcome))


FILTER_FIELDS = frozenset({"state", "due_after", "due_before", "group", "reason", "key"})


async def _bulk(svc: WebService, topic: str, body: BulkIn, f: BulkFilterIn | None) -> BulkOutcome:
    return await svc.admin.bulk(
        topic,
        body.action,
        state=None if f is None else f.state,
        due_after=None if f is None else as_time("filter.due_after", f.due_after),
        due_before=None if f is None else as_time("filter.due_before", f.due_before),
        group=None if f is None else f.group,
        reason=None if f is None else f.reason,
        key=None if f is None else f.key,
        ids=body.ids,
        refs=body.refs,
        selection=body.selection,
        dry_run=body.dry_run,
        at=as_time("at", body.at),
        shift_ms=body.shift_ms,
        max_jobs=BULK_SLICE,
    )


@router.post("/batch", response_model=BatchOut)
@any_topic
async def enqueue_batch(topic: TopicPath, batch: BatchIn, request: Request) -> Response:
    """Enqueue jobs together; each result has its own `status` (201, or 409 for an `id`
    that is pending). A bad job refuses the whole batch (422 naming ``jobs[i].field``)."""
    svc = service(request)
    svc.guard.check(request, "write", topic)
    return json_response({"results": await batch_results(svc, topic, batch)})


async def batch_results(svc: WebService, topic: str, batch: BatchIn) -> list[dict[str, Any]]:
    """Enqueue a batch; each job's result. 422 for too many jobs or a bad one (no write)."""
    if len(batch.jobs) > svc.settings.max_batch:
        raise ProblemError(
            422,
            "invalid-argument",
            "Invalid argument",
            f"jobs must hold at most {svc.settings.max_batch} jobs, got {len(batch.jobs)}",
            field="jobs",
        )
    jobs = batch.jobs
    for i, job in enumerate(jobs):
        if job.after is not None or job.on_parent_failure is not None:
            raise ProblemError(
                422,
                "invalid-argument",
                "Invalid argument",
                "a job with after is enqueued alone (POST .../jobs), or as a flow (POST /v1/flows)",
                field=f"jobs[{i}].after",
            )
    items = [checked_item(svc, topic, job, f"jobs[{i}].") for i, job in enumerate(jobs)]
    duplicates: set[str] = set()
    full: set[str] = set()
    try:
        ids = await svc.client.enqueue_many(topic, items)
    except DuplicateJobError as exc:
        duplicates = set(exc.job_ids)
        ids = _ids_in_order(items, exc)
    except TopicFullError as exc:
        full, ids = set(exc.job_ids), exc.ids
    except (InvalidArgumentError, PayloadTypeError) as exc:
        raise invalid(exc) from None
    delivering(svc, topic, items)
    results: list[dict[str, Any]] = []
    now_ms = svc.clock.now_ms()
    for job_id, item, job in zip(ids, items, jobs, strict=True):
        if job_id in duplicates:
            results.append({"status": 409, "id": job_id, "topic": topic, "detail": "pending"})
        elif job_id in full:
            results.append({"status": 429, "id": job_id, "topic": topic, "detail": "topic full"})
        else:
            due = now_ms + job.delay_ms if job.delay_ms is not None else due_ms(svc, item)
            results.append({"status": 201, "id": job_id, "topic": topic, "due_ms": due})
    return results


def _ids_in_order(items: list[EnqueueItem], exc: DuplicateJobError) -> list[str]:
    """Each item's id after a batch with duplicates: only items with ids can be."""
    enqueued = iter(exc.enqueued)
    dup = set(exc.job_ids)
    return [
        item.job_id if item.job_id is not None and item.job_id in dup else next(enqueued)
        for item in items
    ]


@router.get(
    "/{job_id:path}/result",
    response_model=ResultOut,
    responses={202: {"model": ResultOut, "description": "Not finished when the wait ended"}},
)
async def job_result(
    topic: TopicPath,
    job_id: JobIdPath,
    request: Request,
    group: GroupQuery = "default",
    wait_ms: ResultWait = 0,
) -> Response:
    """What `group`'s handler returned for the job's latest run: 200 once it succeeded there,
    waiting up to `wait_ms` for it (woken by the settlement: no polling); 202 with the state
    when the wait ended first; 409 when the job was dead-lettered (the detail says why) or
    cancelled; 404 when nothing is known of it, or at once when the topic has no consumer
    group `group` (no worker could settle it there). A job id ending in ``/result`` is read here,
    not by ``GET .../jobs/{id}``. 503 with Retry-After when every connection of the waits'
    pool (``pull_connections``) is taken."""
    svc = service(request)
    svc.guard.check(request, "read", topic)
    answer = {"id": job_id, "topic": topic, "group": group}
    try:
        value = await svc.results.wait(topic, job_id, group, wait_ms)
    except JobFailedError as exc:
        raise ProblemError(409, "job-failed", "Job failed", str(exc)) from None
    except UnknownGroupError as exc:
        raise ProblemError(404, "not-found", "Not found", str(exc), field="group") from None
    except ResultTimeoutError as exc:  # (UnknownJobError: 404, as `problem_of` says)
        return json_response({**answer, "state": exc.state, "result": None}, 202)
    return json_response({**answer, "state": JobState.SUCCEEDED, "result": jsonable(value)})


@router.api_route(
    "/{job_id:path}/result", methods=["DELETE", "PATCH", "POST", "PUT"], include_in_schema=False
)
@any_topic
async def job_result_only_read(request: Request) -> Response:
    """A result is only read: 405, not the job routes' answer for an id ending in /result."""
    raise ProblemError(
        405,
        "method-not-allowed",
        "Method not allowed",
        f"{request.method} of a job's result: it is only read (GET); a job whose id ends "
        "in /result is not reachable by id over HTTP",
        headers={"Allow": "GET"},
    )


@router.get("/{job_id:path}", response_model=JobInfoModel)
async def get_job(topic: TopicPath, job_id: JobIdPath, request: Request) -> Response:
    """A job's state, whatever it is; 404 when nothing is known of it."""
    svc = service(request)
    svc.guard.check(request, "read", topic)
    info = await svc.client.get(topic, job_id)
    if info.state is JobState.UNKNOWN:
        raise _unknown(topic, job_id)
    return json_response(as_json(info))


@router.delete(
    "/{job_id:path}",
    status_code=204,
    responses={200: {"model": KeyCancelled, "description": "tree=true: how many cancelled"}},
)
async def cancel_job(
    topic: TopicPath,
    job_id: JobIdPath,
    request: Request,
    tree: Annotated[
        bool,
        Query(
            description="also a flow parent's children (and theirs) and every job that "
            "follows one of them: 200 with how many were cancelled"
        ),
    ] = False,
) -> Response:
    """Cancel a pending job; 409 once it has fired (or was cancelled), 404 if unknown."""
    svc = service(request)
    svc.guard.check(request, "write", topic)
    if tree:
        cancelled = await svc.client.cancel(topic, job_id, tree=True)
        return json_response({"cancelled": cancelled})
    if await svc.client.cancel(topic, job_id):
        return Response(status_code=204)
    raise await _not_pending(svc, topic, job_id, "cancel")


@router.patch(
    "/{job_id:path}",
    response_model=Enqueued,
    responses={200: {"model": KeyMoved, "description": "tree=true: how many moved"}},
)
async def reschedule_job(
    topic: TopicPath,
    job_id: JobIdPath,
    due: JobMoveIn,
    request: Request,
    tree: Annotated[
        bool,
        Query(
            description="every pending job of the job's tree (as DELETE's tree=true finds it), "
            "by the body's by_ms (each from its own due time) or to: 200 with how many moved"
        ),
    ] = False,
) -> Response:
    """Move a pending job to `delay_ms` from now or to `at`; 409 once it has fired. With
    ``tree=true`` the body is ``by_ms`` or ``to``, as a key's move takes them."""
    svc = service(request)
    svc.guard.check(request, "write", topic)
    if tree:
        return await _reschedule_tree(svc, topic, job_id, due)
    if due.by_ms is not None or due.to is not None:
        name = "by_ms" if due.by_ms is not None else "to"
        raise invalid(InvalidArgumentError(name, f"{name} goes with tree=true or ?key="))
    try:
        delay, at = due.due(wall_ms())
        if delay is None and at is None:
            raise InvalidArgumentError("delay_ms", "give delay_ms or at (delay_ms 0 for now)")
    except InvalidArgumentError as exc:
        raise invalid(exc) from None
    if await svc.client.reschedule(topic, job_id, delay=delay, at=at):
        item = EnqueueItem(payload=None, delay=delay, at=at)
        return json_response({"id": job_id, "topic": topic, "due_ms": due_ms(svc, item)})
    raise await _not_pending(svc, topic, job_id, "reschedule")


async def _reschedule_tree(svc: WebService, topic: str, job_id: str, move: JobMoveIn) -> Response:
    if move.at is not None or move.delay_ms is not None:
        name = "at" if move.at is not None else "delay_ms"
        raise invalid(InvalidArgumentError(name, "a tree moves by by_ms (a shift) or to (a time)"))
    by, to = _shift_or_time(move)
    moved = await svc.client.reschedule(topic, job_id, tree=True, by=by, to=to)
    return json_response({"moved": moved})


async def _not_pending(svc: WebService, topic: str, job_id: str, what: str) -> ProblemError:
    info = await svc.client.get(topic, job_id)
    if info.state is JobState.UNKNOWN:
        return _unknown(topic, job_id)
    return ProblemError(
        409,
        "not-pending",
        "Job is not pending",
        f"cannot {what} job {job_id!r}: it is {info.state.value}",
    )


def _unknown(topic: str, job_id: str) -> ProblemError:
    problem = problem_of(UnknownJobError(topic, job_id))  # the same 404 as result()'s
    assert problem is not None
    return problem


ROUTE = "/v1/topics/{topic}/jobs"
BATCH_ROUTE = "/v1/topics/{topic}/jobs/batch"
_PATH = re.compile(r"/v1/topics/([A-Za-z0-9_.\-]{1,100})/jobs(/batch)?")


def topic_of(scope: Scope) -> tuple[str, bool] | None:
    """(topic, batch?) when `scope` is a JSON enqueue this path takes, else None."""
    if scope["method"] != "POST":
        return None
    found = _PATH.fullmatch(scope["path"])
    if found is None:
        return None
    for name, value in scope["headers"]:
        if name == b"content-type":
            if is_json(value.decode("latin-1")):
                return found[1], found[2] is not None
            return None
    return None


async def fast_enqueue(
    service: WebService, topic: str, batch: bool, scope: Scope, receive: Receive, send: Send
) -> int:
    """Answer the enqueue (one job, or a batch) straight from ASGI; returns the status sent.

    FastAPI's per-request machinery cost twice the enqueue itself; this does the same steps
    with the same parts (`JobIn`, problems, the coalescer), and the route below stays for the
    OpenAPI document and for a chunked body. `wheelq.web.app`'s gatekeeper has checked the
    ``Host``, the token and the Content-Type already.
    """
    headers = [(b"content-type", b"application/json")]
    try:
        status, body, location = await _answer(service, topic, batch, scope, receive)
        if location is not None:
            headers.append((b"location", location.encode("latin-1")))
    except Exception as exc:
        problem = problem_of(exc)
        if problem is None:
            raise
        response = problem.response(scope["path"])
        status, body = problem.status, bytes(response.body)
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers.items()]
    if not any(name == b"content-length" for name, _ in headers):
        headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
    return status


async def _answer(
    service: WebService, topic: str, batch: bool, scope: Scope, receive: Receive
) -> tuple[int, bytes, str | None]:
    """(status, JSON body, Location) of a request that went well; raises otherwise."""
    body = await _body(receive)
    if not body:  # as FastAPI reads it: no body at all
        raise validation_problem([{"loc": ("body",), "msg": "Field required"}])
    deep = deep_body_problem(body)
    if deep is not None:
        raise deep
    try:
        if batch:
            results = await batch_results(service, topic, BatchIn.model_validate_json(body))
            return 200, json_bytes({"results": results}), None
        job = JobIn.model_validate_json(body)
    except ValidationError as exc:
        raise validation_problem(exc.errors()) from None
    answer, where = await enqueue_one(service, topic, job)
    return 201, json_bytes(answer), where


async def _body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise ProblemError(400, "http", "Bad request", "the client went away")
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)
