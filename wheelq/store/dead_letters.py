"""The dead-letter stream's reads and changes: read, replay, purge. Dead letters are
written by the settling calls (`wheelq.store.settle`), by `claim.lua` and by `emit_due.lua`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from wheelq.core.keys import ShardKeys
from wheelq.store.call import Call, script_call
from wheelq.store.scripts import check, text
from wheelq.store.streams import Entry, read_range


def read_dead(keys: ShardKeys, start: str, count: int) -> Call[list[Entry]]:
    """Dead letters from `start` (inclusive; ``"-"`` for the oldest)."""
    return read_range(keys.dead, start, count)


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
