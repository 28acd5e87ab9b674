"""The outbox tests' reading of both sides: rows committed and left in PostgreSQL, and each
job id's entries in Redis (fired) or its due time (scheduled), for a topic of `SHARDS`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

import psycopg
import redis

from wheelq import outbox
from wheelq.core import keys as k
from wheelq.core.job import Field

SHARDS = 4  # ClientSettings.default_shards: the topics these tests make
FAST = {"sweep_ms": 50}  # a lost notification costs 50 ms here


def commit(dsn: str, topic: str, count: int, **options: Any) -> list[str]:
    """`count` jobs enqueued in one committed transaction; their ids."""
    with psycopg.connect(dsn) as conn, conn.transaction():
        return [outbox.enqueue(conn, topic, {"n": i}, **options) for i in range(count)]


def rows(dsn: str, table: str = "wheelq_outbox") -> int:
    with psycopg.connect(dsn) as conn:
        found = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
        assert found is not None
        return int(found[0])


def fired(r: redis.Redis, topic: str, shards: Iterable[int] = range(SHARDS)) -> Counter[str]:
    """Each job id in the topic's ready streams (of `shards`), with how many entries it has."""
    ids: Counter[str] = Counter()
    for shard in shards:
        for _, fields in r.xrange(k.ShardKeys(topic, shard).ready):
            ids[fields[Field.ID].decode()] += 1
    return ids


def scheduled(r: redis.Redis, topic: str) -> dict[str, float]:
    """Each pending job id with its due ms (its score in the sorted sets)."""
    out: dict[str, float] = {}
    for shard in range(SHARDS):
        out.update(
            {
                m.decode(): s
                for m, s in r.zrange(k.ShardKeys(topic, shard).delayed, 0, -1, withscores=True)
            }
        )
    return out


def fired_exactly(r: redis.Redis, topic: str, ids: list[str]) -> bool:
    """Whether every job of `ids` fired; fails the test at once if one fired twice, or if a
    job not among them did."""
    got = fired(r, topic)
    assert all(n == 1 for n in got.values()), [i for i, n in got.items() if n > 1][:5]
    assert set(got) <= set(ids), "a job no transaction committed fired"
    return set(got) == set(ids)
