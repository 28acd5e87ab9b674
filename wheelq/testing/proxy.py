"""A TCP proxy on loopback whose connections a test can cut, stall or slow.

async with CuttingProxy(target_port) as proxy:
    url = f"redis://127.0.0.1:{proxy.port}"
    proxy.cut()   # close every connection, both sides; new ones are accepted
    proxy.refusing = True   # close new connections at once (Redis "down")
    proxy.stall()   # no byte moves until unstall()
    proxy.slow(20)   # every chunk forwarded 20 ms late (0: off)
    proxy.drop_replies = True   # requests applied, replies thrown away

`ProxyThread` runs one in a daemon thread, for code that is not async.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Self, TypeVar

from wheelq.runtime.service import Lifecycle

T = TypeVar("T")


class CuttingProxy(Lifecycle):
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
        self.delay_ms = 0.0
        """Each chunk is forwarded this much later (`slow`)."""
        self.drop_replies = False
        """While set, the server's replies are thrown away: applied, and the caller never hears."""
        self._flowing = asyncio.Event()
        self._flowing.set()

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    def cut(self) -> int:
        """Close every connection, both sides, even ones still connecting; returns how many."""
        for transport in self._transports:
            transport.abort()
        self._transports.clear()
        for task in self._handlers:
            task.cancel()  # one still in open_connection() closes its socket
        self.cuts += 1
        return len(self._handlers)

    def stall(self) -> None:
        """Stop forwarding both ways until `unstall`: connections stay open, bytes wait."""
        self._flowing.clear()

    def unstall(self) -> None:
        self._flowing.set()

    def slow(self, delay_ms: float) -> None:
        """Forward every chunk `delay_ms` late (0: at once again)."""
        self.delay_ms = delay_ms

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, replies: bool = False
    ) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                if replies and self.drop_replies:
                    continue
                await self._flowing.wait()
                if self.delay_ms:
                    await asyncio.sleep(self.delay_ms / 1000)
                    await self._flowing.wait()
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
            await asyncio.gather(
                self._pipe(reader, up_writer), self._pipe(up_reader, writer, replies=True)
            )
        except (OSError, asyncio.CancelledError):
            pass  # upstream refused, or cut: the handler ends here either way
        finally:
            for side in (writer, up_writer):
                if side is not None:
                    side.transport.abort()
                    self._transports.discard(side.transport)
            self._handlers.discard(task)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        self.cut()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()


class ProxyThread:
    """A `CuttingProxy` on its own event loop in a daemon thread; controls work from any thread."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self._target = (target_port, target_host)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._proxy: CuttingProxy | None = None

    @property
    def port(self) -> int:
        assert self._proxy is not None
        return self._proxy.port

    def cut(self) -> int:
        """Close every open connection; returns how many client connections were cut."""
        return self._call(lambda p: p.cut())

    def stall(self) -> None:
        self._call(lambda p: p.stall())

    def unstall(self) -> None:
        self._call(lambda p: p.unstall())

    def slow(self, delay_ms: float) -> None:
        self._call(lambda p: p.slow(delay_ms))

    @property
    def drop_replies(self) -> bool:
        return self._call(lambda p: p.drop_replies)

    @drop_replies.setter
    def drop_replies(self, value: bool) -> None:
        self._call(lambda p: setattr(p, "drop_replies", value))

    @property
    def accepted(self) -> int:
        """Client connections accepted so far (not those refused)."""
        return self._call(lambda p: p.accepted)

    def refuse(self, refusing: bool) -> None:
        self._call(lambda p: setattr(p, "refusing", refusing))

    def _call(self, action: Callable[[CuttingProxy], T]) -> T:
        async def run() -> T:
            assert self._proxy is not None
            return action(self._proxy)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    def __enter__(self) -> Self:
        self._thread.start()
        port, host = self._target

        async def start() -> CuttingProxy:
            proxy = CuttingProxy(port, host)
            await proxy.start()
            return proxy

        self._proxy = asyncio.run_coroutine_threadsafe(start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        proxy = self._proxy
        if proxy is not None:
            proxy.unstall()
            future = asyncio.run_coroutine_threadsafe(proxy.stop(), self._loop)
            future.result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
