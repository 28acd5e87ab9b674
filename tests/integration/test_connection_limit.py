"""A server that stalls with more calls in flight than the client may open connections to it.

redis-py's pools (and a cluster client's, per node) open at most `max_connections` (100 by
default since redis-py 6) and refuse the next call unsent (MaxConnectionsError) where a
blocking pool would wait. Before the executor held calls to that many, a stall of a few
hundred milliseconds under load failed every call past the limit, and the breaker, taking
the refusal for an unreachable server, failed every call to every node for a second more:
the slot-migration fault test saw hundreds of enqueues in doubt. Here the calls wait their
turn and none fails, on a single server and on a cluster node, with async and sync clients.
Blocking reads take no turn: a cluster worker's, one a shard, would leave none to the rest.

The servers are this module's own: a test stops one (SIGSTOP) for `STALL_S`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis

from tests.integration.test_worker import holds
from tests.support.servers import dedicated_server
from tests.support.waiting import eventually
from wheelq import Admin, AsyncAdmin, AsyncClient, Client, JobState
from wheelq.core.keys import ShardKeys
from wheelq.store import connect
from wheelq.store.call import Call
from wheelq.store.executor import connection_limit
from wheelq.testing import EmbeddedCluster, EmbeddedServer, ServerBinary

CALLS = 250  # in flight at once: more than the client opens to one server (100)
STALL_S = 0.5  # the fault: every call has been made (in well under this) while it lasts

pytestmark = pytest.mark.both_servers


@pytest.fixture(scope="module")
def own_server(server_binary: ServerBinary) -> Iterator[EmbeddedServer]:
    with dedicated_server(server_binary) as server:
        yield server


@pytest.fixture(scope="module")
def own_cluster(server_binary: ServerBinary) -> Iterator[EmbeddedCluster]:
    # No replica: a stall shorter than the node timeout (2 s) moves nothing.
    with EmbeddedCluster(server_binary, primaries=3) as cluster:
        yield cluster


def connections(server: EmbeddedServer) -> int:
    """Clients connected to `server`, this check's own connection not counted."""
    with redis.Redis.from_url(server.url) as r:
        return len(r.client_list()) - 1


class Stall:
    """SIGSTOP `server` on entry; SIGCONT it `STALL_S` later, or on leaving early."""

    def __init__(self, server: EmbeddedServer) -> None:
        assert server.pid is not None
        self.pid = server.pid

    def __enter__(self) -> Stall:
        os.kill(self.pid, signal.SIGSTOP)
        return self

    def __exit__(self, *exc: object) -> None:
        os.kill(self.pid, signal.SIGCONT)

    async def lasting(self) -> None:
        await asyncio.sleep(STALL_S)  # the fault's length, not a wait for an outcome
        os.kill(self.pid, signal.SIGCONT)


async def enqueue_through_a_stall(url: str, server: EmbeddedServer, topic: str) -> None:
    """`CALLS` enqueues at once on one shard of `server`, which stalls meanwhile; every one
    returns its id and the job is pending."""
    async with AsyncClient.from_url(url) as client:
        await AsyncAdmin.of(client).create_topic(topic, 1)
        limit = connection_limit(client.redis)
        assert limit < CALLS, "the test needs more calls than connections"
        ids = [f"j-{i}" for i in range(CALLS)]
        with Stall(server) as stall:
            calls = [
                asyncio.create_task(client.enqueue(topic, i, delay=600, job_id=job_id))
                for i, job_id in enumerate(ids)
            ]
            await stall.lasting()
        assert await asyncio.gather(*calls) == ids
        assert connections(server) >= limit  # the premise: every connection was in use
        jobs = [await client.get(topic, job_id) for job_id in ids]
        assert {job.state for job in jobs} == {JobState.PENDING}


async def test_async_enqueues_past_the_connection_limit_wait_through_a_stall(
    own_server: EmbeddedServer, topic: str
) -> None:
    await enqueue_through_a_stall(own_server.url, own_server, topic)


async def test_async_enqueues_past_a_cluster_nodes_connection_limit_wait_through_a_stall(
    own_cluster: EmbeddedCluster, topic: str
) -> None:
    await enqueue_through_a_stall(own_cluster.url, owner_of_shard(own_cluster, topic), topic)


def sync_enqueue_through_a_stall(url: str, server: EmbeddedServer, topic: str) -> None:
    """`enqueue_through_a_stall` with the sync client, `CALLS` threads at once."""
    with Client.from_url(url) as client:
        Admin.of(client).create_topic(topic, 1)
        limit = connection_limit(client.redis)
        assert limit < CALLS, "the test needs more calls than connections"
        ids = [f"j-{i}" for i in range(CALLS)]
        with ThreadPoolExecutor(CALLS) as pool, Stall(server):
            calls = [
                pool.submit(client.enqueue, topic, i, delay=600, job_id=job_id)
                for i, job_id in enumerate(ids)
            ]
            time.sleep(STALL_S)  # the fault's length, not a wait for an outcome
        assert [call.result() for call in calls] == ids
        assert connections(server) >= limit
        assert {client.get(topic, job_id).state for job_id in ids} == {JobState.PENDING}


def test_sync_enqueues_past_the_connection_limit_wait_through_a_stall(
    own_server: EmbeddedServer, topic: str
) -> None:
    sync_enqueue_through_a_stall(own_server.url, own_server, topic)


def test_sync_enqueues_past_a_cluster_nodes_connection_limit_wait_through_a_stall(
    own_cluster: EmbeddedCluster, topic: str
) -> None:
    sync_enqueue_through_a_stall(own_cluster.url, owner_of_shard(own_cluster, topic), topic)


def owner_of_shard(cluster: EmbeddedCluster, topic: str) -> EmbeddedServer:
    """The primary holding `topic`'s shard 0."""
    with cluster.client(cluster.primaries[0]) as c:
        slot = int(c.execute_command("CLUSTER", "KEYSLOT", ShardKeys(topic, 0).delayed))
    return cluster.owner(slot)


BLOCK_MS = 3000


async def test_blocking_reads_take_no_turn_from_the_other_calls(
    own_cluster: EmbeddedCluster, topic: str
) -> None:
    # The gate counts the calls in flight against one node's connections; a cluster worker
    # reads each shard with a blocking read of its own (one a node here, as many as the
    # gate's turns): were they counted, every other call would wait out their block time.
    executor = connect.async_executor(own_cluster.url, {"max_connections": 3}, cluster=True)
    try:
        await executor.resolve()
        keys = key_on_each_primary(own_cluster, topic)
        assert connection_limit(executor.client) == len(keys)
        reads = [
            asyncio.create_task(executor.run([Call(command=blocking_read(k), blocks=True)]))
            for k in keys
        ]
        await eventually(
            holds(lambda: all(blocked(own_cluster, node) for node in own_cluster.primaries)),
            timeout_s=10,
            what="a blocking read on every primary",
        )
        t0 = time.monotonic()
        assert await executor.run([Call(command=("GET", keys[0]))]) == [None]
        waited_s = time.monotonic() - t0
        assert not any(read.done() for read in reads)  # the reads still held their turns
        assert waited_s < BLOCK_MS / 1000 / 4, f"the GET waited {waited_s:.2f} s behind reads"
        for read in reads:
            read.cancel()
        await asyncio.gather(*reads, return_exceptions=True)
    finally:
        await executor.aclose()


def key_on_each_primary(cluster: EmbeddedCluster, topic: str) -> list[str]:
    """A key served by each primary (one primary's a key, in the primaries' order)."""
    found: dict[int, str] = {}
    with cluster.client(cluster.primaries[0]) as c:
        for n in range(10_000):
            key = f"{topic}:{n}"
            owner = cluster.owner(int(c.execute_command("CLUSTER", "KEYSLOT", key)))
            found.setdefault(owner.port, key)
            if len(found) == len(cluster.primaries):
                return [found[p.port] for p in cluster.primaries]
    raise AssertionError("no key found on every primary")


def blocking_read(key: str) -> tuple[str | int, ...]:
    return ("XREAD", "BLOCK", BLOCK_MS, "STREAMS", key, "$")


def blocked(cluster: EmbeddedCluster, node: EmbeddedServer) -> bool:
    with cluster.client(node) as c:
        return int(c.info("clients")["blocked_clients"]) >= 1
