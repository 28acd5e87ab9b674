"""The ASGI app: `create_app(service)` over a `wheelq.web.service.WebService`, which
mounts the API, the health endpoints and ``/metrics`` (`wheelq.web.health`) and the
dashboard on one FastAPI app whose lifespan starts and stops the service; and the
`Gatekeeper` in front of them."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import fastapi_offline
from fastapi import Depends, FastAPI, Request, Response
from fastapi.openapi.docs import get_redoc_html
from fastapi.responses import HTMLResponse
from fastapi_offline import FastAPIOffline
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from wheelq.web import (
    api_events,
    api_flows,
    api_jobs,
    api_processes,
    api_pull,
    api_schedules,
    api_topics,
    health,
    problems,
    ui,
    ui_actions,
    ui_bulk,
    ui_job_lists,
    ui_processes,
)
from wheelq.web.problems import problem_response
from wheelq.web.service import WebService, known_topic

DESCRIPTION = """\
Delayed jobs on Redis that fire on time, over HTTP: enqueue with a delay or an absolute
time, look jobs up, cancel and reschedule them, pull due jobs as a consumer group, have
them POSTed to a callback URL when due, and list, replay or purge dead letters. Errors are
`application/problem+json` (RFC 9457) naming the field at fault."""


REDOC_JS_PATH = "/docs/redoc.standalone.js"
REDOC_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"
"""The one thing ReDoc's bundle fetches from another host: the logo of its side bar."""
NO_IMAGE = "data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg'/%3E"


@functools.cache
def offline_redoc() -> bytes:
    """fastapi-offline's ReDoc bundle with its logo's URL made an empty inline image, so
    /redoc asks nothing of another host (docs/guides/http-service.md)."""
    bundle = Path(fastapi_offline.__file__).with_name("static") / "redoc.standalone.js"
    return bundle.read_bytes().replace(REDOC_LOGO.encode(), NO_IMAGE.encode())


def create_app(service: WebService) -> FastAPI:
    """The app over `service`, which its lifespan starts and stops."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await service.start()
        try:
            yield
        finally:
            await service.stop()

    # /docs and /redoc load their scripts and styles from the service, not from a CDN, so
    # they render on a host without internet access; no online validator badge either.
    app = FastAPIOffline(
        title="wheelq",
        version=_version(),
        description=DESCRIPTION,
        lifespan=lifespan,
        responses=problems.RESPONSES,
        static_url="/docs/static",
        redoc_url=None,  # served below: its bundle's one request to another host taken out
        swagger_ui_parameters={"validatorUrl": None},
        dependencies=[Depends(known_topic)],  # 404 for an unknown topic, on every route
    )
    app.state.service = service

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_redoc_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}{REDOC_JS_PATH}",
            with_google_fonts=False,
            redoc_favicon_url=f"{root}/docs/static/favicon.png",
        )

    @app.get(REDOC_JS_PATH, include_in_schema=False)
    async def redoc_js() -> Response:
        return Response(offline_redoc(), media_type="text/javascript")

    problems.install(app, page=ui.error_page)
    routers = (
        api_jobs,
        api_flows,
        api_topics,
        api_schedules,
        api_pull,
        api_events,
        api_processes,
    )
    for api in routers:
        app.include_router(api.router)
    app.include_router(api_flows.topic_router)
    app.include_router(ui.router)
    app.include_router(ui_job_lists.router)
    app.include_router(ui_processes.router)
    app.include_router(ui_actions.router)
    app.include_router(ui_bulk.router)
    app.include_router(ui.front)

    app.include_router(health.router(service))

    app.add_middleware(Gatekeeper, service=service, page=ui.error_page)
    return app


class Gatekeeper:
    """Pure ASGI middleware, before any body is read: checks the ``Host`` and the token
    (421, 401, 403: `wheelq.web.auth.Guard.admit`), that an API body is sent as JSON (415),
    and refuses bodies over ``max_body_bytes`` (413, before reading more of them) and API
    bodies nested too deep (422, `problems.deep_body_problem`); then takes JSON enqueues
    (`api_jobs.fast_enqueue`, which checks its body's depth the same way) and counts answers
    by route and status for ``/metrics``."""

    def __init__(self, app: ASGIApp, service: WebService, page: problems.Page) -> None:
        self.app = app
        self._service = service
        self._page = page
        self._max = service.settings.max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            self._service.guard.admit(scope)
            if scope["path"].startswith("/v1/"):
                media = problems.media_problem(scope["method"], dict(scope["headers"]))
                if media is not None:
                    raise media
        except problems.ProblemError as refused:
            await problems.send_problem(scope, send, refused, self._page)
            self._count(scope, refused.status)
            return
        length = _content_length(scope)
        fast = api_jobs.topic_of(scope)
        if fast is not None and length is not None and length <= self._max:
            topic, batch = fast
            status = await api_jobs.fast_enqueue(self._service, topic, batch, scope, receive, send)
            route = api_jobs.BATCH_ROUTE if batch else api_jobs.ROUTE
            self._count(scope, status, route)
            return
        if length is not None and length > self._max:
            await self._too_large(scope, send)
            self._count(scope, 413)
            return
        api = scope["path"].startswith("/v1/")
        if scope["method"] in ("POST", "PUT", "PATCH", "DELETE") and (length is None or api):
            # Chunked (no length given), or an API body: read it here, up to the limit.
            body = await _read_up_to(receive, self._max)
            if body is None:
                await self._too_large(scope, send)
                self._count(scope, 413)
                return
            deep = problems.deep_body_problem(body) if api else None
            if deep is not None:
                await problems.send_problem(scope, send, deep, self._page)
                self._count(scope, deep.status)
                return
            receive = _replay(body, receive)
        status = 500

        async def counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, counted)
        finally:
            self._count(scope, status)

    def _count(self, scope: Scope, status: int, route: str | None = None) -> None:
        path: str = route or getattr(scope.get("route"), "path", None) or "(none)"
        key = (path, status)
        requests = self._service.requests
        requests[key] = requests.get(key, 0) + 1

    async def _too_large(self, scope: Scope, send: Send) -> None:
        response = problem_response(
            None,
            413,
            "too-large",
            "Request body too large",
            f"the body must be at most {self._max} bytes (max_body_bytes)",
        )
        await response(scope, problems.disconnected, send)


async def _read_up_to(receive: Receive, limit: int) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, then: Receive) -> Receive:
    """A receive that hands out `body` (read already), then what `then` receives (the
    client's disconnect)."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return await then()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _version() -> str:
    try:
        return version("wheelq")
    except PackageNotFoundError:
        return "0"
