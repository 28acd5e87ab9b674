"""The HTTP service in a bench's own event loop: `wheelq serve`'s app (its sampler running)
on uvicorn, on a free loopback port."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import uvicorn

from wheelq import AsyncClient
from wheelq.web.app import create_app
from wheelq.web.service import WebService


@contextlib.asynccontextmanager
async def service_on_loopback(url: str) -> AsyncIterator[str]:
    """`wheelq serve`'s app (sampler running) on a free loopback port; its base URL."""
    service = WebService(AsyncClient.from_url(url))
    service.owns_client = True
    server = uvicorn.Server(
        uvicorn.Config(create_app(service), host="127.0.0.1", port=0, log_level="warning")
    )
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:  # uvicorn says when it listens; nothing to wait on but this
            if task.done():
                task.result()
            await asyncio.sleep(0.05)
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = True
        await task
