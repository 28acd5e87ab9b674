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
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from redis.exceptions import RedisError

from wheelq.core.settings import WorkerSettings
from wheelq.runtime.outage import Outage
from wheelq.runtime.service import Service
from wheelq.store import consume
from wheelq.worker.membership import Consumer

log = logging.getLogger("wheelq.worker")

IDS_PER_TOUCH = 500


class ClaimKeeper(Service):
    name = "claims"

    def __init__(
        self,
        me: Consumer,
        settings: WorkerSettings,
        *,
        held: Callable[[], dict[int, list[str]]],
        free: Callable[[], int],
        accept: Callable[[int, list[consume.Entry], Sequence[int]], None],
        lost: Callable[[int, list[str]], None],
    ) -> None:
        super().__init__()
        self._me = me
        self._settings = settings
        self._held = held
        self._free = free
        self._accept = accept
        self._lost = lost
        self._cursors = {keys.shard: consume.ZERO_ID for keys in me.shards}
        self.claiming = True
        """Cleared when the worker stops taking new work; keep-alive goes on."""
        self.dead_lettered = 0
        self.taken_over = 0
        self._outage = Outage(log, f"worker claim keeper of {me.topic}")

    async def _run(self) -> None:
        s = self._settings
        now = time.monotonic()
        next_touch = now + s.keepalive_interval_ms / 1000
        next_claim = now + s.claim_interval_ms / 1000
        while not self.stopping:
            await self.sleep(max(0.0, min(next_touch, next_claim) - time.monotonic()))
            if self.stopping:
                return
            now = time.monotonic()
            try:
                if now >= next_touch:
                    next_touch = now + s.keepalive_interval_ms / 1000
                    await self.keep_alive()
                if now >= next_claim:
                    next_claim = now + s.claim_interval_ms / 1000
                    if self.claiming:
                        await self.take_over()
            except (RedisError, OSError) as exc:  # next tries: on the timers, backed off
                retry_at = now + self._outage.failed(exc)
                next_touch, next_claim = max(next_touch, retry_at), max(next_claim, retry_at)
            else:
                self._outage.ok()

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
                self._lost(shard, sorted(taken))
        return kept

    async def take_over(self) -> int:
        """Claim idle entries of other workers into free slots; returns how many."""
        claimed = 0
        for keys in self._me.shards:
            free = self._free()
            if free <= 0:
                break
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
                claimed += len(result.entries)
                log.info("took over %d entries of %s from idle workers", len(result.entries), where)
                self._accept(keys.shard, result.entries, result.deliveries)
        self.taken_over += claimed
        return claimed
