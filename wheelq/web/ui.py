"""The dashboard at ``/ui``: server-rendered pages over the API's client and token guard,
and what they show, read with ``wheelq top``'s bounded observation (`wheelq.store.observe`,
meaning what `wheelq.core.observe` says); every page reads without JavaScript, and there is
none.

Pages: ``/ui`` (topics), ``/ui/topics/{t}`` (shards with their leaders, consumer groups,
rates, a job lookup), ``/ui/topics/{t}/jobs/{id}``,
``/ui/topics/{t}/dead`` (dead letters, filtered by reason and group) and
``/ui/topics/{t}/schedules``; the job lists are `wheelq.web.ui_job_lists`' and the
processes `wheelq.web.ui_processes`'. Their forms POST
to `wheelq.web.ui_actions` (a job list's bulk actions to `wheelq.web.ui_bulk`), which
comes back to a page with ``?done=``, a code `flash` turns into a message. ``/`` leads to ``/ui``.

A browser logs in with HTTP Basic auth (the token as password), so a page answers 401
with a Basic challenge, which makes the browser ask. A browser also sends those
credentials with any request to the site, whoever's page made it: so a form is accepted
only when its Origin (or Referer) names this site (CSRF), and pages may not be framed.

A rate needs two observations, and a page is one request: `Frames` keeps what recent page
views read (at most one frame a second per topic, for a minute), and a page's rates are
taken over the span back to the oldest of them; the first view has none.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import mimetypes
import re
import shlex
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import quote, urlencode

import jinja2
from fastapi import APIRouter, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.routing import APIRoute
from markupsafe import Markup

from wheelq.core.due import utc_text
from wheelq.core.history import JobInfo, JobState, payload_gone
from wheelq.core.payload import payload_text
from wheelq.core.retry import Reason, error_line, error_summary
from wheelq.errors import (
    InvalidArgumentError,
    NoFlowError,
    RedisUnavailableError,
    SelectionGoneError,
    UnknownJobError,
    UnknownTopicError,
)
from wheelq.web import api_topics
from wheelq.web.charts import RANGES, Chart, svg
from wheelq.web.problems import ProblemError, problem_of
from wheelq.web.service import WebService, service
from wheelq.web.ui_topics import Frames, summaries, topic_view

HERE = Path(__file__).parent
STATIC = HERE / "static"
MAX_PAYLOAD_CHARS = 100_000
"""A job page shows this much of a payload's JSON."""
HEADERS = {
    # No script may run at all: the pages have none, so an injection could not either.
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
ICON_CACHE = {"Cache-Control": "public, max-age=86400"}
CHALLENGE = {"WWW-Authenticate": 'Basic realm="wheelq"'}


# --- how values read -----------------------------------------------------------------------

EXCERPT_CHARS = 120
"""A dead letter's payload shows this much of its JSON in the list."""
NOTHING = "\N{EN DASH}"
"""What a value that is not there (or not known yet) reads as."""


def number(value: int | None) -> str:
    return NOTHING if value is None else f"{value:,}"


def per_second(value: float | None) -> str:
    if value is None:
        return NOTHING
    return f"{value:,.1f}" if value < 10 else f"{value:,.0f}"


def millis(value: float | None) -> str:
    if value is None or math.isnan(value):
        return NOTHING
    return f"{value:,.0f} ms"


def age(ms: int | None) -> str:
    if ms is None:
        return NOTHING
    if ms < 1000:
        return f"{ms} ms"
    return f"{ms / 1000:.1f} s" if ms < 10_000 else f"{ms / 1000:,.0f} s"


def age_at(ms: int | None, now_ms: int) -> str:
    """How long before `now_ms` `ms` was (never negative: clocks differ a little)."""
    return age(None if ms is None else max(0, now_ms - ms))


def utc(ms: int | None) -> str:
    """Redis-clock ms as UTC ISO 8601 to the millisecond (any int: `utc_text`)."""
    return utc_text(ms, NOTHING)


def first_line(text: str | None) -> str:
    """A recorded error's one-line summary (`wheelq.core.retry.error_line`)."""
    return error_line(text)


DONE = {
    "cancelled": "Cancelled the job: it will not run.",
    "not-cancelled": "Not cancelled: the job has fired already, or nothing is pending of it.",
    "moved": "Moved the job: it is due at the time shown.",
    "not-moved": "Not moved: the job has fired already, or nothing is pending of it.",
    "run": "The job is due now: it fires within a moment.",
    "paused": "Paused: no new jobs start; running ones finish, and firing goes on.",
    "resumed": "Resumed: jobs that waited start now.",
    "group-deleted": "Deleted the consumer group.",
    "dropped": "Dropped the topic and all its keys.",
    "schedule-paused": "Paused the schedule: it writes no runs, and those written ahead are gone.",
    "schedule-resumed": "Resumed the schedule: it runs again from now on.",
    "schedule-deleted": "Deleted the schedule and the runs it had written ahead.",
    "schedule-gone": "No such schedule: it was deleted meanwhile.",
}
"""What a dashboard action did, by the code its redirect carries in ``?done=``."""
_COUNTED = re.compile(
    r"(replayed|purged|cancelled|run-now|rescheduled) (\d{1,9})"
    r"(?: changed (\d{1,9}))?(?: skipped (\d{1,9}))?"
)
_SAID = {
    "replayed": ("Replayed", "dead letter", ""),
    "purged": ("Purged", "dead letter", ""),
    "cancelled": ("Cancelled", "job", ""),
    "run-now": ("Made", "job", " due now: they fire within a moment"),
    "rescheduled": ("Rescheduled", "job", ""),
}
"""A counted code's verb, noun and what follows the count."""


def flash(done: str | None) -> str | None:
    """The message for an action's ``done`` (from a fixed set, or a counted code such as
    ``cancelled 1229 changed 5``: the query is never echoed)."""
    if done in DONE:
        return DONE[done]
    found = _COUNTED.fullmatch(done or "")
    if found is None:
        return None
    verb, noun, after = _SAID[found[1]]
    n = int(found[2])
    said = f"{verb} {n:,} {noun}{'' if n == 1 else 's'}{after}"
    if found[3]:
        changed = int(found[3])
        said += (
            f"; {changed:,} had changed state and {'was' if changed == 1 else 'were'} left alone"
        )
    said += "."
    if found[4]:
        skipped = int(found[4])
        s = "s" if skipped == 1 else ""
        if found[1] == "replayed":
            said += (
                f" {skipped:,} cannot be replayed (malformed, nested past 100 levels, or held "
                f"back by the topic's max_ready) and stay{s}."
            )
        else:
            said += f" {skipped:,} could not be acted on and stay{s} as before."
    return said


@dataclass(frozen=True, slots=True)
class Asset:
    """A static file of the console, as read when the module loaded."""

    body: bytes
    media_type: str
    etag: str


def read_assets(directory: Path) -> dict[str, Asset]:
    """Every file of `directory` (not its subfolders), read now."""
    assets = {}
    for path in sorted(directory.iterdir()):
        if path.is_file():
            body = path.read_bytes()
            media_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
            etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
            assets[path.name] = Asset(body, media_type, etag)
    return assets


def read_templates(directory: Path) -> dict[str, str]:
    """Every template of `directory`, read now."""
    return {p.name: p.read_text("utf-8") for p in sorted(directory.glob("*.html"))}


# The console's files are read once, as the process starts: a page never reads the disk, so
# an upgrade in place (a pip install under the running service) cannot break one.
ASSETS = read_assets(STATIC)
TEMPLATES = read_templates(HERE / "templates")


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.DictLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,  # a misspelt name fails the page, not blanks it
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        num=number,
        rate=per_second,
        ms=millis,
        age=age,
        age_at=age_at,
        utc=utc,
        first_line=first_line,
        error_summary=error_summary,
        excerpt=lambda payload: payload_text(payload, EXCERPT_CHARS),
        seg=lambda text: quote(str(text), safe=""),
        sh=lambda text: shlex.quote(str(text)),  # a name in a command to paste
    )
    return env


ENV = _environment()


def home(request: Request) -> str:
    """Where the dashboard is (under the app's root path, behind a proxy that sets one)."""
    return str(request.scope.get("root_path", "")) + "/ui"


def render(
    request: Request,
    template: str,
    status: int = 200,
    headers: dict[str, str] | None = None,
    **context: Any,
) -> Response:
    context = {"ui": home(request), "refresh": None, "flash": None} | context
    html = ENV.get_template(template).render(context)
    return HTMLResponse(html, status, headers=HEADERS | (headers or {}))


def _error(
    request: Request, status: int, title: str, detail: str, headers: dict[str, str] | None = None
) -> Response:
    return render(request, "error.html", status, headers, code=status, title=title, detail=detail)


def _problem_page(request: Request, problem: ProblemError) -> Response:
    headers = CHALLENGE if problem.status == 401 else problem.headers
    return _error(request, problem.status, problem.title, problem.detail, headers)


def error_page(request: Request, problem: ProblemError) -> Response | None:
    """An error on one of the dashboard's paths that its routes did not answer (a bug, a
    path no route takes), as its error page; None on other paths (`problems.install`)."""
    root, path = home(request), request.url.path
    if path != root and not path.startswith(root + "/"):
        return None
    return _problem_page(request, problem)


class PageRoute(APIRoute):
    """A dashboard route: its errors answer as pages, which a browser shows, rather than
    the API's problem JSON."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            try:
                return await handler(request)
            except ProblemError as exc:
                return _problem_page(request, exc)
            except RequestValidationError as exc:
                detail = "; ".join(
                    f"{'.'.join(map(str, e['loc'][1:]))}: {e['msg']}" for e in exc.errors()
                )
                return _error(request, 422, "Invalid argument", detail)
            except (UnknownTopicError, UnknownJobError, SelectionGoneError) as exc:  # as the API
                problem = problem_of(exc)
                assert problem is not None
                return _problem_page(request, problem)
            except InvalidArgumentError as exc:
                return _error(request, 422, "Invalid argument", str(exc))
            except RedisUnavailableError as exc:
                return _error(request, 503, "Redis is unavailable", str(exc), {"Retry-After": "1"})

        return handle


router = APIRouter(prefix="/ui", include_in_schema=False, route_class=PageRoute)
front = APIRouter(include_in_schema=False)
"""``/``: the service's front page is the dashboard."""


@front.get("/")
async def front_page(request: Request) -> Response:
    return RedirectResponse(home(request), 307)


@front.api_route("/ui/static/{name}", methods=["GET", "HEAD"])
async def static_file(request: Request, name: str) -> Response:
    """A file of `ASSETS` (read at start), with its ETag; 304 when the client has it."""
    return _asset(request, name)


@front.api_route("/favicon.ico", methods=["GET", "HEAD"])
async def favicon(request: Request) -> Response:
    """The icon a browser asks the site for (the pages link the same file)."""
    return _asset(request, "favicon.ico", ICON_CACHE)


def _asset(request: Request, name: str, cache: Mapping[str, str] | None = None) -> Response:
    asset = ASSETS.get(name)
    if asset is None:
        return Response("Not Found", 404, media_type="text/plain")
    headers = {"ETag": asset.etag, **(cache or {})}
    if request.headers.get("if-none-match") == asset.etag:
        return Response(status_code=304, headers=headers)
    return Response(asset.body, media_type=asset.media_type, headers=headers)


Limit = Annotated[int | None, Query(ge=1, le=1000, description="page size")]
Refresh = Annotated[int | None, Query(ge=2, le=3600, description="reload every so many s")]
After = Annotated[str | None, Query(max_length=100)]


def _frames(request: Request) -> Frames:
    """The app's recent observations (the rates' other end), made on first use."""
    state = request.app.state
    if not hasattr(state, "ui_frames"):
        state.ui_frames = Frames()
    frames: Frames = state.ui_frames
    return frames


async def shards_of(svc: WebService, topic: str) -> int:
    shards = (await svc.admin.topics()).get(topic)
    if shards is None:
        raise ProblemError(404, "not-found", "Not found", f"no topic {topic!r}")
    return shards


Done = Annotated[str | None, Query(max_length=80, description="what an action did")]
Range = Annotated[
    Literal["15m", "1h", "6h", "24h"], Query(alias="range", description="the charts' range")
]


@dataclass(frozen=True, slots=True)
class ChartsView:
    """A page's charts over its range, drawn, and where their data came from."""

    range: str
    ranges: tuple[str, ...]
    charts: list[tuple[Chart, Markup]]
    source: str


async def charts_view(svc: WebService, topic: str | None, range_: str) -> ChartsView:
    end_ms = svc.clock.now_ms()
    start_ms = end_ms - RANGES[range_]
    since = svc.charts.since_ms
    if since is not None and since > start_ms:  # samples begin later: chart what there is
        start_ms = min(since, end_ms - 60_000)
    found = await svc.charts.charts(topic, start_ms, end_ms)
    if svc.prometheus is not None:
        source = f"from Prometheus ({svc.prometheus.url})"
    elif svc.charts.since_ms is None:
        source = "from this service's own samples: none yet (the first is taken within 15 s)"
    else:
        source = (
            f"from this service's own samples (every 15 to 30 s per topic), since "
            f"{utc(svc.charts.since_ms)}; set [serve] prometheus_url for longer history"
        )
    drawn = [(c, Markup(svg(c))) for c in found]  # noqa: S704 (svg escapes what it draws)
    return ChartsView(range_, tuple(RANGES), drawn, source)


MAX_CHILDREN_SHOWN = 200
"""A flow's children its parent's page lists at most (the rest counted)."""
MAX_TIED_SHOWN = 20
"""The jobs following a job its page shows at most, each with its state (the rest counted)."""


@router.get("")
async def topics_page(
    request: Request,
    after: After = None,
    limit: Limit = None,
    refresh: Refresh = None,
    done: Done = None,
    range_: Range = "1h",
) -> Response:
    svc = service(request)
    rows, after_next, total = await api_topics.topics_page(request, after, limit)
    now_ms = svc.clock.now_ms()
    topics = await summaries(svc.client.executor, _frames(request), dict(rows), now_ms)
    return render(
        request,
        "topics.html",
        topics=topics,
        unled=svc.unled.unled,
        count=total,
        after=after,
        limit=limit,
        next=after_next,
        refresh=refresh,
        now_ms=now_ms,
        flash=flash(done),
        charts=await charts_view(svc, None, range_),
    )


@router.get("/topics/{topic}")
async def topic_page(
    topic: str, request: Request, refresh: Refresh = None, done: Done = None, range_: Range = "1h"
) -> Response:
    svc = service(request)
    svc.guard.check(request, "read", topic)
    shards = await shards_of(svc, topic)
    now_ms = svc.clock.now_ms()
    view = await topic_view(svc.client.executor, _frames(request), topic, shards, now_ms)
    charts = await charts_view(svc, topic, range_)
    schedules = await svc.admin.schedules(topic)  # those declared in code marked periodic
    return render(
        request, "topic.html", view=view, refresh=refresh, flash=flash(done), charts=charts,
        schedules=schedules,
    )  # fmt: skip


@router.get("/topics/{topic}/job")
async def lookup(
    topic: str,
    request: Request,
    job_id: Annotated[str, Query(alias="id", min_length=1, max_length=1000)],
) -> Response:
    """The lookup form's target: on to the job's own page (an address to share)."""
    service(request).guard.check(request, "read", topic)
    where = f"/topics/{quote(topic, safe='')}/jobs/{quote(job_id, safe='')}"
    return RedirectResponse(home(request) + where, 303)


@router.get("/topics/{topic}/jobs/{job_id:path}")
async def job_page(topic: str, job_id: str, request: Request, done: Done = None) -> Response:
    svc = service(request)
    svc.guard.check(request, "read", topic)
    await shards_of(svc, topic)
    info = await svc.client.get(topic, job_id)
    if info.state is JobState.UNKNOWN:
        return render(request, "job.html", 404, topic=topic, job_id=job_id, info=None)
    payload = payload_text(info.payload, MAX_PAYLOAD_CHARS, indent=True)
    children: list[JobInfo] = []
    if info.children:  # a flow's parent: its children, in the order given
        with contextlib.suppress(NoFlowError):  # its list expired since get() read it
            children = await svc.client.children(topic, job_id, limit=MAX_CHILDREN_SHOWN + 1)
    tied = [info.after, info.parent, *info.continuations[:MAX_TIED_SHOWN]]
    found = await asyncio.gather(*(svc.client.get(r.topic, r.job_id) for r in tied if r))
    return render(
        request,
        "job.html",
        topic=topic,
        job_id=job_id,
        info=info,
        payload=payload,
        gone=payload_gone(info),
        flash=flash(done),
        children=children[:MAX_CHILDREN_SHOWN],
        more_children=max(0, len(children) - MAX_CHILDREN_SHOWN),
        tied={(j.topic, j.id): j for j in found},
        continuations=info.continuations[:MAX_TIED_SHOWN],
        more_continuations=max(0, len(info.continuations) - MAX_TIED_SHOWN),
    )


@router.get("/topics/{topic}/schedules")
async def schedules_page(topic: str, request: Request, done: Done = None) -> Response:
    svc = service(request)
    svc.guard.check(request, "read", topic)
    await shards_of(svc, topic)
    found = await svc.admin.schedules(topic)
    return render(
        request,
        "schedules.html",
        topic=topic,
        schedules=found,
        now_ms=svc.clock.now_ms(),
        flash=flash(done),
    )


REASONS = tuple(r.value for r in Reason)


@router.get("/topics/{topic}/dead")
async def dead_page(
    topic: str,
    request: Request,
    after: After = None,
    limit: Limit = None,
    reason: Annotated[str | None, Query(max_length=20)] = None,
    group: Annotated[str | None, Query(max_length=200)] = None,
    done: Done = None,
) -> Response:
    svc = service(request)
    svc.guard.check(request, "read", topic)
    await shards_of(svc, topic)
    page = limit or svc.settings.page_limit
    reason, group = reason or None, group or None  # the filter form sends "" for any
    letters = await svc.admin.dead_letters(topic, page, after=after, reason=reason, group=group)
    stats = await svc.admin.stats(topic)
    groups = await svc.admin.groups(topic) or []
    return render(
        request,
        "dead.html",
        topic=topic,
        letters=letters,
        total=0 if stats is None else stats.dead,
        after=after,
        limit=limit,
        next=letters.next,
        flash=flash(done),
        reason=reason,
        group=group,
        reasons=REASONS,
        groups=sorted({g.name for g in groups}),
        filter_query=urlencode({k: v for k, v in (("reason", reason), ("group", group)) if v}),
    )
