"""The process list's calls: a process's beat (`process_beat.lua`, one call a beat) and the
read of the live ones (`processes.lua`); docs/architecture.md, "Processes"."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from wheelq.core.keys import PROCESS_RECORDS_KEY, PROCESSES_KEY
from wheelq.core.process import ProcessInfo, unpack_process
from wheelq.store.call import Call
from wheelq.store.scripts import check, text

KEYS = (PROCESSES_KEY, PROCESS_RECORDS_KEY)
PRUNE_PER_BEAT = 100
"""Expired records one beat removes at most (a beat stays short after many died at once)."""
MAX_PROCESSES = 5000
"""The most processes one read returns (a bound on the call, far above a usual fleet)."""


def beat(process_id: str, record: bytes, ttl_ms: int) -> Call[int]:
    """Write `record` for `process_id`, to expire `ttl_ms` after the server's now; parses
    to that now (Redis ms)."""
    return Call(
        "process_beat",
        KEYS,
        (process_id, record, ttl_ms, PRUNE_PER_BEAT),
        parse=lambda reply: int(check("process_beat", reply)[1]),
    )


def leave(process_id: str) -> Call[int]:
    """Take `process_id` off the list now (its process stops); parses to the server's ms."""
    return Call(
        "process_beat",
        KEYS,
        (process_id, b"", 0, PRUNE_PER_BEAT),
        parse=lambda reply: int(check("process_beat", reply)[1]),
    )


@dataclass(frozen=True, slots=True)
class Found:
    """What one read found: the live processes, when (Redis ms), and the unreadable ones."""

    now_ms: int
    processes: list[ProcessInfo]
    unreadable: list[str]
    """Ids of records that are missing or not records a process writes."""


def live(limit: int = MAX_PROCESSES) -> Call[Found]:
    """The live processes (at most `limit`); a record that cannot be read is skipped and
    its id named in ``unreadable``: one bad record hides no other."""

    def parse(reply: Any) -> Found:
        r = check("processes", reply)
        now_ms = int(r[1])
        out: list[ProcessInfo] = []
        bad: list[str] = []
        for i in range(2, len(r) - 2, 3):
            process_id = text(r[i], "replace")
            raw = r[i + 2]
            try:
                if not isinstance(raw, bytes):
                    raise ValueError("no record")
                out.append(unpack_process(raw, int(float(r[i + 1])), now_ms))
            except ValueError:
                bad.append(process_id)
        return Found(now_ms, out, bad)

    return Call("processes", KEYS, (limit,), parse=parse)
