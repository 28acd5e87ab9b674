"""Reading a job's history: one `lookup.lua` call per id, parsed into a `Lookup`.

The script reads every key of the job's shard that can know the id (sorted
set, envelopes, stream and its groups, history, cancellations) in one step,
so the answer is consistent and costs one round trip on one node;
`wheelq.core.history.job_info` decides the state from it.
"""

from __future__ import annotations

import math
from typing import Any

from wheelq.core.history import GroupLookup, Lookup
from wheelq.core.keys import ShardKeys
from wheelq.store.calls import Call, script_call
from wheelq.store.scripts import check

GROUP_FIELDS = 6
"""Values per consumer group in the reply."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


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
        _text(name),
        _text(delivered),
        record,
        None if latest is None else _text(latest),
        _fields(fields),
        None if not pending else (_text(pending[0]), int(pending[1]), int(pending[2])),
    )


def parse_lookup(reply: Any) -> Lookup:
    """`lookup.lua`'s reply as a `Lookup`.

    Raises:
        ScriptError: A key of the shard holds another type.
    """
    r = check("lookup", reply)
    rest = r[7:]
    return Lookup(
        int(r[1]),
        _int(r[2]),
        r[3],
        _int(r[4]),
        None if r[5] is None else _text(r[5]),
        _fields(r[6]),
        [_group(rest[i : i + GROUP_FIELDS]) for i in range(0, len(rest), GROUP_FIELDS)],
    )


def lookup(keys: ShardKeys, job_id: str) -> Call[Lookup]:
    """Everything `keys`' shard knows of `job_id` (read only)."""
    return script_call("lookup", keys, [job_id], parse_lookup)
