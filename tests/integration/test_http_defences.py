"""The HTTP service under attack (issue 31), through uvicorn on a loopback port: a request is
checked for its ``Host`` and token before its body is read, on every route; a body not sent
as JSON is 415; numbers JSON cannot carry are refused; the OpenAPI document and the server
agree on ids and integers; and a Redis with no free connection is a 503 with Retry-After,
never a 500."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any
from urllib.parse import quote

import pytest

from tests.support.clients import admin_of
from tests.support.waiting import until
from tests.support.web import Served, serving
from wheelq import AsyncAdmin
from wheelq.core.settings import ServeSettings
from wheelq.web.app import create_app
from wheelq.web.auth import READS, Token

PROBLEM = "application/problem+json"
WRITE = "w" * 24
READ_OTHER = "r" * 24
"""A token that reads topics named other-* only."""
BODIES = [b'{"broken', b'{"unknown": [1], "jobs": "no", "receipts": 3}']
"""Bodies no route takes: not JSON, and JSON of the wrong shape."""
UI = [
    ("GET", "/ui"),
    ("GET", "/ui/topics/{topic}"),
    ("GET", "/ui/topics/{topic}/dead?limit=0"),
    ("POST", "/ui/topics/{topic}/dead/replay"),
    ("POST", "/ui/topics/{topic}/dead/purge"),
    ("POST", "/ui/topics/{topic}/job/cancel"),
    ("POST", "/ui/topics/{topic}/job/move"),
    ("POST", "/ui/topics/{topic}/pause"),
    ("POST", "/ui/topics/{topic}/resume"),
    ("POST", "/ui/topics/{topic}/groups/delete"),
    ("POST", "/ui/topics/{topic}/drop"),
    ("GET", "/ui/topics/{topic}/schedules"),
    ("POST", "/ui/topics/{topic}/schedules/delete"),
    ("GET", "/metrics"),
]
OPEN = {"/healthz", "/readyz"}
VALID_JSON = b'{"payload": 1, "receipts": ["x"], "refs": ["0/1-1"], "delay_ms": 0}'
"""Valid JSON, and what some route takes."""


async def operations(api: Served, topic: str) -> list[tuple[str, str, bool]]:
    """(method, path, has a body?) of every operation of the served OpenAPI document, its
    path parameters filled in and bad query parameters added, then the dashboard's."""
    _, doc, _ = await api.call("GET", "/openapi.json")
    out = []
    for path, item in doc["paths"].items():
        if path in OPEN:
            continue
        for method, op in item.items():
            filled = path.format(topic=topic, job_id="j/1", group="g", name="s1")
            query = "?limit=0&ref=bad&after=%00" if method == "get" else "?ref=bad"
            out.append((method.upper(), filled + query, "requestBody" in op))
    assert len(out) >= 15, out  # every operation of the API
    return out + [(m, p.format(topic=topic), m == "POST") for m, p in UI]


@pytest.fixture
async def guarded(redis_url: str) -> AsyncIterator[Served]:
    tokens = (Token(WRITE), Token(READ_OTHER, "read", ("other-*",)))
    async with serving(redis_url, tokens=tokens) as served:
        yield served


def chunked(body: bytes) -> AsyncIterator[bytes]:
    """`body` sent without a Content-Length (never the fast path)."""

    async def chunks() -> AsyncIterator[bytes]:
        yield body

    return chunks()


async def send(
    api: Served, method: str, path: str, body: bytes | None, headers: dict[str, str]
) -> tuple[int, str, dict[str, str]]:
    async with api.http.request(method, api.base + path, data=body, headers=headers) as r:
        return r.status, await r.text(), dict(r.headers)


# --- 7: auth before parsing ------------------------------------------------------------------


@pytest.mark.parametrize("body", BODIES, ids=["not-json", "wrong-shape"])
@pytest.mark.parametrize(
    ("authorization", "status"),
    [(None, 401), ("Bearer nope-nope-nope-nope", 401), (f"Bearer {READ_OTHER}", 403)],
    ids=["no-token", "unknown-token", "token-of-other-topics"],
)
async def test_every_route_checks_the_token_before_it_reads_the_body(
    guarded: Served, topic: str, body: bytes, authorization: str | None, status: int
) -> None:
    refused = []
    for method, path, has_body in await operations(guarded, topic):
        if status == 403 and topic not in path:
            continue  # a read of no topic (the topic list, /metrics): any token may
        headers = {"Content-Type": "application/json"}
        if authorization is not None:
            headers["Authorization"] = authorization
        got, text, answer = await send(
            guarded, method, path, body if has_body or method != "GET" else None, headers
        )
        if got != status:
            refused.append((method, path, got, text[:120]))
        elif status == 401:
            assert "WWW-Authenticate" in answer, (method, path)
    assert not refused, refused


# --- 8: a body not sent as JSON --------------------------------------------------------------


@pytest.mark.parametrize("by_chunks", [False, True], ids=["length", "chunked"])
async def test_every_body_not_sent_as_json_is_415_naming_the_type(
    guarded: Served, topic: str, by_chunks: bool
) -> None:
    wrong = []
    for method, path, has_body in await operations(guarded, topic):
        if not has_body or path.startswith("/ui"):
            continue
        data: Any = chunked(VALID_JSON) if by_chunks else VALID_JSON
        headers = {"Content-Type": "text/plain", "Authorization": f"Bearer {WRITE}"}
        async with guarded.http.request(
            method, guarded.base + path.partition("?")[0], data=data, headers=headers
        ) as r:
            text = await r.text()
            if r.status != 415 or "Content-Type: application/json" not in text:
                wrong.append((method, path, r.status, text[:120]))
            elif not r.headers["Content-Type"].startswith(PROBLEM):
                wrong.append((method, path, r.headers["Content-Type"]))
    assert not wrong, wrong


# --- 9: the Host header ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "status"),
    [
        ("rebound.example", 421),
        ("rebound.example:{port}", 421),
        ("127.0.0.1.nip.io:{port}", 421),
        ("127.0.0.1:1", 421),  # our address, another port
        ("127.0.0.1:{port}", 200),
        ("localhost:{port}", 200),
        ("LocalHost.:{port}", 200),
        ("[::1]:{port}", 200),  # loopback, bound on loopback
        ("api.internal:{port}", 200),  # configured
        ("api.internal", 200),
    ],
)
async def test_only_the_services_own_hosts_are_answered_in_open_mode(
    redis_url: str, topic: str, host: str, status: int
) -> None:
    async with serving(redis_url, allowed_hosts=("api.internal",)) as api:
        port = api.base.rsplit(":", 1)[1]
        headers = {"Host": host.format(port=port)}
        job = json.dumps({"payload": 1}).encode()
        json_headers = headers | {"Content-Type": "application/json"}
        answers = {
            "topics": (await send(api, "GET", "/v1/topics", None, headers))[0],
            "enqueue (fast path)": (
                await send(api, "POST", f"/v1/topics/{topic}/jobs", job, json_headers)
            )[0],
            "dashboard": (await send(api, "GET", "/ui", None, headers))[0],
            "metrics": (await send(api, "GET", "/metrics", None, headers))[0],
        }
        expected = {"enqueue (fast path)": 201 if status == 200 else status}
        assert answers == {k: expected.get(k, status) for k in answers}
        if status == 421:
            _, text, answer = await send(api, "GET", "/v1/topics", None, headers)
            assert answer["Content-Type"].startswith(PROBLEM)
            assert "allowed_hosts" in json.loads(text)["detail"]
            # A rebinding page's form passes the dashboard's origin check no more.
            form = {"Origin": f"http://{headers['Host']}"} | headers
            path = f"/ui/topics/{topic}/dead/purge"
            assert (await send(api, "POST", path, b"all=1&confirm=1", form))[0] == 421


# --- 10: numbers JSON cannot carry -----------------------------------------------------------


@pytest.mark.parametrize("route", ["fast path", "FastAPI route"])
@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/jobs", b'{"payload": NaN}', "payload"),
        ("/jobs", b'{"payload": Infinity}', "payload"),
        ("/jobs", b'{"payload": -Infinity}', "payload"),
        ("/jobs", b'{"payload": 1e400}', "payload"),
        ("/jobs", b'{"payload": {"a": [1, {"b": -1e999}]}}', "payload"),
        ("/jobs", b'{"payload": 1, "delay_ms": NaN}', "delay_ms"),
        ("/jobs", b'{"payload": 1, "at": 1e400}', "at"),
        ("/jobs/batch", b'{"jobs": [{"payload": 1}, {"payload": [NaN]}]}', "jobs[1].payload"),
    ],
)
async def test_numbers_json_cannot_carry_are_422_naming_the_field(
    redis_url: str, topic: str, path: str, body: bytes, field: str, route: str
) -> None:
    # No Content-Length: the gatekeeper leaves it to the FastAPI route.
    data: Any = chunked(body) if route == "FastAPI route" else body
    async with serving(redis_url) as api:
        url = f"{api.base}/v1/topics/{topic}{path}"
        async with api.http.post(url, data=data, headers={"Content-Type": "application/json"}) as r:
            problem = await r.json(content_type=None)
            assert (r.status, problem.get("field")) == (422, field), problem
            assert r.headers["Content-Type"].startswith(PROBLEM)
        status, _, _ = await api.call("GET", f"/v1/topics/{topic}")
        assert status == 404  # nothing written: not even the topic


# --- 11: the OpenAPI document and the server agree -------------------------------------------


async def test_the_id_pattern_admits_exactly_the_ids_the_server_takes(
    redis_url: str, topic: str
) -> None:
    async with AsyncAdmin.from_url(redis_url) as admin:
        await admin.create_topic(topic)  # an unknown topic is 404 before the id is looked at
    async with serving(redis_url) as api:
        _, doc, _ = await api.call("GET", "/openapi.json")
        params = doc["paths"]["/v1/topics/{topic}/jobs/{job_id}"]["get"]["parameters"]
        pattern = re.compile(next(p for p in params if p["name"] == "job_id")["schema"]["pattern"])
        for text in ["a", "a b", "é", "😀", "\x85", "\u200b", "\u2028", "\ue000", "\x7f", "a\tb"]:
            said = pattern.fullmatch(text) is not None
            assert said == text.isprintable(), repr(text)
            status, problem, _ = await api.call("GET", f"/v1/topics/{topic}/jobs/{quote(text)}")
            assert status == (404 if said else 422), (repr(text), problem)


@pytest.mark.parametrize("route", ["fast path", "FastAPI route"])
async def test_integers_written_with_a_fraction_of_zero_are_integers(
    redis_url: str, topic: str, route: str
) -> None:
    async with serving(redis_url) as api:
        body = json.dumps({"payload": 1, "delay_ms": 300000.0, "max_attempts": 3.0}).encode()
        data: Any = chunked(body) if route == "FastAPI route" else body
        url = f"{api.base}/v1/topics/{topic}/jobs"
        async with api.http.post(url, data=data, headers={"Content-Type": "application/json"}) as r:
            created = await r.json(content_type=None)
            assert r.status == 201, created
        status, job, _ = await api.call("GET", f"/v1/topics/{topic}/jobs/{created['id']}")
        assert (status, job["max_attempts"]) == (200, 3)
        moved = await api.call(
            "PATCH", f"/v1/topics/{topic}/jobs/{created['id']}", {"delay_ms": 5e3}
        )
        assert moved[0] == 200, moved
        half = await api.call("POST", f"/v1/topics/{topic}/jobs", {"payload": 1, "delay_ms": 0.5})
        assert (half[0], half[1]["field"]) == (422, "delay_ms")


# --- 3: no free connection to Redis ----------------------------------------------------------


async def test_a_pool_with_no_free_connection_is_503_with_retry_after_on_every_route(
    redis_url: str, topic: str
) -> None:
    async with serving(redis_url, redis_options={"max_connections": 4}, breaker_open_ms=0) as api:
        assert (await api.call("POST", f"/v1/topics/{topic}/jobs", {"payload": 1}))[0] == 201
        pool = api.service.client.executor.client.connection_pool
        held = []
        try:
            while True:  # take every connection the pool would lend
                held.append(await pool.get_connection())
        except Exception as exc:
            assert type(exc).__name__ == "MaxConnectionsError", exc
        try:
            job = json.dumps({"payload": 1}).encode()
            calls = [
                ("POST", f"/v1/topics/{topic}/jobs", job),  # the fast path
                ("POST", f"/v1/topics/{topic}/jobs/batch", b'{"jobs": [{"payload": 1}]}'),
                ("GET", f"/v1/topics/{topic}/jobs/x", None),
                ("GET", f"/v1/topics/{topic}/jobs/x/result", None),  # a look: the API's pool
                ("DELETE", f"/v1/topics/{topic}/jobs/x", None),
                ("GET", f"/v1/topics/{topic}", None),
                ("GET", "/v1/topics", None),
                ("GET", f"/v1/topics/{topic}/dead", None),
                ("POST", f"/v1/topics/{topic}/groups/g/pull", b"{}"),
                ("GET", "/readyz", None),
            ]
            answers = {}
            for method, path, body in calls:
                status, _, headers = await send(
                    api, method, path, body, {"Content-Type": "application/json"}
                )
                answers[(method, path)] = (
                    status,
                    headers.get("Retry-After"),
                    headers["Content-Type"].split(";")[0],
                )
            assert set(answers.values()) == {(503, "1", PROBLEM)}, answers
        finally:
            for connection in held:
                await pool.release(connection)
        assert (await api.call("GET", "/readyz"))[0] == 200


# --- 11: long-polls of results are bounded ---------------------------------------------------


async def test_long_polls_of_results_past_their_pool_are_503_and_never_take_the_apis(
    redis_url: str, topic: str
) -> None:
    settings = ServeSettings(pull_connections=2)
    async with serving(redis_url, settings=settings, redis_options={"max_connections": 4}) as api:
        later = {"payload": 1, "delay_ms": 60_000}
        job = (await api.call("POST", f"/v1/topics/{topic}/jobs", later))[1]["id"]
        await api.call("POST", f"/v1/topics/{topic}/groups", {"name": "default"})
        path = f"/v1/topics/{topic}/jobs/{job}/result?wait_ms=20000"
        polls = [asyncio.create_task(api.call("GET", path)) for _ in range(2)]
        await until(lambda: api.service.results.in_use == 2, what="both polls waiting")
        flood = [await api.call("GET", path) for _ in range(6)]
        assert {
            (s, h.get("Retry-After"), h["Content-Type"].split(";")[0]) for s, _, h in flood
        } == {(503, "1", PROBLEM)}, flood
        for _ in range(10):  # the API's own 4 connections are all free for the rest
            assert (await api.call("GET", f"/v1/topics/{topic}/jobs/{job}"))[0] == 200
        api.service.closing()  # a stopping service: the waits answer with what they have
        answers = await asyncio.wait_for(asyncio.gather(*polls), 5)
        assert [(s, b["state"]) for s, b, _ in answers] == [(202, "pending")] * 2


# --- issue 43 item 5: cross-site requests ----------------------------------------------------

FORMS: list[tuple[str, dict[str, str], bytes | None]] = [
    ("no body", {}, None),
    ("form", {"Content-Type": "application/x-www-form-urlencoded"}, b"confirm=1&force=1"),
    ("multipart", {"Content-Type": "multipart/form-data; boundary=b"}, b"--b--\r\n"),
    ("text", {"Content-Type": "text/plain"}, b'{"payload": 1}'),
    ("json", {"Content-Type": "application/json"}, b'{"payload": 1}'),
]
"""Bodies a cross-site page can send (the first four without asking: no preflight)."""


def cross_site_spellings(base: str) -> list[tuple[str, dict[str, str]]]:
    """Headers of a browser's request from another site, each another spelling of `base`
    (the service's own origin, ``http://127.0.0.1:PORT``) or a foreign one."""
    port = int(base.rsplit(":", 1)[1])
    named = {"Host": f"localhost:{port}"}  # an accepted name of the service, to spell it
    return [
        ("other site", {"Origin": "https://evil.example"}),
        ("null", {"Origin": "null"}),
        ("other scheme", {"Origin": f"https://127.0.0.1:{port}"}),
        ("other port", {"Origin": f"http://127.0.0.1:{port + 1}"}),
        ("no port", {"Origin": "http://127.0.0.1"}),
        ("upper case", {**named, "Origin": f"http://LOCALHOST:{port}"}),
        ("trailing dot", {**named, "Origin": f"http://localhost.:{port}"}),
        ("other name", {**named, "Origin": base}),
        ("user info", {"Origin": f"http://user@127.0.0.1:{port}"}),
        ("host as user info", {"Origin": f"{base}@evil.example"}),
        ("host as prefix", {"Origin": f"{base}.evil.example"}),
        ("with a path", {"Origin": f"{base}/ui"}),
        ("fetch cross-site", {"Sec-Fetch-Site": "cross-site"}),
        ("fetch same-site", {"Sec-Fetch-Site": "same-site"}),
        ("fetch cross-site, own origin", {"Sec-Fetch-Site": "cross-site", "Origin": base}),
    ]


def every_route(routes: Iterable[Any]) -> Iterator[Any]:
    """The routes of a route table, those of included routers too (FastAPI >= 0.165 keeps an
    included router whole; older ones copy its routes)."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        yield from [route] if inner is None else every_route(inner.routes)


def state_changing_routes(api: Served, topic: str) -> list[tuple[str, str]]:
    """(method, path) of every route of the app that is not a read, from its route table
    (a new route is covered without a change here), path parameters filled in."""
    filled = {"topic": topic, "job_id": "j1", "group": "g", "name": "s1", "action": "run"}
    out = []
    for route in every_route(create_app(api.service).routes):
        for method in sorted(set(getattr(route, "methods", None) or ()) - READS):
            path = re.sub(r"\{(\w+)(?::\w+)?\}", lambda m: filled.get(m[1], "x"), route.path)
            out.append((method, path))
    assert len(out) >= 25, out
    return out


@pytest.fixture
async def api(redis_url: str) -> AsyncIterator[Served]:
    async with serving(redis_url) as served:
        yield served


async def test_cross_site_requests_change_nothing_on_any_route(api: Served, topic: str) -> None:
    client = api.service.client
    admin = admin_of(client)
    await client.enqueue(topic, 1, job_id="j1", delay=3600)
    await admin.create_group(topic, "g")
    await admin.schedule("s1", topic, 1, every_ms=3_600_000)
    routes = state_changing_routes(api, topic)
    paths = {p for _, p in routes}
    for needed in (f"{topic}/pause", f"{topic}/resume", "s1/pause", "s1/resume"):
        assert any(p.endswith(needed) for p in paths), (needed, paths)
    assert any(p.startswith("/ui/") for p in paths), paths
    routes += [("POST", f"/v1/topics/{topic}/{verb}?group=g") for verb in ("pause", "resume")]
    wrong = []
    for method, path in routes:
        for attack, headers in cross_site_spellings(api.base):
            for kind, form, body in FORMS:
                sent = {**headers, **form}
                got, text, _ = await send(api, method, path, body, sent)
                if got != 403 or "client that is not a browser" not in text:
                    wrong.append((method, path, attack, kind, got, text[:100]))
    assert not wrong, wrong[:20]
    assert not (await admin.paused(topic)).paused
    assert [g.paused_since_ms for g in await admin.groups(topic) or []] == [None]
    assert not (await admin.get_schedule("s1", topic)).paused  # type: ignore[union-attr]
    assert (await client.get(topic, "j1")).state.value == "pending"
    # The service's own pages, and clients that are not browsers, still change things.
    named = f"localhost:{api.base.rsplit(':', 1)[1]}"
    own = [
        {},
        {"Origin": api.base},
        {"Origin": api.base, "Sec-Fetch-Site": "same-origin"},
        {"Sec-Fetch-Site": "none"},
        {"Host": named, "Origin": f"http://{named}"},
    ]
    for headers in own:
        for verb in ("pause", "resume"):
            got, text, _ = await send(api, "POST", f"/v1/topics/{topic}/{verb}", None, headers)
            assert got == 200, (verb, headers, text)
    form = await send(api, "POST", f"/ui/topics/{topic}/pause", None, {"Origin": api.base})
    assert form[0] == 200, form  # the topic's page, after the redirect
    assert (await admin.paused(topic)).paused
