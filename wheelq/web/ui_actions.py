"""The dashboard's actions: forms that POST, each doing what one library call does, then
back to a page whose ``?done=`` says what happened (`wheelq.web.ui.DONE`).

Jobs: cancel, move (to a delay or a UTC time), run now. Topics: pause and resume (the
topic, or one group), delete a consumer group, drop the topic. Schedules: pause, resume,
delete. Dead letters: replay or purge the ones ticked, or every one matching the page's
filter. Many jobs at once: `wheelq.web.ui_bulk`, through this module's confirmation step.

Each form is accepted only from the dashboard's own pages (its Origin or Referer is this
service's origin, `wheelq.web.auth.check_site`: a browser sends the login with any request
to the site) and with a token that may
write the topic. A destructive action (cancel, delete a group or schedule, drop, purge)
posted without ``confirm=1`` changes nothing: it answers a page that says what would
happen, with a button that posts the same form confirmed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Annotated, Literal
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response

from wheelq.core.recurring import MAX_NAME
from wheelq.errors import GroupBusyError, GroupNotFoundError, TopicNotEmptyError, UnknownGroupError
from wheelq.web.auth import check_site
from wheelq.web.models import GROUP_NAME
from wheelq.web.problems import ProblemError
from wheelq.web.service import WebService, service
from wheelq.web.ui import PageRoute, home, render, shards_of

router = APIRouter(prefix="/ui", include_in_schema=False, route_class=PageRoute)

MAX_DELAY_S = 10 * 366 * 86_400
"""The furthest a job is moved: ten years, as `enqueue` allows."""

Confirm = Annotated[str | None, Form(max_length=10)]
Flag = Annotated[str | None, Form(max_length=10)]
JobId = Annotated[str, Form(alias="id", min_length=1, max_length=1000)]
Group = Annotated[str | None, Form(**GROUP_NAME)]
Refs = Annotated[list[str] | None, Form(max_length=1000)]


@dataclass(frozen=True, slots=True)
class Confirmation:
    """A destructive form posted without ``confirm``: what it would do, and the same form."""

    title: str
    what: str
    action: str
    fields: list[tuple[str, str]]
    back: str
    option: tuple[str, str] | None = None
    """A checkbox the confirmed form may carry: (name, label)."""


async def confirm_then_act(
    request: Request,
    confirm: str | None,
    confirmation: Confirmation,
    act: Callable[[], Awaitable[Response]],
) -> Response:
    """A destructive form's one handler: posted without `confirm`, the page that says what
    would happen (its `action` and `back` are paths under the dashboard) and changes
    nothing; confirmed, what `act` answers."""
    if confirm:
        return await act()
    return confirmation_page(request, confirmation)


def confirmation_page(request: Request, confirmation: Confirmation) -> Response:
    """The page that asks `confirmation` (its `action` and `back` paths under the dashboard)."""
    root = home(request)
    c = replace(confirmation, action=root + confirmation.action, back=root + confirmation.back)
    return render(request, "confirm.html", c=c)


async def topic_writer(request: Request, topic: str) -> WebService:
    """`writer`, once the topic is known to exist (404 else)."""
    svc = writer(request, topic)
    await shards_of(svc, topic)
    return svc


def writer(request: Request, topic: str) -> WebService:
    """The service, once the form is known to come from this site and the token may write."""
    check_site(dict(request.scope["headers"]), request.url.scheme, required=True)
    svc = service(request)
    svc.guard.check(request, "write", topic)
    return svc


def back_to(request: Request, path: str, done: str, **query: str | int | None) -> Response:
    """303 to `path` under the dashboard, saying `done` (and keeping `query`)."""
    kept = {k: v for k, v in {**query, "done": done}.items() if v}
    return RedirectResponse(f"{home(request)}{path}?{urlencode(kept)}", 303)


def topic_path(topic: str) -> str:
    return f"/topics/{quote(topic, safe='')}"


# --- jobs ------------------------------------------------------------------------------------


@router.post("/topics/{topic}/job/{action}")
async def job_action(
    topic: str,
    action: Literal["cancel", "move", "run", "cancel-tree", "shift-tree"],
    request: Request,
    job_id: JobId,
    delay_s: Annotated[int | None, Form(ge=0, le=MAX_DELAY_S)] = None,
    at: Annotated[str | None, Form(max_length=40)] = None,
    by_s: Annotated[int | None, Form(ge=-MAX_DELAY_S, le=MAX_DELAY_S)] = None,
    confirm: Confirm = None,
) -> Response:
    """Cancel a pending job (confirmed), move it to `delay_s` from now or to `at` (UTC), or
    make it due now; cancel its whole tree (confirmed), or shift every pending job of its
    tree by `by_s` seconds; back to its page."""
    svc = await topic_writer(request, topic)
    page = f"{topic_path(topic)}/jobs/{quote(job_id, safe='')}"
    if action == "cancel-tree":

        async def cancel_tree() -> Response:
            return back_to(
                request, page, f"cancelled {await svc.client.cancel(topic, job_id, tree=True)}"
            )

        return await confirm_then_act(
            request,
            confirm,
            Confirmation(
                "Cancel this job's whole tree?",
                f"Job {job_id} of {topic}, every child of it (and theirs), and every job that "
                "follows one of them will not run, whatever their on_parent_failure; jobs of "
                "it that have fired already run.",
                f"{topic_path(topic)}/job/cancel-tree",
                [("id", job_id)],
                page,
            ),
            cancel_tree,
        )
    if action == "shift-tree":
        if by_s is None:
            raise ProblemError(422, "invalid-argument", "Invalid argument", "give by_s")
        moved = await svc.client.reschedule(topic, job_id, tree=True, by=timedelta(seconds=by_s))
        return back_to(request, page, f"rescheduled {moved}")
    if action == "cancel":

        async def cancel() -> Response:
            done = "cancelled" if await svc.client.cancel(topic, job_id) else "not-cancelled"
            return back_to(request, page, done)

        return await confirm_then_act(
            request,
            confirm,
            Confirmation(
                "Cancel this job?",
                f"Job {job_id} of {topic} will not run. A job that has fired already "
                "is not cancelled.",
                f"{topic_path(topic)}/job/cancel",
                [("id", job_id)],
                page,
            ),
            cancel,
        )
    if action == "run":
        delay: timedelta | None = timedelta(0)
        when: datetime | None = None
    else:
        delay, when = _when(delay_s, at)
    moved = await svc.client.reschedule(topic, job_id, delay=delay, at=when)
    return back_to(request, page, ("run" if action == "run" else "moved") if moved else "not-moved")


def _when(delay_s: int | None, at: str | None) -> tuple[timedelta | None, datetime | None]:
    """A move's target: seconds from now, or a time read as UTC (a ``datetime-local``)."""
    if (delay_s is None) == (not at):
        raise ProblemError(
            422, "invalid-argument", "Invalid argument", "give delay_s or at, one of them"
        )
    if delay_s is not None:
        return timedelta(seconds=delay_s), None
    assert at is not None
    try:
        when = datetime.fromisoformat(at)
    except ValueError:
        when = None
    if when is None or "T" not in at.upper():
        raise ProblemError(
            422,
            "invalid-argument",
            "Invalid argument",
            f"at must be a UTC time like 2030-01-31T09:30, got {at!r:.60}",
        )
    return None, when if when.tzinfo else when.replace(tzinfo=UTC)


# --- topics and groups -----------------------------------------------------------------------


@router.post("/topics/{topic}/pause")
async def pause_form(topic: str, request: Request, group: Group = None) -> Response:
    """Pause the topic, or one `group`; back to the topic's page."""
    return await _change_pause(request, topic, group, resume=False)


@router.post("/topics/{topic}/resume")
async def resume_form(topic: str, request: Request, group: Group = None) -> Response:
    """Resume the topic, or one `group`; back to the topic's page."""
    return await _change_pause(request, topic, group, resume=True)


async def _change_pause(request: Request, topic: str, group: str | None, resume: bool) -> Response:
    svc = await topic_writer(request, topic)
    try:
        await (svc.admin.resume if resume else svc.admin.pause)(topic, group)
    except UnknownGroupError as exc:
        raise ProblemError(404, "not-found", "Not found", str(exc)) from None
    return back_to(request, topic_path(topic), "resumed" if resume else "paused")


@router.post("/topics/{topic}/groups/delete")
async def delete_group_form(
    topic: str,
    request: Request,
    group: Annotated[str, Form(**GROUP_NAME)],
    confirm: Confirm = None,
    force: Flag = None,
) -> Response:
    """Delete a consumer group (confirmed; `force`: even with entries in flight)."""
    svc = await topic_writer(request, topic)

    async def delete() -> Response:
        try:
            await svc.admin.delete_group(topic, group, force=bool(force))
        except GroupNotFoundError as exc:
            raise ProblemError(404, "not-found", "Not found", str(exc)) from None
        except GroupBusyError as exc:
            detail = exc.explain("go back and tick 'also while entries are in flight'")
            raise ProblemError(409, "group-busy", "Entries in flight", detail) from None
        return back_to(request, topic_path(topic), "group-deleted")

    return await confirm_then_act(
        request,
        confirm,
        Confirmation(
            f"Delete consumer group {group}?",
            f"Group {group} of {topic} is deleted on every shard: its place in the "
            "stream and its entries in flight go. Stop its workers first: a running one "
            "creates it again.",
            f"{topic_path(topic)}/groups/delete",
            [("group", group)],
            topic_path(topic),
            ("force", "also while entries are in flight (they are dropped for it)"),
        ),
        delete,
    )


@router.post("/topics/{topic}/drop")
async def drop_form(
    topic: str, request: Request, confirm: Confirm = None, force: Flag = None
) -> Response:
    """Drop the topic (confirmed; `force`: even while jobs wait); back to the topic list."""
    svc = await topic_writer(request, topic)

    async def drop() -> Response:
        try:
            await svc.admin.drop_topic(topic, force=bool(force))
        except TopicNotEmptyError as exc:
            detail = exc.explain("go back and tick 'also while jobs are pending'")
            raise ProblemError(409, "topic-not-empty", "Topic holds jobs", detail) from None
        return back_to(request, "", "dropped")

    return await confirm_then_act(
        request,
        confirm,
        Confirmation(
            f"Drop topic {topic}?",
            f"Every key of {topic} is deleted: its jobs, streams, history, dead letters, "
            "schedules and pauses. Stop its workers and schedulers first.",
            f"{topic_path(topic)}/drop",
            [],
            topic_path(topic),
            ("force", "also while jobs are pending or not yet acked (they are lost)"),
        ),
        drop,
    )


# --- schedules -------------------------------------------------------------------------------


@router.post("/topics/{topic}/schedules/{change}")
async def schedule_form(
    topic: str,
    change: Literal["pause", "resume", "delete"],
    request: Request,
    name: Annotated[str, Form(min_length=1, max_length=MAX_NAME)],
    confirm: Confirm = None,
) -> Response:
    """Pause, resume or delete (confirmed) a schedule; back to the topic's schedules."""
    svc = await topic_writer(request, topic)
    here = f"{topic_path(topic)}/schedules"

    async def act() -> Response:
        call = {
            "pause": svc.admin.pause_schedule,
            "resume": svc.admin.resume_schedule,
            "delete": svc.admin.unschedule,
        }[change]
        done = {"pause": "schedule-paused", "resume": "schedule-resumed"}.get(
            change, "schedule-deleted"
        )
        return back_to(request, here, done if await call(name, topic) else "schedule-gone")

    if change != "delete":
        return await act()
    return await confirm_then_act(
        request,
        confirm,
        Confirmation(
            f"Delete schedule {name}?",
            f"Schedule {name} of {topic} writes no more runs, and the runs it has written "
            "ahead are cancelled. Runs already fired are not touched.",
            f"{here}/delete",
            [("name", name)],
            here,
        ),
        act,
    )


# --- dead letters ----------------------------------------------------------------------------


@router.post("/topics/{topic}/dead/{action}")
async def dead_form(
    topic: str,
    action: Literal["replay", "purge"],
    request: Request,
    ref: Refs = None,
    every: Annotated[str | None, Form(alias="all", max_length=10)] = None,
    reason: Annotated[str | None, Form(max_length=20)] = None,
    group: Group = None,
    confirm: Confirm = None,
    after: Annotated[str | None, Form(max_length=100)] = None,
    limit: Annotated[int | None, Form(ge=1, le=1000)] = None,
) -> Response:
    """Replay or purge the dead letters ticked (`ref`), or all of them matching `reason`
    and `group` (`all=1`; a purge confirmed), then back to the list, saying how many."""
    svc = await topic_writer(request, topic)
    if bool(ref) == bool(every):
        detail = "tick one or more dead letters, or take all matching, not both"
        raise ProblemError(422, "invalid-argument", "Invalid argument", detail)
    here = f"{topic_path(topic)}/dead"
    kept = {"reason": reason, "group": group, "after": after, "limit": limit}

    async def act() -> Response:
        refs = ref or None
        match = {"reason": reason or None, "group": group or None} if every else {}
        if action == "replay":
            replayed = await svc.admin.replay(topic, refs, **match)
            done = f"replayed {replayed}" + f" skipped {replayed.skipped}" * bool(replayed.skipped)
        else:
            done = f"purged {await svc.admin.purge_dead(topic, refs, **match)}"
        return back_to(request, here, done, **kept)

    if action == "replay":
        return await act()
    fields = [("ref", r) for r in ref or ()] + [("all", "1")] * bool(every)
    fields += [(k, str(v)) for k, v in kept.items() if v]
    which = f"the {len(ref)} dead letters ticked" if ref else "every dead letter"
    if every and (reason or group):
        which += " matching the filter"
    return await confirm_then_act(
        request,
        confirm,
        Confirmation(
            "Purge dead letters?",
            f"{which.capitalize()} of {topic} will be deleted for good.",
            f"{here}/purge",
            fields,
            f"{here}?" + urlencode({k: v for k, v in kept.items() if v}),
        ),
        act,
    )
