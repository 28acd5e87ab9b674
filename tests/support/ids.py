"""Job ids chosen for the shards they land in."""

from __future__ import annotations

from wheelq.core.keys import shard_of


def balanced_ids(prefix: str, per_shard: int, shards: int) -> list[str]:
    """Ids ``prefix-0``, ``prefix-1``, … picked so that exactly `per_shard` land in each of
    `shards` shards (a test that needs every shard busy cannot leave it to chance)."""
    by_shard: dict[int, list[str]] = {s: [] for s in range(shards)}
    i = 0
    while any(len(ids) < per_shard for ids in by_shard.values()):
        job_id = f"{prefix}-{i}"
        i += 1
        if len(by_shard[shard_of(job_id, shards)]) < per_shard:
            by_shard[shard_of(job_id, shards)].append(job_id)
    return [job_id for ids in by_shard.values() for job_id in ids]
