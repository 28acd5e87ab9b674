"""``/v1/topics/{topic}/jobs``: enqueue (one or a batch), look up, cancel, reschedule."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request, Response

from wheelq.callbacks.resolver import private_target
from wheelq.core.callback import validate_callback
from wheelq.core.due import due_spec
from wheelq.core.history import JobState
from wheelq.core.jsonable import job_info_json
from wheelq.errors import (
    DuplicateJobError,
    InvalidArgumentError,
    PayloadTypeError,
    TopicFullError,
)
from wheelq.producer.items import EnqueueItem
from wheelq.runtime.clock import wall_ms
from wheelq.web.models import (
    BatchIn,
    BatchOut,
    Due,
    Enqueued,
    JobIdPath,
    JobIn,
    JobOut,
    TopicPath,
)
from wheelq.web.problems import RESPONSES, ProblemError, invalid
from wheelq.web.service import WebService

router = APIRouter(prefix="/v1/topics/{topic}/jobs", tags=["jobs"], responses=RESPONSES)


def service(request: Request) -> WebService:
    svc: WebService = request.app.state.service
    return svc


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """A JSON answer without a response model's second validation (the hot paths)."""
    return Response(
        json.dumps(body, ensure_ascii=False, separators=(",", ":")),
        status,
        headers=headers,
        media_type="application/json",
    )


def checked_item(svc: WebService, topic: str, job: JobIn, prefix: str = "") -> EnqueueItem:
    """The client's item for `job`, its callback checked for its form and, unless allowed,
    against private targets (its host as the deliverer's HTTP client connects to it)."""
    try:
        item = job.item(wall_ms())  # the client's clock: the one its own check of `at` reads
        if item.callback is not None:
            callback = validate_callback(item.callback)
            why = "" if svc.allow_private else private_target(callback.url)
            if why:
                raise InvalidArgumentError(
                    "callback.url",
                    f"{why}, which this service does not call ([callbacks] allow_private)",
                )
    except (InvalidArgumentError, PayloadTypeError) as exc:
        raise invalid(exc, prefix) from None
    return item


def delivering(svc: WebService, topic: str, items: list[EnqueueItem]) -> None:
    """Jobs with callbacks were enqueued on `topic`: have them delivered from now on."""
    if svc.deliveries is not None and any(item.callback is not None for item in items):
        svc.deliveries.want(topic)


def due_ms(svc: WebService, item: EnqueueItem) -> int:
    """When the job is due, on the Redis clock (a delay counts from about now)."""
    now_ms = svc.clock.now_ms()
    due = due_spec(item.delay, item.at, now_ms=now_ms)
    return due.value_ms if due.kind == "at" else now_ms + due.value_ms


@router.post("", status_code=201, response_model=Enqueued)
async def enqueue(topic: TopicPath, job: JobIn, request: Request) -> Response:
    """Enqueue one job; 409 when a job of that `id` is pending (unless `replace`)."""
    svc = service(request)
    svc.guard.check(request, "write", topic)
    item = checked_item(svc, topic, job)
    job_id = await svc.coalescer.enqueue(topic, item)
    delivering(svc, topic, [item])
    body = {"id": job_id, "topic": topic, "due_ms": due_ms(svc, item)}
    where = f"/v1/topics/{topic}/jobs/{quote(job_id, safe='')}"
    return json_response(body, 201, {"Location": where})


@router.post("/batch", response_model=BatchOut)
async def enqueue_batch(topic: TopicPath, batch: BatchIn, request: Request) -> Response:
    """Enqueue jobs together; each result has its own `status` (201, or 409 for an `id`
    that is pending). A bad job refuses the whole batch (422 naming ``jobs[i].field``)."""
    svc = service(request)
    svc.guard.check(request, "write", topic)
    return json_response({"results": await batch_results(svc, topic, batch)})


async def batch_results(svc: WebService, topic: str, batch: BatchIn) -> list[dict[str, Any]]:
    """Enqueue a batch; each job's result (what `enqueue_batch` answers).

    Raises:
        ProblemError: 422 for too many jobs or a bad one (nothing is written).
    """
    if len(batch.jobs) > svc.settings.max_batch:
        raise ProblemError(
            422,
            "invalid-argument",
            "Invalid argument",
            f"jobs must hold at most {svc.settings.max_batch} jobs, got {len(batch.jobs)}",
            field="jobs",
        )
    jobs = batch.jobs
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


@router.get("/{job_id:path}", response_model=JobOut)
async def get_job(topic: TopicPath, job_id: JobIdPath, request: Request) -> Response:
    """A job's state, whatever it is; 404 when nothing is known of it."""
    svc = service(request)
    svc.guard.check(request, "read", topic)
    info = await svc.client.get(topic, job_id)
    if info.state is JobState.UNKNOWN:
        raise _unknown(topic, job_id)
    return json_response(job_info_json(info))


@router.delete("/{job_id:path}", status_code=204)
async def cancel_job(topic: TopicPath, job_id: JobIdPath, request: Request) -> Response:
    """Cancel a pending job; 409 once it has fired (or was cancelled), 404 if unknown."""
    svc = service(request)
    svc.guard.check(request, "write", topic)
    if await svc.client.cancel(topic, job_id):
        return Response(status_code=204)
    raise await _not_pending(svc, topic, job_id, "cancel")


@router.patch("/{job_id:path}", response_model=Enqueued)
async def reschedule_job(
    topic: TopicPath, job_id: JobIdPath, due: Due, request: Request
) -> Response:
    """Move a pending job to `delay_ms` from now or to `at`; 409 once it has fired."""
    svc = service(request)
    svc.guard.check(request, "write", topic)
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
    return ProblemError(
        404,
        "not-found",
        "Not found",
        f"nothing is known of job {job_id!r} on topic {topic!r} (never enqueued there, or "
        "its history is past retention)",
    )
