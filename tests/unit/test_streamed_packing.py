"""store.executor's packing: what it writes for a pipeline is, byte for byte, what redis-py's
own packer makes of the same calls (script calls go to hiredis directly: str as UTF-8, bytes
and ints as they are), in writes of at least WRITE_BYTES but the last."""

from __future__ import annotations

from typing import Any

import redis

from wheelq.core.due import DueSpec
from wheelq.core.keys import ShardKeys
from wheelq.store import enqueue
from wheelq.store import executor as streamed
from wheelq.store.call import Call


def calls() -> list[Call[Any]]:
    writes = [
        enqueue.JobWrite(
            f"id-{n}-é", DueSpec("at", 1_900_000_000_000 + n), n % 2 == 0, b"\x00\xff" * 900
        )
        for n in range(300)
    ]
    keys = ShardKeys("tópic", 2)
    return [
        enqueue.enqueue(keys, writes[:100]),
        Call(command=("CONFIG GET", "maxmemory")),  # redis-py splits a two-word command
        enqueue.enqueue(keys, writes[100:], record_ms=5000, call_token="c1"),
        Call(command=("GET", keys.horizon)),
    ]


def test_a_pipeline_is_packed_as_redis_py_packs_it_in_writes_of_write_bytes() -> None:
    conn = redis.Connection()
    writes = list(streamed._writes(conn, calls()))
    ours = b"".join(bytes(chunk) for write in writes for chunk in write)
    theirs = b"".join(bytes(chunk) for call in calls() for chunk in conn.pack_command(*call.wire()))
    assert ours == theirs
    sizes = [sum(len(chunk) for chunk in write) for write in writes]
    assert len(sizes) > 1
    assert all(size >= streamed.WRITE_BYTES for size in sizes[:-1])
