"""ack= on one server with one replica: "replicated" (WAIT) and "persisted" (WAITAOF).

A pair per server kind for the module: a primary and a replica (``--replicaof``), both
with appendonly yes. Tests that pause the replica (SIGSTOP) resume it in ``finally``.
Valkey 9 has WAITAOF; redis-server 7.0 has not, so "persisted" must refuse it there
before writing anything.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from typing import Any

import pytest
import redis

from tests.support.clients import MakeClient
from tests.support.servers import SYNC_AT_ONCE, dedicated_server
from tests.support.waiting import eventually_sync
from wheelq import (
    AckUnsupportedError,
    Admin,
    Client,
    DurabilityError,
    InvalidArgumentError,
)
from wheelq.core.keys import ShardKeys, shard_of
from wheelq.testing import EmbeddedServer, ServerBinary

pytestmark = pytest.mark.both_servers  # replication acks: WAIT, WAITAOF

SHARDS = 4
TIMEOUT_MS = 300


class Pair:
    """A primary and its replica."""

    def __init__(self, primary: EmbeddedServer, replica: EmbeddedServer) -> None:
        self.primary = primary
        self.replica = replica

    def holds(self, server: EmbeddedServer, topic: str, job_id: str) -> bool:
        with redis.Redis(port=server.port) as r:
            return bool(r.hexists(ShardKeys(topic, shard_of(job_id, SHARDS)).jobs, job_id))

    @contextmanager
    def replica_stopped(self) -> Iterator[None]:
        pid = self.replica.pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(pid, signal.SIGCONT)


def _linked(replica: EmbeddedServer) -> bool:
    with redis.Redis(port=replica.port) as r:
        return r.info("replication").get("master_link_status") == "up"


@pytest.fixture(scope="module")
def pair(server_binary: ServerBinary) -> Iterator[Pair]:
    with dedicated_server(server_binary, appendonly=True, extra_args=SYNC_AT_ONCE) as primary:
        follow = ("--replicaof", primary.host, str(primary.port))
        with dedicated_server(server_binary, appendonly=True, extra_args=follow) as replica:
            eventually_sync(lambda: _linked(replica), timeout_s=15, what="the replica's link")
            yield Pair(primary, replica)


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    return "a-" + re.sub(r"[^A-Za-z0-9_.-]", "-", request.node.name)[-90:]


@pytest.fixture
def make(make_client_at: MakeClient) -> MakeClient:
    """Clients of the kind under test: ``make(url, **settings)``, with this file's shards."""
    return lambda url, **settings: make_client_at(url, **{"default_shards": SHARDS, **settings})


def test_replicated_returns_only_once_the_replica_has_the_job(pair: Pair, topic: str) -> None:
    with Client.from_url(pair.primary.url, default_shards=SHARDS, ack="replicated") as client:
        admin = Admin.of(client)
        admin.create_topic(topic)
        for i in range(20):  # each read of the replica right after the call returns
            job_id = client.enqueue(topic, i, delay=600)
            assert pair.holds(pair.replica, topic, job_id)
        slow = Client.from_url(  # WAIT holds the connection up to ack_timeout_ms: a socket for it
            pair.primary.url,
            ack="replicated",
            ack_timeout_ms=60_000,
            redis_options={"socket_timeout": 120},
        )
        Admin.of(slow).create_topic(topic)  # cached: the call below is the job's write and its WAIT
        with ThreadPoolExecutor(1) as pool, pair.replica_stopped():
            call = pool.submit(slow.enqueue, topic, "late", delay=600, job_id="late")
            eventually_sync(
                lambda: pair.holds(pair.primary, topic, "late"), timeout_s=10, what="the write"
            )
            with pytest.raises(FutureTimeout):  # written, but not confirmed: still waiting
                call.result(timeout=0.5)
        assert call.result(timeout=30) == "late"
        assert pair.holds(pair.replica, topic, "late")
        slow.close()


async def test_a_stopped_replica_fails_the_level_naming_the_jobs_written_on_the_primary(
    pair: Pair, topic: str, make: Any
) -> None:
    client = make(pair.primary.url, ack="replicated", ack_timeout_ms=TIMEOUT_MS)
    ids = [f"j{i}" for i in range(10)]
    await client.enqueue_many(topic, [{"payload": i, "delay": 600, "job_id": i} for i in ids[:1]])
    with pair.replica_stopped():
        started = time.monotonic()
        with pytest.raises(DurabilityError) as info:
            await client.enqueue_many(
                topic, [{"payload": 1, "delay": 600, "job_id": i} for i in ids[1:]]
            )
        took = time.monotonic() - started
        error = info.value
        assert sorted(error.job_ids) == sorted(ids[1:])
        assert (error.level, error.topic, error.wanted, error.confirmed) == (
            "replicated",
            topic,
            1,
            0,
        )
        assert error.result == ids[1:]
        assert "may or may not survive" in str(error)
        assert TIMEOUT_MS / 1000 <= took < TIMEOUT_MS / 1000 + 5
        assert all(pair.holds(pair.primary, topic, i) for i in ids)

        with pytest.raises(DurabilityError) as info:
            await client.cancel(topic, ids[0])
        assert (info.value.job_ids, info.value.result) == ([ids[0]], True)
        assert not pair.holds(pair.primary, topic, ids[0])

        with pytest.raises(DurabilityError) as info:
            await client.reschedule(topic, ids[1], delay=900)
        assert (info.value.job_ids, info.value.result) == ([ids[1]], True)

        # the default level of this client is overridden per call: no WAIT at all
        assert await client.enqueue(topic, 2, delay=600, job_id="fast", ack="primary") == "fast"
    assert await client.enqueue(topic, 2, delay=600, job_id="fast", replace=True) == "fast"
    assert pair.holds(pair.replica, topic, "fast")


async def test_persisted_is_confirmed_on_disk_where_the_server_has_waitaof(
    pair: Pair, topic: str, make: Any
) -> None:
    if pair.primary.kind == "redis":
        pytest.skip("redis-server 7.0 has no WAITAOF (see the next test)")
    client = make(
        pair.primary.url,
        ack="persisted",
        ack_timeout_ms=10_000,
        redis_options={"socket_timeout": 30},  # WAITAOF holds the connection up to 10 s
    )
    job_id = await client.enqueue(topic, 1, delay=600)
    assert pair.holds(pair.replica, topic, job_id)
    ids = await client.enqueue_many(topic, [{"payload": i, "delay": 600} for i in range(50)])
    assert all(pair.holds(pair.replica, topic, i) for i in ids)
    impatient = make(pair.primary.url, ack_timeout_ms=TIMEOUT_MS)
    with pair.replica_stopped(), pytest.raises(DurabilityError) as info:
        await impatient.enqueue(topic, 1, delay=600, job_id="p", ack="persisted")
    assert info.value.job_ids == ["p"] and info.value.level == "persisted"


@pytest.mark.parametrize("appendonly", [True, False], ids=["aof", "no-aof"])
async def test_persisted_without_waitaof_or_aof_raises_before_writing(
    server_binary: ServerBinary, appendonly: bool, topic: str, make: Any
) -> None:
    with dedicated_server(server_binary, appendonly=appendonly) as server:
        if server.kind == "valkey" and appendonly:
            pytest.skip("Valkey with appendonly yes can persist (the test above)")
        client = make(server.url, ack="persisted", ack_replicas=0)
        with pytest.raises(AckUnsupportedError) as info:
            await client.enqueue(topic, 1, delay=600)
        lacks = "has no WAITAOF" if server.kind == "redis" else "has appendonly no"
        assert lacks in info.value.reason and info.value.node == "server"
        assert "nothing was written" in str(info.value)
        with pytest.raises(AckUnsupportedError):
            await client.enqueue_many(topic, [{"payload": 1}] * 5)
        with redis.Redis(port=server.port) as r:
            assert r.keys("*") == []  # not even the topic's registration
            if server.kind == "valkey":
                r.config_set("appendonly", "yes")  # asked again: a failure is not cached
        if server.kind == "valkey":
            assert await client.enqueue(topic, 1, delay=600, job_id="now") == "now"


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"ack": "bogus"}, "ack"),
        ({"ack": 1}, "ack"),
        ({"ack": "Replicated"}, "ack"),
    ],
)
async def test_a_bad_ack_raises_naming_it_and_writes_nothing(
    redis_url: str, redis_sync: redis.Redis, topic: str, make: Any, kwargs: Any, parameter: str
) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        Client.from_url(redis_url, **kwargs)
    assert info.value.parameter == parameter
    assert "'primary', 'replicated' or 'persisted'" in str(info.value)
    client = make(redis_url)
    for call in (
        lambda: client.enqueue(topic, 1, **kwargs),
        lambda: client.enqueue_many(topic, [{"payload": 1}], **kwargs),
        lambda: client.cancel(topic, "x", **kwargs),
        lambda: client.reschedule(topic, "x", delay=1, **kwargs),
    ):
        with pytest.raises(InvalidArgumentError) as info:
            await call()
        assert info.value.parameter == parameter
    assert redis_sync.hget("wheelq:topics", topic) is None


def test_replicated_needs_a_replica_to_wait_for(redis_url: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        Client.from_url(redis_url, ack="replicated", ack_replicas=0)
    assert info.value.parameter == "ack_replicas"
    with (
        Client.from_url(redis_url, ack_replicas=0) as client,
        pytest.raises(InvalidArgumentError) as info,
    ):
        client.enqueue("t", 1, ack="replicated")
    assert info.value.parameter == "ack_replicas"


def test_the_default_level_sends_no_wait(
    redis_url: str, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Client.from_url(redis_url) as client:

        def refuse(*args: Any) -> Any:
            raise AssertionError("the default level must not go through run_acked")

        monkeypatch.setattr(client._executor, "run_acked", refuse)
        job_id = client.enqueue(topic, 1, delay=600)
        client.enqueue_many(topic, [{"payload": 1, "delay": 600}] * 3)
        assert client.reschedule(topic, job_id, delay=900) is True
        assert client.cancel(topic, job_id) is True


async def test_a_lone_server_cannot_confirm_replicated(
    redis_url: str, topic: str, make: Any
) -> None:
    client = make(redis_url, ack="replicated", ack_timeout_ms=50)
    with pytest.raises(DurabilityError) as info:
        await client.enqueue(topic, 1, delay=600, job_id="lone")
    assert info.value.job_ids == ["lone"]
    assert (await client.get(topic, "lone")) is not None  # on the primary all the same
