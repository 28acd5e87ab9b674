"""The due line, the producer's read: a topic's jobs waiting on it, by priority, and its keys
furthest behind (docs/architecture.md, "Seeing the line")."""

from __future__ import annotations

from wheelq.core import keys as k
from wheelq.core.line import LineView, line_of
from wheelq.errors import UnknownTopicError
from wheelq.producer.operations import Op, Producer
from wheelq.store import server
from wheelq.store.line import read_lines


def line(producer: Producer, topic: str) -> Op[LineView]:
    """Read `topic`'s due line: the server's TIME, then `read_lines` of every shard.

    Raises:
        UnknownTopicError: No such topic.
    """
    shards = yield from producer.shard_count(topic, create=False)
    if shards is None:
        raise UnknownTopicError(topic)
    (now,) = yield [server.server_time()]
    now_ms = int(now)
    found = yield from read_lines(k.all_shards(topic, shards), now_ms)
    return line_of(topic, now_ms, found)
