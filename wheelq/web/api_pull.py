"""``/v1/topics/{topic}/groups/{group}``: pull consumers (pull, ack, nack by receipt), and
creating their groups (`create_group`, shared with ``POST /v1/topics/{topic}/groups``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from wheelq.admin.groups import CreatedGroup
from wheelq.errors import GroupLimitError, GroupNotFoundError, UnknownGroupError
from wheelq.web.models import (
    AckOut,
    GroupPath,
    NackIn,
    NackOut,
    PullIn,
    PullOut,
    ReceiptsIn,
    TopicPath,
)
from wheelq.web.problems import RESPONSES, ProblemError
from wheelq.web.service import WebService, json_response, service
from wheelq.worker.pull import Outcome, Pulled

router = APIRouter(
    prefix="/v1/topics/{topic}/groups/{group}", tags=["pull consumers"], responses=RESPONSES
)


def _check_group(group: str) -> None:
    if not group or len(group) > 200 or not group.isprintable():
        raise ProblemError(
            422,
            "invalid-argument",
            "Invalid argument",
            f"group must be a printable name of 1-200 characters, got {group!r:.80}",
            field="group",
        )


async def create_group(
    svc: WebService, topic: str, group: str, start: str = "earliest"
) -> CreatedGroup:
    """Create `group` on every shard of `topic` under ``[serve] max_groups_per_topic``.

    Raises:
        ProblemError: 404 for an unknown topic; 409 when the topic has its cap of groups.
    """
    cap = svc.settings.max_groups_per_topic
    try:
        return await svc.admin.create_group(topic, group, start=start, max_groups=cap)
    except GroupNotFoundError as exc:
        raise ProblemError(404, "not-found", "Not found", str(exc), field="topic") from None
    except GroupLimitError as exc:
        raise ProblemError(
            409, "group-limit", "Too many consumer groups", str(exc), field="name"
        ) from None


@router.post("/pull", response_model=PullOut)
async def pull(topic: TopicPath, group: GroupPath, body: PullIn, request: Request) -> Response:
    """Up to `max` due jobs for the group, waiting up to `wait_ms` for one, and at most
    ``[serve] pull_max_bytes`` (8 MiB) of their stored entries (one larger job comes
    alone; the few read past it go to the group's next pull). Each comes with
    a `receipt` to ack or nack it; one not acked within the visibility timeout goes to
    the next pull (its `deliveries` then counts up). While the topic or the group is
    paused, a pull hands out no job (none is read or taken over) and says so in `paused`,
    after waiting up to `wait_ms` for a resume. 404 when the group does not exist: a
    pull creates it only with `create: true` where the service allows it."""
    svc = service(request)
    svc.guard.check(request, "write", topic)
    _check_group(group)
    if body.create and not svc.settings.pull_creates_groups:
        raise ProblemError(
            422,
            "invalid-argument",
            "Invalid argument",
            "create: this service does not create groups on pull ([serve] "
            f"pull_creates_groups = 0); create it with POST /v1/topics/{topic}/groups",
            field="create",
        )
    consumer = f"http:{body.consumer}"
    try:
        got = await svc.puller.pull(topic, group, consumer, body.max, body.wait_ms)
    except UnknownGroupError as exc:
        if not body.create:
            raise ProblemError(404, "not-found", "Not found", str(exc), field="group") from None
        await create_group(svc, topic, group)  # only when missing: no script per pull
        got = await svc.puller.pull(topic, group, consumer, body.max, body.wait_ms)
    answer: dict[str, Any] = {"jobs": _jobs(got.jobs)}
    if got.paused is not None:
        answer["paused"] = got.paused.value
    return json_response(answer)


def _jobs(got: list[Pulled]) -> list[dict[str, Any]]:
    return [
        {
            "id": p.job.id,
            "topic": p.job.topic,
            "payload": p.payload,
            "due_ms": p.job.due_ms,
            "attempt": p.job.attempt,
            "max_attempts": p.job.max_attempts,
            "deliveries": p.job.deliveries,
            "priority": p.job.priority,
            "key": p.job.key,
            "receipt": p.receipt,
        }
        for p in got
    ]


@router.post("/ack", response_model=AckOut)
async def ack(topic: TopicPath, group: GroupPath, body: ReceiptsIn, request: Request) -> Response:
    """Settle pulled jobs as done; `acked` counts those not settled before, `results` says
    what each receipt did. A stale receipt (its job taken over by a later pull after the
    visibility timeout) settles nothing; 409 when every receipt is stale."""
    svc = service(request)
    svc.guard.check(request, "write", topic)
    _check_group(group)
    outcomes = await svc.puller.ack(topic, group, body.receipts)
    return json_response(_answer(outcomes, acked=Outcome.ACKED))


@router.post("/nack", response_model=NackOut)
async def nack(topic: TopicPath, group: GroupPath, body: NackIn, request: Request) -> Response:
    """Settle pulled jobs as failed: retried after `delay_ms` (default: the backoff), or
    dead-lettered after their last attempt, or (cancelled since pulled) settled without a
    retry; `results` says what each receipt did. A stale receipt settles nothing; 409 when
    every receipt is stale."""
    svc = service(request)
    svc.guard.check(request, "write", topic)
    _check_group(group)
    outcomes = await svc.puller.nack(topic, group, body.receipts, body.delay_ms)
    return json_response(
        _answer(
            outcomes,
            retried=Outcome.RETRIED,
            dead_lettered=Outcome.DEAD_LETTERED,
            cancelled=Outcome.CANCELLED,
        )
    )


def _answer(outcomes: list[Outcome], **counts: Outcome) -> dict[str, Any]:
    """A count per outcome named in `counts`, and each receipt's result; 409 if all stale."""
    stale = [i for i, o in enumerate(outcomes) if o is Outcome.STALE]
    if len(stale) == len(outcomes):
        raise ProblemError(
            409,
            "stale-receipt",
            "Stale receipt",
            f"receipts[{stale[0]}] is stale: its visibility timeout passed and a later pull "
            "took the job over, so only that pull's receipt settles it; nothing was changed",
            field=f"receipts[{stale[0]}]",
            errors=[{"field": f"receipts[{i}]", "message": "stale receipt"} for i in stale],
        )
    body: dict[str, Any] = {name: outcomes.count(o) for name, o in counts.items()}
    body["results"] = [
        {"status": 409 if o is Outcome.STALE else 200, "outcome": o.value} for o in outcomes
    ]
    return body
