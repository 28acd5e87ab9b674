"""Job results' waiters: registering a wait in ``{T:s}:waiters`` and reading the
``{T:s}:done`` notes the settling scripts write (docs/architecture.md, "Job results").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from wheelq.core.history import decode_result
from wheelq.core.keys import ShardKeys, result_key
from wheelq.store.call import Call
from wheelq.store.scripts import text
from wheelq.store.streams import ZERO_ID, Entry, nested, parse_entries


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


@dataclass(frozen=True, slots=True)
class Kept:
    """A result kept apart for its task's ``result_ttl``, decoded."""

    value: Any


def kept_result(keys: ShardKeys, field: str) -> Call[Kept | None]:
    """The result history field `field` keeps apart (`result_key`); None once it expired."""
    return Call(
        command=("GET", result_key(keys, field)),
        parse=lambda r: None if r is None else Kept(decode_result(r)),
    )


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
            entries += parse_entries(raw[0] if nested(raw) else raw)
        named = frozenset(text(f) for _, fields in entries for f in fields)
        return Woken(named, entries[-1][0] if entries else None, len(entries) >= DONE_COUNT)

    block = ("BLOCK", block_ms)
    return Call(
        command=("XREAD", "COUNT", DONE_COUNT, *block, "STREAMS", keys.done, after),
        parse=parse,
        blocks=True,
    )
