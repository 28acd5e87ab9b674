"""The wake subscription on a Redis Cluster whose slots move: it reads on connections no
command uses, and it follows a followed channel's slot to its new owner.

redis-py's cluster pub/sub lends a node's pooled connection to each per-node subscription
and, when a slot move leaves that subscription empty, hands the connection back to the pool
while a read may still wait on it. Shared with the scheduler's commands, the next command
took it and two coroutines read one socket ("read() called while another coroutine is
already waiting"); so the subscription runs on a client of its own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
import redis.asyncio.cluster

from tests.integration.test_worker import holds
from tests.support.waiting import eventually
from wheelq.core.keys import ShardKeys
from wheelq.store import connect
from wheelq.store.executor import AsyncExecutor
from wheelq.store.wake import WakeSubscription
from wheelq.testing import EmbeddedCluster, ServerBinary

pytestmark = [
    pytest.mark.slow,
    pytest.mark.both_servers,  # the cluster: sharded pub/sub across slot moves
]


@pytest.fixture
def moving_cluster(server_binary: ServerBinary) -> Iterator[EmbeddedCluster]:
    """A cluster of its own: these tests move slots."""
    with EmbeddedCluster(server_binary, primaries=2) as c:
        yield c


async def _executor(url: str) -> AsyncExecutor:
    executor = connect.async_executor(url, {}, None)
    assert await executor.resolve()
    return executor


def _commands_client(executor: AsyncExecutor) -> redis.asyncio.cluster.RedisCluster:
    client = executor.client
    assert isinstance(client, redis.asyncio.cluster.RedisCluster)
    return client


async def test_the_subscription_reads_on_connections_no_command_is_sent_on(
    moving_cluster: EmbeddedCluster, topic: str
) -> None:
    executor = await _executor(moving_cluster.url)
    channels = [ShardKeys(topic, s).wake_channel for s in range(4)]
    subscription = WakeSubscription.of(executor)
    try:
        await subscription.follow(channels)
        await subscription.receive(0.05)
        commands = _commands_client(executor)
        await commands.ping(target_nodes=commands.ALL_NODES)
        # The redis-py objects under test: the subscriptions' sockets and the node pools.
        reading = {id(p.connection) for p in subscription.node_subscriptions()}
        pooled = {id(c) for node in commands.get_nodes() for c in node._connections}
        assert reading, "no subscription connection"
        assert not reading & pooled
    finally:
        await subscription.aclose()
        await executor.aclose()


async def test_a_followed_channel_is_read_on_its_new_owner_after_its_slot_moves(
    moving_cluster: EmbeddedCluster, topic: str
) -> None:
    cluster = moving_cluster
    executor = await _executor(cluster.url)
    commands = _commands_client(executor)
    channel = ShardKeys(topic, 0).wake_channel
    slot = commands.keyslot(channel)
    subscription = WakeSubscription.of(executor)
    try:
        await subscription.follow([channel])
        owner = cluster.owner(slot)
        to = next(p for p in cluster.primaries if p is not owner)
        await asyncio.to_thread(cluster.migrate_slot, slot, to)
        sent = 0

        async def a_note_arrives_from_the_new_owner() -> bool:
            nonlocal sent
            sent += 1
            await commands.spublish(channel, f"{sent}:after-the-move".encode())
            notes = await subscription.receive(0.1)
            return any(note.job_id == "after-the-move" for note in notes)

        await eventually(a_note_arrives_from_the_new_owner, timeout_s=10, what="a note")
        with cluster.client(to) as new_owner:
            _, count = new_owner.execute_command("PUBSUB", "SHARDNUMSUB", channel)
        assert count == 1
    finally:
        await subscription.aclose()
        await executor.aclose()


async def test_a_busy_nodes_next_note_is_handed_on_while_a_quiet_node_waits(
    moving_cluster: EmbeddedCluster, topic: str
) -> None:
    """A second note on one node reached the scheduler only when the quiet nodes' reads
    timed out (the poll, 100 ms) and the next receive began: a join's parent waited that
    long for its last child's nudge. Now a node with notes is read on meanwhile."""
    cluster = moving_cluster
    executor = await _executor(cluster.url)
    commands = _commands_client(executor)
    by_node: dict[int, str] = {}
    for shard in range(64):
        channel = ShardKeys(topic, shard).wake_channel
        by_node.setdefault(cluster.owner(commands.keyslot(channel)).port, channel)
    assert len(by_node) == 2  # one busy node, one quiet
    busy = next(iter(by_node.values()))
    subscription = WakeSubscription.of(executor)
    handed: list[tuple[float, str]] = []
    try:
        await subscription.follow(list(by_node.values()))
        await subscription.receive(0.05)  # the subscriptions confirmed
        wait_s = 2.0
        receiving = asyncio.ensure_future(
            subscription.receive(
                wait_s, lambda notes: handed.extend((time.monotonic(), n.job_id) for n in notes)
            )
        )
        await commands.spublish(busy, b"1:first")
        await eventually(holds(lambda: bool(handed)), timeout_s=wait_s, what="the first note")
        sent = time.monotonic()
        await commands.spublish(busy, b"2:second")
        await eventually(holds(lambda: len(handed) == 2), timeout_s=wait_s, what="the second")
        assert [job for _, job in handed] == ["first", "second"]
        assert handed[1][0] - sent < 0.25 * wait_s  # not held until the quiet node's timeout
        assert await receiving == []  # handed on, not returned
    finally:
        await subscription.aclose()
        await executor.aclose()


async def test_closing_closes_its_own_client_even_when_its_subscription_fails_to_close(
    moving_cluster: EmbeddedCluster, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    executor = await _executor(moving_cluster.url)
    subscription = WakeSubscription.of(executor)
    try:
        await subscription.follow([ShardKeys(topic, s).wake_channel for s in range(4)])
        await subscription.receive(0.05)
        # The objects under test: the subscription's own client, and redis-py's cluster
        # pub/sub, made to fail as it does when a node's socket is already broken.
        own = subscription._client
        assert isinstance(own, redis.asyncio.cluster.RedisCluster)
        assert any(c.is_connected for n in own.get_nodes() for c in n._connections)

        async def broken() -> None:
            raise ConnectionError("gone")

        monkeypatch.setattr(subscription._pubsub, "aclose", broken)
        await subscription.aclose()

        assert not any(c.is_connected for n in own.get_nodes() for c in n._connections)
    finally:
        await executor.aclose()
