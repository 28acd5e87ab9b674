"""Bounded reads of what a shard holds, for `wheelq stats`, `wheelq top` and the metrics
(docs/architecture.md, invariant 15); `wheelq.core.observe` computes what they mean.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

from redis.exceptions import ResponseError

from wheelq.core.job import Field, entry_ms
from wheelq.core.keys import CALLBACKS, READY, ShardKeys
from wheelq.core.observe import GroupView, ShardObservation
from wheelq.store.call import Call, script_call
from wheelq.store.scripts import check, text

ObserveOp = Generator[list[Call[Any]], list[Any], list[ShardObservation]]

DUE_SOON_MS = 1000
"""ZCOUNT's span: jobs due within this much of now (what "due/s" shows)."""
ROUND_ONE = 11
"""Calls per shard in round 1, before its `due_within` call when windows are asked for."""


def pending_count(keys: ShardKeys) -> Call[int]:
    return Call(command=("ZCARD", keys.delayed), parse=int)


def far_count(keys: ShardKeys) -> Call[Any]:
    """The shard's jobs in its far tier (docs/architecture.md, "The far tier")."""
    return Call(command=("HGET", keys.far, "entries"))


def expired_count(keys: ShardKeys) -> Call[Any]:
    """Jobs of the shard dropped at their expiry, never run (its limits' ``expired`` count,
    written by ``wq_expire`` and ack.lua: at fire, and at a worker's read)."""
    return Call(command=("HGET", keys.limits, "expired"))


def due_within(keys: ShardKeys, until_ms: Sequence[int]) -> Call[list[int]]:
    """Pending jobs due at or before each of `until_ms` (ascending), overdue ones included,
    in the sorted set and the far tier (`due_within.lua`: O(log n) a time, plus the far
    leaves that start by the last one)."""
    order = sorted(range(len(until_ms)), key=until_ms.__getitem__)

    def parse(reply: Any) -> list[int]:
        counts = [0] * len(order)
        for i, n in zip(order, check("due_within", reply)[1:], strict=True):
            counts[i] = int(n)
        return counts

    return script_call("due_within", keys, [until_ms[i] for i in order], parse)


def waiting_count(keys: ShardKeys) -> Call[int]:
    """Jobs of the shard waiting on its due line: due, not fired yet (docs/architecture.md,
    "The due line")."""
    return Call(command=("HLEN", keys.held), parse=int)


def dead_count(keys: ShardKeys) -> Call[int]:
    return Call(command=("XLEN", keys.dead), parse=int)


def _get(info: Any, name: str) -> Any:
    """A field of a parsed XINFO reply, whatever type its keys came back as."""
    if not isinstance(info, dict):
        return None
    found = info.get(name.encode())
    return info.get(name) if found is None else found


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


_MISSING = object()
"""Stands for the reply to a stream call not sent: the probe found no stream."""


def _no_stream(reply: Any) -> bool:
    return reply is _MISSING or (
        isinstance(reply, ResponseError) and "no such key" in str(reply).lower()
    )


def _raise_others(replies: list[Any]) -> None:
    for reply in replies:
        if isinstance(reply, Exception) and not _no_stream(reply):
            raise reply


def _lateness(entries: Any) -> tuple[int, ...]:
    """entry ms - due of each sampled entry (entries without a readable due are skipped)."""
    out = []
    for entry_id, fields in entries or ():
        due = fields.get(Field.DUE) if isinstance(fields, dict) else None
        if due is not None and due.isdigit():
            out.append(entry_ms(entry_id) - int(due))
    return tuple(out)


def observe_shards(
    shards: Sequence[ShardKeys],
    now_ms: int,
    sample: int = 100,
    *,
    probe: bool = False,
    within_ms: Sequence[int] = (),
) -> ObserveOp:
    """Read what each of `shards` holds (sans-I/O); one `ShardObservation` per shard, in order.

    `sample`: newest ready entries read per shard for lateness. `probe`: ask first which
    streams exist (a round trip more), so a driver without ``return_exceptions`` can run it.
    `within_ms`: windows to count the jobs due in (`ShardObservation.due_within`): a
    `due_within` call a shard, in the same round trip.
    """
    there = [True] * len(shards)
    waits = [True] * len(shards)  # the callbacks stream: fired jobs the deliverer POSTs
    if probe:
        found = yield [Call(command=("EXISTS", k.ready)) for k in shards] + [
            Call(command=("EXISTS", k.callbacks)) for k in shards
        ]
        there = [bool(n) for n in found[: len(shards)]]
        waits = [bool(n) for n in found[len(shards) :]]
    calls: list[Call[Any]] = []
    sent: list[list[bool]] = []
    soon = f"({now_ms + DUE_SOON_MS}"
    for keys, exists, calling in zip(shards, there, waits, strict=True):
        wanted = [
            (exists, Call(command=("XINFO", "STREAM", keys.ready))),
            (exists, Call(command=("XINFO", "GROUPS", keys.ready))),
            (True, pending_count(keys)),
            (True, far_count(keys)),
            (True, Call(command=("ZCOUNT", keys.delayed, now_ms, soon), parse=int)),
            (True, dead_count(keys)),
            (
                exists and sample > 0,
                Call(command=("XREVRANGE", keys.ready, "+", "-", "COUNT", sample)),
            ),
            (calling, Call(command=("XINFO", "STREAM", keys.callbacks))),
            (calling, Call(command=("XINFO", "GROUPS", keys.callbacks))),
            (True, expired_count(keys)),
            (True, waiting_count(keys)),
        ]
        if within_ms:
            wanted.append((True, due_within(keys, [now_ms + window for window in within_ms])))
        calls += [call for send, call in wanted if send]
        sent.append([send for send, _ in wanted])
    got = iter((yield calls))
    # every shard's replies in place, _MISSING for a call not sent
    replies: list[Any] = [next(got) if send else _MISSING for shard in sent for send in shard]
    _raise_others(replies)
    oldest_calls: list[Call[Any]] = []
    asked: list[tuple[int, str, str]] = []
    stride = ROUND_ONE + (1 if within_ms else 0)
    for i, keys in enumerate(shards):
        for stream, at in ((keys.ready, 1), (keys.callbacks, 8)):
            groups = replies[i * stride + at]
            for group in [] if _no_stream(groups) else groups or ():
                if (_int(_get(group, "pending")) or 0) > 0:
                    name = text(_get(group, "name"))
                    oldest_calls.append(Call(command=("XPENDING", stream, name)))
                    asked.append((i, stream, name))
    oldest: dict[tuple[int, str, str], int] = {}
    if oldest_calls:
        summaries = yield oldest_calls
        _raise_others(summaries)
        for where, summary in zip(asked, summaries, strict=True):
            smallest = _get(summary, "min")
            if smallest:
                oldest[where] = entry_ms(smallest)
    return [
        _shard(i, keys, replies[i * stride : (i + 1) * stride], oldest, now_ms, within_ms)
        for i, keys in enumerate(shards)
    ]


def _shard(
    i: int,
    keys: ShardKeys,
    r: list[Any],
    oldest: dict[tuple[int, str, str], int],
    now_ms: int,
    within_ms: Sequence[int],
) -> ShardObservation:
    stream, groups, pending, far, due_soon, dead, newest, calls, callers, gone, line = r[:ROUND_ONE]
    ready_length, ready_added = _lengths(stream)
    callbacks_length, callbacks_added = _lengths(calls)
    return ShardObservation(
        topic=keys.topic,
        shard=keys.shard,
        at_ms=now_ms,
        pending=int(pending) + int(far or 0),
        due_soon=int(due_soon),
        length=ready_length + callbacks_length,
        entries_added=ready_added + callbacks_added,
        dead=int(dead),
        groups=_views(i, keys.ready, READY, groups, oldest)
        + _views(i, keys.callbacks, CALLBACKS, callers, oldest),
        lateness_ms=() if _no_stream(newest) else _lateness(newest),
        callbacks_length=callbacks_length,
        due_within=tuple(zip(within_ms, r[ROUND_ONE] if within_ms else (), strict=True)),
        far=int(far or 0),
        expired=int(gone or 0),
        waiting=int(line or 0),
    )


def _lengths(stream: Any) -> tuple[int, int]:
    """(length, entries ever added) of a stream's XINFO STREAM (0, 0: no stream)."""
    if _no_stream(stream):
        return 0, 0
    return int(_get(stream, "length") or 0), int(_get(stream, "entries-added") or 0)


def _views(
    i: int, stream: str, lane: str, groups: Any, oldest: dict[tuple[int, str, str], int]
) -> tuple[GroupView, ...]:
    return tuple(
        GroupView(
            name=text(_get(g, "name")),
            pending=_int(_get(g, "pending")) or 0,
            lag=_int(_get(g, "lag")),
            entries_read=_int(_get(g, "entries-read")),
            oldest_pending_ms=oldest.get((i, stream, text(_get(g, "name")))),
            lane=lane,
        )
        for g in ([] if _no_stream(groups) else groups or ())
    )
