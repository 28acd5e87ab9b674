"""A local HTTP server scripted to answer callbacks as a test says: per path, the n-th
request's status, delay, headers and body. It records every request it answered."""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web


@dataclass(frozen=True)
class Reply:
    status: int = 200
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    body: str = "ok"
    until: asyncio.Event | None = None
    """The answer waits until the test sets it (a request held open, after `delay_s`)."""


@dataclass
class Hit:
    """One request as received, and what it was answered."""

    path: str
    job_id: str
    attempt: int
    at_s: float
    """time.monotonic() when it arrived."""
    body: bytes
    headers: dict[str, str]
    status: int = 0
    """0 until answered (and for good when the client went away before the answer)."""

    @property
    def json(self) -> Any:
        return json.loads(self.body)


Script = Callable[[int], Reply]
"""The n-th request to a path (1 for the first) -> the reply."""


class ScriptedServer:
    """`scripts[path]` answers requests to `path`; unknown paths get 404."""

    def __init__(self) -> None:
        self.scripts: dict[str, Script] = {}
        self.hits: list[Hit] = []
        self._counts: dict[str, int] = defaultdict(int)
        self._runner: web.AppRunner | None = None
        self.port = 0

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        arrived = time.monotonic()
        body = await request.read()
        path = request.path
        self._counts[path] += 1
        script = self.scripts.get(path)
        reply = script(self._counts[path]) if script else Reply(404, body="no such path")
        hit = Hit(
            path,
            request.headers.get("Wheelq-Id", ""),
            int(request.headers.get("Wheelq-Attempt", "0")),
            arrived,
            body,
            dict(request.headers),
        )
        self.hits.append(hit)
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        if reply.until is not None:
            await reply.until.wait()
        hit.status = reply.status
        return web.Response(status=reply.status, text=reply.body, headers=reply.headers)

    def to(self, path: str) -> list[Hit]:
        return [h for h in self.hits if h.path == path]

    def delivered(self) -> dict[str, int]:
        """Job id -> how many of its requests were answered 2xx."""
        out: dict[str, int] = defaultdict(int)
        for h in self.hits:
            if 200 <= h.status < 300:
                out[h.job_id] += 1
        return dict(out)


def free_port() -> int:
    """A loopback port nothing listens on (for connection-refused targets)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def receiver() -> AsyncIterator[ScriptedServer]:
    """A `ScriptedServer` on a free loopback port, stopped after the test."""
    server = ScriptedServer()
    await server.start()
    yield server
    await server.stop()
