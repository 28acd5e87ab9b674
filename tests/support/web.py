"""The HTTP service on a free loopback port, in the test's event loop (uvicorn, for real),
and an aiohttp session to talk to it."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import uvicorn

from tests.support.waiting import until
from wheelq import AsyncClient
from wheelq.callbacks.delivery import Deliveries
from wheelq.core.settings import ServeSettings, WorkerSettings
from wheelq.web.app import create_app
from wheelq.web.auth import Token
from wheelq.web.service import WebService

PROBLEM = "application/problem+json"


@dataclass
class Served:
    base: str
    service: WebService
    http: aiohttp.ClientSession

    async def call(
        self, method: str, path: str, body: Any = None, **kwargs: Any
    ) -> tuple[int, Any, dict[str, str]]:
        """(status, JSON body or text or None, headers)."""
        async with self.http.request(method, self.base + path, json=body, **kwargs) as r:
            text = await r.text()
            ctype = r.headers.get("Content-Type", "")
            data: Any = text
            if "json" in ctype and text:
                data = json.loads(text)
            elif not text:
                data = None
            return r.status, data, dict(r.headers)

    async def job_rows(self, path: str) -> list[dict[str, Any]]:
        """Every row of a job list (`path`: ``/v1/topics/{t}/jobs?state=...``), page by page
        through each page's ``next``."""
        rows: list[dict[str, Any]] = []
        cursor = ""
        while True:
            status, body, _ = await self.call("GET", path + cursor)
            assert status == 200, body
            rows += body["jobs"]
            if body["next"] is None:
                return rows
            cursor = f"&cursor={body['next']}"


@contextlib.asynccontextmanager
async def serving(
    redis_url: str,
    *,
    settings: ServeSettings | None = None,
    worker_settings: WorkerSettings | None = None,
    tokens: tuple[Token, ...] = (),
    deliveries: Any = None,
    allow_private: bool = False,
    allowed_hosts: tuple[str, ...] = (),
    receipt_secret: str = "",
    prometheus_url: str = "",
    **client_settings: Any,
) -> AsyncIterator[Served]:
    client = AsyncClient.from_url(redis_url, **client_settings)
    delivery: Deliveries | None = deliveries(client) if callable(deliveries) else deliveries
    service = WebService(
        client,
        settings=settings,
        worker_settings=worker_settings,
        tokens=tokens,
        deliveries=delivery,
        allow_private=allow_private,
        allowed_hosts=allowed_hosts,
        receipt_secret=receipt_secret,
        prometheus_url=prometheus_url,
    )
    service.owns_client = True
    config = uvicorn.Config(
        create_app(service), host="127.0.0.1", port=0, log_level="warning", lifespan="on"
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        await until(lambda: server.started or task.done(), timeout_s=20, what="uvicorn")
        if task.done():
            task.result()  # raises why it did not start
        port = server.servers[0].sockets[0].getsockname()[1]
        async with aiohttp.ClientSession() as http:
            yield Served(f"http://127.0.0.1:{port}", service, http)
    finally:
        server.should_exit = True
        await task
        forget_endpoints()


def forget_endpoints() -> None:
    """Let go of the apps FastAPI's caches keep alive.

    FastAPI remembers what each endpoint is (coroutine, generator) in caches of 4,096
    entries keyed by the function. An endpoint made in a closure (ours, and the offline
    docs' pages) keeps its app alive, about 16,000 objects: the hundreds of apps the tests
    make would leave millions of objects for each full collection to walk, pauses of 1-2 s
    that stop the scheduler nodes and workers running in the same process. A service runs
    one app, so only the tests need this.
    """
    from fastapi.dependencies import models

    for name in (
        "_is_gen_callable_cached",
        "_is_async_gen_callable_cached",
        "_is_coroutine_callable_cached",
    ):
        cached = getattr(models, name, None)
        if cached is not None:
            cached.cache_clear()


def assert_problem(got: tuple[int, object, dict[str, str]], status: int, field: str | None) -> None:
    code, body, headers = got
    assert code == status, body
    assert headers["Content-Type"].startswith(PROBLEM)
    assert isinstance(body, dict)
    assert body["status"] == status and body["type"].startswith("urn:wheelq:problem:")
    assert body["title"] and body["detail"]
    if field is not None:
        assert body["field"] == field, body
        assert field.rsplit(".", 1)[-1].split("[")[0] in body["detail"] or body["errors"]
