"""A topic that does not exist: on every route of the HTTP service that names one the same
404 problem (``no topic 'T'``) for reads and writes alike, but on the routes that create a
topic, and in the library the same `UnknownTopicError` where it has no "none" to answer
with. The routes come from the app's own route table, so a new route is covered by this
test the day it is added (issue 43: six routes answered 200 with empty or default data, and
the library an empty page, 0 or default settings)."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI

from tests.support.clients import admin_of
from tests.support.web import serving
from wheelq import AsyncAdmin, AsyncClient, Client, UnknownTopicError
from wheelq.web.app import create_app

RESULT = "/v1/topics/{topic}/jobs/{job_id:path}/result"
ANY_TOPIC = {
    *((method, RESULT) for method in ("DELETE", "PATCH", "POST", "PUT")),  # 405: only read
    ("POST", "/v1/topics/{topic}/jobs"),
    ("POST", "/v1/topics/{topic}/jobs/batch"),
    ("PUT", "/v1/topics/{topic}/limits"),
    ("PATCH", "/v1/topics/{topic}/limits"),
    ("PUT", "/v1/topics/{topic}/far"),
    ("PUT", "/v1/topics/{topic}/schedules/{name}"),
    ("POST", "/v1/topics/{topic}/events/on"),
}
"""The routes that take a topic that does not exist: those that create it (an enqueue, a
setting or a schedule for it), and the 405 of a result's writes."""

FILLS = {"job_id": "some-job", "group": "some-group", "name": "some-schedule"}
"""A value of each other path parameter (an action's: the route's first choice, below)."""


def topic_routes(app: FastAPI) -> Iterator[tuple[str, str, Any]]:
    """(method, path, route) of every route under ``{topic}``, included routers' too."""
    pending: list[Any] = list(app.routes)
    while pending:
        route = pending.pop()
        inner = getattr(route, "original_router", None)
        if inner is not None:
            pending += inner.routes
            continue
        path = getattr(route, "path", "")
        for method in sorted(getattr(route, "methods", None) or ()):
            if "{topic}" in path and method != "HEAD":
                yield method, path, route


def filled(path: str, topic: str, route: Any) -> str:
    out = path.replace("{topic}", topic).replace("{job_id:path}", FILLS["job_id"])
    for name, value in FILLS.items():
        out = out.replace("{" + name + "}", value)
    for param in getattr(route, "dependant", None).path_params if route else ():
        if "{" + param.name + "}" in out:  # an action of a form: any it takes
            choices = getattr(param.field_info.annotation, "__args__", None) or ("x",)
            out = out.replace("{" + param.name + "}", str(choices[0]))
    return out


async def test_every_route_of_an_unknown_topic_answers_the_same_404(redis_url: str) -> None:
    topic = f"nosuch-{secrets.token_hex(4)}"
    async with serving(redis_url) as api:
        routes = sorted(topic_routes(create_app(api.service)), key=lambda r: r[:2])
        assert len(routes) > 30, routes
        wrong = []
        for method, path, route in routes:
            if (method, path) in ANY_TOPIC:
                continue
            url = filled(path, topic, route)
            headers = {"Origin": api.base}  # the dashboard's forms: from its own pages
            if path.startswith("/ui/"):
                form = None if method == "GET" else {"confirm": "1"}
                got = await api.call(method, url, data=form, headers=headers)
                ok = got[0] == 404
            else:
                body = None if method in ("GET", "DELETE") else {}
                got = await api.call(method, url, body, headers=headers)
                ok = got[0] == 404 and got[1]["detail"] == f"no topic {topic!r}"
            if not ok:
                wrong.append(f"{method} {url}: {got[0]} {_said(got[1])}")
        assert not wrong, "\n".join(wrong)
    async with AsyncAdmin.from_url(redis_url) as admin:
        assert topic not in await admin.topics(), "a refused request created the topic"


def _said(answer: Any) -> str:
    text = str(answer)
    return text.partition("<title>")[2].partition("</title>")[0] or text[:160]


LIBRARY_CALLS = {
    "dead_letters": lambda c, t: admin_of(c).dead_letters(t),
    "replay": lambda c, t: admin_of(c).replay(t),
    "purge_dead": lambda c, t: admin_of(c).purge_dead(t),
    "limits": lambda c, t: admin_of(c).limits(t),
    "line": lambda c, t: admin_of(c).line(t),
    "events_config": lambda c, t: admin_of(c).events_config(t),
    "pause": lambda c, t: admin_of(c).pause(t),
    "result": lambda c, t: c.result(t, "some-job", timeout=30),
}
"""The library's calls of a topic that answer `UnknownTopicError` for an unknown one (the
others answer a "none": `stats` and `groups` None, `get` state unknown, `cancel` False)."""


@pytest.mark.parametrize("call", sorted(LIBRARY_CALLS))
async def test_the_library_raises_unknown_topic_where_http_answers_404(
    redis_url: str, call: str
) -> None:
    topic = f"nosuch-{secrets.token_hex(4)}"
    with Client.from_url(redis_url) as sync_client, pytest.raises(UnknownTopicError):
        LIBRARY_CALLS[call](sync_client, topic)
    async with AsyncClient.from_url(redis_url) as client:
        admin = AsyncAdmin.of(client)
        with pytest.raises(UnknownTopicError):
            await asyncio.wait_for(LIBRARY_CALLS[call](client, topic), 5)
        if call == "events_config":  # and following them
            with pytest.raises(UnknownTopicError):
                async with contextlib.aclosing(admin.events(topic)) as events:
                    await anext(events)
        assert topic not in await admin.topics()
