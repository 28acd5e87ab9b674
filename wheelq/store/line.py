"""Bounded reads of a shard's due line (docs/architecture.md, "Seeing the line"): the one
reader of the console's topic page, ``wheelq top``, `Admin.line` and the ``wheelq_line_*``
metrics; `wheelq.core.line` says what they mean.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Generator, Sequence
from typing import Any

from wheelq.core.job import Envelope
from wheelq.core.keys import ShardKeys, lane_key
from wheelq.core.line import (
    LANE_SAMPLE,
    MAX_LANES,
    PRIORITIES,
    SHARD_SAMPLE,
    LaneLine,
    ShardLine,
)
from wheelq.core.options import DEFAULT_PRIORITY
from wheelq.store.call import Call
from wheelq.store.scripts import text

LineOp = Generator[list[Call[Any]], list[Any], list[ShardLine]]


def orders(keys: ShardKeys) -> Call[bool]:
    """Whether `keys`' shard orders its due jobs (its limits hash has ``ordered`` or ``fair``,
    as `emit_due.lua` reads them): a worker reading it keeps its read-ahead short."""
    return Call(
        command=("HMGET", keys.limits, "ordered", "fair"),
        parse=lambda got: any(v in (b"1", "1") for v in got),
    )


def read_lines(shards: Sequence[ShardKeys], now_ms: int, *, priorities: bool = True) -> LineOp:
    """Read each of `shards`' due line (sans-I/O); one `ShardLine` per shard, in order.

    Three round trips at most, each bounded: every shard's line size and its first
    `MAX_LANES` lanes by turn; each lane's length and first jobs (`LANE_SAMPLE` a lane,
    `SHARD_SAMPLE` a shard); those jobs' due times and, with `priorities`, their envelopes
    (the metrics leave them out: a payload is read only for the backlog by priority).
    """
    first: list[Call[Any]] = []
    for keys in shards:
        first += [
            Call(command=("HLEN", keys.held), parse=int),
            Call(command=("ZCARD", keys.turns), parse=int),
            Call(command=("ZRANGE", keys.turns, 0, MAX_LANES - 1)),
        ]
    got = yield first
    sizes = [(int(got[3 * i]), int(got[3 * i + 1])) for i in range(len(shards))]
    lanes: list[list[bytes]] = [list(got[3 * i + 2] or ()) for i in range(len(shards))]
    heads: list[Call[Any]] = []
    for keys, names in zip(shards, lanes, strict=True):
        take = min(LANE_SAMPLE, max(1, SHARD_SAMPLE // max(1, len(names))))
        for name in names:
            at = _lane(keys, name)
            heads += [
                Call(command=("ZCARD", at), parse=int),
                Call(command=("ZRANGE", at, 0, take - 1)),
            ]
    replies = iter((yield heads) if heads else [])
    read: list[list[tuple[bytes, int, list[bytes]]]] = [
        [(name, next(replies), list(next(replies) or ())) for name in names] for names in lanes
    ]
    jobs: list[Call[Any]] = []
    for keys, found in zip(shards, read, strict=True):
        for _, _, members in found:
            if members:
                jobs.append(Call(command=("HMGET", keys.held, *members)))
                if priorities:
                    jobs.append(Call(command=("HMGET", keys.jobs, *members)))
    details = iter((yield jobs) if jobs else [])
    out = []
    for keys, (waiting, count), found in zip(shards, sizes, read, strict=True):
        seen: list[LaneLine] = []
        tally: Counter[int] = Counter()
        for name, length, members in found:
            dues: list[int] = []
            if members:
                dues = [d for d in map(_due, next(details)) if d is not None]
                if priorities:
                    tally.update(_priority(e) for e in next(details) if e is not None)
            seen.append(LaneLine(_key(name), length, min(dues) if dues else None))
        out.append(
            ShardLine(
                topic=keys.topic,
                shard=keys.shard,
                at_ms=now_ms,
                waiting=waiting,
                lanes=count,
                read=tuple(seen),
                by_priority=tuple((p, tally[p]) for p in PRIORITIES if tally[p]),
                sampled=sum(tally.values()),
            )
        )
    return out


def _lane(keys: ShardKeys, name: bytes) -> bytes:
    """A lane's key from its name as ``{T:s}:turns`` holds it (bytes: a key need not be
    UTF-8)."""
    return lane_key(keys, "").encode() + name


def _key(name: bytes) -> str | None:
    """The key of lane `name` (``k:<key>``), None for the shared lane."""
    spelled = text(name, "replace")
    return spelled[2:] if spelled.startswith("k:") else None


def _due(held: Any) -> int | None:
    """The due ms of a ``{T:s}:held`` value ``"<due ms> <lane>"`` (None: gone, or unreadable)."""
    if held is None:
        return None
    due = text(held, "replace").partition(" ")[0]
    return int(due) if due.lstrip("-").isdigit() else None


def _priority(envelope: bytes) -> int:
    """An envelope's priority; the default for one that does not decode (it is dead-lettered
    when it fires)."""
    try:
        found = Envelope.unpack(envelope)
    except ValueError:
        return DEFAULT_PRIORITY
    return found.priority
