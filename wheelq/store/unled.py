"""Unled shards: the one definition of a shard with jobs coming due and no scheduler node
leading it (docs/operations/monitoring.md, "Unled shards"), and its bounded read.

A shard is *unled* when its lease key (``{T:s}:lease``) is absent while it holds pending
jobs due within `HORIZON_MS` of now on the Redis clock, overdue ones included, in the
sorted set or the far tier (`due_within.lua`). A lease held by a frozen or dead node counts
as a leader until it expires (``lease_ttl_ms``); a shard with nothing due soon is not unled,
whoever leads it. Each shard costs two calls in one slot (``EXISTS`` and ``due_within``:
O(log n) however large the backlog), sent `BATCH_SHARDS` shards a round trip.
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
    return [
        Call(command=("EXISTS", keys.lease), parse=bool),
        due_within(keys, [now_ms + HORIZON_MS]),
    ]


def shard_unled(replies: list[Any]) -> bool:
    """Whether a shard is unled, from the parsed replies of its `shard_calls`."""
    held, (due,) = replies
    return is_unled(bool(held), int(due))


def unled_topics(
    topics: Mapping[str, int], now_ms: int, led: Collection[ShardKeys] = ()
) -> UnledOp:
    """Every topic of `topics` (name -> shard count) with unled shards -> their numbers, in
    order (sans-I/O: yields batches of calls of `BATCH_SHARDS` shards). `led`: shards the
    caller leads itself, not asked about."""
    mine = {(k.topic, k.shard) for k in led}
    shards = [
        keys
        for topic, n in sorted(topics.items())
        for keys in all_shards(topic, n)
        if (keys.topic, keys.shard) not in mine
    ]
    found: dict[str, list[int]] = {}
    for start in range(0, len(shards), BATCH_SHARDS):
        batch = shards[start : start + BATCH_SHARDS]
        replies = yield [call for keys in batch for call in shard_calls(keys, now_ms)]
        for i, keys in enumerate(batch):
            if shard_unled(replies[2 * i : 2 * i + 2]):
                found.setdefault(keys.topic, []).append(keys.shard)
    return {topic: tuple(numbers) for topic, numbers in found.items()}
