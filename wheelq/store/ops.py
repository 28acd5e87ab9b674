"""Job transitions, reads and the topic registry: one wrapper per script or command that
builds the `Call` and parses its reply; the executors send them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from wheelq.core.due import DueSpec
from wheelq.core.history import GroupLookup, Lookup
from wheelq.core.job import parse_note
from wheelq.core.keys import (
    CALLBACK_TOPICS_KEY,
    TOPICS_KEY,
    Registry,
    ShardKeys,
    parse_registry,
    parse_shard_count,
)
from wheelq.store.call import Call, script_call
from wheelq.store.scripts import NOT_PENDING, Placed, check, text


@dataclass(frozen=True, slots=True)
class EmitResult:
    """What one `emit_due.lua` call fired, skipped and left for later."""

    emitted: int
    more: bool
    orphans: int
    not_yet_due: list[tuple[str, int]]
    malformed: list[str] = field(default_factory=list)
    """Ids whose envelope could not be decoded: moved to the dead-letter stream."""
    held: list[str] = field(default_factory=list)
    """Ids due but held back by the byte budget: still pending, to emit next."""
    throttled: bool = False
    """Due jobs stay pending: the stream is at the topic's ``max_ready`` (`wheelq.core.flow`)."""


@dataclass(frozen=True, slots=True)
class PreloadPage:
    """One page of `preload.lua`: near-due jobs, where the next page starts, and when."""

    cursor_ms: int
    server_now_ms: int
    full: bool
    jobs: list[tuple[str, int]]
    next_read_ms: int = 0
    """Redis time at which the next read is due (the script's plan; now when it made none)."""
    overdue: bool = False
    """A job was due at or before the call's overdue bound (the sweep has work)."""


def _pairs(flat: Sequence[Any]) -> list[tuple[str, int]]:
    return [(flat[i].decode(), int(float(flat[i + 1]))) for i in range(0, len(flat), 2)]


def _rescheduled(reply: Any) -> Placed | None:
    outcome = check("reschedule", reply)[1]
    return None if outcome == NOT_PENDING else Placed(outcome)


def reschedule(keys: ShardKeys, job_id: str, due: DueSpec) -> Call[Placed | None]:
    """The outcome, None when not pending; `MalformedJobError` if due now and undecodable."""
    mode, value = due.wire
    return script_call(
        "reschedule", keys, [keys.topic, keys.wake_channel, job_id, mode, value], _rescheduled
    )


def debounce(
    keys: ShardKeys, job_id: str, debounce_ms: int, max_wait_ms: int, envelope: bytes
) -> Call[tuple[Placed, int]]:
    """Due `debounce_ms` from now, at most `max_wait_ms` (0: no cap) after the first call."""

    def parse(reply: Any) -> tuple[Placed, int]:
        r = check("debounce", reply)
        return Placed(r[1]), int(r[2])

    args: list[str | bytes | int] = [keys.topic, keys.wake_channel, job_id, debounce_ms]
    args += [max_wait_ms, envelope]
    return script_call("debounce", keys, args, parse)


def cancel(keys: ShardKeys, job_id: str) -> Call[bool]:
    return script_call("cancel", keys, [job_id], lambda r: bool(check("cancel", r)[1]))


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
    """Wheel mode with `ids`, sweep mode (oldest `limit` due by `now_ms`) without."""
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
            bool(r[7]),
        )

    return script_call(
        "emit_due",
        keys,
        [token, keys.topic, now_ms, limit, NO_BYTE_BOUND if max_bytes is None else max_bytes, *ids],
        parse,
    )


def preload(
    keys: ShardKeys,
    token: str,
    cursor_ms: int,
    window_ms: int,
    limit: int,
    ttl_ms: int,
    *,
    least_ms: int = 0,
    most_ms: int = 0,
    overdue_ms: int | None = None,
) -> Call[PreloadPage]:
    """The next page after `cursor_ms`; `least_ms` > 0 also plans the next read (`preload.lua`)."""
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    if least_ms < 0 or most_ms < least_ms:
        raise ValueError(f"need 0 <= least_ms <= most_ms, got {least_ms} and {most_ms}")

    def parse(reply: Any) -> PreloadPage:
        r = check("preload", reply)
        return PreloadPage(int(r[1]), int(r[2]), bool(r[3]), _pairs(r[6:]), int(r[4]), bool(r[5]))

    bound = -1 if overdue_ms is None else overdue_ms
    args: list[str | int] = [token, cursor_ms, window_ms, limit, ttl_ms, least_ms, most_ms, bound]
    return script_call("preload", keys, args, parse)


@dataclass(frozen=True, slots=True)
class ShardDrop:
    """The outcome of `drop_shard.lua`: dropped, or refused for what is still there."""

    dropped: bool
    pending: int
    """Jobs in the sorted set (0 in force mode: not counted)."""
    unacked: int
    """Ready-stream entries not yet acked, once per group (0 in force mode)."""


def drop_shard(keys: ShardKeys, mode: str) -> Call[ShardDrop]:
    """`mode`: ``check`` (count only), ``drop`` (only when nothing is left) or ``force``."""
    if mode not in ("check", "drop", "force"):
        raise ValueError(f"mode must be check, drop or force, got {mode!r}")

    def parse(reply: Any) -> ShardDrop:
        r = check("drop_shard", reply)
        return ShardDrop(bool(r[1]), int(r[2]), int(r[3]))

    return script_call("drop_shard", keys, [mode], parse)


# --- plain commands -------------------------------------------------------------------------


def pending_count(keys: ShardKeys) -> Call[int]:
    return Call(command=("ZCARD", keys.delayed), parse=int)


def dead_count(keys: ShardKeys) -> Call[int]:
    return Call(command=("XLEN", keys.dead), parse=int)


def drain_inbox(keys: ShardKeys, count: int) -> Call[list[tuple[str, int]]]:
    """Pop up to `count` "due:id" notes; parses to (id, due_ms) pairs."""

    def parse(reply: Any) -> list[tuple[str, int]]:
        return [note for raw in reply or () if (note := parse_note(raw)) is not None]

    return Call(command=("LPOP", keys.inbox, count), parse=parse)


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


def mark_callback_topic(topic: str) -> Call[Any]:
    """Note that `topic` has jobs with a callback (SADD to the deliverer's list)."""
    return Call(command=("SADD", CALLBACK_TOPICS_KEY, topic))


def callback_topics() -> Call[set[str]]:
    """Parses to the topics that have had a job with a callback."""
    return Call(
        command=("SMEMBERS", CALLBACK_TOPICS_KEY),
        parse=lambda r: {m.decode("utf-8", "replace") if isinstance(m, bytes) else m for m in r},
    )


def exists(key: str) -> Call[bool]:
    return Call(command=("EXISTS", key), parse=bool)


def unmark_callback_topic(topic: str) -> Call[Any]:
    return Call(command=("SREM", CALLBACK_TOPICS_KEY, topic))


def unregister_topic(topic: str) -> Call[bool]:
    """HDEL from the registry; parses to True when the entry was there."""
    return Call(command=("HDEL", TOPICS_KEY, topic), parse=bool)


def write_limits(keys: ShardKeys, fields: dict[str, int | None]) -> list[Call[Any]]:
    """Set the shard's limit fields (None: remove the field); `wheelq.core.flow`."""
    gone = [name for name, value in fields.items() if value is None]
    kept: list[str | int] = []
    for name, value in fields.items():
        if value is not None:
            kept += [name, value]
    calls: list[Call[Any]] = []
    if gone:
        calls.append(Call(command=("HDEL", keys.limits, *gone)))
    if kept:
        calls.append(Call(command=("HSET", keys.limits, *kept)))
    return calls


def read_limits(keys: ShardKeys) -> Call[dict[bytes, bytes]]:
    return Call(command=("HGETALL", keys.limits), parse=dict)


# --- a job's history: lookup.lua reads every key of the shard that can know the id ----------

GROUP_FIELDS = 6
"""Values per consumer group in the reply."""


_FAR_MS = 2**63 - 1
"""What an infinite score reads as: no client writes one, but get() answers for any job."""


def _int(value: Any) -> int | None:
    if value is None:
        return None
    ms = float(value)
    if math.isfinite(ms):
        return int(ms)
    return _FAR_MS if ms > 0 else -_FAR_MS


def _fields(flat: Any) -> dict[bytes, bytes] | None:
    if not flat:
        return None
    return {flat[i]: flat[i + 1] for i in range(0, len(flat), 2)}


def _group(r: list[Any]) -> GroupLookup:
    name, delivered, record, latest, fields, pending = r
    return GroupLookup(
        text(name),
        text(delivered),
        record,
        None if latest is None else text(latest),
        _fields(fields),
        None if not pending else (text(pending[0]), int(pending[1]), int(pending[2])),
    )


def parse_lookup(reply: Any) -> Lookup:
    """`lookup.lua`'s reply as a `Lookup`; ScriptError when a key holds another type."""
    r = check("lookup", reply)
    rest = r[7:]
    return Lookup(
        int(r[1]),
        _int(r[2]),
        r[3],
        _int(r[4]),
        None if r[5] is None else text(r[5]),
        _fields(r[6]),
        [_group(rest[i : i + GROUP_FIELDS]) for i in range(0, len(rest), GROUP_FIELDS)],
    )


def lookup(keys: ShardKeys, job_id: str) -> Call[Lookup]:
    """Everything `keys`' shard knows of `job_id` (read only)."""
    return script_call("lookup", keys, [job_id], parse_lookup)
