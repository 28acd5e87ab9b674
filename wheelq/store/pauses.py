"""Paused topics and groups in Redis: the `PAUSED_KEY` hash, and the `PAUSED_CHANNEL`
subscription that tells workers to look at it again (docs/architecture.md, "Pause and resume").
Pub/sub only makes a change prompt: a worker also reads the hash on every (re)subscription and
at a slow pace, so a lost message delays a pause, never loses it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterable
from typing import Any

import redis.asyncio
import redis.asyncio.cluster
from redis.asyncio.client import PubSub

from wheelq.core.keys import CALLBACKS, PAUSED_CHANNEL, PAUSED_KEY
from wheelq.core.pause import PauseState, fields_of, parse_pauses, pause_field, pause_fields
from wheelq.store.call import Call
from wheelq.store.executor import AsyncExecutor
from wheelq.store.scripts import text


def _ms(value: Any) -> int:
    """A pause's start; a field whose value is not a time still pauses (since 0)."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def read_pause_state(topic: str, groups: Iterable[str]) -> Call[PauseState]:
    """What is paused of `topic`, as far as the topic, `groups` and its callbacks group go
    (HMGET: bounded). The callbacks group reads a stream of its own, so views that name the
    ready stream's groups would miss its pause."""
    names = sorted({*groups, CALLBACKS})
    fields = [pause_field(topic, None), *(pause_field(topic, g) for g in names)]

    def parse(reply: Any) -> PauseState:
        found = {f: _ms(v) for f, v in zip(fields, reply, strict=True) if v is not None}
        return parse_pauses(topic, found)

    return Call(command=("HMGET", PAUSED_KEY, *fields), parse=parse)


def scan_pauses(topic: str, cursor: int = 0) -> Call[tuple[int, dict[str, int]]]:
    """One HSCAN page of the pause fields that may be `topic`'s (filter with `fields_of`):
    (the next cursor, 0 at the end; field -> ms)."""
    pattern = f"{topic}*"  # topic names hold no glob characters ([A-Za-z0-9_.-])

    def parse(reply: Any) -> tuple[int, dict[str, int]]:
        nxt, found = reply
        return int(nxt), {text(k, errors="replace"): _ms(v) for k, v in dict(found).items()}

    return Call(command=("HSCAN", PAUSED_KEY, cursor, "MATCH", pattern, "COUNT", 1000), parse=parse)


def topic_pauses(topic: str) -> Generator[list[Call[Any]], list[Any], dict[str, int]]:
    """Every pause field of `topic` (sans-I/O: HSCAN pages until the cursor is back at 0)."""
    cursor, found = 0, {}
    while True:
        ((cursor, page),) = yield [scan_pauses(topic, cursor)]
        found.update(page)
        if cursor == 0:
            return {name: found[name] for name in fields_of(found, topic)}


def read_pause_of(topic: str, group: str) -> Call[bool]:
    """Whether `group` of `topic` is paused (the topic as a whole, or the group)."""
    return Call(
        command=("HMGET", PAUSED_KEY, *pause_fields(topic, group)),
        parse=lambda reply: any(v is not None for v in reply),
    )


def write_pause(name: str, at_ms: int) -> Call[Any]:
    """Pause what the field `name` names, since `at_ms` (an existing pause keeps its time)."""
    return Call(command=("HSETNX", PAUSED_KEY, name, at_ms))


def clear_pauses(names: Iterable[str]) -> Call[int]:
    """Remove these pause fields; parses to how many there were."""
    return Call(command=("HDEL", PAUSED_KEY, *names), parse=int)


def announce(topic: str) -> Call[Any]:
    """Tell subscribed workers that `topic`'s pauses changed (PUBLISH; lost if none listen)."""
    return Call(command=("PUBLISH", PAUSED_CHANNEL, topic), keyless=True)


def write_then_announce(
    topic: str, writes: list[Call[Any]]
) -> Generator[list[Call[Any]], list[Any], list[Any]]:
    """Send `writes`, and once they are done, `announce` (sans-I/O; returns their replies).
    Never in one batch: on a cluster a batch's keyless PUBLISH is sent first, so a worker
    told would read the state before the write and wait for its next poll."""
    replies = yield writes
    yield [announce(topic)]
    return replies


class PauseSubscription:
    """A subscription to `PAUSED_CHANNEL` on a connection of its own. On a cluster, any node
    hears every PUBLISH, so it is a plain connection to one node (no cluster client to make:
    its first use parses COMMAND, a stall of tens of ms)."""

    @classmethod
    def of(cls, executor: AsyncExecutor) -> PauseSubscription:
        """The subscription for `executor`'s server (on a cluster, one of its nodes)."""
        client = executor.client
        if isinstance(client, redis.asyncio.cluster.RedisCluster):
            node = client.get_random_node()  # spread over the nodes; another after a failure
            pool = redis.asyncio.ConnectionPool(
                connection_class=node.connection_class, max_connections=1, **node.connection_kwargs
            )
            own = redis.asyncio.Redis.from_pool(pool)
            return cls(own.pubsub(), own)
        return cls(client.pubsub())

    def __init__(self, pubsub: PubSub, own: redis.asyncio.Redis | None = None) -> None:
        self._pubsub = pubsub
        self._own = own

    async def subscribe(self) -> None:
        await self._pubsub.subscribe(PAUSED_CHANNEL)

    async def changed(self, topics: frozenset[str], timeout_s: float) -> bool:
        """Wait up to `timeout_s`; True once a message names one of `topics` or the
        subscription was confirmed (again: messages may have been missed meanwhile)."""
        message = await self._pubsub.get_message(timeout=timeout_s)
        while message is not None:
            kind = message.get("type") if isinstance(message, dict) else None
            if kind == "subscribe":
                return True
            if kind == "message" and text(message.get("data") or b"", "replace") in topics:
                return True
            message = await self._pubsub.get_message(timeout=0)
        return False

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):  # closing: a broken one is closed too
            await self._pubsub.aclose()  # type: ignore[no-untyped-call]
        if self._own is not None:
            await self._own.aclose()
