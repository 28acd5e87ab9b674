"""docs/architecture.md, invariant 9: Redis AUTH, ACL users and TLS (``rediss://``) URLs work
for the clients and the scheduler node; wrong credentials fail with redis-py's own error."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import msgpack
import pytest
import redis
import redis.asyncio
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.support.servers import dedicated_server, tls_supported
from tests.support.waiting import eventually
from wheelq import Admin, AsyncAdmin, AsyncClient, Client, Scheduler
from wheelq.core.history import JobState
from wheelq.core.keys import PAUSED_KEY, TOPICS_KEY, ShardKeys, shard_of
from wheelq.testing import EmbeddedServer, ServerBinary

pytestmark = pytest.mark.both_servers  # AUTH, ACL and TLS

PASSWORD = "s3cr:t/@x"
SHARDS = 2


def no_retry() -> dict[str, Any]:
    """redis-py options that fail at once instead of retrying with backoff."""
    return {"retry": Retry(NoBackoff(), 0), "socket_connect_timeout": 5}


def plain_url(server: EmbeddedServer, user: str | None = None, password: str | None = None) -> str:
    scheme = "rediss" if server.url.startswith("rediss") else "redis"
    auth = ""
    if password is not None:
        auth = f"{quote(user or '', safe='')}:{quote(password, safe='')}@"
    return f"{scheme}://{auth}{server.host}:{server.port}"


def roundtrip(client: Client, topic: str) -> None:
    """enqueue, get, reschedule, cancel, fire, topics and stats through `client`."""
    job = client.enqueue(topic, {"k": "v"}, delay=60)
    info = client.get(topic, job)
    assert info is not None and info.payload == {"k": "v"}
    assert client.reschedule(topic, job, delay=120) is True
    assert client.cancel(topic, job) is True
    fired = client.enqueue(topic, b"now")
    assert (client.get(topic, fired)).state is JobState.READY
    assert Admin.of(client).topics()[topic] == SHARDS
    stats = Admin.of(client).stats(topic)
    assert stats is not None and (stats.pending, stats.ready) == (0, 1)


async def roundtrip_async(client: AsyncClient, topic: str) -> None:
    job = await client.enqueue(topic, {"k": "v"}, delay=60)
    info = await client.get(topic, job)
    assert info is not None and info.payload == {"k": "v"}
    assert await client.reschedule(topic, job, delay=120) is True
    assert await client.cancel(topic, job) is True
    fired = await client.enqueue(topic, b"now")
    assert (await client.get(topic, fired)).state is JobState.READY
    stats = await AsyncAdmin.of(client).stats(topic)
    assert stats is not None and (stats.pending, stats.ready) == (0, 1)


# --- AUTH ---------------------------------------------------------------------------------


@pytest.fixture
def password_server(server_binary: ServerBinary) -> Iterator[EmbeddedServer]:
    with dedicated_server(server_binary, password=PASSWORD) as server:
        yield server


def test_password_url_works_with_reserved_characters(
    password_server: EmbeddedServer, topic: str
) -> None:
    assert quote(PASSWORD, safe="") in password_server.url  # the URL carries it %-escaped
    with Client.from_url(password_server.url, default_shards=SHARDS) as client:
        roundtrip(client, topic)
    with redis.Redis.from_url(password_server.url) as admin:
        assert admin.hget(TOPICS_KEY, topic) == str(SHARDS).encode()


async def test_password_url_works_for_the_async_client(
    password_server: EmbeddedServer, topic: str
) -> None:
    async with AsyncClient.from_url(password_server.url, default_shards=SHARDS) as client:
        await roundtrip_async(client, topic)


@pytest.mark.parametrize(
    "password", ["wrong", PASSWORD[:-1], None], ids=["wrong", "truncated", "missing"]
)
def test_wrong_or_missing_password_fails_with_authentication_error(
    password_server: EmbeddedServer, topic: str, password: str | None
) -> None:
    url = plain_url(password_server, password=password)
    with Client.from_url(url, redis_options=no_retry()) as client:
        with pytest.raises(redis.AuthenticationError):
            client.enqueue(topic, "x", delay=60)
        with pytest.raises(redis.AuthenticationError):
            client.get(topic, "any")
    with redis.Redis.from_url(password_server.url) as admin:
        assert admin.dbsize() == 0, "a refused client wrote something"


async def test_wrong_password_fails_for_the_async_client(
    password_server: EmbeddedServer, topic: str
) -> None:
    url = plain_url(password_server, password="wrong")
    async with AsyncClient.from_url(url, redis_options=no_retry()) as client:
        with pytest.raises(redis.AuthenticationError):
            await client.enqueue(topic, "x", delay=60)


# --- ACL users ----------------------------------------------------------------------------


@pytest.fixture
def acl_server(password_server: EmbeddedServer, topic: str) -> Iterator[EmbeddedServer]:
    """The password server with user ``app`` (everything) and ``narrow`` (only the
    topic's keys, the registry, the pause hash that stats and lookups read, and the topic's
    wake channels)."""
    with redis.Redis.from_url(password_server.url) as admin:
        admin.execute_command("ACL", "SETUSER", "app", "on", ">pw", "~*", "&*", "+@all")
        admin.execute_command(
            "ACL",
            "SETUSER",
            "narrow",
            "on",
            ">pw2",
            "resetkeys",
            f"~{TOPICS_KEY}",
            f"~{PAUSED_KEY}",
            f"~{{{topic}:*",
            "resetchannels",
            f"&{{{topic}:*",
            "+@all",
        )
    return password_server


def test_acl_user_url_works(acl_server: EmbeddedServer, topic: str) -> None:
    url = plain_url(acl_server, "app", "pw")
    with Client.from_url(url, default_shards=SHARDS) as client:
        roundtrip(client, topic)
        assert client.redis.acl_whoami() == "app"


async def test_acl_user_url_works_for_the_async_client(
    acl_server: EmbeddedServer, topic: str
) -> None:
    async with AsyncClient.from_url(plain_url(acl_server, "app", "pw"), default_shards=SHARDS) as c:
        await roundtrip_async(c, topic)
        assert await c.redis.acl_whoami() == "app"


def test_acl_user_limited_to_the_topic_keys_can_produce(
    acl_server: EmbeddedServer, topic: str
) -> None:
    """wheelq touches only its documented keys: the registry, the pause hash and the topic's
    ``{T:s}`` keys."""
    url = plain_url(acl_server, "narrow", "pw2")
    with Client.from_url(url, default_shards=SHARDS) as client:
        roundtrip(client, topic)
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.redis.get("not-a-wheelq-key")  # the ACL really is narrow


async def test_scheduler_with_an_acl_user_limited_to_its_topic_fires_jobs(
    acl_server: EmbeddedServer, topic: str
) -> None:
    with redis.Redis.from_url(acl_server.url) as admin:
        admin.execute_command("ACL", "SETUSER", "narrow", f"~wheelq:nodes:{topic}")
    url = plain_url(acl_server, "narrow", "pw2")
    async with AsyncClient.from_url(url, default_shards=SHARDS) as client:
        await AsyncAdmin.of(client).create_topic(topic)
        node = Scheduler.from_url(url, [topic], lease_ttl_ms=2000, preload_interval_ms=100)
        await node.start()
        try:
            job = await client.enqueue(topic, "x", delay=0.3)
            ready = ShardKeys(topic, shard_of(job, SHARDS)).ready

            async def entries() -> list[Any]:
                found: list[Any] = await client.redis.xrange(ready, "-", "+")
                return found

            ((_, fields),) = await eventually(entries, timeout_s=10, what="the job in its stream")
        finally:
            await node.stop()
    assert fields[b"id"].decode() == job


@pytest.mark.parametrize(
    ("user", "password"), [("app", "wrong"), ("nobody", "pw")], ids=["wrong-password", "no-user"]
)
def test_acl_user_with_wrong_credentials_fails(
    acl_server: EmbeddedServer, topic: str, user: str, password: str
) -> None:
    url = plain_url(acl_server, user, password)
    with (
        Client.from_url(url, redis_options=no_retry()) as client,
        pytest.raises(redis.AuthenticationError),
    ):
        client.enqueue(topic, "x", delay=60)


def test_disabled_acl_user_fails(acl_server: EmbeddedServer, topic: str) -> None:
    with redis.Redis.from_url(acl_server.url) as admin:
        admin.execute_command("ACL", "SETUSER", "app", "off")
    url = plain_url(acl_server, "app", "pw")
    with (
        Client.from_url(url, redis_options=no_retry()) as client,
        pytest.raises(redis.AuthenticationError),
    ):
        client.enqueue(topic, "x", delay=60)


# --- TLS ----------------------------------------------------------------------------------


@pytest.fixture
def tls_server(server_binary: ServerBinary) -> Iterator[EmbeddedServer]:
    if not tls_supported(server_binary):
        pytest.skip(f"this {server_binary.kind} binary is built without TLS (BUILD_TLS=yes)")
    with dedicated_server(server_binary, tls=True, password=PASSWORD) as server:
        yield server


def test_tls_url_works_for_the_client(tls_server: EmbeddedServer, topic: str) -> None:
    assert tls_server.url.startswith("rediss://")
    options = {"ssl_ca_certs": tls_server.ca_cert_path}
    with Client.from_url(tls_server.url, redis_options=options, default_shards=SHARDS) as client:
        roundtrip(client, topic)
        assert client.redis.connection_pool.connection_class.__name__ == "SSLConnection"


async def test_tls_url_works_for_the_async_client(tls_server: EmbeddedServer, topic: str) -> None:
    options = {"ssl_ca_certs": tls_server.ca_cert_path}
    async with AsyncClient.from_url(
        tls_server.url, redis_options=options, default_shards=SHARDS
    ) as client:
        await roundtrip_async(client, topic)


def test_tls_url_without_the_ca_fails_to_connect(tls_server: EmbeddedServer, topic: str) -> None:
    with (
        Client.from_url(tls_server.url, redis_options=no_retry()) as client,
        pytest.raises(redis.ConnectionError, match="certif"),
    ):
        client.enqueue(topic, "x", delay=60)


async def test_scheduler_over_tls_fires_a_job_into_the_stream(
    tls_server: EmbeddedServer, topic: str
) -> None:
    options = {"ssl_ca_certs": tls_server.ca_cert_path}
    async with AsyncClient.from_url(
        tls_server.url, redis_options=options, default_shards=SHARDS
    ) as client:
        admin = AsyncAdmin.of(client)
        await admin.create_topic(topic)
        node = Scheduler.from_url(
            tls_server.url,
            [topic],
            redis_options=options,
            lease_ttl_ms=2000,
            preload_interval_ms=100,
        )
        await node.start()
        try:
            job = await client.enqueue(topic, {"over": "tls"}, delay=0.3)
            info = await client.get(topic, job)
            assert info is not None, "the job fired at once instead of at its due time"
            ready = ShardKeys(topic, shard_of(job, SHARDS)).ready

            async def entries() -> list[Any]:
                found: list[Any] = await client.redis.xrange(ready, "-", "+")
                return found

            ((entry_id, fields),) = await eventually(
                entries, timeout_s=10, what="the job in its stream"
            )
        finally:
            await node.stop()
    assert fields[b"id"].decode() == job
    assert int(fields[b"due"]) == info.due_ms
    assert int(entry_id.split(b"-")[0]) >= info.due_ms, "fired before its due time"
    assert msgpack.unpackb(fields[b"payload"]) == {"over": "tls"}
