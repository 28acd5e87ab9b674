"""The dashboard's bulk actions: a job list's ticked rows, or every row its filter
matches, cancelled, run now, rescheduled, replayed or purged (`bulk_form`). Each goes
through a dry run whose count a confirmation page states; confirmed, it acts on that
selection 10,000 jobs a request, with a page to go on while any remain. Accepted as every
dashboard action is (`wheelq.web.ui_actions.topic_writer`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, Form, Request
from fastapi.responses import Response

from wheelq.core.bulk_actions import SELECTION_TTL_MS, BulkAction, BulkOutcome, bulk_action
from wheelq.core.due import MAX_SHIFT_MS
from wheelq.core.job_list import ListState, list_state
from wheelq.errors import InvalidArgumentError
from wheelq.web.api_jobs import BULK_SLICE
from wheelq.web.problems import ProblemError
from wheelq.web.service import WebService
from wheelq.web.ui import PageRoute, home, render, utc
from wheelq.web.ui_actions import (
    Confirm,
    Confirmation,
    Group,
    back_to,
    confirmation_page,
    topic_path,
    topic_writer,
)
from wheelq.web.ui_job_lists import form_time

router = APIRouter(prefix="/ui", include_in_schema=False, route_class=PageRoute)

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
    key: str | None = None
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
            "key": self.key,
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
        if self.key:
            parts.append(f"of key {self.key}")
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
    key: Annotated[str | None, Form(max_length=256)] = None,
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
        key or None,
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
            key=form.key,
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
    back = f"{topic_path(topic)}/jobs?{urlencode(form.kept())}"
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
    action = f"{topic_path(topic)}/jobs/bulk/{found.value}"
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
            back=f"{root}{topic_path(topic)}/jobs?{urlencode(form.kept())}",
            go=f"{root}{topic_path(topic)}/jobs/bulk/{found.value}",
            fields=fields,
        )
    done = f"{_DONE[found]} {acted}" + f" changed {changed}" * bool(changed)
    done += f" skipped {skipped}" * bool(skipped)
    path = f"{topic_path(topic)}/jobs"
    return back_to(request, path, done, **form.kept())
