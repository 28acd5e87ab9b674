"""A job's history in Redis: `lookup.lua`, which reads every key of the shard that can know
an id (`wheelq.core.history` works out what it means), and `trim.lua`, which retires what
is past retention (docs/architecture.md, "Job history").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from wheelq.core.history import GroupLookup, Lookup
from wheelq.core.keys import ShardKeys
from wheelq.store.call import Call, script_call
from wheelq.store.scripts import check, text

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
    rest = r[9:]
    return Lookup(
        int(r[1]),
        _int(r[2]),
        r[3],
        _int(r[4]),
        None if r[5] is None else text(r[5]),
        _fields(r[6]),
        [_group(rest[i : i + GROUP_FIELDS]) for i in range(0, len(rest), GROUP_FIELDS)],
        _int(r[7]),
        r[8] is not None,
    )


def lookup(keys: ShardKeys, job_id: str) -> Call[Lookup]:
    """Everything `keys`' shard knows of `job_id` (read only)."""
    return script_call("lookup", keys, [job_id], parse_lookup)


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
