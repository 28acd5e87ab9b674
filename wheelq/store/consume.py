"""The consuming side's calls: group setup, read, ack, retry, dead letters, claims, trimming."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from wheelq.core.history import SEPARATOR, pack_success
from wheelq.core.keys import ShardKeys
from wheelq.store.call import Call, script_call
from wheelq.store.scripts import check, text

Entry = tuple[str, dict[bytes, bytes]]

ZERO_ID = "0-0"


def _fields(flat: Any) -> dict[bytes, bytes]:
    if isinstance(flat, dict):
        return dict(flat)
    return {flat[i]: flat[i + 1] for i in range(0, len(flat or ()), 2)}


def _entries(raw: Any) -> list[Entry]:
    return [(text(entry_id), _fields(fields)) for entry_id, fields in raw or ()]


def shared_secret(key: str, candidate: str) -> list[Call[Any]]:
    """SET NX then GET, sent in one `run`: every caller gets the first value written."""
    return [
        Call(command=("SET", key, candidate, "NX")),
        Call(command=("GET", key), parse=lambda r: text(r) if r is not None else ""),
    ]


def create_group(keys: ShardKeys, group: str, start_id: str = "0") -> Call[Any]:
    """XGROUP CREATE ... MKSTREAM at `start_id` ("0": entries fired before any worker too)."""
    return Call(command=("XGROUP", "CREATE", keys.stream, group, start_id, "MKSTREAM"))


def read_group(
    streams: Sequence[ShardKeys], group: str, consumer: str, count: int, block_ms: int | None
) -> Call[list[tuple[int, Entry]]]:
    """XREADGROUP of new entries of several shard streams; parses to (shard, entry) pairs."""
    by_key = {keys.stream: keys.shard for keys in streams}
    block = () if block_ms is None else ("BLOCK", block_ms)

    def parse(reply: Any) -> list[tuple[int, Entry]]:
        if isinstance(reply, dict):  # RESP3
            reply = list(reply.items())
        out: list[tuple[int, Entry]] = []
        for key, raw in reply or ():
            shard = by_key[text(key)]
            out += [(shard, e) for e in _entries(raw[0] if _nested(raw) else raw)]
        return out

    head = ("XREADGROUP", "GROUP", group, consumer, "COUNT", count, *block, "STREAMS")
    return Call(command=(*head, *by_key, *([">"] * len(by_key))), parse=parse)


def _nested(raw: Any) -> bool:
    return bool(raw) and isinstance(raw[0], list) and bool(raw[0]) and isinstance(raw[0][0], list)


def ack(keys: ShardKeys, group: str, entry_ids: Sequence[str]) -> Call[int]:
    """Plain XACK, no history record (entries meant for another group, malformed ones)."""
    return Call(command=("XACK", keys.stream, group, *entry_ids), parse=int)


Done = tuple[str, str, int, int, bytes | None, int]
"""A run that succeeded: (entry id, job id, when it ended ms, how long it ran ms, what the
handler returned as msgpack: None when it returned None, the attempt: 0 when not known)."""
Started = tuple[str, int]
"""A handler that started: (job id, attempt)."""
Delivery = tuple[str, int]
"""One delivery of a pending entry, as a pull receipt names it: (consumer, count)."""


def ack_done(
    keys: ShardKeys, group: str, done: Sequence[Done], started: Sequence[Started] = ()
) -> Call[int]:
    """Ack succeeded runs and record them in the history; parses to how many were acked.
    `started`: handlers of the shard that started since the last round, noted first as job
    events while the topic has them on (one call: a job's start precedes its end).

    The records are packed here as two msgpack arguments: in Lua they cost Redis more.
    """
    args = [*_ack_args(group, done), _started_arg(started)]
    return script_call("ack", keys, args, lambda r: int(check("ack", r)[1]))


def ack_delivered(
    keys: ShardKeys, group: str, done: Sequence[Done], deliveries: Sequence[Delivery]
) -> Call[list[int]]:
    """`ack_done` of pull receipts while pending to their delivery: 1 acked, 0 not, -1 later."""
    fences = msgpack.packb([v for d in deliveries for v in d], use_bin_type=False)

    def parse(reply: Any) -> list[int]:
        r = check("ack", reply)
        return [int(v) for v in r[2]] if len(r) > 2 else []

    return script_call("ack", keys, [*_ack_args(group, done), "", fences], parse)


def _started_arg(started: Sequence[Started]) -> bytes | str:
    if not started:
        return ""
    packed: bytes = msgpack.packb([v for job in started for v in job], use_bin_type=False)
    return packed


def _ack_args(group: str, done: Sequence[Done]) -> list[str | bytes]:
    suffix = SEPARATOR + group
    entries: list[str] = []
    pairs: list[str | bytes] = []
    attempts: list[int] = []
    results = 0
    for entry, job_id, at_ms, took_ms, result, attempt in done:
        entries.append(entry)
        pairs.append(job_id + suffix)
        pairs.append(pack_success(entry, at_ms, min(max(took_ms, 0), MAX_RUN_MS), result))
        attempts.append(attempt)
        if result is not None:
            results += len(result)
    packed = [msgpack.packb(entries), msgpack.packb(pairs, use_bin_type=False)]
    return [group, *packed, results, msgpack.packb(attempts)]


MAX_RUN_MS = 2**32 - 1
"""The longest run time a success record holds (49 days); below 0 it holds 0."""


@dataclass(frozen=True, slots=True)
class Retried:
    """What `retry.lua` did: `done` (back as `member` due `due_ms`), else `stale` or not pending."""

    done: bool
    due_ms: int = 0
    member: str = ""
    stale: bool = False


def retry(
    keys: ShardKeys,
    group: str,
    entry_id: str,
    job_id: str,
    delay_ms: int,
    envelope: bytes,
    error: str = "",
    ended_ms: int = 0,
    delivery: Delivery | None = None,
) -> Call[Retried]:
    """Ack a failed run and put it back `delay_ms` from now, in `group` only."""

    def parse(reply: Any) -> Retried:
        r = check("retry", reply)
        if r[1] == 1:
            return Retried(True, int(r[2]), text(r[3]))
        return Retried(False, stale=r[1] == -1)

    args: list[str | bytes | int] = [group, entry_id, job_id, delay_ms, envelope]
    args += [keys.wake_channel, error, ended_ms]
    if delivery is not None:
        args += delivery
    return script_call("retry", keys, args, parse)


def dead_letter(keys: ShardKeys, group: str, entries: Sequence[tuple[str, str, str]]) -> Call[int]:
    """Dead-letter (entry id, reason, error) triples; parses to how many were."""
    args = _dead_letter_args(group, ("", 0), entries)
    return script_call("dead_letter", keys, args, lambda r: int(check("dead_letter", r)[1]))


def dead_letter_delivered(
    keys: ShardKeys, group: str, entry: tuple[str, str, str], delivery: Delivery
) -> Call[int]:
    """Dead-letter a pull receipt's (entry id, reason, error) while pending to `delivery`."""

    def parse(reply: Any) -> int:
        r = check("dead_letter", reply)
        return -1 if int(r[2]) else int(r[1])

    return script_call("dead_letter", keys, _dead_letter_args(group, delivery, [entry]), parse)


def _dead_letter_args(
    group: str, delivery: Delivery, entries: Sequence[tuple[str, str, str]]
) -> list[str | bytes | int]:
    args: list[str | bytes | int] = [group, *delivery]
    for entry_id, reason, error in entries:
        args += [entry_id, reason, error]
    return args


@dataclass(frozen=True, slots=True)
class Claimed:
    """What one `claim.lua` call took over, dead-lettered, and where its scan goes on."""

    cursor: str
    dead_lettered: int
    entries: list[Entry]
    deliveries: list[int]  # each entry's delivery count, this one included


def claim(
    keys: ShardKeys,
    group: str,
    consumer: str,
    min_idle_ms: int,
    cursor: str,
    count: int,
    max_deliveries: int,
) -> Call[Claimed]:
    def parse(reply: Any) -> Claimed:
        r = check("claim", reply)
        flat = r[3:]
        entries = [(text(flat[i]), _fields(flat[i + 2])) for i in range(0, len(flat), 3)]
        deliveries = [int(flat[i + 1]) for i in range(0, len(flat), 3)]
        return Claimed(text(r[1]), int(r[2]), entries, deliveries)

    return script_call(
        "claim", keys, [group, consumer, min_idle_ms, cursor, count, max_deliveries], parse
    )


def touch(
    keys: ShardKeys, group: str, consumer: str, idle_ms: int, entry_ids: Sequence[str]
) -> Call[list[str]]:
    """Refresh claims (idle 0) or hand entries on; parses to the ids no longer held."""
    return script_call(
        "touch",
        keys,
        [group, consumer, idle_ms, *entry_ids],
        lambda r: [text(x) for x in check("touch", r)[1:]],
    )


def pending_of(keys: ShardKeys, group: str, consumer: str, count: int) -> Call[list[str]]:
    """Ids pending for one consumer (XPENDING extended form)."""
    return Call(
        command=("XPENDING", keys.stream, group, "-", "+", count, consumer),
        parse=lambda r: [text(row["message_id"]) for row in r or ()],
        options={"parse_detail": True},
    )


def delete_consumer(keys: ShardKeys, group: str, consumer: str) -> Call[int]:
    return Call(command=("XGROUP", "DELCONSUMER", keys.stream, group, consumer), parse=int)


@dataclass(frozen=True, slots=True)
class Trimmed:
    """What one `trim.lua` call removed, and whether more is due for removal."""

    trimmed: int
    more: bool
    consumers_deleted: int


def trim(
    keys: ShardKeys, retention_ms: int, limit: int, consumer_idle_ms: int, max_bytes: int = 0
) -> Call[Trimmed]:
    """Trim acked entries past `retention_ms` (or over `max_bytes`), about `limit` a call."""

    def parse(reply: Any) -> Trimmed:
        r = check("trim", reply)
        return Trimmed(int(r[1]), bool(r[2]), int(r[3]))

    return script_call("trim", keys, [retention_ms, limit, consumer_idle_ms, max_bytes], parse)


def _range(key: str, start: str, count: int) -> Call[list[Entry]]:
    return Call(command=("XRANGE", key, start, "+", "COUNT", count), parse=_entries)


def read_ready(keys: ShardKeys, start: str, count: int) -> Call[list[Entry]]:
    """Ready-stream entries from `start` (``"-"``: the oldest; ``"(id"``: after one)."""
    return _range(keys.ready, start, count)


# --- results' waiters ------------------------------------------------------------------------


def await_outcome(keys: ShardKeys, field: str, until_ms: int, now_ms: int) -> list[Call[Any]]:
    """Register a wait for history field `field` (``id<US>group``) until `until_ms` (the
    waiter's clock) in `{T:s}:waiters`, and read `{T:s}:done`'s last entry; the last call
    parses to the id to read on from (send them before the lookup, in one round trip:
    a settlement after them wakes the waiter, one before shows in the lookup)."""
    ttl_ms = max(until_ms - now_ms, 0) + WAITERS_GRACE_MS
    return [
        Call(command=("ZREMRANGEBYSCORE", keys.waiters, "-inf", f"({now_ms - WAITERS_GRACE_MS}")),
        Call(command=("ZADD", keys.waiters, "GT", until_ms, field)),
        Call(command=("PEXPIRE", keys.waiters, ttl_ms, "NX")),
        Call(command=("PEXPIRE", keys.waiters, ttl_ms, "GT")),
        Call(
            command=("XREVRANGE", keys.done, "+", "-", "COUNT", 1),
            parse=lambda r: text(r[0][0]) if r else ZERO_ID,
        ),
    ]


WAITERS_GRACE_MS = 60_000
"""A wait's registration outlives its end by this much (clocks of waiters differ)."""
DONE_COUNT = 1000
"""Entries of `{T:s}:done` read at once; a full read may have missed some (it is trimmed)."""


@dataclass(frozen=True, slots=True)
class Woken:
    """What one read of `{T:s}:done` saw: the fields it named, and where to read on."""

    fields: frozenset[str]
    last: str | None
    full: bool


def read_done(keys: ShardKeys, after: str, block_ms: int) -> Call[Woken]:
    """XREAD of `{T:s}:done` after entry `after`, blocking up to `block_ms`."""

    def parse(reply: Any) -> Woken:
        if isinstance(reply, dict):  # RESP3
            reply = list(reply.items())
        entries: list[Entry] = []
        for _, raw in reply or ():
            entries += _entries(raw[0] if _nested(raw) else raw)
        named = frozenset(text(f) for _, fields in entries for f in fields)
        return Woken(named, entries[-1][0] if entries else None, len(entries) >= DONE_COUNT)

    block = ("BLOCK", block_ms)
    return Call(
        command=("XREAD", "COUNT", DONE_COUNT, *block, "STREAMS", keys.done, after), parse=parse
    )


# --- dead letters ---------------------------------------------------------------------------


def read_dead(keys: ShardKeys, start: str, count: int) -> Call[list[Entry]]:
    """Dead letters from `start` (inclusive; ``"-"`` for the oldest)."""
    return _range(keys.dead, start, count)


def replay(keys: ShardKeys, entry_ids: Sequence[str]) -> Call[tuple[int, int, list[str]]]:
    """Parses to (replayed, held back by max_ready, ids that cannot be replayed)."""

    def parse(reply: Any) -> tuple[int, int, list[str]]:
        r = check("replay", reply)
        return int(r[1]), int(r[2]), [text(x) for x in r[3:]]

    return script_call("replay", keys, [keys.topic, *entry_ids], parse)


def purge_dead(keys: ShardKeys, entry_ids: Sequence[str] | None) -> Call[int]:
    """XDEL the given dead letters, or (None) the whole stream; parses to how many went."""
    if entry_ids is None:
        return script_call("purge_dead", keys, (), lambda r: int(check("purge_dead", r)[1]))
    return Call(command=("XDEL", keys.dead, *entry_ids), parse=int)
