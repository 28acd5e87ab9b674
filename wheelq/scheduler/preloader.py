"""The preloader: keeps each led shard's near-due jobs in the wheel.

A full round over a shard is one pipeline:
1. drain the shard's inbox (notes of jobs written inside the horizon: the
   durable half of docs/architecture.md, invariant 4),
2. read the next page of jobs due before Redis time + `window_ms`, and
3. sweep: emit, oldest first and `sweep_batch` at a time, jobs that are
   overdue (the backlog from before this node took the shard, or anything
   the wheel missed by more than `sweep_grace_ms`). A shard whose stream is at
   its topic's ``max_ready`` is swept of every due job, every 20 ms, until
   the stream has room again (`wheelq.core.flow`).
Shards whose page was full or whose sweep left more behind go round again
at once; the event loop runs the wheel driver in between, so a backlog is
drained in bounded steps without starving jobs that are due now.

When a shard goes round again is planned by the read (`preload.lua`): every
`preload_interval_ms` while jobs are due within the window, else not before
its earliest job comes within the window, and at most
`idle_preload_interval_ms` later; the horizon covers the jobs written
meanwhile. A shard sleeps until that plan only while the wake listener
follows it (its notes arrive by pub/sub, so a job written inside the
horizon reaches the wheel at once) and no note has come since its last
drain; otherwise it goes round every `preload_interval_ms`, and its inbox
drain keeps pace with the notes. A followed shard
with nothing noted and nothing overdue gets a light round: the read alone,
which also says whether anything is overdue (then a full round follows at
once). An idle shard so costs one script call per `idle_preload_interval_ms`.
While Redis is unreachable a round ends at the first failure and the next
one waits with backoff.
"""

from __future__ import annotations

import logging
from typing import Any

from wheelq.errors import LeaseLostError
from wheelq.runtime import crash
from wheelq.runtime.outage import is_transient
from wheelq.runtime.service import Service
from wheelq.scheduler.led_shards import Lead, NodeContext
from wheelq.scheduler.wheel_driver import WheelDriver, record_emit
from wheelq.store import ops
from wheelq.store.executor import Call

log = logging.getLogger(__name__)

INBOX_BATCH = 1000
THROTTLED_INTERVAL_MS = 20
"""How often a shard held back by max_ready is swept while the stream is full."""


class Preloader(Service):
    """Tops up the wheel from Redis and sweeps overdue jobs."""

    name = "preloader"
    title = "preloader"

    def __init__(
        self,
        ctx: NodeContext,
        driver: WheelDriver,
    ) -> None:
        super().__init__(ctx.clock, log, max_pause_ms=ctx.settings.failure_pause_max_ms)
        self._ctx = ctx
        self._driver = driver
        self._refused: set[int] = set()
        """Slots of shards whose last round failed on their own (a wrong-type key)."""

    async def step(self) -> float | None:
        """Rounds over the shards whose round is due, until none has more to read or sweep;
        returns the wait until the next shard's round (None: no shard led)."""
        now_ms = self._ctx.clock.now_ms()
        leads = [lead for lead in self._ctx.leads.all() if self._round_at(lead) <= now_ms]
        busy = await self.cycle(leads)
        while busy and not self.stopping:
            busy = await self.cycle(busy)
        self._refused &= self._ctx.leads.by_slot.keys()  # forget leads gone since
        if self._refused:
            self.still_failing()  # a refused shard's retry is still to come
        rounds = [self._round_at(lead) for lead in self._ctx.leads.all()]
        if not rounds:
            return None
        return max(0.0, (min(rounds) - self._ctx.clock.now_ms()) / 1000)

    def _round_at(self, lead: Lead) -> int:
        """When `lead`'s next round is due: its plan, or sooner when not followed."""
        if lead.throttled:
            return lead.last_round_ms + THROTTLED_INTERVAL_MS
        if lead.followed and not lead.noted:
            return lead.planned_ms
        # Not followed, or notes arrive (jobs are being written): drained at the busy pace.
        return min(lead.planned_ms, lead.last_round_ms + self._ctx.settings.preload_interval_ms)

    async def cycle(self, leads: list[Lead]) -> list[Lead]:
        """One round over `leads`; returns those that have more to read or sweep.

        One round trip per shard, not one for all: each reply is parsed and
        put in the wheel in its own event-loop step, so the wheel driver gets
        the loop between shards and no step holds it for long.
        """
        busy = []
        for lead in leads:
            if lead.active and not self.stopping and await self._round(lead):
                busy.append(lead)
        return busy

    async def _round(self, lead: Lead) -> bool:
        s = self._ctx.settings
        token = self._ctx.leads.token
        sent_ms = self._ctx.clock.now_ms()
        lead.last_round_ms = sent_ms
        # Held back by max_ready: every due job is swept (the wheel let them go).
        grace = 0 if lead.throttled else s.sweep_grace_ms
        bound_ms = max(lead.acquired_ms, sent_ms - grace)
        full = lead.noted or lead.overdue or lead.throttled or not lead.followed
        read = ops.preload(
            lead.keys,
            token,
            lead.cursor_ms,
            s.window_ms,
            s.preload_batch,
            s.lease_ttl_ms,
            least_ms=s.preload_interval_ms,
            most_ms=max(s.preload_interval_ms, s.idle_preload_interval_ms),
            overdue_ms=bound_ms,
        )
        calls: list[Call[Any]] = [read]
        if full:
            calls = [
                ops.drain_inbox(lead.keys, INBOX_BATCH),
                read,
                ops.emit_due(
                    lead.keys, token, bound_ms, limit=s.sweep_batch, max_bytes=s.emit_batch_bytes
                ),
            ]
        replies = await self._ctx.executor.run(calls, return_exceptions=True)
        crash.point("sweep.after_reply")
        for reply in replies:
            if is_transient(reply):  # e.g. LOADING: an outage, not this shard's problem
                raise reply
        if full:
            inbox, page, sweep = replies
            return self._settle(lead, inbox, page, sweep, sent_ms, bound_ms)
        return self._settle(lead, None, replies[0], None, sent_ms, bound_ms)

    def _settle(
        self, lead: Lead, inbox: Any, page: Any, sweep: Any, sent_ms: int, bound_ms: int
    ) -> bool:
        if not lead.active:
            return False
        if isinstance(page, LeaseLostError) or isinstance(sweep, LeaseLostError):
            log.warning("lost the lease of %s while preloading", lead.keys.tag)
            self._ctx.lost(lead)
            return False
        busy = False
        if isinstance(inbox, list):
            self._driver.schedule(lead, inbox)
            lead.noted = busy = len(inbox) >= INBOX_BATCH
        if isinstance(page, ops.PreloadPage):
            self._driver.schedule(lead, page.jobs)
            lead.cursor_ms = max(lead.cursor_ms, page.cursor_ms)
            lead.planned_ms = page.next_read_ms
            busy = busy or page.full
            if sweep is None:  # a light round: an overdue job asks for a full one
                lead.overdue = page.overdue
                busy = busy or page.overdue
        if isinstance(sweep, ops.EmitResult):
            lead.throttled = sweep.throttled
            lead.overdue = sweep.more
            record_emit(self._ctx, lead, sweep, sent_ms)
            self._ctx.metrics.fired_by_sweep(lead.keys.topic, sent_ms, bound_ms, sweep.emitted)
            busy = busy or sweep.more
        self._refused.discard(lead.slot)
        for result in (inbox, page, sweep):
            if isinstance(result, Exception) and not isinstance(result, LeaseLostError):
                lead.planned_ms = sent_ms + self._ctx.settings.preload_interval_ms
                self._refused.add(lead.slot)
                self.failed(result)  # this shard only: the others go on without a pause
        return busy
