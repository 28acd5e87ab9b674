"""What a scheduler node knows of the node sets of the topics it serves, and when it must
read each again.

The lease keeper computes its quota from a topic's live nodes every check. Reading every
node set every check cost one command per topic per 250 ms; instead a node set is read
again only when
- the topic is new to this node,
- the membership counter moved (`wheelq.core.keys.MEMBERSHIP_KEY`: a node raises it after
  it joins or leaves a node set, so a joining node gets its share, and a leaving node's
  shards are taken over, within one check),
- the heartbeat expiry of a node it holds has come (that node may have died: its shards
  move on within the lease TTL plus one check, as before), or
- `refresh_ms` have passed since the last read (nodes of a version that does not raise the
  counter).
Pure bookkeeping: no I/O, times in ms on the node's clock.
"""

from __future__ import annotations

from collections.abc import Iterable


class NodeSets:
    """The live nodes of each served topic, as last read, and when to read them again.

    Args:
        node_id: This node (its own expiry never asks for a read: it heartbeats).
        refresh_ms: Longest time between two reads of one topic's node set.
    """

    def __init__(self, node_id: str, refresh_ms: int) -> None:
        self._node_id = node_id
        self._refresh_ms = refresh_ms
        self._live: dict[str, list[str]] = {}
        self._next_ms: dict[str, int] = {}
        self._version: int | None = None

    def to_read(self, topics: Iterable[str], now_ms: int, version: int | None) -> list[str]:
        """The topics whose node set must be read now, given the membership counter (None:
        unknown, every one)."""
        if version is None or version != self._version:
            self._version = version
            return list(topics)
        return [t for t in topics if t not in self._live or now_ms >= self._next_ms[t]]

    def update(self, topic: str, members: list[tuple[str, int]], now_ms: int) -> None:
        """Note a read of `topic`'s live nodes: (node id, heartbeat expiry ms) pairs."""
        self._live[topic] = [node for node, _ in members]
        expiries = [expiry for node, expiry in members if node != self._node_id]
        self._next_ms[topic] = min([*expiries, now_ms + self._refresh_ms])

    def live(self, topic: str) -> list[str]:
        """The live nodes of `topic` as last read (empty before the first read)."""
        return self._live.get(topic, [])

    def forget(self, topics: Iterable[str]) -> None:
        """Drop topics no longer served (read again if served again)."""
        for topic in topics:
            self._live.pop(topic, None)
            self._next_ms.pop(topic, None)

    def stale(self) -> None:
        """Read every node set at the next check (after a failed step)."""
        self._version = None
