"""The stream reader: XREADGROUP over every shard of a topic, as much as there is room for.

It reads only when the worker has free slots, and asks each shard for its
share of them (at least one), so a worker holds at most about `concurrency`
entries plus one per shard, and does not hoard entries another could run.
`stop()` cancels a blocked read at once (the connection is dropped, and any
entries it had delivered stay pending: the worker hands them on when it
stops). A group that has vanished (its stream was deleted) is made again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from redis.exceptions import ResponseError

from wheelq.core.clock import Clock
from wheelq.runtime.lifecycle import StopBudget
from wheelq.runtime.service import DEFAULT_MAX_PAUSE_MS, PartStopped, Service
from wheelq.store import consume
from wheelq.worker.membership import Consumer

log = logging.getLogger(__name__)


class StreamReader(Service):
    """Reads new entries of every shard stream into the worker's free slots.

    Args:
        me: This worker in Redis (its executor sends the reads).
        block_ms: How long one XREADGROUP blocks when there is nothing to read.
        free: How many more entries the worker can take (the in-flight set's `free`).
        room: Set when a slot frees up; the reader waits on it while `free()` is 0.
        accept: Takes the entries read from one shard.
        ensure_groups: Makes the group again where it vanished (`Membership.join`).
        clock: The base's clock (pauses after failures).
        max_pause_ms: Longest pause after failed reads (``failure_pause_max_ms``).
    """

    name = "reader"

    def __init__(
        self,
        me: Consumer,
        block_ms: int,
        *,
        free: Callable[[], int],
        room: asyncio.Event,
        accept: Callable[[int, list[consume.Entry]], None],
        ensure_groups: Callable[[], Awaitable[None]],
        clock: Clock,
        max_pause_ms: int = DEFAULT_MAX_PAUSE_MS,
    ) -> None:
        title = f"worker reader of {me.topic}"
        super().__init__(clock, log, max_pause_ms=max_pause_ms, title=title)
        self._me = me
        self._block_ms = block_ms
        self._free = free
        self._room = room
        self._accept = accept
        self._ensure_groups = ensure_groups
        self.read = 0

    async def stop(self, budget: StopBudget | None = None) -> PartStopped:
        """Stop now: a read blocked in Redis is cancelled, not waited out."""
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
        return await super().stop(budget)

    async def step(self) -> float:
        """One read into the free slots (or a wait for one to free up)."""
        free = self._free()
        if free <= 0:
            self._room.clear()
            await self._room.wait()
            return 0.0
        per_shard = max(1, free // len(self._me.shards))  # COUNT applies to each stream
        call = consume.read_group(
            self._me.shards, self._me.group, self._me.name, per_shard, self._block_ms
        )
        try:
            (got,) = await self._me.executor.run([call])
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            log.warning("consumer group %s is gone; creating it again", self._me.group)
            await self._ensure_groups()
            return 0.0
        by_shard: dict[int, list[consume.Entry]] = {}
        for shard, entry in got:
            by_shard.setdefault(shard, []).append(entry)
        for shard, entries in by_shard.items():
            self.read += len(entries)
            self._accept(shard, entries)
        return 0.0
