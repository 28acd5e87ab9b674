"""The far tier as Python reads it (wheelq.core.far_tier's arithmetic), for tests that count
where every job is: the live records of a shard's leaves."""

from __future__ import annotations

import redis

from wheelq.core import far_tier as ft
from wheelq.core.keys import ShardKeys, far_buckets_key, far_index_key, far_leaf_key


def far_ids(r: redis.Redis, keys: ShardKeys) -> list[str]:
    """The ids of the jobs in the shard's far tier: each record its index entry points at
    (a dead record, cancelled or moved, is not one)."""
    meta = r.hgetall(keys.far)
    width = int(meta.get(b"width", ft.WIDTH_MS))
    level, split = int(meta.get(b"level", 0)), int(meta.get(b"split", 0))
    ids = []
    for raw_leaf in r.zrange(far_buckets_key(keys), 0, -1):
        leaf = int(raw_leaf)
        start, leaf_level = ft.leaf_of(leaf, width)
        for position, raw in enumerate(r.lrange(far_leaf_key(keys, leaf), 0, -1)):
            record = ft.unpack_record(raw, start, leaf_level)
            fp = ft.fingerprint(record.job_id)
            loc = r.hget(far_index_key(keys, ft.index_address(fp, level, split)), fp)
            if loc is not None and ft.split_location(loc) == (leaf, position):
                ids.append(record.job_id)
    return ids
