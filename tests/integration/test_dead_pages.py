"""Dead letters page by page (`dead_letters(after=ref)`, what the HTTP service and the
dashboard list with): every page continues exactly where the last ended, across shards,
with entries of the same millisecond on several shards and sequence numbers past 9."""

from __future__ import annotations

import msgpack
import pytest
import redis

from tests.support.entries import add_ready, dead_fields
from wheelq import Admin, InvalidArgumentError
from wheelq.core.keys import ShardKeys

pytestmark = pytest.mark.cluster_too  # on the single server and on the cluster

SHARDS = 3


def bury(r: redis.Redis, topic: str) -> list[tuple[int, int, int]]:
    """Write dead letters straight into the shard streams; returns their (ms, seq, shard)."""
    keys: list[tuple[int, int, int]] = []
    for shard in range(SHARDS):
        dead = ShardKeys(topic, shard).dead
        for ms in (1000, 1001, 1002):
            for seq in range(12 if ms == 1001 else 2):
                fields = dead_fields(
                    f"j{shard}-{ms}-{seq}",
                    topic=topic,
                    due_ms=0,
                    max_attempts=1,
                    payload=msgpack.packb(seq),
                )
                add_ready(r, dead, fields, f"{ms}-{seq}")
                keys.append((ms, seq, shard))
    return sorted(keys)


@pytest.mark.parametrize("page", [1, 3, 7, 100])
def test_pages_continue_where_the_last_ended_in_entry_order(
    redis_url: str, redis_sync: redis.Redis, topic: str, page: int
) -> None:
    with Admin.from_url(redis_url) as admin:
        admin.create_topic(topic, SHARDS)
        expected = bury(redis_sync, topic)
        seen: list[tuple[int, int, int]] = []
        after = None
        while True:
            rows = admin.dead_letters(topic, page, after=after)
            assert len(rows) <= page
            if not rows:
                break
            for dead in rows:
                ms, _, seq = dead.entry_id.partition("-")
                seen.append((int(ms), int(seq), dead.shard))
            after = rows[-1].ref
        assert seen == expected
        assert [d.ref for d in admin.dead_letters(topic, len(expected))] == [
            f"{s}/{m}-{q}" for m, q, s in expected
        ]


def test_a_malformed_cursor_names_after(redis_url: str, topic: str) -> None:
    with Admin.from_url(redis_url) as admin:
        admin.create_topic(topic, SHARDS)
        with pytest.raises(InvalidArgumentError) as raised:
            admin.dead_letters(topic, 10, after="nope")
        assert raised.value.parameter == "after"
