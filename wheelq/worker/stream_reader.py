"""Reads and claims (docs/architecture.md, invariants 1 and 14)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from redis.exceptions import ResponseError

from wheelq.core.clock import Clock
from wheelq.core.keys import ShardKeys
from wheelq.core.settings import WorkerSettings
from wheelq.runtime.outage import StopBudget, is_transient
from wheelq.runtime.service import DEFAULT_MAX_PAUSE_MS, PartStopped, Service
from wheelq.store import consume, streams
from wheelq.store.executor import Executor

log = logging.getLogger(__name__)

PENDING_PAGE = 1000


@dataclass(frozen=True, slots=True)
class Consumer:
    """Who a worker is in Redis, shared by its reader, claim keeper and membership."""

    executor: Executor  # `AsyncExecutor`, or a fake in unit tests.
    topic: str
    shards: Sequence[ShardKeys]
    group: str
    name: str
    by_shard: dict[int, ShardKeys] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_shard", {keys.shard: keys for keys in self.shards})


class Membership:
    """Joins `me`'s group on every shard, hands entries on and leaves ."""

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
        """Entries pending for this consumer (up to a page per shard)."""
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
        """Delete this consumer from the group, only when it holds nothing."""
        me = self.me
        calls = [consume.delete_consumer(keys, me.group, me.name) for keys in me.shards]
        await me.executor.run(calls, return_exceptions=True)


SHARED_BLOCK_MS = 100  # Block while another reader has no slot.


class ReadSlots:
    """The worker's free slots as its readers take them; a read asks each shard for its share."""

    def __init__(
        self, free: Callable[[], int], room: asyncio.Event, shards: int, readers: int = 1
    ) -> None:
        self._free = free
        self._room = room
        self._shards = shards
        self._readers = readers
        self.reserved = 0  # Slots taken by reads under way.
        self.reading = 0  # Reads under way.
        self.waiting = 0  # Readers waiting for a slot.

    def take(self) -> int:
        """The COUNT of one read: a share of the free slots, at least one (0: none free)."""
        left = self._free() - self.reserved
        if left <= 0:
            return 0
        count = max(1, left // self._shards)
        self.reserved += count
        self.reading += 1
        return count

    @property
    def short(self) -> bool:
        """Whether reads should block only briefly (every slot taken, some reader has none)."""
        return self.reading < self._readers and self._free() <= self.reserved

    def give_back(self, count: int) -> None:
        """A read has ended: its entries are held now (or there were none)."""
        self.reserved -= count
        self.reading -= 1
        if self.waiting:
            self._room.set()

    async def wait(self) -> None:
        self.waiting += 1
        try:
            self._room.clear()
            await self._room.wait()
        finally:
            self.waiting -= 1


class StreamReader(Service):
    """Reads new entries of its shards into the worker's free `slots`."""

    name = "reader"

    def __init__(
        self,
        me: Consumer,
        block_ms: int,
        *,
        slots: ReadSlots,
        accept: Callable[[int, list[streams.Entry]], None],
        ensure_groups: Callable[[], Awaitable[None]],
        clock: Clock,
        max_pause_ms: int = DEFAULT_MAX_PAUSE_MS,
        shards: Sequence[ShardKeys] | None = None,
        noted: Callable[[bool], None] | None = None,
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
        self._noted = noted  # told after each read whether every stream came short
        self._may_block = False
        """Whether the next read may block: the last one came back short (its streams had no
        more). Not at the start, nor after a full read: those answer at once, so the worker's
        slots learn without waiting out `block_ms` whether the topic has entries (a topic
        with entries on their way keeps its turn; `wheelq.worker.slots`)."""
        self.read = 0

    async def stop(self, budget: StopBudget | None = None) -> PartStopped:
        """Stop now: a read blocked in Redis is cancelled, not waited out."""
        self._stopping = True
        self._may_block = False
        if self._task is not None:
            self._task.cancel()
        return await super().stop(budget)

    async def step(self) -> float:
        """One read into the free slots (or a wait for one to free up)."""
        # Read at once when woken: a reader that went round the loop first would let the
        # reader that just gave its slot back take it again, every time.
        while (count := self._slots.take()) == 0:  # COUNT applies to each stream read
            await self._slots.wait()
        block_ms: int | None = None
        if self._may_block:
            block_ms = min(self._block_ms, SHARED_BLOCK_MS) if self._slots.short else self._block_ms
        call = consume.read_group(self.shards, self._me.group, self._me.name, count, block_ms)
        try:
            (got,) = await self._me.executor.run([call])
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                self._note(True)
                raise
            log.warning("consumer group %s is gone; creating it again", self._me.group)
            await self._ensure_groups()
            return 0.0
        except Exception:
            self._note(True)  # nothing on its way: a failing read holds no turn of the slots
            raise
        finally:
            self._slots.give_back(count)  # what was read is accepted (held) below, at once
        by_shard: dict[int, list[streams.Entry]] = {}
        for shard, entry in got:
            by_shard.setdefault(shard, []).append(entry)
        for shard, entries in by_shard.items():
            self.read += len(entries)
            self._accept(shard, entries)
        # a stream that gave fewer than COUNT has no more now
        self._may_block = short = all(len(entries) < count for entries in by_shard.values())
        self._note(short)
        return 0.0

    def _note(self, short: bool) -> None:
        if self._noted is not None:
            self._noted(short)


IDS_PER_TOUCH = 500


class ClaimKeeper(Service):
    """Keeps held entries alive and takes over dead workers' idle entries into free slots."""

    name = "claims"

    def __init__(
        self,
        me: Consumer,
        settings: WorkerSettings,
        *,
        held: Callable[[], dict[int, list[str]]],
        free: Callable[[], int],
        accept: Callable[[int, list[streams.Entry], Sequence[int]], None],
        clock: Clock,
    ) -> None:
        title = f"worker claim keeper of {me.topic}"
        max_pause_ms = min(settings.failure_pause_max_ms, settings.keepalive_interval_ms)
        super().__init__(clock, log, max_pause_ms=max_pause_ms, title=title)
        self._me = me
        self._settings = settings
        self._held = held
        self._free = free
        self._accept = accept
        self._cursors = {keys.shard: streams.ZERO_ID for keys in me.shards}
        self.claiming = True  # Cleared when the worker stops taking new work; keep-alive goes on.
        self.dead_lettered = 0
        self.taken_over = 0
        self._told: set[tuple[int, str]] = set()  # held entries lost and logged: once each
        now_ms = clock.now_ms()
        self._next_touch_ms = now_ms + settings.keepalive_interval_ms
        self._next_claim_ms = now_ms + settings.claim_interval_ms

    async def first_wait(self) -> float:
        return self._wait_s()

    def claim_soon(self) -> None:
        """Look for entries to take over now (a resumed group: those handed on at the pause)."""
        self._next_claim_ms = self.clock.now_ms()
        self.wake()

    async def step(self) -> float:
        """Keep-alive and take-over when each is due."""
        s, now_ms = self._settings, self.clock.now_ms()
        if now_ms >= self._next_touch_ms:
            await self.keep_alive()
            self._next_touch_ms = now_ms + s.keepalive_interval_ms
        if now_ms >= self._next_claim_ms:
            if self.claiming:
                await self.take_over()
            self._next_claim_ms = now_ms + s.claim_interval_ms
        return self._wait_s()

    def _wait_s(self) -> float:
        next_ms = min(self._next_touch_ms, self._next_claim_ms)
        return max(0.0, next_ms - self.clock.now_ms()) / 1000

    async def keep_alive(self, idle_ms: int = 0) -> int:
        """Reset every held entry's idle time; returns how many are still this worker's."""
        calls = []
        for shard, ids in self._held().items():
            keys = self._me.by_shard[shard]
            for i in range(0, len(ids), IDS_PER_TOUCH):
                chunk = ids[i : i + IDS_PER_TOUCH]
                calls.append(
                    (
                        shard,
                        len(chunk),
                        consume.touch(keys, self._me.group, self._me.name, idle_ms, chunk),
                    )
                )
        if not calls:
            return 0
        kept = 0
        replies = await self._me.executor.run([c for _, _, c in calls])
        # an entry settled while the touch was in flight is not lost
        still_held = {shard: set(ids) for shard, ids in self._held().items()}
        told = {(s, i) for s, i in self._told if i in still_held.get(s, ())}
        for (shard, n, _), lost in zip(calls, replies, strict=True):
            kept += n - len(lost)
            taken = {(shard, i) for i in lost if i in still_held.get(shard, ())} - told
            told |= taken  # each take-over logged once, not at every touch while it runs on
            if taken:
                log.warning(
                    "%d entries of %s shard %d were taken over by another worker while held "
                    "here (this worker stalled past the visibility timeout); only the first to "
                    "finish counts",
                    len(taken),
                    self._me.topic,
                    shard,
                )
        self._told = told
        return kept

    async def take_over(self) -> int:
        """Claim idle entries into free slots; returns how many (raises the first failure last)."""
        claimed = 0
        refused: Exception | None = None
        for keys in self._me.shards:
            free = self._free()
            if free <= 0:
                break
            try:
                claimed += await self._take_over_shard(keys, free)
            except Exception as exc:
                if is_transient(exc):
                    raise
                refused = refused or exc
        self.taken_over += claimed
        if refused is not None:
            raise refused
        return claimed

    async def _take_over_shard(self, keys: ShardKeys, free: int) -> int:
        call = consume.claim(
            keys,
            self._me.group,
            self._me.name,
            self._settings.visibility_timeout_ms,
            self._cursors[keys.shard],
            free,
            self._settings.max_deliveries,
        )
        (result,) = await self._me.executor.run([call])
        self._cursors[keys.shard] = result.cursor
        where = f"{self._me.topic}/{keys.shard}"
        if result.dead_lettered:
            self.dead_lettered += result.dead_lettered
            log.info(
                "dead-lettered %d entries of %s after more than max_deliveries=%d deliveries",
                result.dead_lettered,
                where,
                self._settings.max_deliveries,
            )
        if result.entries:
            log.info("took over %d entries of %s from idle workers", len(result.entries), where)
            self._accept(keys.shard, result.entries, result.deliveries)
        return len(result.entries)
