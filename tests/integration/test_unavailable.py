"""A producer client when Redis cannot take its calls, on real servers: a replica's URL
(READONLY), a server over ``maxmemory`` (OOM), a server killed, and a peer that accepts
connections but never answers. With a spool the enqueues are spooled and replayed once the
server takes writes again; without, each call raises `RedisUnavailableError` naming why, and
within ``breaker_open_ms`` of a connection failure the next call fails before it is sent."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.support.servers import dedicated_server
from tests.support.spooling import (
    DRAIN_S,
    HOUR_S,
    SHARDS,
    EitherClient,
    found_ids,
)
from tests.support.waiting import eventually, until
from wheelq import RedisUnavailableError
from wheelq.testing import EmbeddedServer, ServerBinary

SOCKET_TIMEOUT_S = 0.5


@pytest.fixture
def replica(server_binary: ServerBinary) -> Iterator[EmbeddedServer]:
    """A replica of a primary of its own: it answers every write with READONLY."""
    with (
        dedicated_server(server_binary) as primary,
        dedicated_server(
            server_binary, extra_args=["--replicaof", "127.0.0.1", str(primary.port)]
        ) as server,
    ):
        yield server


@pytest.fixture
def full(server_binary: ServerBinary) -> Iterator[EmbeddedServer]:
    """A server over its ``maxmemory`` with ``noeviction``: it refuses writes with OOM."""
    with dedicated_server(server_binary) as server:
        with redis.Redis.from_url(server.url) as r:
            r.config_set("maxmemory-policy", "noeviction")
            r.config_set("maxmemory", "1")
        yield server


async def refused(client: EitherClient, topic: str) -> RedisUnavailableError:
    with pytest.raises(RedisUnavailableError) as caught:
        await client.call("enqueue", topic, "x", delay=HOUR_S)
    return caught.value


@pytest.mark.parametrize(("server", "reason"), [("replica", "readonly"), ("full", "oom")])
async def test_without_a_spool_a_server_refusing_writes_is_a_typed_error(
    request: pytest.FixtureRequest,
    server_binary: ServerBinary,  # parametrizes the server fixtures looked up here
    client_kind: str,
    topic: str,
    server: str,
    reason: str,
) -> None:
    srv: EmbeddedServer = request.getfixturevalue(server)
    client = EitherClient(client_kind, srv.url, default_shards=SHARDS)
    try:
        error = await refused(client, topic)
        assert error.reason == reason
        assert isinstance(error.__cause__, redis.ResponseError)
        again = await refused(client, topic)  # a refusal is a reply: the breaker stays shut
        assert again.reason == reason
    finally:
        await client.close()


def promote(r: redis.Redis) -> None:
    r.replicaof("NO", "ONE")


def free_memory(r: redis.Redis) -> None:
    r.config_set("maxmemory", "0")


@pytest.mark.parametrize(("server", "heal"), [("replica", promote), ("full", free_memory)])
async def test_with_a_spool_a_refusal_is_spooled_and_replayed_once_the_server_takes_writes(
    request: pytest.FixtureRequest,
    server_binary: ServerBinary,  # parametrizes the server fixtures looked up here
    client_kind: str,
    topic: str,
    tmp_path: Path,
    server: str,
    heal: Callable[[redis.Redis], None],
) -> None:
    srv: EmbeddedServer = request.getfixturevalue(server)
    client = EitherClient(client_kind, srv.url, spool=tmp_path / "spool.db", default_shards=SHARDS)
    try:
        ids = [await client.call("enqueue", topic, n, delay=n % 2 * HOUR_S) for n in range(5)]
        ids += await client.call("enqueue_many", topic, [{"payload": n} for n in range(5)])
        assert client.spool_stats().depth == 10
        with redis.Redis.from_url(srv.url) as r:
            heal(r)

        await until(lambda: client.spool_stats().depth == 0, timeout_s=DRAIN_S, what="drain")
        assert found_ids(srv.url, topic) == dict.fromkeys(ids, 1)
    finally:
        await client.close()


@pytest.fixture
def blackhole() -> Iterator[socket.socket]:
    """A port that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        listener.setblocking(False)
        yield listener


def connections_made(listener: socket.socket) -> int:
    """Take every connection waiting in the backlog; how many there were."""
    count = 0
    while True:
        try:
            conn, _ = listener.accept()
        except BlockingIOError:
            return count
        conn.close()
        count += 1


async def test_within_breaker_open_ms_a_call_fails_without_connecting(
    blackhole: socket.socket, client_kind: str, topic: str
) -> None:
    url = f"redis://127.0.0.1:{blackhole.getsockname()[1]}"
    options: dict[str, Any] = {
        "socket_timeout": SOCKET_TIMEOUT_S,
        "socket_connect_timeout": SOCKET_TIMEOUT_S,
    }
    client = EitherClient(client_kind, url, redis_options=options, breaker_open_ms=600_000)
    try:
        first = await refused(client, topic)
        assert first.reason == "unreachable"
        assert connections_made(blackhole) >= 1  # it connected, then timed out waiting

        for _ in range(3):
            fast = await refused(client, topic)
            assert fast.reason == "breaker_open"
        assert connections_made(blackhole) == 0  # nothing was even tried
    finally:
        await client.close()


async def test_the_breaker_opens_on_a_dead_server_then_a_probe_closes_it_once_it_is_back(
    server_binary: ServerBinary, client_kind: str, topic: str
) -> None:
    with dedicated_server(server_binary, appendonly=True) as srv:
        client = EitherClient(client_kind, srv.url, default_shards=SHARDS, breaker_open_ms=200)
        try:
            await client.manage("create_topic", topic)
            srv.kill()
            assert (await refused(client, topic)).reason == "unreachable"
            assert (await refused(client, topic)).reason == "breaker_open"
            srv.restart()

            async def probe_gets_through() -> bool:
                try:
                    await client.call("enqueue", topic, "back", job_id="after")
                except RedisUnavailableError as exc:
                    assert exc.reason == "breaker_open"  # the probe is the one let through
                    return False
                return True

            await eventually(probe_gets_through, timeout_s=10, what="the probe to get through")
            await client.call("enqueue", topic, "closed", job_id="closed")  # closed: no refusal
            assert found_ids(srv.url, topic).keys() >= {"after", "closed"}
        finally:
            await client.close()
