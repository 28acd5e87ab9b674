"""The dashboard's actions: forms that POST, each doing what one library call does, then
back to a page whose ``?done=`` says what happened (`wheelq.web.ui.DONE`).

Jobs: cancel, move (to a delay or a UTC time), run now. Many jobs (a job list's ticked
rows, or every row its filter matches): cancel, run now, reschedule, replay, purge, each
through a dry run whose count a confirmation page states (`bulk_form`). Topics: pause and
resume (the topic, or one group), delete a consumer group, drop the topic. Schedules:
pause, resume, delete. Dead letters: replay or purge the ones ticked, or every one matching
the page's filter.

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
from typing import Annotated, Any, Literal
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response

from wheelq.admin.bulk_actions import MAX_SHIFT_MS
from wheelq.core.bulk_actions import SELECTION_TTL_MS, BulkAction, BulkOutcome, bulk_action
from wheelq.core.job_list import ListState, list_state
from wheelq.core.recurring import MAX_NAME
from wheelq.errors import (
    GroupBusyError,
    GroupNotFoundError,
    InvalidArgumentError,
    TopicNotEmptyError,
    UnknownGroupError,
)
from wheelq.web.api_jobs import BULK_SLICE
from wheelq.web.auth import check_site
from wheelq.web.models import GROUP_NAME
from wheelq.web.problems import ProblemError
from wheelq.web.service import WebService, service
from wheelq.web.ui import PageRoute, home, render, shards_of, utc
from wheelq.web.ui_job_lists import form_time

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


def _topic_path(topic: str) -> str:
    return f"/topics/{quote(topic, safe='')}"


# --- jobs ------------------------------------------------------------------------------------


@router.post("/topics/{topic}/job/{action}")
async def job_action(
    topic: str,
    action: Literal["cancel", "move", "run"],
    request: Request,
    job_id: JobId,
    delay_s: Annotated[int | None, Form(ge=0, le=MAX_DELAY_S)] = None,
    at: Annotated[str | None, Form(max_length=40)] = None,
    confirm: Confirm = None,
) -> Response:
    """Cancel a pending job (confirmed), move it to `delay_s` from now or to `at` (UTC), or
    make it due now; back to its page."""
    svc = await topic_writer(request, topic)
    page = f"{_topic_path(topic)}/jobs/{quote(job_id, safe='')}"
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
                f"{_topic_path(topic)}/job/cancel",
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
    return back_to(request, _topic_path(topic), "resumed" if resume else "paused")


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
        return back_to(request, _topic_path(topic), "group-deleted")

    return await confirm_then_act(
        request,
        confirm,
        Confirmation(
            f"Delete consumer group {group}?",
            f"Group {group} of {topic} is deleted on every shard: its place in the "
            "stream and its entries in flight go. Stop its workers first: a running one "
            "creates it again.",
            f"{_topic_path(topic)}/groups/delete",
            [("group", group)],
            _topic_path(topic),
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
            f"{_topic_path(topic)}/drop",
            [],
            _topic_path(topic),
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
    here = f"{_topic_path(topic)}/schedules"

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
    here = f"{_topic_path(topic)}/dead"
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


# --- many jobs at once -----------------------------------------------------------------------

MAX_TICKED = 1000
"""Rows one form may tick: a list's largest page."""
SHIFT_UNITS_MS = {"s": 1000, "min": 60_000, "h": 3_600_000}
"""A reschedule's shift units, as the job list's form offers them."""
_UNIT_WORDS = {"s": "second", "min": "minute", "h": "hour"}
_VERB = {
    BulkAction.CANCEL: "cancel",
    BulkAction.RUN_NOW: "run",
    BulkAction.RESCHEDULE: "reschedule",
    BulkAction.REPLAY: "replay",
    BulkAction.PURGE: "purge",
}
_DONE = {
    BulkAction.CANCEL: "cancelled",
    BulkAction.RUN_NOW: "run-now",
    BulkAction.RESCHEDULE: "rescheduled",
    BulkAction.REPLAY: "replayed",
    BulkAction.PURGE: "purged",
}
"""The code a finished bulk action's redirect says (`wheelq.web.ui.flash` reads it)."""
_DOES = {
    BulkAction.CANCEL: "They will not run: every pending attempt of each is cancelled.",
    BulkAction.RUN_NOW: "Each becomes due now and fires within a moment.",
    BulkAction.REPLAY: "Each goes back to its stream as attempt 1, due now, for the group it "
    "failed in (one that cannot run again stays a dead letter).",
    BulkAction.PURGE: "They are deleted for good.",
}
Count = Annotated[int, Form(ge=0, le=10**9)]
FormText = Annotated[str | None, Form(max_length=64)]


@dataclass(frozen=True, slots=True)
class BulkForm:
    """What a bulk form carries besides its jobs: the list it came from (its state, filter
    and page size, the way back) and a reschedule's target."""

    state: ListState
    due_after: str | None = None
    due_before: str | None = None
    group: str | None = None
    reason: str | None = None
    limit: int | None = None
    shift: int | None = None
    unit: str = "min"
    at_ms: int | None = None

    def kept(self) -> dict[str, str]:
        """The list's state, filter and page size, as its address has them."""
        given = {
            "state": self.state.value,
            "due_after": self.due_after,
            "due_before": self.due_before,
            "group": self.group,
            "reason": self.reason,
            "limit": None if self.limit is None else str(self.limit),
        }
        return {k: v for k, v in given.items() if v}

    def move(self) -> list[tuple[str, str]]:
        """A reschedule's target as hidden fields (a time as epoch ms: exactly as read)."""
        if self.at_ms is not None:
            return [("at", str(self.at_ms))]
        if self.shift is not None:
            return [("shift", str(self.shift)), ("unit", self.unit)]
        return []

    def shift_ms(self) -> int | None:
        return None if self.shift is None else self.shift * SHIFT_UNITS_MS[self.unit]

    def at(self) -> datetime | None:
        return None if self.at_ms is None else datetime.fromtimestamp(self.at_ms / 1000, UTC)

    def target(self) -> str:
        """Where a reschedule moves jobs to, in words ("by +30 minutes")."""
        if self.at_ms is not None:
            return f"to {utc(self.at_ms)}"
        n = self.shift or 0
        return f"by {n:+,} {_UNIT_WORDS[self.unit]}{'' if abs(n) == 1 else 's'}"

    def matching(self) -> str:
        """The filter in words (" due from ... to ..., of group g"), or ""."""
        low, high = form_time("due_after", self.due_after), form_time("due_before", self.due_before)
        parts = []
        if low and high:
            parts.append(f"due from {utc_of(low)} to {utc_of(high)}")
        elif low or high:
            parts.append(f"due from {utc_of(low)}" if low else f"due before {utc_of(high)}")
        if self.group:
            parts.append(f"of group {self.group}")
        if self.reason:
            parts.append(f"with reason {self.reason}")
        return "".join(" " + p for p in parts)


def utc_of(at: datetime | None) -> str:
    return utc(None if at is None else round(at.timestamp() * 1000))


@router.post("/topics/{topic}/jobs/bulk/{action}")
async def bulk_form(
    topic: str,
    action: str,
    request: Request,
    state: Annotated[str, Form(max_length=20)],
    job_ids: Annotated[list[str] | None, Form(alias="id", max_length=MAX_TICKED)] = None,
    ref: Annotated[list[str] | None, Form(max_length=MAX_TICKED)] = None,
    every: Annotated[str | None, Form(alias="all", max_length=10)] = None,
    due_after: FormText = None,
    due_before: FormText = None,
    group: Group = None,
    reason: Annotated[str | None, Form(max_length=20)] = None,
    limit: Annotated[int | None, Form(ge=1, le=1000)] = None,
    shift: Annotated[int | None, Form(ge=-(10**12), le=10**12)] = None,
    unit: Annotated[Literal["s", "min", "h"], Form()] = "min",
    at: FormText = None,
    selection: Annotated[str | None, Form(max_length=200)] = None,
    confirm: Confirm = None,
    acted: Count = 0,
    changed: Count = 0,
    skipped: Count = 0,
) -> Response:
    """Act on many jobs of one list (`state`): cancel, run_now, reschedule (by `shift`
    `unit`s, or to `at`, UTC), replay, purge. Without `confirm` (or without `selection`),
    a dry run of the rows ticked (`id`, or `ref` on the dead list) or, with `all=1`, of
    every row the list's filter matches, whatever is ticked: a page that states the count
    and posts the dry run's `selection` confirmed (or says nothing matches). Confirmed, it
    acts on that selection, 10,000 jobs a request: a page with a button to go on while any
    remain (`acted`, `changed`, `skipped`: the counts so far), then back to the list,
    saying how many it acted on and how many had changed state and were left alone."""
    svc = await topic_writer(request, topic)
    listed = list_state(state)
    found = bulk_action(action, listed)
    form = BulkForm(
        listed,
        due_after or None,
        due_before or None,
        group or None,
        reason or None,
        limit,
        **_target(found, shift, unit, at),
    )
    if selection and confirm:
        return await _act(request, svc, topic, found, form, selection, (acted, changed, skipped))
    if selection:  # a selection not confirmed yet: ask again, with what remains of it
        ticked = None
        outcome = await svc.admin.bulk(
            topic, found.value, selection=selection, dry_run=True, **_moving(form)
        )
        count = outcome.remaining
    elif every:
        ticked = None
        outcome = await svc.admin.bulk(
            topic,
            found.value,
            state=listed.value,
            due_after=form_time("due_after", form.due_after),
            due_before=form_time("due_before", form.due_before),
            group=form.group,
            reason=form.reason,
            dry_run=True,
            **_moving(form),
        )
        count = outcome.matched
    else:
        ticked = ref if listed is ListState.DEAD else job_ids
        if not ticked:
            what = "dead letters" if listed is ListState.DEAD else "jobs"
            detail = f"tick one or more {what}, or take all matching"
            raise ProblemError(422, "invalid-argument", "Invalid argument", detail)
        dead = listed is ListState.DEAD
        outcome = await svc.admin.bulk(
            topic,
            found.value,
            state=listed.value,
            ids=None if dead else ticked,
            refs=ticked if dead else None,
            dry_run=True,
            **_moving(form),
        )
        count = outcome.matched
    return _ask(request, topic, found, form, outcome, count, ticked)


def _target(found: BulkAction, shift: int | None, unit: str, at: str | None) -> dict[str, Any]:
    """A reschedule's `BulkForm` fields (one of `shift` and `at`); nothing for the others,
    whose forms carry the job list's reschedule inputs too."""
    if found is not BulkAction.RESCHEDULE:
        return {}
    when = form_time("at", at)
    if (shift is None) == (when is None):
        raise InvalidArgumentError("shift", "reschedule by a shift or to a time (at), one of them")
    if when is not None:
        return {"at_ms": round(when.timestamp() * 1000)}
    assert shift is not None
    if abs(shift * SHIFT_UNITS_MS[unit]) > MAX_SHIFT_MS:
        limit = MAX_SHIFT_MS // SHIFT_UNITS_MS[unit]
        raise InvalidArgumentError(
            "shift", f"shift must be within ±{limit:,} {_UNIT_WORDS[unit]}s, got {shift:,}"
        )
    return {"shift": shift, "unit": unit}


def _moving(form: BulkForm) -> dict[str, Any]:
    return {"at": form.at(), "shift_ms": form.shift_ms()}


def _jobs(state: ListState, n: int) -> str:
    s = "" if n == 1 else "s"
    return f"dead letter{s}" if state is ListState.DEAD else f"{state.value} job{s}"


def _ask(
    request: Request,
    topic: str,
    found: BulkAction,
    form: BulkForm,
    outcome: BulkOutcome,
    count: int,
    ticked: list[str] | None,
) -> Response:
    """The confirmation page of a dry run that selected `count` jobs (or, none, the page
    that says so)."""
    state, verb = form.state, _VERB[found]
    which = "" if ticked is None else "ticked "
    where = "" if ticked is not None else form.matching()
    back = f"{_topic_path(topic)}/jobs?{urlencode(form.kept())}"
    there = "there" if state is ListState.DEAD else state.value
    gone = ""
    if ticked is not None and count < len(set(ticked)):
        n, of = len(set(ticked)) - count, len(set(ticked))
        gone = f" {n:,} of the {of:,} ticked {'is' if n == 1 else 'are'} no longer {there}."
    if not count or outcome.selection is None:
        if ticked is not None:
            said = f"None of the {len(set(ticked)):,} ticked is {there} any more."
        else:
            said = f"No {_jobs(state, 2)}{where} now."
        title = f"Nothing to {verb}{' now' * (found is BulkAction.RUN_NOW)}"
        return render(request, "bulk.html", title=title, said=said, back=home(request) + back)
    title = f"{verb.capitalize()} {count:,} {which}{_jobs(state, count)}{where}"
    if found is BulkAction.RUN_NOW:
        title += " now"
    elif found is BulkAction.RESCHEDULE:
        title += " " + form.target()
    does = _DOES.get(found) or (
        f"Each becomes due at {utc(form.at_ms)}."
        if form.at_ms is not None
        else f"Each moves {form.target()} from its own due time."
    )
    ttl_min = SELECTION_TTL_MS // 60_000
    what = (
        f"{does}{gone} These {count:,} of topic {topic} were counted just now: confirm "
        f"within {ttl_min} minutes. One that leaves its state meanwhile is left alone, and "
        f"counted; one that enters it is not taken. Up to {BULK_SLICE:,} are acted on at a "
        "time: a page then says how many remain, with a button to go on."
    )
    fields = [("selection", outcome.selection), *form.move(), *form.kept().items()]
    action = f"{_topic_path(topic)}/jobs/bulk/{found.value}"
    return confirmation_page(request, Confirmation(f"{title}?", what, action, fields, back))


async def _act(
    request: Request,
    svc: WebService,
    topic: str,
    found: BulkAction,
    form: BulkForm,
    selection: str,
    before: tuple[int, int, int],
) -> Response:
    """Act on `selection`, `BULK_SLICE` jobs at most: the page to go on, or back to the
    list saying what was done (`before`: acted, changed, skipped by the requests before)."""
    outcome = await svc.admin.bulk(
        topic, found.value, selection=selection, max_jobs=BULK_SLICE, **_moving(form)
    )
    acted, changed, skipped = (
        before[0] + outcome.acted,
        before[1] + outcome.changed,
        before[2] + outcome.skipped,
    )
    if outcome.remaining and outcome.selection is not None:
        said = (
            f"Acted on {acted:,} of {outcome.matched:,}; {changed:,} had changed; "
            f"{outcome.remaining:,} remain."
        )
        if skipped:
            said += f" {skipped:,} could not be acted on and stay as they were."
        counts = [("acted", str(acted)), ("changed", str(changed)), ("skipped", str(skipped))]
        fields = [
            ("selection", outcome.selection),
            ("confirm", "1"),
            *form.move(),
            *form.kept().items(),
            *counts,
        ]
        root = home(request)
        return render(
            request,
            "bulk.html",
            title=f"{_VERB[found].capitalize()} {_jobs(form.state, 2)}: "
            f"{outcome.remaining:,} remain",
            said=said,
            back=f"{root}{_topic_path(topic)}/jobs?{urlencode(form.kept())}",
            go=f"{root}{_topic_path(topic)}/jobs/bulk/{found.value}",
            fields=fields,
        )
    done = f"{_DONE[found]} {acted}" + f" changed {changed}" * bool(changed)
    done += f" skipped {skipped}" * bool(skipped)
    path = f"{_topic_path(topic)}/jobs"
    return back_to(request, path, done, **form.kept())
