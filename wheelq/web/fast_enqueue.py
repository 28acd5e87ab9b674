"""``POST /v1/topics/{topic}/jobs`` (and ``.../jobs/batch``) straight from ASGI: the
requests sent thousands of times a second.

FastAPI's per-request machinery (a Request object, dependency solving, the body parsed
into a model, the exception middleware) cost twice what the enqueue itself costs. This
path does the same steps with the same parts, the same model (`JobIn`), problems and
coalesced enqueue, without it; the FastAPI route stays for the OpenAPI document, and for
a request this path leaves to it (a chunked body). The gatekeeper in front of both has
checked the ``Host``, the token and the Content-Type already (`wheelq.web.app`).
"""

from __future__ import annotations

import json
import re
from urllib.parse import quote

from pydantic import ValidationError
from starlette.types import Receive, Scope, Send

from wheelq.web.api_jobs import batch_results, checked_item, delivering, due_ms
from wheelq.web.models import BatchIn, JobIn
from wheelq.web.problems import ProblemError, is_json, problem_of, validation_problem
from wheelq.web.service import WebService

ROUTE = "/v1/topics/{topic}/jobs"
BATCH_ROUTE = "/v1/topics/{topic}/jobs/batch"
_PATH = re.compile(r"/v1/topics/([A-Za-z0-9_.\-]{1,100})/jobs(/batch)?")


def topic_of(scope: Scope) -> tuple[str, bool] | None:
    """(topic, batch?) when `scope` is a JSON enqueue this path takes, else None."""
    if scope["method"] != "POST":
        return None
    found = _PATH.fullmatch(scope["path"])
    if found is None:
        return None
    for name, value in scope["headers"]:
        if name == b"content-type":
            if is_json(value.decode("latin-1")):
                return found[1], found[2] is not None
            return None
    return None


async def enqueue(
    service: WebService, topic: str, batch: bool, scope: Scope, receive: Receive, send: Send
) -> int:
    """Answer the enqueue (one job, or a batch); returns the status sent."""
    headers = [(b"content-type", b"application/json")]
    try:
        status, body, location = await _answer(service, topic, batch, scope, receive)
        if location is not None:
            headers.append((b"location", location.encode("latin-1")))
    except Exception as exc:
        problem = problem_of(exc)
        if problem is None:
            raise
        response = problem.response(scope["path"])
        status, body = problem.status, bytes(response.body)
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers.items()]
    if not any(name == b"content-length" for name, _ in headers):
        headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
    return status


async def _answer(
    service: WebService, topic: str, batch: bool, scope: Scope, receive: Receive
) -> tuple[int, bytes, str | None]:
    """(status, JSON body, Location) of a request that went well; raises otherwise."""
    body = await _body(receive)
    try:
        if batch:
            results = await batch_results(service, topic, BatchIn.model_validate_json(body))
            return 200, _json({"results": results}), None
        job = JobIn.model_validate_json(body)
    except ValidationError as exc:
        raise validation_problem(exc.errors()) from None
    item = checked_item(service, topic, job)
    job_id = await service.coalescer.enqueue(topic, item)
    delivering(service, topic, [item])
    answer = {"id": job_id, "topic": topic, "due_ms": due_ms(service, item)}
    return 201, _json(answer), f"/v1/topics/{topic}/jobs/{quote(job_id, safe='')}"


def _json(value: object) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


async def _body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise ProblemError(400, "http", "Bad request", "the client went away")
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)
