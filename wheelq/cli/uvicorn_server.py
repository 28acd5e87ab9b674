"""uvicorn's server as `wheelq serve` runs it: Redis first, then the socket; a clean stop.

It waits for Redis before it listens, as a scheduler node or a worker does (the service's
`StartGate`, up to ``[serve] start_timeout_ms``): a Redis that never answers ends `run()`
with the gate's error, which the CLI prints on one line (exit 1), instead of uvicorn's
traceback and exit 3 after it had already said it was serving. Imported only by
``wheelq serve``, so the other commands run without the ``http`` extra.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from types import FrameType

import uvicorn

from wheelq.runtime.outage import wait_for_either
from wheelq.web.service import WebService


class Server(uvicorn.Server):
    """uvicorn's server over `service` (the app's lifespan then finds it started).

    A SIGTERM/SIGINT while it waits for Redis ends the wait (exit 0, nothing started); once
    serving, a stop on either ends with status 0 (uvicorn raises the signal again once
    stopped), and a second signal of either kind hurries the stop, as for the other
    commands. Requests that wait (long-poll pulls) answer as soon as the stop begins.

    Args:
        config: uvicorn's settings (the app, host, port, logging).
        service: What the app serves; started here, stopped by the app's lifespan.
        listening: Called with the bound port once the socket listens.
    """

    def __init__(
        self, config: uvicorn.Config, service: WebService, listening: Callable[[int], None]
    ) -> None:
        super().__init__(config)
        self._service = service
        self._listening = listening
        self._signalled: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        with self.capture_signals():  # ours while Redis is waited for, then uvicorn's
            if await self._start_service():
                await super().serve(sockets)

    async def _start_service(self) -> bool:
        """Start the service (wait for Redis); False when a signal ended the wait."""
        self._loop = asyncio.get_running_loop()
        self._signalled = asyncio.Event()
        starting = asyncio.ensure_future(self._service.start())
        await wait_for_either(starting, self._signalled, None)
        if not starting.done():
            await self._service.stop()  # ends the wait; the start returns having done nothing
        await starting  # raises why Redis was not reached
        return self._service.started

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            (listener, *_) = self.servers
            self._listening(listener.sockets[0].getsockname()[1])

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # uvicorn waits for the requests under way before the app's lifespan ends: end the
        # waiting ones (long-poll pulls, up to 30 s) first, or a stop would wait them out.
        self._service.closing()
        await super().shutdown(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.should_exit:
            self.force_exit = True
        self.should_exit = True
        if self._loop is not None and self._signalled is not None:
            # A signal handler runs between bytecodes: hand the wake-up to the loop.
            self._loop.call_soon_threadsafe(self._signalled.set)
