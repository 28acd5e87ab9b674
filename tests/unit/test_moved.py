"""The managing methods the clients keep for one release (`wheelq.producer.moved`): each
warns once per process, at the caller's line, naming where it went and when it goes
(docs/operations/upgrading.md says so), and then stays silent."""

from __future__ import annotations

import asyncio
import warnings

import pytest
import redis
import redis.asyncio

from wheelq import Admin, AsyncAdmin, AsyncClient, Client
from wheelq.producer import moved
from wheelq.producer.moved import Moved

ALIASES = sorted(name for name, member in vars(Client).items() if isinstance(member, Moved))
ASYNC_ALIASES = sorted(
    name for name, member in vars(AsyncClient).items() if isinstance(member, Moved)
)


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """No method used yet, as in a new process."""
    monkeypatch.setattr(moved, "_warned", set())


def _once(used: str, instead: str, record: list[warnings.WarningMessage]) -> None:
    [warning] = record
    assert warning.category is DeprecationWarning
    assert str(warning.message).startswith(
        f"{used} moved to wheelq.{instead} in wheelq 0.3.0 and goes in 0.4.0: "
    )
    assert warning.filename == __file__  # the caller's line, not wheelq's


@pytest.mark.parametrize("name", ALIASES)
def test_a_moved_method_warns_once_at_the_callers_line(name: str) -> None:
    client = Client(redis.Redis())  # nothing is sent: reading the alias warns
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        getattr(client, name)
        getattr(client, name)  # a second use in the process is silent
    _once(f"Client.{name}", f"Admin.{name}", record)


@pytest.mark.parametrize("name", ASYNC_ALIASES)
def test_an_async_moved_method_warns_once_at_the_callers_line(name: str) -> None:
    client = AsyncClient(redis.asyncio.Redis())
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        getattr(client, name)
        getattr(client, name)
    _once(f"AsyncClient.{name}", f"AsyncAdmin.{name}", record)


def test_stats_warns_once_at_the_callers_line_and_adds_no_spool_without_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(Admin, "stats", lambda self, topic: None)
    client = Client(redis.Redis())
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert client.stats("emails") is None
        assert client.stats("emails") is None
    _once("Client.stats", "Admin.stats", record)


def test_async_stats_warns_once_at_the_callers_line(monkeypatch: pytest.MonkeyPatch) -> None:
    async def no_stats(self: AsyncAdmin, topic: str) -> None:
        return None

    monkeypatch.setattr(AsyncAdmin, "stats", no_stats)

    async def main() -> list[warnings.WarningMessage]:
        client = AsyncClient(redis.asyncio.Redis())
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            assert await client.stats("emails") is None
            assert await client.stats("emails") is None
        return record

    _once("AsyncClient.stats", "AsyncAdmin.stats", asyncio.run(main()))


class MyClient(Client):
    """A program's own subclass: its moved methods run on an `Admin` as `Client`'s do."""


@pytest.mark.parametrize("client_class", [Client, MyClient])
def test_a_moved_method_is_the_method_of_the_one_admin_on_the_clients_connections(
    client_class: type[Client],
) -> None:
    client = client_class(redis.Redis())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pause = client.pause
    admin = Admin.of(client)
    assert pause.__self__ is admin
    assert Admin.of(client) is admin
    assert admin.redis is client.redis


def test_an_async_moved_method_is_the_method_of_the_async_admin_of_the_client() -> None:
    client = AsyncClient(redis.asyncio.Redis())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pause = client.pause
    assert pause.__self__ is AsyncAdmin.of(client)
    assert AsyncAdmin.of(client).executor is client.executor
