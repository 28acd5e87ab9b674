"""The stream reader: XREADGROUP over the shards of a topic, as much as there is room for.

It reads only when the worker has free slots, and asks each shard for its
share of them (at least one), so a worker holds at most about `concurrency`
entries plus one per shard, and does not hoard entries another could run.
On a single server one reader reads every shard with one blocking XREADGROUP;
on a Redis Cluster, where a command may touch one slot only, the worker runs
one reader per shard, each with its own blocking read. Those readers share the
free slots through `ReadSlots`: a read takes its COUNT from them before it
blocks, so together they never hold more entries than the worker can start
(a worker busy with a long handler leaves the other jobs to idle workers).
While the slots are all taken and some reader has none, reads block for at most
`SHARED_BLOCK_MS`, so the slots go round to the shards that have work.
`stop()` cancels a blocked read at once (the connection is dropped, and any
entries it had delivered stay pending: the worker hands them on when it
stops). A group that has vanished (its stream was deleted) is made again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from redis.exceptions import ResponseError

from wheelq.core.clock import Clock
from wheelq.core.keys import ShardKeys
from wheelq.runtime.outage import StopBudget
from wheelq.runtime.service import DEFAULT_MAX_PAUSE_MS, PartStopped, Service
from wheelq.store import consume
from wheelq.worker.membership import Consumer

log = logging.getLogger(__name__)

SHARED_BLOCK_MS = 100
"""Longest block of a read while another reader of the worker has no slot to read with."""


class ReadSlots:
    """The worker's free slots as its readers take them for their reads (see the module
    docstring).

    Args:
        free: How many more entries the worker can take (the in-flight set's `free`).
        room: Set when a slot frees up (by the in-flight set, and here when a read gives
            back what it did not fill).
        shards: The topic's shard count: a read asks each shard for its share.
        readers: How many readers share the slots.
    """

    def __init__(
        self, free: Callable[[], int], room: asyncio.Event, shards: int, readers: int = 1
    ) -> None:
        self._free = free
        self._room = room
        self._shards = shards
        self._readers = readers
        self.reserved = 0
        """Slots taken by reads under way."""
        self.reading = 0
        """Reads under way."""
        self.waiting = 0
        """Readers waiting for a slot."""

    def take(self) -> int:
        """The COUNT of one read, taken from the slots no other read holds: a shard's share
        of them (at least one); 0 when none is left."""
        left = self._free() - self.reserved
        if left <= 0:
            return 0
        count = max(1, left // self._shards)
        self.reserved += count
        self.reading += 1
        return count

    @property
    def short(self) -> bool:
        """Whether reads should block only briefly: every slot is taken, and some reader
        has none."""
        return self.reading < self._readers and self._free() <= self.reserved

    def give_back(self, count: int) -> None:
        """A read has ended: its entries are held now (or there were none)."""
        self.reserved -= count
        self.reading -= 1
        if self.waiting:
            self._room.set()

    async def wait(self) -> None:
        """Wait until a slot frees up or a read gives slots back."""
        self.waiting += 1
        try:
            self._room.clear()
            await self._room.wait()
        finally:
            self.waiting -= 1


class StreamReader(Service):
    """Reads new entries of every shard stream into the worker's free slots.

    Args:
        me: This worker in Redis (its executor sends the reads).
        block_ms: How long one XREADGROUP blocks when there is nothing to read.
        slots: The worker's free slots, shared by all its readers.
        accept: Takes the entries read from one shard.
        ensure_groups: Makes the group again where it vanished (`Membership.join`).
        clock: The base's clock (pauses after failures).
        max_pause_ms: Longest pause after failed reads (``failure_pause_max_ms``).
        shards: The shards this reader reads (default: all of `me`'s, in one command).
    """

    name = "reader"

    def __init__(
        self,
        me: Consumer,
        block_ms: int,
        *,
        slots: ReadSlots,
        accept: Callable[[int, list[consume.Entry]], None],
        ensure_groups: Callable[[], Awaitable[None]],
        clock: Clock,
        max_pause_ms: int = DEFAULT_MAX_PAUSE_MS,
        shards: Sequence[ShardKeys] | None = None,
    ) -> None:
        self.shards = list(me.shards if shards is None else shards)
        title = f"worker reader of {me.topic}"
        if shards is not None:
            title += " shard " + ",".join(str(keys.shard) for keys in self.shards)
        super().__init__(clock, log, max_pause_ms=max_pause_ms, title=title)
        self._me = me
        self._block_ms = block_ms
        self._slots = slots
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
        # Read at once when woken: a reader that went round the loop first would let the
        # reader that just gave its slot back take it again, every time.
        while (count := self._slots.take()) == 0:  # COUNT applies to each stream read
            await self._slots.wait()
        block_ms = min(self._block_ms, SHARED_BLOCK_MS) if self._slots.short else self._block_ms
        call = consume.read_group(self.shards, self._me.group, self._me.name, count, block_ms)
        try:
            (got,) = await self._me.executor.run([call])
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            log.warning("consumer group %s is gone; creating it again", self._me.group)
            await self._ensure_groups()
            return 0.0
        finally:
            self._slots.give_back(count)  # what was read is accepted (held) below, at once
        by_shard: dict[int, list[consume.Entry]] = {}
        for shard, entry in got:
            by_shard.setdefault(shard, []).append(entry)
        for shard, entries in by_shard.items():
            self.read += len(entries)
            self._accept(shard, entries)
        return 0.0
