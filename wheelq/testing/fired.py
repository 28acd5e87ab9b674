"""What fired: a topic's stream entries as `Fired` records, and `summarize`, which checks
them against the ids that should have fired.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import redis.asyncio

from wheelq.core.job import Field, entry_ms
from wheelq.core.keys import all_shards
from wheelq.core.observe import percentile
from wheelq.store import consume
from wheelq.store.executor import AsyncExecutor

PAGE = 10_000


async def read_fired(
    connection: redis.asyncio.Redis, topic: str, shards: int, after: dict[int, bytes] | None = None
) -> list[Fired]:
    """Every ready-stream entry after the ids in `after` (per shard, updated in place)."""
    executor = AsyncExecutor(connection)
    cursor = after if after is not None else {}
    out: list[Fired] = []
    for keys in all_shards(topic, shards):
        while True:
            start = "(" + cursor[keys.shard].decode() if keys.shard in cursor else "-"
            (page,) = await executor.run([consume.read_ready(keys, start, PAGE)])
            out += [Fired.from_entry(entry_id, fields) for entry_id, fields in page]
            if page:
                cursor[keys.shard] = page[-1][0].encode()
            if len(page) < PAGE:
                break
    return out


@dataclass(frozen=True, slots=True)
class Fired:
    """One stream entry: which job, when it was due, when it entered the stream (ms)."""

    job_id: str
    due_ms: int
    entry_ms: int
    attempt: int = 1
    """1 for a first firing; a retry's entry has the attempt it runs."""

    @classmethod
    def from_entry(cls, entry_id: str | bytes, fields: Mapping[bytes, bytes]) -> Fired:
        """From a ready-stream entry: the entry id's ms part is when it fired (Redis clock)."""
        attempt = int(fields.get(Field.ATTEMPT, b"1"))
        return cls(fields[Field.ID].decode(), int(fields[Field.DUE]), entry_ms(entry_id), attempt)

    @property
    def lateness_ms(self) -> int:
        """How long after its due time it fired (negative: early)."""
        return self.entry_ms - self.due_ms


def summarize(records: Iterable[Fired], expected_ids: Iterable[str]) -> dict[str, Any]:
    """Counts and lateness percentiles of `records` against the ids that should have fired."""
    records = list(records)
    expected = set(expected_ids)
    counts = Counter(r.job_id for r in records)
    lateness = sorted(r.lateness_ms for r in records if r.job_id in expected)
    return {
        "expected": len(expected),
        "fired": len(expected & counts.keys()),
        "missing": len(expected - counts.keys()),
        "duplicates": sum(n - 1 for n in counts.values() if n > 1),
        "early": sum(1 for r in records if r.lateness_ms < 0),
        "unexpected": len(counts.keys() - expected),
        "lateness_ms": {
            "p50": percentile(lateness, 50),
            "p90": percentile(lateness, 90),
            "p99": percentile(lateness, 99),
            "p99.9": percentile(lateness, 99.9),
            "max": float(lateness[-1]) if lateness else math.nan,
        },
    }
