"""A TCP proxy on loopback whose connections a test can cut at once (a network fault).

async with CuttingProxy(target_port) as proxy:
    url = f"redis://127.0.0.1:{proxy.port}"
    ...
    proxy.cut()   # every open connection is closed, both sides; new ones are accepted
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
        self._writers: set[asyncio.StreamWriter] = set()
        self.cuts = 0
        self.accepted = 0

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    def cut(self) -> int:
        """Close every open connection (client and server side); returns how many."""
        writers = list(self._writers)
        for writer in writers:
            writer.transport.abort()
        self._writers.clear()
        self.cuts += 1
        return len(writers) // 2

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError, asyncio.CancelledError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.transport.abort()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        self._writers -= {writer, up_writer}

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cut()
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()
