"""One typed wrapper per Redis transition: build the `Call`, parse its reply.

Scripts are the state changes (one Lua file each); plain commands are
reads and single-key writes. Nothing here sends anything: executors in
`wheelq.store.calls` do, so the same wrappers serve the sync client, the
async client and the scheduler node.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from wheelq.core.keys import (
    TOPICS_KEY,
    Registry,
    ShardKeys,
    nodes_key,
    parse_registry,
    parse_shard_count,
)
from wheelq.core.schedule import DueSpec
from wheelq.errors import MalformedJobError
from wheelq.store.calls import Call
from wheelq.store.scripts import LEASE_LOST, check


class Placed(IntEnum):
    """What enqueue / reschedule did with a job."""

    SCHEDULED = 0
    FIRED = 1
    DUPLICATE = 2


@dataclass(frozen=True, slots=True)
class JobWrite:
    """One job for `enqueue`."""

    id: str
    due: DueSpec
    replace: bool
    envelope: bytes


@dataclass(frozen=True, slots=True)
class EmitResult:
    emitted: int
    more: bool
    orphans: int
    not_yet_due: list[tuple[str, int]]
    malformed: list[str] = field(default_factory=list)
    """Ids whose envelope could not be decoded: moved to the dead-letter stream."""
    held: list[str] = field(default_factory=list)
    """Ids due but held back by the byte budget: still pending, to emit next."""


@dataclass(frozen=True, slots=True)
class PreloadPage:
    cursor_ms: int
    server_now_ms: int
    full: bool
    jobs: list[tuple[str, int]]


@dataclass(frozen=True, slots=True)
class LeaseAttempt:
    held: bool
    """True when the caller holds the lease after the call."""
    new: bool
    """True when it was just acquired (not renewed)."""
    server_now_ms: int
    holder: str | None


def _pairs(flat: Sequence[Any]) -> list[tuple[str, int]]:
    return [(flat[i].decode(), int(float(flat[i + 1]))) for i in range(0, len(flat), 2)]


def enqueue(keys: ShardKeys, jobs: Sequence[JobWrite]) -> Call[list[Placed]]:
    args: list[str | bytes | int] = [keys.topic, keys.wake_channel]
    for job in jobs:
        mode, value = job.due.wire
        args += [job.id, mode, value, "1" if job.replace else "0", job.envelope]
    return Call(
        "enqueue",
        _shard_write_keys(keys),
        args,
        parse=lambda r: [Placed(c) for c in check("enqueue", r)[1:]],
    )


def reschedule(keys: ShardKeys, job_id: str, due: DueSpec) -> Call[Placed | None]:
    """Parses to the outcome, or None when the job is not pending; raises
    `MalformedJobError` when it is due now but its envelope cannot be decoded."""
    mode, value = due.wire

    def parse(reply: Any) -> Placed | None:
        r = check("reschedule", reply)
        if r[1] == 3:
            raise MalformedJobError(keys.topic, job_id, r[2].decode("utf-8", "replace"))
        return None if r[1] == 0 else (Placed.SCHEDULED if r[1] == 1 else Placed.FIRED)

    return Call(
        "reschedule",
        _shard_write_keys(keys),
        [keys.topic, keys.wake_channel, job_id, mode, value],
        parse=parse,
    )


def cancel(keys: ShardKeys, job_id: str) -> Call[bool]:
    return Call(
        "cancel",
        [keys.delayed, keys.jobs],
        [job_id],
        parse=lambda r: bool(check("cancel", r)[1]),
    )


NO_BYTE_BOUND = 2**52  # what "no byte bound" sends: more than any server holds


def emit_due(
    keys: ShardKeys,
    token: str,
    now_ms: int,
    ids: Sequence[str] = (),
    limit: int = 0,
    *,
    max_bytes: int | None = None,
) -> Call[EmitResult]:
    """Wheel mode with `ids`; sweep mode (oldest `limit` jobs due by `now_ms`) without.
    `max_bytes`: the envelope bytes one call moves (plus one envelope that does not fit);
    None: no byte bound."""
    if not ids and limit < 1:
        raise ValueError(f"limit must be >= 1 in sweep mode, got {limit}")

    def parse(reply: Any) -> EmitResult:
        r = check("emit_due", reply)
        return EmitResult(
            r[1],
            bool(r[2]),
            r[3],
            _pairs(r[4]),
            [m.decode() for m in r[5]],
            [h.decode() for h in r[6]],
        )

    return Call(
        "emit_due",
        [keys.delayed, keys.jobs, keys.ready, keys.lease, keys.dead],
        [token, keys.topic, now_ms, limit, NO_BYTE_BOUND if max_bytes is None else max_bytes, *ids],
        parse=parse,
    )


def preload(
    keys: ShardKeys, token: str, cursor_ms: int, window_ms: int, limit: int, ttl_ms: int
) -> Call[PreloadPage]:
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")

    def parse(reply: Any) -> PreloadPage:
        r = check("preload", reply)
        return PreloadPage(int(r[1]), int(r[2]), bool(r[3]), _pairs(r[4:]))

    return Call(
        "preload",
        [keys.delayed, keys.lease, keys.horizon],
        [token, cursor_ms, window_ms, limit, ttl_ms],
        parse=parse,
    )


def lease_acquire(keys: ShardKeys, token: str, ttl_ms: int) -> Call[LeaseAttempt]:
    def parse(reply: Any) -> LeaseAttempt:
        if reply[0] == 0:
            return LeaseAttempt(False, False, 0, reply[1].decode())
        return LeaseAttempt(True, reply[0] == 1, int(reply[1]), token)

    return Call(
        "lease_acquire", [keys.lease, keys.horizon, keys.inbox], [token, ttl_ms], parse=parse
    )


def lease_renew(keys: ShardKeys, token: str, ttl_ms: int) -> Call[bool]:
    """Parses to True when renewed, False when the lease is no longer the caller's."""
    return Call(
        "lease_renew",
        [keys.lease, keys.horizon],
        [token, ttl_ms],
        parse=lambda r: r[0] != LEASE_LOST,
    )


def lease_release(keys: ShardKeys, token: str) -> Call[bool]:
    return Call(
        "lease_release", [keys.lease, keys.horizon], [token], parse=lambda r: r[0] != LEASE_LOST
    )


@dataclass(frozen=True, slots=True)
class ShardDrop:
    dropped: bool
    pending: int
    """Jobs in the sorted set (0 in force mode: not counted)."""
    unacked: int
    """Ready-stream entries not yet acked, once per group (0 in force mode)."""


def drop_shard(keys: ShardKeys, mode: str) -> Call[ShardDrop]:
    """`mode`: ``check`` (count only), ``drop`` (delete when nothing is left to run) or
    ``force`` (delete whatever is there)."""
    if mode not in ("check", "drop", "force"):
        raise ValueError(f"mode must be check, drop or force, got {mode!r}")

    def parse(reply: Any) -> ShardDrop:
        r = check("drop_shard", reply)
        return ShardDrop(bool(r[1]), int(r[2]), int(r[3]))

    return Call("drop_shard", keys.data_keys, [mode], parse=parse)


@functools.lru_cache(maxsize=4096)
def _write_keys(keys: ShardKeys) -> tuple[str, ...]:
    return (keys.delayed, keys.jobs, keys.ready, keys.horizon, keys.inbox)


def _shard_write_keys(keys: ShardKeys) -> tuple[str, ...]:
    """The five keys enqueue, reschedule and retry write (built once per shard)."""
    return _write_keys(keys)


# --- plain commands -------------------------------------------------------------------------


def job_score(keys: ShardKeys, job_id: str) -> Call[int | None]:
    return Call(
        command=("ZSCORE", keys.delayed, job_id),
        parse=lambda r: None if r is None else int(float(r)),
    )


def job_envelope(keys: ShardKeys, job_id: str) -> Call[bytes | None]:
    return Call(command=("HGET", keys.jobs, job_id))


def pending_count(keys: ShardKeys) -> Call[int]:
    return Call(command=("ZCARD", keys.delayed), parse=int)


def ready_count(keys: ShardKeys) -> Call[int]:
    return Call(command=("XLEN", keys.ready), parse=int)


def dead_count(keys: ShardKeys) -> Call[int]:
    return Call(command=("XLEN", keys.dead), parse=int)


def drain_inbox(keys: ShardKeys, count: int) -> Call[list[tuple[str, int]]]:
    """Pop up to `count` "due:id" notes; parses to (id, due_ms) pairs."""

    def parse(reply: Any) -> list[tuple[str, int]]:
        out = []
        for note in reply or ():
            due, _, job_id = note.decode().partition(":")
            out.append((job_id, int(due)))
        return out

    return Call(command=("LPOP", keys.inbox, count), parse=parse)


def register_topic(topic: str, shards: int) -> Call[bool]:
    """HSETNX into the registry; parses to True when this call created the topic."""
    return Call(command=("HSETNX", TOPICS_KEY, topic, shards), parse=bool)


def topic_shards(topic: str) -> Call[int | None]:
    """Parses to the topic's shard count, None when it is not registered; raises
    `TopicConfigError` when the registry holds something else than a valid count."""
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


def forget_nodes(topic: str) -> Call[int]:
    """Delete the topic's node set (a topic being dropped)."""
    return Call(command=("UNLINK", nodes_key(topic)), parse=int)


def server_time() -> Call[float]:
    """Parses TIME to ms (float, µs precision)."""
    return Call(command=("TIME",), parse=lambda r: int(r[0]) * 1000 + int(r[1]) / 1000)


def heartbeat(topic: str, node_id: str, expires_ms: int) -> Call[int]:
    return Call(command=("ZADD", nodes_key(topic), expires_ms, node_id), parse=int)


def live_nodes(topic: str, now_ms: int) -> Call[list[str]]:
    return Call(
        command=("ZRANGE", nodes_key(topic), f"({now_ms}", "+inf", "BYSCORE"),
        parse=lambda r: [m.decode() for m in r],
    )


def forget_dead_nodes(topic: str, before_ms: int) -> Call[int]:
    return Call(command=("ZREMRANGEBYSCORE", nodes_key(topic), "-inf", before_ms), parse=int)


def leave(topic: str, node_id: str) -> Call[int]:
    return Call(command=("ZREM", nodes_key(topic), node_id), parse=int)


def server_config(name: str) -> Call[dict[str, str]]:
    def text(v: Any) -> str:
        return v.decode() if isinstance(v, bytes) else str(v)

    def parse(reply: Any) -> dict[str, str]:
        pairs = (
            reply.items() if isinstance(reply, dict) else zip(reply[::2], reply[1::2], strict=True)
        )
        return {text(k): text(v) for k, v in pairs}

    return Call(command=("CONFIG", "GET", name), parse=parse)
