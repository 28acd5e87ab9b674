"""The wake listener: the prompt half of docs/architecture.md, invariant 4.

A job written inside a window the leader has already preloaded is noted
in the shard's inbox (durable) and published on its wake channel (fast).
This service subscribes to the wake channels of the led shards and puts
announced jobs straight into the wheel. It also tells the preloader which
shards it follows (`Lead.followed`: the server confirmed the subscription):
only those may sleep until their planned read, because their notes arrive
here. A shard not followed is read, and its inbox drained, every preload
interval. When a subscription is confirmed again (a reconnection, a slot
move) notes published meanwhile may have been missed: the shard goes round
at once and its inbox drain finds them. Correctness never rests on pub/sub.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from wheelq.core.clock import Clock
from wheelq.runtime.service import DEFAULT_MAX_PAUSE_MS, Service
from wheelq.scheduler.led_shards import Leads
from wheelq.scheduler.wheel_driver import WheelDriver
from wheelq.store.executor import AsyncExecutor
from wheelq.store.wake import WakeNote, WakeSubscription

log = logging.getLogger(__name__)

POLL_S = 0.1  # how soon a new subscription (or stop) takes effect


class WakeListener(Service):
    """Feeds pub/sub wake notes of led shards into the wheel.

    Args:
        executor: The server to subscribe on (see `WakeSubscription.of`).
        leads: The node's leads: whose channels to follow, and whose notes to take.
        driver: Where announced jobs go.
        clock: This part's clock (the base logs pauses on it).
        max_pause_ms: Longest pause after failed subscriptions (``failure_pause_max_ms``).
        on_follow: Called when shards became followed or stopped being followed, or got
            their first note since their inbox was drained (the preloader's wake: it plans
            their rounds again).
    """

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
    ) -> None:
        super().__init__(clock, log, max_pause_ms=max_pause_ms)
        self._executor = executor
        self._leads = leads
        self._driver = driver
        self._on_follow = on_follow

    async def step(self) -> float:
        """One subscription: listen until stopped or the connection fails (it raises)."""
        subscription = WakeSubscription.of(self._executor)
        try:
            await self._listen(subscription)
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
            notes = await subscription.receive(POLL_S)
            if self.failures:
                self.succeeded()  # the subscription is back: this step does not return
            for note in notes:
                self._deliver(note)
            self._follow(subscription)
            await asyncio.sleep(0)

    def _deliver(self, note: WakeNote) -> None:
        lead = self._leads.by_channel.get(note.channel)
        if lead is not None:
            self._driver.schedule(lead, [(note.job_id, note.due_ms)])
            if not lead.noted:  # its durable copy waits in the inbox: drain at the busy pace
                lead.noted = True
                if self._on_follow is not None:
                    self._on_follow()

    def _follow(self, subscription: WakeSubscription) -> None:
        """Mark the leads whose channel is confirmed as followed, the others not; a lead
        just followed (or confirmed again) goes round at once."""
        changed = False
        fresh, subscription.fresh = subscription.fresh, set()
        confirmed = subscription.confirmed
        for channel, lead in self._leads.by_channel.items():
            following = channel in confirmed
            if following and (channel in fresh or not lead.followed):
                lead.noted = True
                lead.planned_ms = 0
                changed = True
            elif lead.followed and not following:
                changed = True
            lead.followed = following
        if changed and self._on_follow is not None:
            self._on_follow()

    def _unfollow_all(self) -> None:
        for lead in self._leads.all():
            lead.followed = False
        if self._on_follow is not None:
            self._on_follow()
