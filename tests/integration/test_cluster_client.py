"""The producer clients on a Redis Cluster: the URL of any node works unchanged.

Before, `Client.from_url(url_of_a_cluster_node).enqueue(...)` raised redis-py's raw
MovedError for every key the node did not own. Now the first MOVED reply switches the
client to redis-py's cluster client, and a topic's shards spread over every primary.
"""

from __future__ import annotations

import asyncio
import gc
import warnings
from typing import Any

import pytest
import redis
import redis.asyncio.cluster
import redis.cluster

from wheelq import Admin, AsyncAdmin, AsyncClient, Client, InvalidArgumentError, JobState
from wheelq.core.keys import all_shards
from wheelq.runtime import outage
from wheelq.store import connect
from wheelq.store.executor import AsyncExecutor
from wheelq.testing import EmbeddedCluster, EmbeddedServer

pytestmark = pytest.mark.both_servers  # the cluster protocol: MOVED

SHARDS = 8


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    return f"c-{request.node.name[:40]}".replace("[", "-").replace("]", "")


def _primary_ports_holding(cluster: EmbeddedCluster, topic: str) -> set[int]:
    """The ports of the primaries whose delayed sets of `topic` hold jobs."""
    ports = set()
    for node in cluster.primaries:
        with cluster.client(node) as c:
            for keys in all_shards(topic, SHARDS):
                try:
                    if c.zcard(keys.delayed):
                        ports.add(node.port)
                except redis.exceptions.ResponseError:  # MOVED: another node's slot
                    pass
    return ports


@pytest.mark.parametrize("node", [0, 2])
def test_any_nodes_url_enqueues_onto_every_primary_and_manages_the_jobs(
    cluster: EmbeddedCluster, topic: str, node: int
) -> None:
    with Client.from_url(cluster.primaries[node].url) as client:
        admin = Admin.of(client)
        assert admin.create_topic(topic, SHARDS) == SHARDS
        ids = client.enqueue_many(topic, [{"payload": i, "delay": 600} for i in range(200)])
        assert isinstance(client.redis, redis.cluster.RedisCluster)
        assert admin.stats(topic).pending == 200
        assert _primary_ports_holding(cluster, topic) == {n.port for n in cluster.primaries}

        info = client.get(topic, ids[0])
        assert info is not None and info.state is JobState.PENDING and info.payload == 0
        assert client.cancel(topic, ids[1]) is True
        assert (client.get(topic, ids[1])).state is JobState.CANCELLED
        assert client.reschedule(topic, ids[2], delay=900) is True
        client.enqueue(topic, "now")  # due now: straight into its shard's ready stream
        assert admin.stats(topic).ready == 1
        assert admin.topics()[topic] == SHARDS
        assert admin.drop_topic(topic, force=True) is True
        assert topic not in admin.topics()


async def test_the_async_client_on_a_cluster_nodes_url(
    cluster: EmbeddedCluster, topic: str
) -> None:
    async with AsyncClient.from_url(cluster.primaries[1].url) as client:
        admin = AsyncAdmin.of(client)
        await admin.create_topic(topic, SHARDS)
        ids = await client.enqueue_many(topic, [{"payload": i, "delay": 600} for i in range(50)])
        assert (await admin.stats(topic)).pending == 50
        assert all([(await client.get(topic, i)) is not None for i in ids])
        assert await client.cancel(topic, ids[0]) is True
        assert await admin.drop_topic(topic, force=True) is True


def test_cluster_true_makes_the_cluster_client_at_once(
    cluster: EmbeddedCluster, topic: str
) -> None:
    with Client.from_url(cluster.url, cluster=True) as client:
        admin = Admin.of(client)
        assert isinstance(client.redis, redis.cluster.RedisCluster)
        client.enqueue(topic, 1, delay=60)
        assert admin.stats(topic).pending == 1
        admin.drop_topic(topic, force=True)


@pytest.mark.parametrize("cluster_at_once", [True, None], ids=["cluster-true", "switched"])
def test_a_closed_cluster_client_leaves_no_socket_open(
    cluster: EmbeddedCluster, topic: str, cluster_at_once: bool | None
) -> None:
    """redis-py's cluster `close` left every node's pool open: the sockets were freed later,
    unclosed, wherever the collector happened to run."""
    gc.collect()  # what earlier tests left is not this test's
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        with Client.from_url(cluster.url, cluster=cluster_at_once) as client:
            admin = Admin.of(client)
            client.enqueue_many(topic, [{"payload": i, "delay": 60} for i in range(20)])
            assert admin.stats(topic).pending == 20
            admin.drop_topic(topic, force=True)
        del client
        gc.collect()
    assert [str(w.message) for w in caught if w.category is ResourceWarning] == []


def test_a_single_server_keeps_its_plain_client(server: EmbeddedServer, topic: str) -> None:
    with Client.from_url(server.url) as client:
        admin = Admin.of(client)
        client.enqueue_many(topic, [{"payload": i, "delay": 60} for i in range(20)])
        assert type(client.redis) is redis.Redis
        admin.drop_topic(topic, force=True)


@pytest.mark.parametrize("bad", ["yes", 1, 0])
def test_cluster_must_be_a_bool_or_none(bad: object) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        Client.from_url("redis://127.0.0.1:1", cluster=bad)  # type: ignore[arg-type]
    assert info.value.parameter == "cluster"
    assert "True, False or None" in str(info.value)


@pytest.mark.parametrize("kind", ["cluster", "single"])
async def test_a_close_cut_short_leaves_no_socket_open(
    cluster: EmbeddedCluster,
    server: EmbeddedServer,
    topic: str,
    kind: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A role's stop waits `CLOSE_S` for its connections to close; one that took longer
    (a loaded machine) was cancelled half-way, and the cluster nodes' sockets it left were
    freed unclosed wherever the collector ran: ResourceWarnings at another test's end."""
    gc.collect()
    url = cluster.url if kind == "cluster" else server.url
    executor = connect.async_executor(url, {}, None)
    await executor.resolve()
    client: Any = executor.client
    if kind == "cluster":
        await client.ping(target_nodes=redis.asyncio.cluster.RedisCluster.ALL_NODES)
    else:
        await client.ping()

    async def hangs() -> None:
        await asyncio.sleep(30)

    monkeypatch.setattr(executor, "aclose", hangs)
    monkeypatch.setattr(outage, "CLOSE_S", 0.05)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        await outage.close(executor)
        opened = executor_connections(executor)
        assert opened and not any(c.is_connected for c in opened)
        del executor, opened
        gc.collect()
    assert [str(w.message) for w in caught if w.category is ResourceWarning] == []


def executor_connections(executor: AsyncExecutor) -> list[Any]:
    client = executor.client
    if isinstance(client, redis.asyncio.cluster.RedisCluster):
        nodes = client.nodes_manager.nodes_cache.values()
        return [c for node in nodes for c in node._connections]
    return list(client.connection_pool._available_connections)
