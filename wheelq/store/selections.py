"""The Redis side of bulk actions (`wheelq.core.bulk_actions`): a selection's sorted set per shard
(member: a job id or a dead letter's entry id; score: its due ms when selected) and its hash of
stamps (a job id -> its envelope's stamp when selected), and the reads of what a selected job
is now. Every call is bounded by its batch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from wheelq.core.history import SEPARATOR
from wheelq.core.keys import ShardKeys, selection_key, selection_mark_key, selection_stamps_key
from wheelq.store.call import Call, script_call
from wheelq.store.scripts import check, text


def remember(
    keys: ShardKeys, name: str, members: Sequence[tuple[str, int, str | None]], ttl_ms: int
) -> list[Call[Any]]:
    """Add (member, score, stamp) rows to the shard's selection `name`, which expires `ttl_ms`
    after this call; the first call's reply is how many members were new to it. A member given
    twice keeps its last row."""
    key, stamps_key = selection_key(keys, name), selection_stamps_key(keys, name)
    flat: list[str | int] = []
    stamps: list[str] = []
    for member, score, stamp in members:
        flat += [score, member]
        if stamp is not None:
            stamps += [member, stamp]
    calls = [Call(command=("ZADD", key, *flat), parse=int), _expire(key, ttl_ms)]
    if stamps:
        calls += [Call(command=("HSET", stamps_key, *stamps)), _expire(stamps_key, ttl_ms)]
    return calls


def _expire(key: str, ttl_ms: int) -> Call[Any]:
    return Call(command=("PEXPIRE", key, ttl_ms))


def take(keys: ShardKeys, name: str, count: int, ttl_ms: int) -> list[Call[Any]]:
    """Up to `count` (member, score) pairs of the selection, in member order (and its
    expiry pushed back: it is in use)."""
    key = selection_key(keys, name)

    def parse(reply: Any) -> list[tuple[str, int]]:
        return [(text(m), int(float(s))) for m, s in reply or ()]

    return [
        Call(command=("ZRANGE", key, 0, count - 1, "WITHSCORES"), parse=parse),
        _expire(key, ttl_ms),
        _expire(selection_stamps_key(keys, name), ttl_ms),
    ]


def stamps(keys: ShardKeys, name: str, members: Sequence[str]) -> Call[list[str]]:
    """Each member's stamp as the selection recorded it ("": none)."""
    return Call(
        command=("HMGET", selection_stamps_key(keys, name), *members),
        parse=lambda reply: ["" if s is None else text(s) for s in reply or ()],
    )


def open_mark(topic: str, name: str, ttl_ms: int) -> Call[Any]:
    """Mark the selection `name` as open: acts on it may go on (kept `ttl_ms`, in shard 0's
    slot)."""
    return Call(command=("SET", selection_mark_key(topic, name), 1, "PX", ttl_ms))


def is_open(topic: str, name: str, ttl_ms: int) -> Call[bool]:
    """Whether the selection is open (and, if it is, keep it `ttl_ms` longer)."""
    return Call(command=("PEXPIRE", selection_mark_key(topic, name), ttl_ms), parse=bool)


def close_mark(topic: str, name: str) -> Call[Any]:
    """The selection is used up: acting on it again is refused."""
    return Call(command=("DEL", selection_mark_key(topic, name)))


def forget(keys: ShardKeys, name: str, members: Sequence[str]) -> list[Call[int]]:
    return [
        Call(command=("ZREM", selection_key(keys, name), *members), parse=int),
        Call(command=("HDEL", selection_stamps_key(keys, name), *members), parse=int),
    ]


def size(keys: ShardKeys, name: str) -> Call[int]:
    return Call(command=("ZCARD", selection_key(keys, name)), parse=int)


def _pending(reply: Any) -> list[tuple[int, str] | None]:
    r = check("due_times", reply)
    return [
        None if due is False or due is None else (int(float(due)), text(stamp))
        for due, stamp in zip(r[1::2], r[2::2], strict=True)
    ]


def due_times(keys: ShardKeys, members: Sequence[str]) -> Call[list[tuple[int, str] | None]]:
    """Each member's (due ms, stamp) wherever it is pending, the sorted set or the far tier
    (None: not pending); a batch of at most `wheelq.core.bulk_actions.BATCH`
    (`due_times.lua`)."""
    return script_call("due_times", keys, list(members), _pending)


def in_retry_index(keys: ShardKeys, members: Sequence[str]) -> Call[list[bool]]:
    """Whether each member is in the index of pending retries."""
    return Call(
        command=("ZMSCORE", keys.retries, *members),
        parse=lambda r: [s is not None for s in r or ()],
    )


def alias_retry(keys: ShardKeys, job_id: str) -> Call[str | None]:
    """The first alias member a retry of `job_id` is pending under (None: none)."""
    return Call(
        command=(
            "ZRANGE",
            keys.retries,
            f"[{job_id}{SEPARATOR}",
            f"({job_id}\x20",
            "BYLEX",
            "LIMIT",
            0,
            1,
        ),
        parse=lambda r: text(r[0]) if r else None,
    )


def dead_exists(keys: ShardKeys, entry_ids: Sequence[str]) -> list[Call[bool]]:
    """Whether each dead letter is still in the shard's dead-letter stream."""
    return [
        Call(command=("XRANGE", keys.dead, entry_id, entry_id), parse=bool)
        for entry_id in entry_ids
    ]
