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

from wheelq.core.clock import Clock
from wheelq.runtime.service import DEFAULT_MAX_PAUSE_MS, Service
from wheelq.scheduler.led_shards import Leads
from wheelq.scheduler.wheel_driver import WheelDriver

log = logging.getLogger(__name__)

POLL_S = 0.1  # how soon a new subscription (or stop) takes effect


class WakeListener(Service):
    """Feeds pub/sub wake notes of led shards into the wheel."""

    name = "wake"
    title = "wake listener"

    def __init__(
        self,
        connection: redis.asyncio.Redis,
        leads: Leads,
        driver: WheelDriver,
        clock: Clock,
        *,
        max_pause_ms: int = DEFAULT_MAX_PAUSE_MS,
    ) -> None:
        super().__init__(clock, log, max_pause_ms=max_pause_ms)
        self._redis = connection
        self._leads = leads
        self._driver = driver

    async def step(self) -> float:
        """One subscription: listen until stopped or the connection fails (it raises)."""
        pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
        try:
            await self._listen(pubsub)
        finally:
            await pubsub.aclose()  # type: ignore[no-untyped-call]
        return 0.0

    async def _listen(self, pubsub: redis.asyncio.client.PubSub) -> None:
        subscribed: set[str] = set()
        while not self.stopping:
            wanted = set(self._leads.by_channel)
            if wanted - subscribed:
                await pubsub.subscribe(*(wanted - subscribed))
            if subscribed - wanted:
                await pubsub.unsubscribe(*(subscribed - wanted))
            subscribed = wanted
            if not subscribed:
                await self.sleep(POLL_S)
                continue
            message = await pubsub.get_message(timeout=POLL_S)
            if self.failures:
                self.succeeded()  # the subscription is back: this step does not return
            while message is not None:
                self._deliver(message)
                message = await pubsub.get_message(timeout=0)
            await asyncio.sleep(0)

    def _deliver(self, message: dict[str, object]) -> None:
        channel, data = message.get("channel"), message.get("data")
        if not isinstance(channel, bytes) or not isinstance(data, bytes):
            return
        lead = self._leads.by_channel.get(channel.decode())
        due, _, job_id = data.decode().partition(":")
        if lead is not None and due.isdigit() and job_id:
            self._driver.schedule(lead, [(job_id, int(due))])
