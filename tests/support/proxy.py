"""A TCP proxy on loopback whose connections a test can cut at once (a network fault).

async with CuttingProxy(target_port) as proxy:
    url = f"redis://127.0.0.1:{proxy.port}"
    ...
    proxy.cut()   # every open connection is closed, both sides; new ones are accepted
    proxy.refusing = True   # from now on new connections are closed at once (Redis "down")

Every transport the proxy opens is tracked from the moment it exists: a client connection
whose upstream connection is still being made when `cut()` runs is closed too (its handler
is cancelled, which closes the half-made upstream socket), and leaving the ``async with``
waits until every handler has ended, so no socket outlives the proxy (an unclosed one is a
ResourceWarning, an error in this suite).
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType
from typing import Self


class CuttingProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self._target = (target_host, target_port)
        self._server: asyncio.Server | None = None
        self._transports: set[asyncio.WriteTransport] = set()
        """Both sides of every connection, the client side from its accept on."""
        self._handlers: set[asyncio.Task[None]] = set()
        self.cuts = 0
        self.accepted = 0
        self.refusing = False
        """While set, each new connection is closed as soon as it is accepted."""

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    def cut(self) -> int:
        """Close every open connection, both sides, including ones still connecting
        upstream; returns how many client connections were cut."""
        for transport in self._transports:
            transport.abort()
        self._transports.clear()
        for task in self._handlers:
            task.cancel()  # one still in open_connection() closes its socket
        self.cuts += 1
        return len(self._handlers)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.transport.abort()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refusing:
            writer.transport.abort()
            return
        self.accepted += 1
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self._transports.add(writer.transport)
        up_writer: asyncio.StreamWriter | None = None
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
            self._transports.add(up_writer.transport)
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        except (OSError, asyncio.CancelledError):
            pass  # upstream refused, or cut: the handler ends here either way
        finally:
            for side in (writer, up_writer):
                if side is not None:
                    side.transport.abort()
                    self._transports.discard(side.transport)
            self._handlers.discard(task)

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        self.cut()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()
