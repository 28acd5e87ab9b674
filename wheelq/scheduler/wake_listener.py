"""The wake listener: the prompt half of DESIGN invariant 4.

A job written inside a window the leader has already preloaded is noted
in the shard's inbox (durable) and published on its wake channel (fast).
This service subscribes to the wake channels of the led shards and puts
announced jobs straight into the wheel. If a message is lost, the
preloader's inbox drain still finds the job, at most one preload interval
later; correctness never rests on pub/sub.
"""

from __future__ import annotations

import asyncio
import logging

import redis.asyncio
from redis.exceptions import RedisError

from wheelq.runtime.outage import Outage
from wheelq.runtime.service import Service
from wheelq.scheduler.led_shards import Leads
from wheelq.scheduler.wheel_driver import WheelDriver
from wheelq.store.wake import WakeNote, WakeSubscription

log = logging.getLogger("wheelq.wake")

POLL_S = 0.1  # how soon a new subscription (or stop) takes effect


class WakeListener(Service):
    """Feeds pub/sub wake notes of led shards into the wheel."""

    name = "wake"

    def __init__(self, connection: redis.asyncio.Redis, leads: Leads, driver: WheelDriver) -> None:
        super().__init__()
        self._redis = connection
        self._leads = leads
        self._driver = driver
        self._outage = Outage(log, "wake listener")

    async def _run(self) -> None:
        while not self.stopping:
            subscription = WakeSubscription(self._redis)
            pause_s = 0.0
            try:
                await self._listen(subscription)
            except (RedisError, OSError) as exc:
                pause_s = self._outage.failed(exc, POLL_S)
            finally:
                await subscription.aclose()
            await self.sleep(pause_s)

    async def _listen(self, subscription: WakeSubscription) -> None:
        while not self.stopping:
            await subscription.follow(self._leads.by_channel.keys())
            if not subscription.channels:
                await self.sleep(POLL_S)
                continue
            notes = await subscription.receive(POLL_S)
            self._outage.ok()
            for note in notes:
                self._deliver(note)
            await asyncio.sleep(0)

    def _deliver(self, note: WakeNote) -> None:
        lead = self._leads.by_channel.get(note.channel)
        if lead is not None:
            self._driver.schedule(lead, [(note.job_id, note.due_ms)])
