"""The dashboard at ``/ui``: server-rendered pages over the API's client and token guard
and ``wheelq top``'s observations (`wheelq.web.ui_data`); every page reads without
JavaScript, and there is none.

Pages: ``/ui`` (topics), ``/ui/topics/{t}`` (shards with their leaders, consumer groups,
rates, a job lookup), ``/ui/topics/{t}/jobs/{id}`` and ``/ui/topics/{t}/dead`` (dead
letters, with forms that POST to ``.../dead/replay`` and ``.../dead/purge`` and come back
to the list with a flash message in its query string). ``/`` leads to ``/ui``.

A browser logs in with HTTP Basic auth (the token as password), so a page answers 401
with a Basic challenge, which makes the browser ask. A browser also sends those
credentials with any request to the site, whoever's page made it: so a form is accepted
only when its Origin (or Referer) names this site (CSRF), and pages may not be framed.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import quote, urlencode, urlsplit

import jinja2
from fastapi import APIRouter, Form, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles

from wheelq.core.history import JobState
from wheelq.errors import InvalidArgumentError, RedisUnavailableError
from wheelq.web import api_topics, ui_data
from wheelq.web.api_jobs import service
from wheelq.web.problems import ProblemError
from wheelq.web.service import WebService

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
CHALLENGE = {"WWW-Authenticate": 'Basic realm="wheelq"'}


def static_files() -> StaticFiles:
    return StaticFiles(directory=STATIC)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,  # a misspelt name fails the page, not blanks it
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        num=ui_data.number,
        rate=ui_data.per_second,
        ms=ui_data.millis,
        age=ui_data.age,
        utc=ui_data.utc,
        first_line=ui_data.first_line,
        excerpt=lambda payload: ui_data.as_json(payload, ui_data.EXCERPT_CHARS),
        seg=lambda text: quote(str(text), safe=""),
    )
    return env


ENV = _environment()


def _ui(request: Request) -> str:
    """Where the dashboard is (under the app's root path, behind a proxy that sets one)."""
    return str(request.scope.get("root_path", "")) + "/ui"


def _page(
    request: Request,
    template: str,
    status: int = 200,
    headers: dict[str, str] | None = None,
    **context: Any,
) -> Response:
    context = {"ui": _ui(request), "refresh": None, "flash": None} | context
    html = ENV.get_template(template).render(context)
    return HTMLResponse(html, status, headers=HEADERS | (headers or {}))


def _error(
    request: Request, status: int, title: str, detail: str, headers: dict[str, str] | None = None
) -> Response:
    return _page(request, "error.html", status, headers, code=status, title=title, detail=detail)


def _problem_page(request: Request, problem: ProblemError) -> Response:
    headers = CHALLENGE if problem.status == 401 else problem.headers
    return _error(request, problem.status, problem.title, problem.detail, headers)


def error_page(request: Request, problem: ProblemError) -> Response | None:
    """An error on one of the dashboard's paths that its routes did not answer (a bug, a
    path no route takes), as its error page; None on other paths (`problems.install`)."""
    home, path = _ui(request), request.url.path
    if path != home and not path.startswith(home + "/"):
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
    return RedirectResponse(_ui(request), 307)


Limit = Annotated[int | None, Query(ge=1, le=1000, description="page size")]
Refresh = Annotated[int | None, Query(ge=2, le=3600, description="reload every so many s")]
After = Annotated[str | None, Query(max_length=100)]


def _frames(request: Request) -> ui_data.Frames:
    """The app's recent observations (the rates' other end), made on first use."""
    state = request.app.state
    if not hasattr(state, "ui_frames"):
        state.ui_frames = ui_data.Frames()
    frames: ui_data.Frames = state.ui_frames
    return frames


async def _shards(svc: WebService, topic: str) -> int:
    shards = (await svc.client.topics()).get(topic)
    if shards is None:
        raise ProblemError(404, "not-found", "Not found", f"no topic {topic!r}")
    return shards


@router.get("")
async def topics_page(
    request: Request, after: After = None, limit: Limit = None, refresh: Refresh = None
) -> Response:
    svc = service(request)
    rows, after_next, total = await api_topics.topics_page(request, after, limit)
    now_ms = svc.clock.now_ms()
    topics = await ui_data.summaries(svc.client.executor, _frames(request), dict(rows), now_ms)
    return _page(
        request,
        "topics.html",
        topics=topics,
        count=total,
        after=after,
        limit=limit,
        next=after_next,
        refresh=refresh,
        now_ms=now_ms,
    )


@router.get("/topics/{topic}")
async def topic_page(topic: str, request: Request, refresh: Refresh = None) -> Response:
    svc = service(request)
    svc.guard.check(request, "read", topic)
    shards = await _shards(svc, topic)
    now_ms = svc.clock.now_ms()
    view = await ui_data.topic_view(svc.client.executor, _frames(request), topic, shards, now_ms)
    return _page(request, "topic.html", view=view, refresh=refresh)


@router.get("/topics/{topic}/job")
async def lookup(
    topic: str,
    request: Request,
    job_id: Annotated[str, Query(alias="id", min_length=1, max_length=1000)],
) -> Response:
    """The lookup form's target: on to the job's own page (an address to share)."""
    service(request).guard.check(request, "read", topic)
    where = f"/topics/{quote(topic, safe='')}/jobs/{quote(job_id, safe='')}"
    return RedirectResponse(_ui(request) + where, 303)


@router.get("/topics/{topic}/jobs/{job_id:path}")
async def job_page(topic: str, job_id: str, request: Request) -> Response:
    svc = service(request)
    svc.guard.check(request, "read", topic)
    await _shards(svc, topic)
    info = await svc.client.get(topic, job_id)
    if info.state is JobState.UNKNOWN:
        return _page(request, "job.html", 404, topic=topic, job_id=job_id, info=None)
    payload = ui_data.as_json(info.payload, MAX_PAYLOAD_CHARS, indent=True)
    return _page(request, "job.html", topic=topic, job_id=job_id, info=info, payload=payload)


@router.get("/topics/{topic}/dead")
async def dead_page(
    topic: str,
    request: Request,
    after: After = None,
    limit: Limit = None,
    done: Annotated[str | None, Query(max_length=40)] = None,
) -> Response:
    svc = service(request)
    svc.guard.check(request, "read", topic)
    await _shards(svc, topic)
    page = limit or svc.settings.page_limit
    letters = await svc.client.dead_letters(topic, page, after=after)
    stats = await svc.client.stats(topic)
    return _page(
        request,
        "dead.html",
        topic=topic,
        letters=letters,
        total=0 if stats is None else stats.dead,
        after=after,
        limit=limit,
        next=letters[-1].ref if len(letters) == page else None,
        flash=ui_data.flash(done),
    )


Refs = Annotated[list[str] | None, Form(max_length=1000)]
Flag = Annotated[str | None, Form(max_length=10)]


@router.post("/topics/{topic}/dead/{action}")
async def dead_form(
    topic: str,
    action: Literal["replay", "purge"],
    request: Request,
    ref: Refs = None,
    every: Annotated[str | None, Form(alias="all", max_length=10)] = None,
    confirm: Flag = None,
    after: Annotated[str | None, Form(max_length=100)] = None,
    limit: Annotated[int | None, Form(ge=1, le=1000)] = None,
) -> Response:
    """Replay or purge the given dead letters (or all: a purge of all must be confirmed),
    then back to the page the form was on, saying how many."""
    svc = _writer(request, topic)
    await _shards(svc, topic)
    if bool(ref) == bool(every):
        detail = "give ref (one or more) or all=1, not both"
        raise ProblemError(422, "invalid-argument", "Invalid argument", detail)
    refs = None if every else ref
    if action == "replay":
        done = f"replayed {await svc.client.replay(topic, refs)}"
    elif refs is None and not confirm:
        detail = "tick the box to purge every dead letter"
        raise ProblemError(422, "invalid-argument", "Not confirmed", detail)
    else:
        done = f"purged {await svc.client.purge_dead(topic, refs)}"
    query = {"after": after, "limit": limit, "done": done}
    where = f"{_ui(request)}/topics/{topic}/dead?" + urlencode(
        {k: v for k, v in query.items() if v}
    )
    return RedirectResponse(where, 303)


def _writer(request: Request, topic: str) -> WebService:
    """The service, once the form is known to come from this site and the token may write."""
    host = (request.headers.get("host") or "").lower()
    source = request.headers.get("origin") or request.headers.get("referer")
    if not host or source is None or urlsplit(source).netloc.lower() != host:
        raise ProblemError(
            403,
            "cross-origin",
            "Forbidden",
            "the dashboard's forms are accepted only from its own pages (the request's "
            "Origin or Referer must name this host)",
        )
    svc = service(request)
    svc.guard.check(request, "write", topic)
    return svc
