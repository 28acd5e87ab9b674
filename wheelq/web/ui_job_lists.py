"""The console's job lists, ``/ui/topics/{topic}/jobs?state=``: a tab per state, read as
`Admin.jobs` reads it, with a filter form and pages by cursor (docs/architecture.md, "Job
lists"); and `form_time`, how the console's forms spell a time."""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from wheelq.core.bulk_actions import actions_of
from wheelq.core.job_list import DUE_STATES, GROUP_STATES, ListState, list_state
from wheelq.errors import InvalidArgumentError
from wheelq.producer.operations import TopicStats
from wheelq.web.models import as_time
from wheelq.web.service import service
from wheelq.web.ui import REASONS, Done, Limit, PageRoute, flash, render, shards_of

router = APIRouter(prefix="/ui", include_in_schema=False, route_class=PageRoute)


TimeText = Annotated[str | None, Query(max_length=64)]
Cursor = Annotated[str | None, Query(max_length=4096)]


def form_time(name: str, text: str | None) -> datetime | None:
    """A time from a filter form or a hand-written address: a ``datetime-local`` value
    (``2030-01-31T09:30``, seconds and ms optional), read as UTC; an RFC 3339 time with an
    offset; or epoch ms. Empty: None. Else InvalidArgumentError naming `name`."""
    if not text:
        return None
    if text.isascii() and text.isdigit():
        return as_time(name, int(text))
    try:
        naive = datetime.fromisoformat(text).tzinfo is None
    except ValueError:
        naive = False
    if naive and "T" in text.upper():
        text += "Z"
    return as_time(name, text)


def local_value(at: datetime | None) -> str:
    """`at` as a ``datetime-local`` input's value (UTC, to the ms); "" for None."""
    if at is None:
        return ""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]


@dataclass(frozen=True, slots=True)
class JobsFilter:
    """A job list's filter as its form and its links carry it (empty strings: any)."""

    due_after: str = ""
    due_before: str = ""
    group: str = ""
    reason: str = ""
    priority: str = ""
    """Every state takes it; a bulk action's "all matching" does not (the page offers none
    while it is set)."""
    key: str = ""
    """Every state takes it (pending and retrying jobs through the key index), and a bulk
    action's "all matching" too."""

    def for_state(self, state: ListState) -> JobsFilter:
        """The parts `state` takes (a tab link keeps only those)."""
        return JobsFilter(
            self.due_after if state in DUE_STATES else "",
            self.due_before if state in DUE_STATES else "",
            self.group if state in GROUP_STATES else "",
            self.reason if state is ListState.DEAD else "",
            self.priority,
            self.key,
        )

    def bulk_items(self) -> list[tuple[str, str]]:
        """The parts a bulk action's form carries (`items` but the priority)."""
        return [(k, v) for k, v in self.items() if k != "priority"]

    def items(self) -> list[tuple[str, str]]:
        """The parts given, as (name, value)."""
        return [(k, v) for k, v in dataclasses.asdict(self).items() if v]

    def query(self) -> str:
        return urlencode(self.items())

    def __bool__(self) -> bool:
        return any(dataclasses.astuple(self))


def form_priority(text: str | None) -> int | None:
    """A priority from the filter form or an address: a digit string (empty: any); else
    InvalidArgumentError naming ``priority`` (a range check is `Admin.jobs`')."""
    if not text:
        return None
    if not (text.isascii() and text.isdigit()):
        raise InvalidArgumentError("priority", f"priority must be an int in [0, 9], got {text!r}")
    return int(text)


def tab_counts(stats: TopicStats | None) -> dict[ListState, tuple[int, str]]:
    """The tabs' counts the topic's stats hold, each with what it counts where that is
    not the list's rows (the other states' counts are not known cheaply)."""
    if stats is None:
        return {}
    return {
        ListState.PENDING: (stats.pending, "waiting, retries and awaiting jobs included"),
        ListState.READY: (
            stats.ready,
            "not yet given to the group furthest behind, or waiting on the due line",
        ),
        ListState.RUNNING: (stats.in_flight, "in flight, over every group"),
        ListState.DEAD: (stats.dead, "in all"),
    }


@router.get("/topics/{topic}/jobs")
async def jobs_page(
    topic: str,
    request: Request,
    state: Annotated[str, Query(max_length=20)] = ListState.PENDING.value,
    cursor: Cursor = None,
    limit: Limit = None,
    due_after: TimeText = None,
    due_before: TimeText = None,
    group: Annotated[str | None, Query(max_length=200)] = None,
    reason: Annotated[str | None, Query(max_length=20)] = None,
    priority: Annotated[str | None, Query(max_length=4)] = None,
    key: Annotated[str | None, Query(max_length=256)] = None,
    done: Done = None,
) -> Response:
    """A page of the topic's jobs in one state (`wheelq.core.job_list`), a tab per state,
    filtered by due range, group or reason as the state allows, and by priority and key;
    pages go on by cursor."""
    svc = service(request)
    svc.guard.check(request, "read", topic)
    listed = list_state(state)
    await shards_of(svc, topic)
    low, high = form_time("due_after", due_after), form_time("due_before", due_before)
    level = form_priority(priority)
    shown = JobsFilter(
        local_value(low), local_value(high), group or "", reason or "", priority or "", key or ""
    )
    jobs = await svc.admin.jobs(
        topic,
        listed.value,
        limit or svc.settings.page_limit,
        cursor=cursor or None,
        due_after=low,
        due_before=high,
        group=group or None,  # the filter form sends "" for any
        reason=reason or None,
        priority=level,
        key=key or None,  # the form sends "" for any
    )
    stats, groups = await asyncio.gather(svc.admin.stats(topic), svc.admin.groups(topic))
    names = sorted({g.name for g in groups or []} | ({group} if group else set()))
    return render(
        request,
        "jobs.html",
        topic=topic,
        state=listed,
        tabs=list(ListState),
        counts=tab_counts(stats),
        jobs=jobs,
        cursor=cursor or None,
        limit=limit,
        next=jobs.next,
        filter=shown,
        due_states=DUE_STATES,
        group_states=GROUP_STATES,
        groups=names,
        reasons=REASONS,
        now_ms=svc.clock.now_ms(),
        actions=[a.value for a in actions_of(listed)],
        flash=flash(done),
    )
