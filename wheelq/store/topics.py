"""Topics in Redis: the registry (``wheelq:topics``), the topics with callbacks
(``wheelq:callback_topics``), whether a topic's stream exists, and dropping a shard.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from wheelq.core.keys import (
    CALLBACK_TOPICS_KEY,
    TOPICS_KEY,
    Registry,
    ShardKeys,
    parse_registry,
    parse_shard_count,
)
from wheelq.store.call import Call, script_call
from wheelq.store.scripts import check


def register_topic(topic: str, shards: int) -> Call[bool]:
    """HSETNX into the registry; parses to True when this call created the topic."""
    return Call(command=("HSETNX", TOPICS_KEY, topic, shards), parse=bool)


def topic_shards(topic: str) -> Call[int | None]:
    """The topic's shard count, None if unregistered; `TopicConfigError` if the entry is invalid."""
    return Call(
        command=("HGET", TOPICS_KEY, topic),
        parse=lambda r: None if r is None else parse_shard_count(topic, r),
    )


def all_topics() -> Call[Registry]:
    """Parses to the registry: valid entries and the errors of invalid ones."""
    return Call(command=("HGETALL", TOPICS_KEY), parse=lambda r: parse_registry(dict(r)))


def unregister_topic(topic: str) -> Call[bool]:
    """HDEL from the registry; parses to True when the entry was there."""
    return Call(command=("HDEL", TOPICS_KEY, topic), parse=bool)


def mark_callback_topic(topic: str) -> Call[Any]:
    """Note that `topic` has jobs with a callback (SADD to the deliverer's list)."""
    return Call(command=("SADD", CALLBACK_TOPICS_KEY, topic))


def callback_topics() -> Call[set[str]]:
    """Parses to the topics that have had a job with a callback."""
    return Call(
        command=("SMEMBERS", CALLBACK_TOPICS_KEY),
        parse=lambda r: {m.decode("utf-8", "replace") if isinstance(m, bytes) else m for m in r},
    )


def unmark_callback_topic(topic: str) -> Call[Any]:
    return Call(command=("SREM", CALLBACK_TOPICS_KEY, topic))


def exists(key: str) -> Call[bool]:
    return Call(command=("EXISTS", key), parse=bool)


@dataclass(frozen=True, slots=True)
class ShardDrop:
    """The outcome of `drop_shard.lua`: dropped, or refused for what is still there."""

    dropped: bool
    pending: int
    """Jobs in the sorted set (0 in force mode: not counted)."""
    unacked: int
    """Ready-stream entries not yet acked, once per group (0 in force mode)."""
    more: bool = False
    """Part of the far tier was deleted and some is left: call again (`DROP_STEP`)."""


DROP_STEP = 1000
"""Far-tier keys (leaves, index hashes) one `drop_shard` call deletes at most."""


def drop_shard(keys: ShardKeys, mode: str, step: int | None = None) -> Call[ShardDrop]:
    """`mode`: ``check`` (count only), ``drop`` (only when nothing is left) or ``force``; a
    call deletes at most `step` (`DROP_STEP`) far-tier keys, and says `ShardDrop.more` while
    some are left."""
    if mode not in ("check", "drop", "force"):
        raise ValueError(f"mode must be check, drop or force, got {mode!r}")

    def parse(reply: Any) -> ShardDrop:
        r = check("drop_shard", reply)
        return ShardDrop(bool(r[1]), int(r[2]), int(r[3]), r[4] == 1)

    return script_call("drop_shard", keys, [mode, step or DROP_STEP], parse)
