"""uvicorn's server as `wheelq serve` runs it: Redis first, then the socket; a clean stop;
deadlines for slow clients, which uvicorn lacks (`guarded_protocol`).
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable
from types import FrameType
from typing import Any, cast

import uvicorn
from uvicorn.protocols.http.auto import AutoHTTPProtocol

from wheelq.core.settings import ServeSettings
from wheelq.runtime.outage import wait_for_either
from wheelq.web.service import WebService


def raw_problem(
    status: int, reason: str, slug: str, title: str, detail: str, extra: bytes = b""
) -> bytes:
    """A whole HTTP/1.1 answer carrying a problem document, written on the socket itself
    where uvicorn answers before the app sees a request; it closes the connection."""
    body = json.dumps(
        {"type": f"urn:wheelq:problem:{slug}", "title": title, "status": status, "detail": detail}
    ).encode()
    return (
        b"HTTP/1.1 %d %s\r\ncontent-type: application/problem+json\r\n%s"
        b"connection: close\r\ncontent-length: %d\r\n\r\n%s"
        % (status, reason.encode(), extra, len(body), body)
    )


FULL_RESPONSE = raw_problem(
    503,
    "Service Unavailable",
    "too-many-connections",
    "Too many connections",
    "the service holds its most open connections (max_connections); try again",
    b"retry-after: 1\r\n",
)  # a connection past ``max_connections``
MALFORMED_RESPONSE = raw_problem(
    400,
    "Bad Request",
    "malformed-request",
    "Malformed request",
    "the request is not valid HTTP/1.1 (its request line, a header or its framing)",
)  # what the HTTP parser refused: uvicorn's own answer is text/plain


def config(app: Any, host: str, settings: ServeSettings, log_level: str) -> uvicorn.Config:
    """uvicorn's settings for `app` on `host`, with the slow-client limits."""
    return uvicorn.Config(
        app,
        host=host,
        port=settings.port,
        http=guarded_protocol(settings),
        timeout_keep_alive=settings.keep_alive_timeout_ms / 1000,  # type: ignore[arg-type]
        log_level=log_level,
        access_log=False,
        lifespan="on",
        server_header=False,
    )


def guarded_protocol(settings: ServeSettings) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol with ``header_timeout_ms`` / ``body_timeout_ms`` deadlines,
    a 503 for a connection past ``max_connections``, and a problem document (not uvicorn's
    text/plain) for a request its parser refuses."""
    header_s = settings.header_timeout_ms / 1000
    body_s = settings.body_timeout_ms / 1000
    most = settings.max_connections
    base = cast(Any, AutoHTTPProtocol)

    class Guarded(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._deadline: asyncio.TimerHandle | None = None
            self._awaiting: Any = None  # the cycle whose body has a deadline
            self._refused = False  # past max_connections

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            self._arm(header_s)
            if len(self.connections) > most:
                self._refused = True
                sending = cast(asyncio.Transport, transport)
                sending.write(FULL_RESPONSE)
                # Half-close, reading on: a close with the request unread would reset the
                # connection before the client read the answer.
                if sending.can_write_eof():
                    sending.write_eof()
                else:
                    sending.close()

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return  # its answer is sent: the rest is dropped till it goes
            before = self.cycle
            if self._deadline is None and (before is None or before.response_complete):
                self._arm(header_s)  # a request starts: its headers are due
            super().data_received(data)
            cycle = self.cycle
            if cycle is not before and cycle is not None:  # its headers are in
                self._disarm()
                if cycle.more_body:
                    self._awaiting = cycle
                    self._arm(body_s)
            elif self._awaiting is not None and not self._awaiting.more_body:
                self._disarm()

        def send_400_response(self, msg: str) -> None:
            """The parser refused the request: a problem document, as every answer is."""
            self.transport.write(MALFORMED_RESPONSE)
            self.transport.close()

        def on_response_complete(self) -> None:
            done = self.cycle
            super().on_response_complete()
            if self.cycle is done and not self.transport.is_closing():
                # The next request's headers are due from now: part of them may have come
                # with the last request already, and no more data would arm the deadline.
                self._arm(header_s)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self, delay_s: float) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(delay_s, self._too_slow)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None
            self._awaiting = None

        def _too_slow(self) -> None:
            self._deadline = None
            if not self.transport.is_closing():
                self.transport.close()

    return cast(type[asyncio.Protocol], Guarded)


class Server(uvicorn.Server):
    """uvicorn's server over `service`, stopped by signals as the other commands are;
    `listening` gets the bound port."""

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
