"""A relay whose Redis write fails for one shard keeps that shard's rows in PostgreSQL until
it works, then places each once: an error reply inside the batch, a cluster node that stops
answering, an ack level not met (docs/guides/outbox.md, "What is guaranteed"). And a relay
asked for an ack level Redis does not confirm refuses to start, in one line
(docs/guides/outbox.md, "Run the relay").
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis
import redis.cluster

from tests.support.cli import assert_one_line_error, run_wheelq
from tests.support.outbox import FAST, SHARDS, commit, fired, fired_exactly
from tests.support.servers import SYNC_AT_ONCE, dedicated_server
from tests.support.waiting import eventually, eventually_sync, until
from wheelq import outbox
from wheelq.core import keys as k
from wheelq.core.settings import RelaySettings
from wheelq.producer.async_client import AsyncClient
from wheelq.testing import EmbeddedCluster, EmbeddedServer, ServerBinary

COUNT = 40  # rows due now, over the topic's four shards


@pytest.fixture
def dsn(postgres_dsn: str) -> str:
    outbox.install(postgres_dsn)
    return postgres_dsn


def left(dsn: str) -> set[str]:
    """The job ids still in the outbox."""
    with psycopg.connect(dsn) as conn:
        return {j for (j,) in conn.execute("SELECT job_id FROM wheelq_outbox").fetchall()}


def on_shards(ids: list[str], shards: set[int]) -> set[str]:
    return {i for i in ids if k.shard_of(i, SHARDS) in shards}


async def failing_while(relay: outbox.Relay, dsn: str, kept: set[str]) -> None:
    """Until the relay's steps have failed a few times; its rows of `kept` stay meanwhile."""
    await until(lambda: relay.failures >= 3, timeout_s=60, what="the relay's steps failing")
    assert kept and kept <= await asyncio.to_thread(left, dsn)
    assert relay.rejected == 0  # a failure that may pass refuses nothing


@pytest.mark.cluster_too
async def test_a_shard_whose_write_errors_keeps_its_rows_until_it_works(
    dsn: str, topic: str, redis_url: str, redis_sync: redis.Redis
) -> None:
    broken = k.ShardKeys(topic, 0).far  # read by every enqueue.lua call: an error reply
    redis_sync.set(broken, "not a hash")
    ids = commit(dsn, topic, COUNT)
    client = AsyncClient.from_url(redis_url)
    relay = outbox.Relay(client, dsn, RelaySettings(**FAST))
    await relay.start()
    try:
        await failing_while(relay, dsn, on_shards(ids, {0}))
        assert "WRONGTYPE" in str(relay.status()["last_error"])
        assert not on_shards(ids, {0}) & set(fired(redis_sync, topic))
        redis_sync.delete(broken)
        await eventually(
            lambda: asyncio.to_thread(fired_exactly, redis_sync, topic, ids),
            timeout_s=20,
            what="every job fired once the shard works",
        )
        await until(lambda: not left(dsn), timeout_s=10, what="the rows deleted")
    finally:
        await relay.stop()
        await client.aclose()


@pytest.fixture
def stoppable_cluster(server_binary: ServerBinary) -> Iterator[EmbeddedCluster]:
    """3 primaries that never mark a stopped node failed during a test (no failover)."""
    with EmbeddedCluster(server_binary, primaries=3, node_timeout_ms=120_000) as cluster:
        yield cluster


def _stopped_shard(cluster: EmbeddedCluster, topic: str) -> tuple[EmbeddedServer, set[int]]:
    """A primary other than the first (the clients' way in) and the topic's shards on it."""
    for node in cluster.primaries[1:]:
        shards = {
            s
            for s in range(SHARDS)
            if cluster.owner(redis.cluster.key_slot(k.ShardKeys(topic, s).ready.encode())) is node
        }
        if shards and len(shards) < SHARDS:
            return node, shards
    raise AssertionError(f"no primary but the first owns some of {topic!r}'s shards")


async def test_a_cluster_node_that_stops_answering_keeps_the_rows_of_its_shards(
    dsn: str, stoppable_cluster: EmbeddedCluster
) -> None:
    topic = next(
        t
        for t in (f"stopped-node-{n}" for n in range(100))
        if _shards_on_later_nodes(stoppable_cluster, t)
    )
    node, shards = _stopped_shard(stoppable_cluster, topic)
    assert node.pid is not None
    client = AsyncClient.from_url(f"{stoppable_cluster.url}?socket_timeout=1")
    relay = outbox.Relay(client, dsn, RelaySettings(**FAST))
    r = redis.cluster.RedisCluster.from_url(stoppable_cluster.url)
    await relay.start()
    try:
        first = commit(dsn, topic, COUNT)  # every node answers: placed, the topic made
        await eventually(
            lambda: asyncio.to_thread(fired_exactly, r, topic, first), timeout_s=30, what="first"
        )
        os.kill(node.pid, signal.SIGSTOP)
        try:
            later = commit(dsn, topic, COUNT)
            await failing_while(relay, dsn, on_shards(later, shards))
            live = {s for s in range(SHARDS) if s not in shards}  # (the stopped node: unasked)
            placed = await asyncio.to_thread(fired, r, topic, live)
            assert not on_shards(later, shards) & set(placed)
        finally:
            os.kill(node.pid, signal.SIGCONT)
        await eventually(
            lambda: asyncio.to_thread(fired_exactly, r, topic, first + later),
            timeout_s=60,
            what="every job fired once the node answers",
        )
        await until(lambda: not left(dsn), timeout_s=20, what="the rows deleted")
    finally:
        await relay.stop()
        await client.aclose()
        r.close()


def _shards_on_later_nodes(cluster: EmbeddedCluster, topic: str) -> bool:
    try:
        _stopped_shard(cluster, topic)
    except AssertionError:
        return False
    return True


@pytest.fixture
def pair(server_binary: ServerBinary) -> Iterator[tuple[EmbeddedServer, EmbeddedServer]]:
    """A primary and its linked replica."""
    with dedicated_server(server_binary, extra_args=SYNC_AT_ONCE) as primary:
        follow = ("--replicaof", primary.host, str(primary.port))
        with dedicated_server(server_binary, extra_args=follow) as replica:

            def linked() -> bool:
                with redis.Redis(port=replica.port) as r:
                    return r.info("replication").get("master_link_status") == "up"

            eventually_sync(linked, timeout_s=15, what="the replica's link")
            yield primary, replica


@pytest.mark.both_servers  # WAIT
async def test_rows_whose_ack_level_is_not_met_stay_until_the_replica_confirms(
    dsn: str, topic: str, pair: tuple[EmbeddedServer, EmbeddedServer]
) -> None:
    primary, replica = pair
    client = AsyncClient.from_url(primary.url, ack_replicas=1, ack_timeout_ms=300)
    relay = outbox.Relay(client, dsn, RelaySettings(**FAST), ack="replicated")
    r = redis.Redis.from_url(primary.url)
    await relay.check()  # the replica confirms: the relay may start
    await relay.start()
    try:
        first = commit(dsn, topic, COUNT)
        await until(lambda: relay.relayed == COUNT, timeout_s=20, what="the first rows")
        assert replica.pid is not None
        os.kill(replica.pid, signal.SIGSTOP)
        try:
            later = commit(dsn, topic, COUNT)
            await failing_while(relay, dsn, set(later))  # written, not confirmed: kept
        finally:
            os.kill(replica.pid, signal.SIGCONT)
        await until(lambda: not left(dsn), timeout_s=30, what="the rows confirmed and deleted")
        assert await asyncio.to_thread(fired_exactly, r, topic, first + later)
        assert relay.relayed == 2 * COUNT
    finally:
        await relay.stop()
        await client.aclose()
        r.close()


@pytest.mark.both_servers  # WAIT, WAITAOF
@pytest.mark.parametrize("ack", ["replicated", "persisted"])
def test_the_relay_command_refuses_an_ack_level_redis_does_not_confirm(
    dsn: str, server_binary: ServerBinary, ack: str
) -> None:
    with dedicated_server(server_binary, appendonly=True) as lone:  # no replica
        done = run_wheelq("relay", "--dsn", dsn, "--redis-url", lone.url, "--ack", ack)
    line = assert_one_line_error(done, 1, f"ack={ack!r}")
    # Valkey 9 has WAITAOF: 0 of 1 replicas confirm; redis-server 7.0 has none
    assert "0 of 1 replicas" in line or "WAITAOF" in line, line


@pytest.mark.both_servers  # WAIT
def test_a_scheduler_asked_to_relay_at_an_ack_level_redis_does_not_confirm_exits(
    dsn: str, redis_url: str, tmp_path: Path
) -> None:
    config = tmp_path / "wheelq.toml"
    config.write_text(f'[relay]\ndsn = "{dsn}"\nack = "replicated"\n')
    done = run_wheelq("scheduler", "--config", str(config), "--redis-url", redis_url)
    assert_one_line_error(done, 1, "ack='replicated'", "0 of 1 replicas")
