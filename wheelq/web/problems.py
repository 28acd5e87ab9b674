"""Errors as ``application/problem+json`` (RFC 9457), one spelling for every endpoint.

A problem names its ``type`` (``urn:wheelq:problem:<slug>``), ``title``, ``status``,
``detail`` and, for bad input, the ``field`` at fault (as the request spells it: ``id``,
``delay_ms``, ``callback.url``, ``jobs[3].at``) with ``errors`` listing every field found
wrong. Bad input never changes anything: validation runs before the first write.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from itertools import accumulate
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import Message, Scope, Send

from wheelq.core.payload import MAX_PAYLOAD_DEPTH
from wheelq.errors import (
    DuplicateJobError,
    EventsOffError,
    InvalidArgumentError,
    MalformedJobError,
    PayloadTypeError,
    RedisUnavailableError,
    SelectionGoneError,
    TopicFullError,
    UnknownJobError,
    UnknownTopicError,
    WrongTypeError,
)
from wheelq.runtime.outage import unavailable_reason

log = logging.getLogger(__name__)

MEDIA_TYPE = "application/problem+json"
RETRY_AFTER_S = "1"
"""``Retry-After`` of a 429 (topic full) or a 503 (Redis unavailable, or no free
connection to it)."""
FIELDS = {"job_id": "id", "delay": "delay_ms", "items": "jobs"}
"""The client's parameter names as the HTTP API spells them."""


class FieldError(BaseModel):
    field: str
    message: str


class Problem(BaseModel):
    """An error (RFC 9457)."""

    type: str
    title: str
    status: int
    detail: str
    instance: str | None = None
    field: str | None = None
    errors: list[FieldError] | None = None


class ProblemError(Exception):
    """Raise from an endpoint to answer with a problem."""

    def __init__(
        self,
        status: int,
        slug: str,
        title: str,
        detail: str,
        *,
        field: str | None = None,
        headers: dict[str, str] | None = None,
        errors: list[dict[str, str]] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status, self.slug, self.title, self.detail = status, slug, title, detail
        self.field = field
        self.headers = headers or {}
        self.errors = errors

    def response(self, instance: str | None) -> Response:
        return problem_response(
            instance,
            self.status,
            self.slug,
            self.title,
            self.detail,
            field=self.field,
            errors=self.errors,
            headers=self.headers,
        )


def problem_response(
    instance: Request | str | None,
    status: int,
    slug: str,
    title: str,
    detail: str,
    *,
    field: str | None = None,
    errors: list[dict[str, str]] | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    body: dict[str, Any] = {
        "type": f"urn:wheelq:problem:{slug}",
        "title": title,
        "status": status,
        "detail": detail,
    }
    if instance is not None:
        body["instance"] = instance if isinstance(instance, str) else instance.url.path
    if field is not None:
        body["field"] = field
        body["errors"] = errors or [{"field": field, "message": detail}]
    return Response(
        json.dumps(body, ensure_ascii=False), status, headers=headers, media_type=MEDIA_TYPE
    )


def http_field(parameter: str, prefix: str = "") -> str:
    """A client error's parameter as the request names it (``items[3]: ...`` keeps its
    index through `prefix`)."""
    head, dot, rest = parameter.partition(".")
    return prefix + FIELDS.get(head, head) + dot + rest


def invalid(exc: InvalidArgumentError | PayloadTypeError, prefix: str = "") -> ProblemError:
    """The 422 problem of a client error (a batch item's ``items[i]: `` becomes the field's
    ``jobs[i].``)."""
    parameter = exc.parameter if isinstance(exc, InvalidArgumentError) else "payload"
    detail = str(exc)
    item = ITEM.match(detail)
    if item is not None:
        prefix, detail = f"jobs[{item[1]}].", detail[item.end() :]
    field = http_field(parameter, prefix)
    return ProblemError(422, "invalid-argument", "Invalid argument", detail, field=field)


ITEM = re.compile(r"items\[(\d+)\]: ")
"""How the client's error names a batch item: ``items[3]: ...``."""


RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": Problem, "content": {MEDIA_TYPE: {}}, "description": text}
    for code, text in {
        400: "Malformed request (a body that is not JSON text)",
        401: "No or unknown token",
        403: "The token does not grant this",
        404: "No such topic, job or path",
        409: "Conflicts with the job's state",
        413: "Request body too large",
        415: "A body not sent as JSON (Content-Type: application/json)",
        421: "A Host header that names no address or name of this service",
        422: "Invalid argument (the field is named)",
        429: "The topic is at its max_pending (Retry-After says when to try again)",
        503: "Redis is unavailable, or no connection to it is free (Retry-After says when "
        "to try again)",
    }.items()
}
"""The problems any endpoint may answer with, for the OpenAPI document."""


def is_json(content_type: str | None) -> bool:
    """Whether a Content-Type is JSON: ``application/json`` or ``application/...+json``,
    in any case, with parameters (as FastAPI reads one)."""
    if content_type is None:
        return False
    kind = content_type.partition(";")[0].strip().lower()
    return kind == "application/json" or (
        kind.startswith("application/") and kind.endswith("+json")
    )


def media_problem(method: str, headers: Mapping[bytes, bytes]) -> ProblemError | None:
    """The 415 of an API request whose body is not sent as JSON (before it is read, and
    instead of a validation error about its fields); None when it is, or has no body."""
    sent = headers.get(b"content-type")
    has_body = headers.get(b"content-length", b"0") != b"0" or b"transfer-encoding" in headers
    if method in ("GET", "HEAD") or not has_body:
        return None
    kind = None if sent is None else sent.decode("latin-1")
    if is_json(kind):
        return None
    return ProblemError(
        415,
        "unsupported-media-type",
        "Unsupported media type",
        "the body must be JSON, sent with Content-Type: application/json "
        f"(got {'no Content-Type' if kind is None else repr(kind)})",
    )


MAX_BODY_DEPTH = MAX_PAYLOAD_DEPTH + 3
"""Most levels of lists and objects a JSON request body may nest: a payload's, inside a
batch's body, its ``jobs`` and one job. Deeper, no field can be valid."""

_STRING = rb'"(?:[^"\\]|\\.)*"'
_STRINGS = re.compile(_STRING, re.DOTALL)
_TOKENS = re.compile(_STRING + rb"|[\[\]{},]", re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = [0] * 256
for _open, _close in (b"[]", b"{}"):
    _STEP[_open], _STEP[_close] = 1, -1


def deep_body_problem(body: bytes) -> ProblemError | None:
    """The 422 of a JSON body nested past `MAX_BODY_DEPTH`, naming the field that goes too
    deep (``payload``, ``jobs[3].payload``, ``max``) and the bound; None for any other body.
    Every API route checks its body so before parsing it: whatever the depth, the answer is
    this one, never the parser's 400 or a path of hundreds of ``[0]``. Free for a body with
    fewer brackets than the bound; else one pass in C, and a scan of the body when it is too
    deep."""
    if body.count(b"[") + body.count(b"{") <= MAX_BODY_DEPTH:
        return None
    brackets = _STRINGS.sub(b"", body).translate(None, _NOT_BRACKETS)
    if max(accumulate(map(_STEP.__getitem__, brackets)), default=0) <= MAX_BODY_DEPTH:
        return None
    field = _deep_field(body)
    if field.endswith("payload"):
        detail = (
            f"{field} must nest lists and maps at most {MAX_PAYLOAD_DEPTH} levels deep, got more"
        )
    else:
        detail = (
            f"{field} nests lists and objects too deep: a request body nests at most "
            f"{MAX_BODY_DEPTH} levels"
        )
    return ProblemError(422, "invalid-argument", "Invalid argument", detail, field=field)


def _deep_field(body: bytes) -> str:
    """Where `body` first nests past `MAX_BODY_DEPTH`, as a field name: down to its first
    ``payload`` key, else its first three steps up to a key (``callback.headers.x``,
    ``max``)."""
    path: list[str | int] = []  # per open list or object: the index or the key in it
    in_object: list[bool] = []
    key_next = False
    for token in _TOKENS.finditer(body):
        t = token[0]
        if t in (b"[", b"{"):
            if len(path) == MAX_BODY_DEPTH:
                break
            in_object.append(t == b"{")
            path.append("" if t == b"{" else 0)
            key_next = t == b"{"
        elif t in (b"]", b"}"):
            if path:  # (a stray one: not JSON, and no field to name)
                path.pop(), in_object.pop()
            key_next = False
        elif t == b",":
            if in_object and not in_object[-1]:
                path[-1] = int(path[-1]) + 1
            key_next = bool(in_object) and in_object[-1]
        elif key_next:
            path[-1] = t[1:-1].decode("utf-8", "replace")
            key_next = False
    if not path or not in_object[0]:
        return "body"  # not an object: no field to name
    steps = path[: path.index("payload") + 1] if "payload" in path else path[:3]
    while isinstance(steps[-1], int):
        steps.pop()
    out = ""
    for step in steps:
        out += f"[{step}]" if isinstance(step, int) else f".{step}" if out else step
    return out


def _wrong_type(exc: BaseException) -> bool:
    """A command's WRONGTYPE reply: a key of the topic holds another type than wheelq keeps
    there (a script says so itself, `WrongTypeError`)."""
    return isinstance(exc, ResponseError) and str(exc).startswith("WRONGTYPE")


def problem_of(exc: BaseException) -> ProblemError | None:
    """The problem a known error answers with; None for anything else (a bug: 500)."""
    if isinstance(exc, ProblemError):
        return exc
    if isinstance(exc, UnknownTopicError | UnknownJobError):
        return ProblemError(404, "not-found", "Not found", str(exc), field=exc.parameter)
    if isinstance(exc, EventsOffError):
        return ProblemError(409, "events-off", "Events off", str(exc), field="topic")
    if isinstance(exc, SelectionGoneError):
        return ProblemError(410, "selection-gone", "Selection gone", str(exc), field="selection")
    if isinstance(exc, InvalidArgumentError | PayloadTypeError):
        return invalid(exc)
    if isinstance(exc, DuplicateJobError):
        field = http_field("job_id")
        detail = exc.describe(field, 'send "replace": true')
        return ProblemError(409, "duplicate", "Job exists", detail, field=field)
    if isinstance(exc, MalformedJobError):  # stored by someone else: says so, not a 500
        return ProblemError(409, "malformed", "Job cannot be decoded", str(exc))
    if isinstance(exc, WrongTypeError) or _wrong_type(exc):  # as malformed: not ours
        detail = (
            str(exc)
            if isinstance(exc, WrongTypeError)
            else (f"a key of the topic holds another type than wheelq keeps there: {exc}")
        )
        return ProblemError(409, "wrong-type", "Key of another type", detail)
    if isinstance(exc, TopicFullError):
        return ProblemError(
            429, "topic-full", "Topic full", str(exc), headers={"Retry-After": RETRY_AFTER_S}
        )
    if isinstance(exc, RedisUnavailableError) or unavailable_reason(exc) is not None:
        # A pool with no free connection (MaxConnectionsError) is unavailability too.
        return ProblemError(
            503,
            "unavailable",
            "Redis is unavailable",
            f"{type(exc).__name__}: {exc}",
            headers={"Retry-After": RETRY_AFTER_S},
        )
    return None


def validation_problem(errors: Sequence[Any]) -> ProblemError:
    """The 422 problem of pydantic's errors, each field named as the request spells it."""
    fields = [_field_error(e) for e in errors]
    first = fields[0] if fields else {"field": "body", "message": "invalid"}
    return ProblemError(
        422,
        "invalid-argument",
        "Invalid argument",
        f"{first['field']}: {first['message']}",
        field=first["field"],
        errors=fields,
    )


def _field_error(error: Any) -> dict[str, str]:
    """One pydantic error as ``{"field", "message"}``; a body nested too deep for the JSON
    parser is a payload nested too deep (nothing else in a request nests)."""
    message = str(error.get("msg", ""))
    if error.get("type") == "json_invalid" and "recursion limit" in message:
        return {
            "field": "payload",
            "message": f"payload must nest lists and maps at most {MAX_PAYLOAD_DEPTH} levels "
            f"deep, got more ({message})",
        }
    return {"field": _loc(error.get("loc", ())), "message": message}


Page = Callable[[Request, ProblemError], Response | None]
"""Renders a problem as a page on the paths that show pages (the dashboard's); None on the
others, which answer with the problem."""


def install(app: FastAPI, page: Page | None = None) -> None:
    """Answer every error with a problem, or with `page`'s rendering of it where it has one
    (an error the dashboard's routes did not catch: a bug, a path no route takes)."""

    def answer(request: Request, problem: ProblemError) -> Response:
        return _shown(request, problem, page)

    async def _known(request: Request, exc: Exception) -> Response:
        return answer(request, problem_of(exc) or _internal(request, exc))

    for known in (
        ProblemError,
        UnknownTopicError,
        UnknownJobError,
        EventsOffError,
        InvalidArgumentError,
        PayloadTypeError,
        DuplicateJobError,
        MalformedJobError,
        WrongTypeError,
        ResponseError,  # WRONGTYPE; any other is a bug, answered 500 by _known
        TopicFullError,
        RedisUnavailableError,
        RedisConnectionError,  # MaxConnectionsError (a pool with no free connection) too
        RedisTimeoutError,
    ):
        app.add_exception_handler(known, _known)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> Response:
        return answer(request, validation_problem(exc.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        slug = {404: "not-found", 405: "method-not-allowed"}.get(exc.status_code, "http")
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = ", ".join(_allowed(request))
        detail = str(exc.detail)
        return answer(request, ProblemError(exc.status_code, slug, detail, detail, headers=headers))

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> Response:
        # problem_of first: a known error that escaped the handlers above (a wrapped one)
        return answer(request, problem_of(exc) or _internal(request, exc))


def _internal(request: Request, exc: Exception) -> ProblemError:
    """A bug's 500, logged with its traceback."""
    log.exception("%s %s failed", request.method, request.url.path, exc_info=exc)
    return ProblemError(500, "internal", "Internal error", f"{type(exc).__name__}: {exc}")


async def send_problem(scope: Scope, send: Send, problem: ProblemError, page: Page | None) -> None:
    """Answer `problem` from ASGI middleware, before any route: as `install`'s handlers do."""
    await _shown(Request(scope), problem, page)(scope, disconnected, send)


def _shown(request: Request, problem: ProblemError, page: Page | None) -> Response:
    shown = None if page is None else page(request, problem)
    return problem.response(request.url.path) if shown is None else shown


async def disconnected() -> Message:
    """An ASGI receive for an answer sent without reading the body."""
    return {"type": "http.disconnect"}


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _allowed(request: Request) -> list[str]:
    """The methods this path takes: those the OpenAPI document gives its most literal path
    template (``/jobs/batch`` before ``/jobs/{job_id}``), so ``Allow`` says what the API
    documents; for a path it does not document (the console), each method tried against
    the routes as they match (FastAPI keeps included routers whole, out of `router.routes`,
    and Starlette names only the first route's)."""
    path = request.scope["path"]
    for template, methods in _documented(request.app):
        if template.fullmatch(path):
            return methods
    routes = request.app.router.routes
    return [
        method
        for method in _METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] is Match.FULL for route in routes
        )
    ]


def _documented(app: FastAPI) -> list[tuple[re.Pattern[str], list[str]]]:
    """The OpenAPI document's paths as patterns, most literal first, with their methods."""
    cached: list[tuple[re.Pattern[str], list[str]]] | None = getattr(app.state, "allow", None)
    if cached is None:
        paths: dict[str, dict[str, Any]] = app.openapi().get("paths", {})
        ordered = sorted(paths, key=lambda p: (p.count("{"), -len(p)))
        cached = [
            (
                re.compile(re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template))),
                [m for m in _METHODS if m.lower() in paths[template]],
            )
            for template in ordered
        ]
        app.state.allow = cached
    return cached


_UNION_TAGS = frozenset({"str", "int", "float", "bool", "list", "dict", "none"})


def _loc(loc: tuple[Any, ...] | list[Any]) -> str:
    """A pydantic error location as a field path: ("body", "jobs", 3, "at") -> jobs[3].at."""
    parts = list(loc)
    if parts and parts[0] in ("body", "query", "path"):
        parts = parts[1:]
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        elif p in _UNION_TAGS or "[" in str(p) or str(p).startswith("constrained-"):
            continue  # which member of a union failed: not a field
        else:
            out += ("." if out else "") + str(p)
    return out or "body"
