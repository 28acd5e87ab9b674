"""Firing: `preload.lua` (near-due jobs into the wheel), the inbox of notes of new jobs,
and `emit_due.lua` (due jobs into the ready streams), the calls a scheduler node sends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from wheelq.core.follow import NUDGE
from wheelq.core.job import parse_note
from wheelq.core.keys import (
    ShardKeys,
)
from wheelq.store.call import Call, script_call
from wheelq.store.scripts import check

NUDGED = ("", -1)
"""`drain_inbox`'s last note when notices wait on the shard (a '!' was in the inbox)."""


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
    """Due jobs stay pending: the stream is at the topic's ``max_ready`` (`wheelq.core.flow`),
    or jobs wait on the due line."""
    waiting: int = 0
    """Jobs waiting on the shard's due line after the call (docs/architecture.md, "The due
    line"): the leader sweeps it at the line's pace while any do."""


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
            int(r[8]),
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


def drain_inbox(keys: ShardKeys, count: int) -> Call[list[tuple[str, int]]]:
    """Pop up to `count` "due:id" notes; parses to (id, due_ms) pairs, ending in `NUDGED`
    when a nudge was among them (notices wait on the shard: `wheelq.core.follow`)."""

    def parse(reply: Any) -> list[tuple[str, int]]:
        notes = [note for raw in reply or () if (note := parse_note(raw)) is not None]
        if reply and len(notes) < len(reply) and NUDGE in reply:
            notes.append(NUDGED)
        return notes

    return Call(command=("LPOP", keys.inbox, count), parse=parse)
