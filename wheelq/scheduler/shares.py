"""How scheduler nodes divide shards between them, without talking to each other.

Each node sees the same list of live nodes (a Redis sorted set of
heartbeats). From it every node derives its own quota: the shards divided
evenly, the remainder going to the nodes first in id order. A node below
its quota takes free shards, a node above it releases some, so the shards
settle into an even split and a joining node gets its share handed over.

Which shards a node prefers is rendezvous hashing: each node ranks every
shard by a hash of (node id, shard), so two nodes rarely race for the same
free shard and a node keeps "its" shards across restarts of others.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from typing import TypeVar

S = TypeVar("S")


def quota(node_id: str, live_nodes: Iterable[str], total_shards: int) -> int:
    """How many shards `node_id` should lead when `live_nodes` share `total_shards`.

    A node missing from `live_nodes` (its heartbeat not yet visible) counts
    itself in, so a lone starting node takes everything.
    """
    nodes = sorted(set(live_nodes) | {node_id})
    base, extra = divmod(total_shards, len(nodes))
    return base + (1 if nodes.index(node_id) < extra else 0)


def preference(node_id: str, shard_name: str) -> int:
    """Rendezvous weight of a shard for a node: higher is preferred."""
    return zlib.crc32(f"{node_id}/{shard_name}".encode())


def rank(node_id: str, shards: Sequence[S], name: dict[S, str]) -> list[S]:
    """`shards` ordered from most to least preferred by `node_id`."""
    return sorted(shards, key=lambda s: preference(node_id, name[s]), reverse=True)
