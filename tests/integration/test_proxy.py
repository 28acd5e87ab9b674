"""tests/support/proxy.py, the fault injector of test_worker_faults.py: a cut closes every
connection, ones still connecting upstream included, and none outlives the proxy (an
unclosed socket is a ResourceWarning, and warnings are errors in this suite)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator

import pytest

from tests.support.waiting import eventually
from wheelq.testing.proxy import CuttingProxy


@pytest.fixture
def silent_upstream() -> Iterator[int]:
    """A port whose listener never accepts and whose backlog is full: a connect to it hangs,
    so the proxy's handler stays in its upstream connect."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port: int = listener.getsockname()[1]
    fillers = []
    for _ in range(8):  # more than a backlog of 0 takes
        filler = socket.socket()
        filler.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            filler.connect(("127.0.0.1", port))
        fillers.append(filler)
    yield port
    for filler in fillers:
        filler.close()
    listener.close()


@contextlib.asynccontextmanager
async def client_of(proxy: CuttingProxy) -> AsyncIterator[asyncio.StreamReader]:
    """A client connection to the proxy, once the proxy has accepted it."""
    accepted = proxy.accepted
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    try:

        async def handled() -> bool:  # the handler runs: it is connecting upstream
            return proxy.accepted > accepted

        await eventually(handled, timeout_s=5, what="the proxy to accept")
        yield reader
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def closed_by_proxy(reader: asyncio.StreamReader) -> bool:
    """True when the proxy closed its side (EOF or reset) within 5 s."""
    try:
        return await asyncio.wait_for(reader.read(1), 5) == b""
    except ConnectionError:
        return True
    except TimeoutError:
        return False


async def test_a_cut_closes_a_connection_still_connecting_upstream(silent_upstream: int) -> None:
    async with CuttingProxy(silent_upstream) as proxy, client_of(proxy) as reader:
        assert proxy.cut() == 1
        assert await closed_by_proxy(reader), "the cut left the connection open"


async def test_leaving_the_proxy_closes_a_connection_still_connecting_upstream(
    silent_upstream: int,
) -> None:
    proxy = CuttingProxy(silent_upstream)
    await proxy.start()
    left = False
    try:
        async with client_of(proxy) as reader:
            await asyncio.wait_for(proxy.stop(), 5)
            left = True
            assert await closed_by_proxy(reader), "the proxy left the connection open"
    finally:
        if not left:
            await proxy.stop()
