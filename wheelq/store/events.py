"""Job events in Redis: the events a role reports itself (`note_events.lua`) and reads of a
topic's events streams (docs/architecture.md, "Job events"). The scripts that change a job's
state write their own events (`wq_event` in ``includes/events.lua``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from wheelq.core.keys import ShardKeys
from wheelq.store.call import Call, script_call
from wheelq.store.scripts import check

Entry = tuple[str, dict[bytes, bytes]]


def note(keys: ShardKeys, kind: str, group: str, jobs: Sequence[tuple[str, int]] = ()) -> Call[int]:
    """Write `kind` events of `group` for `jobs` (job id, attempt) while events are on;
    parses to how many were written."""
    args: list[str | int] = [kind, group]
    for job_id, attempt in jobs:
        args += [job_id, attempt]
    return script_call("note_events", keys, args, lambda r: int(check("note_events", r)[1]))


def enabled(keys: ShardKeys) -> Call[bool]:
    """Whether the topic has events on (read from `keys`' shard, as the scripts do)."""
    return Call(command=("HEXISTS", keys.limits, "events"), parse=bool)


def read_waiting(shards: Sequence[ShardKeys], after: Sequence[str], block_ms: int) -> Call[Any]:
    """XREAD BLOCK over several shards' events streams (one server: any keys; a cluster: one
    shard a call); parses to (stream key, entries) pairs."""
    return Call(
        command=(
            "XREAD",
            "COUNT",
            1000,
            "BLOCK",
            block_ms,
            "STREAMS",
            *(k.events for k in shards),
            *after,
        ),
        parse=_streams,
        blocks=True,
    )


def entry(keys: ShardKeys, entry_id: str) -> Call[list[Entry]]:
    """One entry of the events stream (none: trimmed since)."""
    return Call(command=("XRANGE", keys.events, entry_id, entry_id), parse=_entries)


def last_id(keys: ShardKeys) -> Call[str]:
    """The id of the stream's newest entry ("0-0": none): where "now" starts."""

    def parse(reply: Any) -> str:
        return _text(reply[0][0]) if reply else "0-0"

    return Call(command=("XREVRANGE", keys.events, "+", "-", "COUNT", 1), parse=parse)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _entries(reply: Any) -> list[Entry]:
    return [(_text(entry_id), dict(fields)) for entry_id, fields in reply or ()]


def _streams(reply: Any) -> list[tuple[str, list[Entry]]]:
    if not reply:
        return []
    return [(_text(key), _entries(entries)) for key, entries in reply]
