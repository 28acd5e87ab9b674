"""Preloader and wake listener (docs/architecture.md, invariant 4)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from wheelq.core.clock import Clock
from wheelq.core.keys import ShardKeys
from wheelq.errors import LeaseLostError
from wheelq.runtime import crash
from wheelq.runtime.outage import is_transient
from wheelq.runtime.service import DEFAULT_MAX_PAUSE_MS, Service
from wheelq.scheduler.led_shards import Lead, Leads, NodeContext, NodePart
from wheelq.scheduler.wheel_driver import WheelDriver, record_emit
from wheelq.store import fire, leases
from wheelq.store.call import Call
from wheelq.store.executor import AsyncExecutor
from wheelq.store.wake import WakeNote, WakeSubscription

log = logging.getLogger(__name__)

POLL_S = 0.1  # how soon a new subscription (or stop) takes effect
QUICK_TRIES = 3
"""Tries of a broken wake subscription made again at once before the failure pauses."""


class WakeListener(Service):
    """Feeds pub/sub wake notes of led shards into the wheel."""

    name = "wake"
    title = "wake listener"

    def __init__(
        self,
        executor: AsyncExecutor,
        leads: Leads,
        driver: WheelDriver,
        clock: Clock,
        *,
        max_pause_ms: int = DEFAULT_MAX_PAUSE_MS,
        on_follow: Callable[[], None] | None = None,
        on_notices: Callable[[], None] | None = None,
        mark: bool = False,
    ) -> None:
        """`mark`: write each shard's confirmed subscription to Redis (`lease_followed.lua`),
        so other nodes can free the lease at once if this process dies (fast failover)."""
        super().__init__(clock, log, max_pause_ms=max_pause_ms)
        self._executor = executor
        self._leads = leads
        self._driver = driver
        self._on_follow = on_follow
        self._on_notices = on_notices
        self._mark = mark
        self._marked: dict[int, ShardKeys] = {}
        """Slots of the leads marked followed (a lead taken again has a new slot)."""

    async def step(self) -> float:
        """One subscription: listen until stopped or the connection fails (it raises).

        A subscription that worked and broke is made again at once, not after a pause, for
        `QUICK_TRIES` tries in a row (each may meet another pooled connection the server
        dropped with it): it is the node's liveness connection, and other nodes free its
        leases if it stays gone for the failover grace (docs/architecture.md, "Leases and
        failover")."""
        subscription = WakeSubscription.of(self._executor)
        try:
            await self._listen(subscription)
        except Exception as exc:
            await self._unmark()  # alive: other nodes must not take this for a dead process
            if self.failures >= QUICK_TRIES - 1 or not is_transient(exc):
                raise
            self.failed(exc)  # counted and logged; the next step subscribes again now
        finally:
            self._unfollow_all()
            await subscription.aclose()
        return 0.0

    async def _listen(self, subscription: WakeSubscription) -> None:
        while not self.stopping:
            await subscription.follow(self._leads.by_channel.keys())
            if not subscription.channels:
                await self.sleep(POLL_S)
                continue
            notes = await subscription.receive(POLL_S, self._deliver_all)
            if self.failures:
                self.succeeded()  # the subscription is back: this step does not return
            self._deliver_all(notes)
            confirmed = self._follow(subscription)
            if self._mark:
                await self._marks(confirmed)
            await asyncio.sleep(0)

    async def _marks(self, confirmed: list[Lead]) -> None:
        """Mark the newly confirmed shards followed; forget the marks of leads gone."""
        for slot in self._marked.keys() - self._leads.by_slot.keys():
            del self._marked[slot]
        fresh = [lead for lead in confirmed if lead.slot not in self._marked]
        if not fresh:
            return
        token = self._leads.token
        replies = await self._executor.run(
            [leases.lease_followed(lead.keys, token, True) for lead in fresh],
            return_exceptions=True,
        )
        for lead, reply in zip(fresh, replies, strict=True):
            if reply is True:
                self._marked[lead.slot] = lead.keys
            elif isinstance(reply, BaseException):
                raise reply  # the subscription is made again: marked then

    async def _unmark(self) -> None:
        """Take the marks back (best effort: Redis may be the reason this failed)."""
        marked, self._marked = self._marked, {}
        if marked:
            token = self._leads.token
            try:
                await self._executor.run(
                    [leases.lease_followed(keys, token, False) for keys in marked.values()],
                    return_exceptions=True,
                )
            except Exception as exc:  # a connection the server dropped: subscribe again now
                log.debug("could not take the wake marks back: %s", exc)

    def _deliver_all(self, notes: list[WakeNote]) -> None:
        for note in notes:
            self._deliver(note)

    def _deliver(self, note: WakeNote) -> None:
        lead = self._leads.by_channel.get(note.channel)
        if lead is not None and note.due_ms < 0:  # a nudge: notices wait on the shard
            lead.nudged += 1
            if self._on_notices is not None:
                self._on_notices()
        elif lead is not None:
            self._driver.schedule(lead, [(note.job_id, note.due_ms)])
            if not lead.noted:  # its durable copy waits in the inbox: drain at the busy pace
                lead.noted = True
                if self._on_follow is not None:
                    self._on_follow()

    def _follow(self, subscription: WakeSubscription) -> list[Lead]:
        """Mark the leads whose channel is confirmed as followed; a new one goes round at once.
        Returns the leads confirmed (again) since the last call."""
        changed = False
        fresh, subscription.fresh = subscription.fresh, set()
        confirmed = subscription.confirmed
        out = []
        for channel, lead in self._leads.by_channel.items():
            following = channel in confirmed
            if following and (channel in fresh or not lead.followed):
                lead.noted = True
                lead.planned_ms = 0
                changed = True
                out.append(lead)
            elif lead.followed and not following:
                changed = True
            lead.followed = following
        if changed and self._on_follow is not None:
            self._on_follow()
        return out

    def _unfollow_all(self) -> None:
        for lead in self._leads.all():
            lead.followed = False
        if self._on_follow is not None:
            self._on_follow()


INBOX_BATCH = 1000
THROTTLED_INTERVAL_MS = 20  # Sweep pace of a shard held back by max_ready.
LINE_PACE_MS = (2, 20)  # Sweep pace of a shard whose due line holds jobs: fastest, slowest.
LINE_HALF_LEAD = 16  # A sweep that fires this many or more goes twice as often next time;
LINE_SLACK = 4  # one that fires fewer than this, half as often (the lead is 32 entries).


def line_pace(pace_ms: int, emitted: int) -> int:
    """The next sweep pace of a shard with jobs on its due line, from the last: about half a
    lead a sweep, so the stream never runs dry and an idle lead costs few round trips."""
    fastest, slowest = LINE_PACE_MS
    if emitted >= LINE_HALF_LEAD:
        return max(fastest, pace_ms // 2)
    if emitted < LINE_SLACK:
        return min(slowest, pace_ms * 2)
    return pace_ms


class Preloader(NodePart):
    """Tops up the wheel from Redis and sweeps overdue jobs."""

    name = "preloader"
    title = "preloader"

    def __init__(
        self, ctx: NodeContext, driver: WheelDriver, on_notices: Callable[[], None] | None = None
    ) -> None:
        super().__init__(ctx, log)
        self._driver = driver
        self._on_notices = on_notices

    def _nudged(self, lead: Lead) -> None:
        """Notices wait on `lead`'s shard: the resolver moves them."""
        lead.nudged += 1
        if self._on_notices is not None:
            self._on_notices()

    async def step(self) -> float | None:
        """Run the due shards' rounds; returns the wait until the next (None: no shard led)."""
        now_ms = self._ctx.clock.now_ms()
        leads = [lead for lead in self._ctx.leads.all() if self._round_at(lead) <= now_ms]
        busy = await self.cycle(leads)
        while busy and not self.stopping:
            busy = await self.cycle(busy)
        self._keep_count()
        rounds = [self._round_at(lead) for lead in self._ctx.leads.all()]
        if not rounds:
            return None
        return max(0.0, (min(rounds) - self._ctx.clock.now_ms()) / 1000)

    def _round_at(self, lead: Lead) -> int:
        """When `lead`'s next round is due: its plan, or sooner when not followed."""
        if lead.waiting:
            return lead.last_round_ms + lead.line_pace_ms
        if lead.throttled:
            return lead.last_round_ms + THROTTLED_INTERVAL_MS
        if lead.followed and not lead.noted:
            return lead.planned_ms
        # Not followed, or notes arrive (jobs are being written): drained at the busy pace.
        return min(lead.planned_ms, lead.last_round_ms + self._ctx.settings.preload_interval_ms)

    async def cycle(self, leads: list[Lead]) -> list[Lead]:
        """One round trip per shard of `leads`; returns those with more to read or sweep."""
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
        emit = fire.emit_due(
            lead.keys, token, bound_ms, limit=s.sweep_batch, max_bytes=s.emit_batch_bytes
        )
        if lead.waiting and lead.followed and not lead.noted and sent_ms < lead.planned_ms:
            # A line's sweep between reads (every few ms while jobs wait on it): the emit
            # alone, with no inbox nor page to read and parse, which wake notes and the
            # read's plan bring in their own time.
            (reply,) = await self._ctx.executor.run([emit], return_exceptions=True)
            crash.point("sweep.after_reply")
            if is_transient(reply):
                raise reply
            return self._settle(lead, None, None, reply, sent_ms, bound_ms)
        full = lead.noted or lead.overdue or lead.throttled or not lead.followed
        read = fire.preload(
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
            calls = [fire.drain_inbox(lead.keys, INBOX_BATCH), read, emit]
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
            if inbox and inbox[-1] == fire.NUDGED:
                inbox.pop()
                self._nudged(lead)
            self._driver.schedule(lead, inbox)
            lead.noted = busy = len(inbox) >= INBOX_BATCH
        if isinstance(page, fire.PreloadPage):
            self._driver.schedule(lead, page.jobs)
            lead.cursor_ms = max(lead.cursor_ms, page.cursor_ms)
            lead.planned_ms = page.next_read_ms
            busy = busy or page.full
            if sweep is None:  # a light round: an overdue job asks for a full one
                lead.overdue = page.overdue
                busy = busy or page.overdue
        if isinstance(sweep, fire.EmitResult):
            lead.throttled = sweep.throttled
            lead.waiting = sweep.waiting
            lead.line_pace_ms = line_pace(lead.line_pace_ms, sweep.emitted)
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
