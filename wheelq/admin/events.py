"""Job events, the producer's side: turning them on or off for a topic, and following them
(docs/architecture.md, "Job events")."""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncGenerator
from typing import Any

from wheelq.core import keys as k
from wheelq.core.events import Event, EventsConfig, Mark, events_of, parse_position
from wheelq.errors import UnknownTopicError, int_in
from wheelq.producer.operations import Op, Producer
from wheelq.store import events, limits, pauses
from wheelq.store.call import Call
from wheelq.store.executor import AsyncExecutor

BLOCK_MS = (10, 60_000)
"""The range of `follow`'s `block_ms`."""
CLUSTER_BLOCK_MS = 100
"""On a cluster, the longest block of one read (see `follow`)."""


def configure(producer: Producer, topic: str, config: EventsConfig) -> Op[EventsConfig]:
    """Write `config` into every shard (the scripts read it as they write); tell workers."""
    shards = yield from producer.shard_count(topic, create=True)
    assert shards is not None
    calls: list[Call[object]] = []
    for keys in k.all_shards(topic, shards):
        calls += limits.write_limits(keys, config.fields())
    yield from pauses.write_then_announce(topic, calls)  # workers read the setting again
    return config


def config_of(producer: Producer, topic: str) -> Op[EventsConfig]:
    """The topic's events setting (`UnknownTopicError` for a topic that does not exist)."""
    shards = yield from producer.shard_count(topic, create=False)
    if shards is None:
        raise UnknownTopicError(topic)
    (raw,) = yield [limits.read_limits(k.ShardKeys(topic, 0))]
    return EventsConfig.from_fields(raw)


def validated(topic: str, shards: int | None, since: str, block_ms: int) -> int:
    """`follow`'s arguments checked (the raises of `follow`); the shard count."""
    k.validate_topic(topic)
    if shards is None:
        raise UnknownTopicError(topic)
    int_in("block_ms", block_ms, *BLOCK_MS)
    if since not in ("now", "start"):
        parse_position(since, shards)  # InvalidArgumentError on since
    return shards


async def follow(
    executor: AsyncExecutor,
    topic: str,
    shards: int | None,
    since: str,
    block_ms: int,
    reads: int | None = None,
) -> AsyncGenerator[Event, None]:
    """Every event of `topic` after `since`, as they happen.

    On one server a single blocking read covers every shard (one connection, however many
    shards); on a cluster each shard has a slot of its own, so each is read on its own, at
    most `reads` at once (None: every shard at once), the others in turn.

    Raises:
        UnknownTopicError: `shards` is None (no such topic).
        InvalidArgumentError: `since` or `block_ms` is not valid (named).
    """
    shards = validated(topic, shards, since, block_ms)
    views = k.all_shards(topic, shards)
    # On a cluster a read is never cancelled (redis-py's cluster client cancelled while it
    # connects leaves a socket open): it blocks briefly and is waited for when the loop ends.
    cluster = executor.cluster
    if cluster:
        block_ms = min(block_ms, CLUSTER_BLOCK_MS)
    block_ms = executor.block_ms(block_ms)  # within the socket timeout: a longer wait reads again
    position: list[Mark]
    if since == "now":
        position = [(e, 0) for e in await executor.run([events.last_id(v) for v in views])]
    elif since == "start":
        position = [("0-0", 0)] * shards
    else:
        position = parse_position(since, shards)  # InvalidArgumentError on since
    # A position inside an entry: the rest of that entry first (nothing if trimmed since).
    partial = [(shard, mark) for shard, mark in enumerate(position) if mark[1]]
    if partial:
        got = await executor.run([events.entry(views[s], entry) for s, (entry, _) in partial])
        for (shard, (entry, read)), found in zip(partial, got, strict=True):
            for event in events_of(entry, found[0][1], position, shard, read) if found else ():
                yield event
            position[shard] = (entry, 0)
    # The shards each read covers: all of them on one server, one on a cluster.
    covers = [[s] for s in range(shards)] if cluster else [list(range(shards))]
    width = len(covers) if reads is None else max(1, min(reads, len(covers)))
    turns = collections.deque(range(len(covers)))
    shard_of = {view.events: shard for shard, view in enumerate(views)}
    running: dict[int, asyncio.Task[list[Any]]] = {}
    try:
        while True:
            while turns and len(running) < width:
                read = turns.popleft()
                covered = covers[read]
                call = events.read_waiting(
                    [views[s] for s in covered], [position[s][0] for s in covered], block_ms
                )
                running[read] = asyncio.ensure_future(executor.run([call]))
            await asyncio.wait(running.values(), return_when=asyncio.FIRST_COMPLETED)
            for read in sorted(running):
                task = running[read]
                if not task.done():
                    continue
                del running[read]
                turns.append(read)
                (got,) = task.result()  # raises what the read raised
                for key, entries in got:
                    shard = shard_of[key]
                    for entry_id, fields in entries:
                        for event in events_of(entry_id, fields, position, shard):
                            yield event
    finally:
        for task in running.values():
            task.add_done_callback(_retrieve)
            if not cluster:  # a blocked read is cancelled: its connection is dropped
                task.cancel()
        if running:
            with contextlib.suppress(BaseException):
                await asyncio.shield(asyncio.wait(running.values(), timeout=block_ms / 1000 + 2))


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Consume a read's outcome (a stop may close its connection under it)."""
    if not task.cancelled():
        task.exception()
