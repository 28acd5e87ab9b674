"""The scheduler's wake-channel subscription: SSUBSCRIBE to the shards' wake channels and
their messages as `WakeNote`s. Pub/sub only makes pick-up prompt: the inbox holds the
same notes durably (docs/architecture.md, invariant 4).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Awaitable, Callable, Collection
from typing import Any, NamedTuple

import redis.asyncio
import redis.asyncio.cluster
from redis.asyncio.client import PubSub
from redis.asyncio.cluster import ClusterPubSub
from redis.exceptions import RedisError

from wheelq.core.follow import NUDGE
from wheelq.core.job import parse_notes
from wheelq.store.executor import AsyncExecutor, SeenNodes
from wheelq.store.scripts import text

RESYNC_S = 0.1
"""Least time between two slot-map reloads of a subscription missing channels."""

_text = functools.partial(text, errors="replace")


class WakeNote(NamedTuple):
    """A job announced on a wake channel (a tuple: cheap to make, one per note); a nudge
    (notices wait on the shard: `wheelq.core.follow`) has no job id and a due time of -1."""

    channel: str
    job_id: str
    due_ms: int


def wake_notes(message: Any) -> list[WakeNote] | None:
    """A pub/sub message's notes as `WakeNote`s; None for anything else."""
    if not isinstance(message, dict) or message.get("type") not in ("smessage", "message"):
        return None
    channel, data = message.get("channel"), message.get("data")
    if not isinstance(channel, bytes) or not isinstance(data, bytes):
        return None
    name = channel.decode("utf-8", "replace")
    if data == NUDGE:
        return [WakeNote(name, "", -1)]
    notes = parse_notes(data)
    if not notes:
        return None
    return [WakeNote(name, job_id, due_ms) for job_id, due_ms in notes]


class WakeSubscription:
    """Sharded pub/sub connections following a changing set of wake channels, read at once.

    On a cluster it needs a client of its own (`of`): redis-py's cluster pub/sub returns a
    node's connection to the pool while a read may still wait on it. `slot_map` (default
    `connection`) says where each channel lives: a node that loses a slot may fall silent.
    """

    @classmethod
    def of(cls, executor: AsyncExecutor) -> WakeSubscription:
        """The subscription for `executor`'s server (on a cluster, on a client of its own)."""
        own = executor.cluster_client()
        if own is None:
            return cls(executor.client)
        return cls(own, owned=True, slot_map=executor.client)

    def __init__(
        self,
        connection: redis.asyncio.Redis,
        *,
        owned: bool = False,
        slot_map: redis.asyncio.Redis | None = None,
    ) -> None:
        self._client = connection if owned else None
        self._map = slot_map or connection
        self._slots: dict[str, int] = {}
        self._cluster: ClusterPubSub | None = None
        if isinstance(connection, redis.asyncio.cluster.RedisCluster):
            self._cluster = connection.pubsub(ignore_subscribe_messages=False)
            self._pubsub: PubSub = self._cluster
        else:
            self._pubsub = connection.pubsub(ignore_subscribe_messages=False)
        self.channels: frozenset[str] = frozenset()
        self.confirmed: dict[str, str] = {}
        """Channel -> the node that confirmed its subscription ("" on a single server)."""
        self.fresh: set[str] = set()
        """Channels confirmed (again) since the caller cleared this: notes may have been missed."""
        self._seen: set[PubSub] = set()
        self._synced_at = -RESYNC_S
        self._nodes = SeenNodes()  # of an own client: closed with it
        self._connections: set[Any] = set()

    async def follow(self, channels: Collection[str]) -> None:
        """Subscribe to `channels` not subscribed yet, unsubscribe from the others."""
        wanted = frozenset(channels)
        if self._client is not None:
            await self._client.initialize()  # the slot map (a no-op once loaded)
        if wanted - self.channels:
            await self._pubsub.ssubscribe(*(wanted - self.channels))
        if self.channels - wanted:
            await self._pubsub.sunsubscribe(*(self.channels - wanted))
            for channel in self.channels - wanted:
                self.confirmed.pop(channel, None)
        self.channels = wanted

    def node_subscriptions(self) -> list[PubSub]:
        """On a cluster, the per-node subscriptions held now (one connection each)."""
        return [] if self._cluster is None else list(self._cluster.node_pubsub_mapping.values())

    async def receive(
        self, timeout_s: float, early: Callable[[list[WakeNote]], None] | None = None
    ) -> list[WakeNote]:
        """Wait up to `timeout_s` for a message; the notes of it and of every one since. On a
        cluster each node is read for up to `timeout_s`: with `early`, each node's notes are
        handed to it as they arrive, and a node that had some is read on until then (a
        nudge need not wait for the quiet nodes' timeouts, nor a second one on a busy node
        for the next call), and what is returned is only what it was not handed."""
        if self._cluster is None:
            return self._notes(await _drain(self._pubsub.get_message, timeout_s), "")
        cluster = self._cluster
        held: dict[str, str] = {}  # channel -> the node whose subscription holds it
        for name, pubsub in list(cluster.node_pubsub_mapping.items()):
            self._seen.add(pubsub)
            if pubsub.connection is not None:
                self._connections.add(pubsub.connection)
            held.update((_text(c), name) for c in pubsub.shard_channels)
        moved = [c for c in self.channels if held.get(c) != self._owner(c, held.get(c))]
        for channel in moved:  # held elsewhere than its owner: notes may not reach us
            self.confirmed.pop(channel, None)
        if moved:
            await self._resync(cluster.cluster)
        nodes = [cluster.cluster.get_node(node_name=n) for n in list(cluster.node_pubsub_mapping)]
        if not any(nodes):
            await asyncio.sleep(timeout_s)
            return []
        live = [node for node in nodes if node is not None]
        notes: list[WakeNote] = []
        deadline = time.monotonic() + timeout_s

        async def read(node: Any) -> None:
            get = functools.partial(cluster.get_sharded_message, target_node=node)
            while True:  # with `early`, a busy node is read on while the quiet ones wait
                messages = await _drain(get, max(0.0, deadline - time.monotonic()))
                got = self._notes(messages, node.name)
                if early is None or not got:
                    notes.extend(got)
                    return
                early(got)
                if time.monotonic() >= deadline:
                    return

        reads = [asyncio.ensure_future(read(node)) for node in live]
        try:
            for done in asyncio.as_completed(reads):
                await done
        finally:
            for one in reads:  # only when one failed: the subscription is made again
                one.cancel()
        return notes

    def _notes(self, messages: list[Any], node: str) -> list[WakeNote]:
        """The notes among `messages`; subscription confirmations update `confirmed` and `fresh`."""
        notes = []
        for message in messages:
            got = wake_notes(message)
            if got is not None:
                notes += got
                continue
            kind = message.get("type") if isinstance(message, dict) else None
            if kind in ("ssubscribe", "sunsubscribe"):
                channel = _text(message.get("channel") or b"")
                if kind == "sunsubscribe":
                    if self.confirmed.get(channel) == node:  # not a move's new owner's
                        del self.confirmed[channel]
                elif channel in self.channels:
                    self.confirmed[channel] = node
                    self.fresh.add(channel)
        return notes

    def _owner(self, channel: str, held_by: str | None) -> str | None:
        """The node owning `channel` in `slot_map`; `held_by` when the map can't say."""
        if not isinstance(self._map, redis.asyncio.cluster.RedisCluster):
            return held_by
        slot = self._slots.get(channel)
        if slot is None:
            slot = self._slots[channel] = self._map.keyslot(channel)
        try:
            return self._map.nodes_manager.get_node_from_slot(slot).name
        except (RedisError, LookupError):  # the slot is not covered right now
            return held_by

    async def _resync(self, client: redis.asyncio.cluster.RedisCluster) -> None:
        """Reload the client's slot map, at most once per `RESYNC_S`."""
        now = time.monotonic()
        if now - self._synced_at < RESYNC_S:
            return
        self._synced_at = now
        seen = self._nodes if self._client is not None else SeenNodes()  # shared: not ours
        seen.note(client)
        with contextlib.suppress(RedisError, OSError):  # tried again at the next receive
            await client.nodes_manager.initialize()
        seen.note(client)

    async def aclose(self) -> None:
        """Close the pub/sub connections (on a cluster, of every node seen: redis-py does not)."""
        try:
            for pubsub in (self._pubsub, *self._seen):
                with contextlib.suppress(Exception):  # closing: a broken one is closed too
                    await pubsub.aclose()  # type: ignore[no-untyped-call]
            for connection in self._connections:
                with contextlib.suppress(Exception):
                    await connection.disconnect(nowait=True)
        finally:  # a client of its own is closed even when the above was cancelled
            self._seen.clear()
            self._connections.clear()
            self._nodes.note(self._client)
            if self._client is not None:
                await self._client.aclose()
            await self._nodes.close()


async def _drain(get: Callable[..., Awaitable[Any]], timeout_s: float) -> list[Any]:
    """The first message within `timeout_s`, and every one already arrived after it."""
    messages = []
    message = await get(timeout=timeout_s)
    while message is not None:
        messages.append(message)
        message = await get(timeout=0)
    return messages
