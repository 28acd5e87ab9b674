"""Unled shards: the one definition of a shard with jobs coming due and no scheduler node
leading it (docs/operations/monitoring.md, "Unled shards"), and its bounded read.

A shard is *unled* when its lease key (``{T:s}:lease``) is absent while it holds pending
jobs due within `HORIZON_MS` of now on the Redis clock, overdue ones included, in the
sorted set or the far tier (`due_within.lua`). A lease held by a frozen or dead node counts
as a leader until it expires (``lease_ttl_ms``); a shard with nothing due soon is not unled,
whoever leads it. Each shard costs two calls in one slot (``EXISTS`` and ``due_within``:
O(log n) however large the backlog); `unled_topics` reads many topics `BATCH_SHARDS` shards
a round trip, asking for the jobs due only where no lease is.
"""

from __future__ import annotations

from collections.abc import Collection, Generator, Mapping
from typing import Any

from wheelq.core.keys import ShardKeys, all_shards
from wheelq.store.call import Call
from wheelq.store.observe import due_within

HORIZON_MS = 60_000
"""How soon a shard's jobs must come due for it to count as unled (overdue ones included)."""
BATCH_SHARDS = 500
"""Shards read per round trip by `unled_topics`."""

UnledOp = Generator[list[Call[Any]], list[Any], dict[str, tuple[int, ...]]]


def is_unled(lease_held: bool, due: int) -> bool:
    """The definition: no lease, and jobs due within the horizon (overdue included)."""
    return not lease_held and due > 0


def shard_calls(keys: ShardKeys, now_ms: int) -> list[Call[Any]]:
    """The two calls one shard's answer takes (one slot): its lease, its jobs due soon."""
    return [lease_exists(keys), due_soon(keys, now_ms)]


def lease_exists(keys: ShardKeys) -> Call[bool]:
    return Call(command=("EXISTS", keys.lease), parse=bool)


def due_soon(keys: ShardKeys, now_ms: int) -> Call[list[int]]:
    """The shard's pending jobs due within the horizon, overdue and far ones included."""
    return due_within(keys, [now_ms + HORIZON_MS])


def shard_unled(replies: list[Any]) -> bool:
    """Whether a shard is unled, from the parsed replies of its `shard_calls`."""
    held, (due,) = replies
    return is_unled(bool(held), int(due))


def unled_topics(topics: Mapping[str, int], now_ms: int, skip: Collection[str] = ()) -> UnledOp:
    """Every topic of `topics` (name -> shard count) with unled shards -> their numbers, in
    order (sans-I/O). Per batch of `BATCH_SHARDS` shards, a round trip of ``EXISTS`` a
    shard, then only if some lease is absent one of `due_within` for those: a fleet whose
    shards are all led costs one command a shard. `skip`: topics the caller leads itself
    (a scheduler node's), not read."""
    shards = [
        keys
        for topic, n in sorted(topics.items())
        if topic not in skip
        for keys in all_shards(topic, n)
    ]
    found: dict[str, list[int]] = {}
    for start in range(0, len(shards), BATCH_SHARDS):
        batch = shards[start : start + BATCH_SHARDS]
        held = yield [lease_exists(keys) for keys in batch]
        free = [keys for keys, leased in zip(batch, held, strict=True) if not leased]
        if not free:
            continue
        due = yield [due_soon(keys, now_ms) for keys in free]
        for keys, (count,) in zip(free, due, strict=True):
            if is_unled(False, count):
                found.setdefault(keys.topic, []).append(keys.shard)
    return {topic: tuple(numbers) for topic, numbers in found.items()}
