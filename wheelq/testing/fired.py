"""Reading back what fired: the records the demo, the tests and the load tests check."""

from __future__ import annotations

import redis.asyncio

from wheelq.core.keys import all_shards
from wheelq.store import consume
from wheelq.store.executor import AsyncExecutor
from wheelq.testing.stats import Fired

PAGE = 10_000


async def read_fired(
    connection: redis.asyncio.Redis, topic: str, shards: int, after: dict[int, bytes] | None = None
) -> list[Fired]:
    """Every entry of the topic's ready streams (after the ids in `after`, per shard).

    `after` is updated in place to the last id read, so repeated calls read
    only new entries.
    """
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
