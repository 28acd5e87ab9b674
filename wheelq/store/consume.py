"""How a consumer gets entries: joining a group (XGROUP CREATE, DELCONSUMER), XREADGROUP,
claims (`claim.lua`, `touch.lua`, XPENDING), reads of the ready stream by id, and the shared
secret of pull receipts. Settling what was read is `wheelq.store.settle`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from wheelq.core.keys import ShardKeys
from wheelq.store.call import Call, script_call
from wheelq.store.scripts import check, text
from wheelq.store.streams import Entry, nested, parse_fields, read_range


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
        # A worker's every entry comes through here: one pass, and redis-py's dict of an
        # entry's fields kept as it is (a fresh one an entry), not copied.
        if isinstance(reply, dict):  # RESP3
            reply = list(reply.items())
        out: list[tuple[int, Entry]] = []
        append = out.append
        for key, raw in reply or ():
            shard = by_key[text(key)]
            for entry_id, fields in raw[0] if nested(raw) else raw:
                kept = fields if type(fields) is dict else parse_fields(fields)
                append((shard, (text(entry_id), kept)))
        return out

    head = ("XREADGROUP", "GROUP", group, consumer, "COUNT", count, *block, "STREAMS")
    return Call(
        command=(*head, *by_key, *([">"] * len(by_key))), parse=parse, blocks=block_ms is not None
    )


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
        entries = [(text(flat[i]), parse_fields(flat[i + 2])) for i in range(0, len(flat), 3)]
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


def read_ready(keys: ShardKeys, start: str, count: int) -> Call[list[Entry]]:
    """Ready-stream entries from `start` (``"-"``: the oldest; ``"(id"``: after one)."""
    return read_range(keys.ready, start, count)
