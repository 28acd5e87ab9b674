"""Clients of both kinds behind one interface: every client test body runs through `Client`
and `AsyncClient`, the blocking one wrapped so that the same ``await client.method(...)``
lines drive both. `make_client` and `make_client_at` are registered in
tests/integration/conftest.py."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
import redis.cluster

from wheelq import Admin, AsyncAdmin, AsyncClient, Client
from wheelq.store.executor import close_sync


class SyncAsAsync:
    """A blocking `Client` (or `Admin`) behind `AsyncClient`'s (or `AsyncAdmin`'s) awaitable
    interface."""

    def __init__(self, client: Client | Admin) -> None:
        self.sync = client
        self.redis = client.redis

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        method = getattr(self.sync, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            return method(*args, **kwargs)

        return call


MakeClient = Callable[..., Any]


@pytest.fixture(params=["sync", "async"])
async def make_client_at(request: pytest.FixtureRequest) -> AsyncIterator[MakeClient]:
    """A factory of clients of the kind under test for any server: ``make(url, **settings)``;
    each is closed after the test."""
    made: list[Any] = []

    def make(url: str, **settings: Any) -> Any:
        if request.param == "sync":
            c: Any = SyncAsAsync(Client.from_url(url, **settings))
        else:
            c = AsyncClient.from_url(url, **settings)
        made.append(c)
        return c

    yield make
    for c in made:
        if isinstance(c, SyncAsAsync):
            c.sync.close()
        else:
            await c.aclose()


@pytest.fixture
def make_client(make_client_at: MakeClient, redis_url: str) -> MakeClient:
    """`make_client_at` for the shared server: ``make(**settings)``."""
    return lambda **settings: make_client_at(redis_url, **settings)


@pytest.fixture(name="client")  # a module's own `client` fixture takes its place there
async def topic_client(
    redis_url: str, topic: str, request: pytest.FixtureRequest
) -> AsyncIterator[AsyncClient]:
    """An `AsyncClient` of the test's server with `topic` made, of the test module's
    ``SHARDS`` shards (4 when it names none); closed after the test."""
    async with AsyncClient.from_url(redis_url) as c:
        admin = AsyncAdmin.of(c)
        await admin.create_topic(topic, getattr(request.module, "SHARDS", 4))
        yield c


def admin_of(client: Any) -> Any:
    """The admin on `client`'s connections, of its kind: `Admin.of` a `Client`,
    `AsyncAdmin.of` an `AsyncClient`, and a wrapped `Admin` for a `SyncAsAsync`."""
    if isinstance(client, SyncAsAsync):
        return SyncAsAsync(Admin.of(client.sync))
    if isinstance(client, Client):
        return Admin.of(client)
    return AsyncAdmin.of(client)


@pytest.fixture
def admin(client: Any) -> Any:
    """The admin of the test's `client` (`admin_of`): the management calls on its
    connections, of the same kind."""
    return admin_of(client)


@contextlib.contextmanager
def cluster_client(**options: Any) -> Iterator[redis.cluster.RedisCluster]:
    """A redis-py cluster client (``url=`` or ``host=``/``port=``), closed with every node's
    pool (`wheelq.store.executor.close_sync`: its own `close` leaves their sockets open)."""
    url = options.pop("url", None)
    client = (
        redis.cluster.RedisCluster.from_url(url, **options)
        if url is not None
        else redis.cluster.RedisCluster(**options)
    )
    try:
        yield client
    finally:
        close_sync(client)  # type: ignore[arg-type]
