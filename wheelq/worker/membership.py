"""A worker's standing in its consumer group: joining, handing entries on, leaving.

- `join` creates the group on every shard stream when missing: at id 0
  ("earliest", the default, so jobs fired before the first worker started
  are not skipped) or at "$" ("now": only jobs fired from then on). An
  existing group is never moved; a group that vanished with its stream is
  made again at 0 (every entry of the new stream came after it);
- `hand_on` gives up entries this worker will not run by setting their idle
  time past the visibility timeout: the next worker to scan takes them over
  at once, instead of after a full timeout;
- `leave` deletes the consumer from the group when it holds nothing, so
  stopped workers leave no trace (the trimmer forgets crashed ones later).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from redis.exceptions import ResponseError

from wheelq.core.keys import ShardKeys
from wheelq.store import consume
from wheelq.store.executor import Executor

PENDING_PAGE = 1000


@dataclass(frozen=True, slots=True)
class Consumer:
    """Who a worker is in Redis, shared by its reader, claim keeper and membership."""

    executor: Executor
    """What its calls go through (`AsyncExecutor`; a scripted fake in unit tests)."""
    topic: str
    shards: Sequence[ShardKeys]
    group: str
    name: str
    by_shard: dict[int, ShardKeys] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_shard", {keys.shard: keys for keys in self.shards})


class Membership:
    """Joins `me`'s group on every shard, hands entries on and leaves (see the module
    docstring). Not a service: the worker calls it when it starts and stops, and the reader
    calls `join` when a group has vanished."""

    def __init__(self, me: Consumer) -> None:
        self.me = me

    async def join(self, start_id: str = "0") -> None:
        """Create the group where missing, at `start_id` (BUSYGROUP: it exists, fine)."""
        calls = [consume.create_group(keys, self.me.group, start_id) for keys in self.me.shards]
        for reply in await self.me.executor.run(calls, return_exceptions=True):
            if isinstance(reply, Exception) and not (
                isinstance(reply, ResponseError) and "BUSYGROUP" in str(reply)
            ):
                raise reply

    async def hand_on(self, by_shard: dict[int, list[str]], idle_ms: int) -> int:
        """Make these entries look idle for `idle_ms`; returns how many were still ours."""
        calls = [
            consume.touch(self.me.by_shard[shard], self.me.group, self.me.name, idle_ms, ids)
            for shard, ids in by_shard.items()
        ]
        if not calls:
            return 0
        replies = await self.me.executor.run(calls, return_exceptions=True)
        return sum(
            len(ids) - len(lost)
            for ids, lost in zip(by_shard.values(), replies, strict=True)
            if isinstance(lost, list)
        )

    async def still_pending(self) -> dict[int, list[str]]:
        """Entries pending for this consumer (up to a page per shard), including any a
        cancelled read had delivered."""
        calls = [
            consume.pending_of(keys, self.me.group, self.me.name, PENDING_PAGE)
            for keys in self.me.shards
        ]
        pages = await self.me.executor.run(calls, return_exceptions=True)
        return {
            shard: ids
            for shard, ids in zip(self.me.by_shard, pages, strict=True)
            if isinstance(ids, list) and ids
        }

    async def leave(self) -> None:
        """Delete this consumer from the group: only when it holds nothing (`still_pending`
        came back empty), or its pending entries would become unclaimable."""
        me = self.me
        calls = [consume.delete_consumer(keys, me.group, me.name) for keys in me.shards]
        await me.executor.run(calls, return_exceptions=True)
