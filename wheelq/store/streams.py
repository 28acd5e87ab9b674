"""Stream entries as Redis returns them (RESP2 or RESP3): `Entry`, and the readers that
the consuming side, the results' waiters and the dead letters share.
"""

from __future__ import annotations

from typing import Any

from wheelq.store.call import Call
from wheelq.store.scripts import text

Entry = tuple[str, dict[bytes, bytes]]

ZERO_ID = "0-0"


def parse_fields(flat: Any) -> dict[bytes, bytes]:
    if isinstance(flat, dict):
        return dict(flat)
    return {flat[i]: flat[i + 1] for i in range(0, len(flat or ()), 2)}


def parse_entries(raw: Any) -> list[Entry]:
    return [(text(entry_id), parse_fields(fields)) for entry_id, fields in raw or ()]


def nested(raw: Any) -> bool:
    return bool(raw) and isinstance(raw[0], list) and bool(raw[0]) and isinstance(raw[0][0], list)


def read_range(key: str, start: str, count: int) -> Call[list[Entry]]:
    return Call(command=("XRANGE", key, start, "+", "COUNT", count), parse=parse_entries)
