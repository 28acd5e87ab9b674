"""The wake channels over sharded pub/sub: the subscription the scheduler's wake listener reads.

A script that writes a job inside a leader's preloaded window publishes the job's note
(``"<due ms>:<job id>"``, `wheelq.core.wire.parse_note`) with SPUBLISH (sharded pub/sub,
Redis >= 7.0) on the shard's wake channel (`wheelq.core.keys.ShardKeys.wake_channel`),
which carries the shard's hash tag: on a Redis Cluster the note stays on the node that
owns the shard. This module builds the subscription's commands (SSUBSCRIBE, SUNSUBSCRIBE,
reading messages) and turns messages into `WakeNote`s; what is done with them is the
listener's business. Pub/sub only makes the pick-up prompt: the inbox holds the same
notes durably.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Collection
from typing import Any, NamedTuple

import redis.asyncio
import redis.asyncio.cluster
from redis.asyncio.client import PubSub
from redis.asyncio.cluster import ClusterPubSub

from wheelq.core.wire import parse_note


class WakeNote(NamedTuple):
    """A job announced on a wake channel (a tuple: cheap to make, one per message)."""

    channel: str
    job_id: str
    due_ms: int


def wake_note(message: Any) -> WakeNote | None:
    """A pub/sub message as a `WakeNote`; None for anything else (a subscribe confirmation,
    a message that is not a note)."""
    if not isinstance(message, dict) or message.get("type") not in ("smessage", "message"):
        return None
    channel, data = message.get("channel"), message.get("data")
    if not isinstance(channel, bytes) or not isinstance(data, bytes):
        return None
    note = parse_note(data)
    if note is None:
        return None
    return WakeNote(channel.decode("utf-8", "replace"), *note)


class WakeSubscription:
    """Sharded pub/sub connections following a changing set of wake channels.

    The scripts publish with SPUBLISH, so a note travels only to the subscribers of
    the node that owns its shard: on a single server that is one connection; on a
    Redis Cluster redis-py's cluster pub/sub keeps one per node owning a followed
    channel and moves a subscription when its slot moves. `receive` listens on all
    of them at once, so a note waits for no other node's timeout.

    Args:
        connection: The client to take the pub/sub connections from (plain or cluster;
            they are connections of their own while subscribed).
    """

    def __init__(self, connection: redis.asyncio.Redis) -> None:
        self._cluster: ClusterPubSub | None = None
        if isinstance(connection, redis.asyncio.cluster.RedisCluster):
            self._cluster = connection.pubsub(ignore_subscribe_messages=True)
            self._pubsub: PubSub = self._cluster
        else:
            self._pubsub = connection.pubsub(ignore_subscribe_messages=True)
        self.channels: frozenset[str] = frozenset()
        """The channels subscribed to."""

    async def follow(self, channels: Collection[str]) -> None:
        """Subscribe to `channels` not subscribed yet, unsubscribe from the others. (When a
        slot moves, redis-py's cluster pub/sub moves its subscriptions to the new owner.)"""
        wanted = frozenset(channels)
        if wanted - self.channels:
            await self._pubsub.ssubscribe(*(wanted - self.channels))
        if self.channels - wanted:
            await self._pubsub.sunsubscribe(*(self.channels - wanted))
        self.channels = wanted

    async def receive(self, timeout_s: float) -> list[WakeNote]:
        """Wait up to `timeout_s` for a message; return the notes of it and of every message
        already arrived after it (on a cluster: from every node)."""
        if self._cluster is None:
            return _notes(await _drain(self._pubsub.get_message, timeout_s))
        cluster = self._cluster
        nodes = [cluster.cluster.get_node(node_name=n) for n in list(cluster.node_pubsub_mapping)]
        if not nodes:
            return []
        got = await asyncio.gather(
            *(
                _drain(functools.partial(cluster.get_sharded_message, target_node=node), timeout_s)
                for node in nodes
                if node is not None
            )
        )
        return _notes([m for messages in got for m in messages])

    async def aclose(self) -> None:
        """Close the pub/sub connections."""
        await self._pubsub.aclose()  # type: ignore[no-untyped-call]


async def _drain(get: Callable[..., Awaitable[Any]], timeout_s: float) -> list[Any]:
    """The first message within `timeout_s`, and every one already arrived after it."""
    messages = []
    message = await get(timeout=timeout_s)
    while message is not None:
        messages.append(message)
        message = await get(timeout=0)
    return messages


def _notes(messages: list[Any]) -> list[WakeNote]:
    return [note for m in messages if (note := wake_note(m)) is not None]
