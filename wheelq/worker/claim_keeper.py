"""A worker's claims: keep its own entries alive, take over the idle entries of dead workers.

Two duties on one timer:

- **keep-alive**, every third of the visibility timeout: every entry this
  worker holds (running or waiting for a slot) has its idle time reset, so
  a long handler is never taken over while its worker lives;
- **take-over**, every `claim_interval_ms` while there are free slots:
  XAUTOCLAIM entries idle longer than the visibility timeout (their worker
  died, stalled, or handed them back on stop). An entry already delivered
  more than `max_deliveries` times is dead-lettered by the same script
  instead of being run again. The handler sees how often an entry was delivered
  (`Job.deliveries`), and each take-over and dead letter is logged at INFO.

A duty whose call failed keeps its timer, so after the base's pause it is tried again
first, before its next regular turn. A take-over refused on one shard (a key of the wrong
type) still runs on the other shards before the step raises. The pause after a failed step
never outlasts the keep-alive interval, so keep-alive goes on while take-over keeps failing
(a long pause would let this worker's own running entries be taken over).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from wheelq.core.clock import Clock
from wheelq.core.keys import ShardKeys
from wheelq.core.settings import WorkerSettings
from wheelq.runtime.outage import is_transient
from wheelq.runtime.service import Service
from wheelq.store import consume
from wheelq.worker.membership import Consumer

log = logging.getLogger(__name__)

IDS_PER_TOUCH = 500


class ClaimKeeper(Service):
    """Keeps this worker's entries alive and takes over the idle entries of dead workers.

    Args:
        me: This worker in Redis (its executor sends the calls).
        settings: ``visibility_timeout_ms``, ``claim_interval_ms``, ``max_deliveries``,
            ``failure_pause_max_ms``.
        held: The entries this worker holds, by shard (the in-flight set's `held_ids`).
        free: How many more entries it can take (the in-flight set's `free_slots`).
        accept: Takes claimed entries with their delivery counts.
        clock: Times both duties (a `ManualClock` in tests).
    """

    name = "claims"

    def __init__(
        self,
        me: Consumer,
        settings: WorkerSettings,
        *,
        held: Callable[[], dict[int, list[str]]],
        free: Callable[[], int],
        accept: Callable[[int, list[consume.Entry], Sequence[int]], None],
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
        self._cursors = {keys.shard: consume.ZERO_ID for keys in me.shards}
        self.claiming = True
        """Cleared when the worker stops taking new work; keep-alive goes on."""
        self.dead_lettered = 0
        self.taken_over = 0
        now_ms = clock.now_ms()
        self._next_touch_ms = now_ms + settings.keepalive_interval_ms
        self._next_claim_ms = now_ms + settings.claim_interval_ms

    async def first_wait(self) -> float:
        return self._wait_s()

    async def step(self) -> float:
        """Keep-alive and take-over when each is due. A timer moves on only once its call
        worked, so after a failure (and the base's pause) the failed duty comes first."""
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
        """Reset the idle time of every held entry (or set it to `idle_ms`); returns how many
        are still this worker's."""
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
        still_held = self._held()  # an entry settled while the touch was in flight is not lost
        for (shard, n, _), lost in zip(calls, replies, strict=True):
            kept += n - len(lost)
            taken = set(lost) & set(still_held.get(shard, ()))
            if taken:
                log.warning(
                    "%d entries of %s shard %d were taken over by another worker while held "
                    "here (this worker stalled past the visibility timeout); only the first to "
                    "finish counts",
                    len(taken),
                    self._me.topic,
                    shard,
                )
        return kept

    async def take_over(self) -> int:
        """Claim idle entries of other workers into free slots; returns how many.

        Raises:
            Exception: The first failure, once every other shard had its turn (a connection
                error at once: the other shards would fail the same way).
        """
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
