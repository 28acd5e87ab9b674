"""The per-shard gauges of a scheduler node: what each shard it leads holds in Redis.

A scrape comes from prometheus_client's thread and must never wait for Redis, so the
reads run here, on the node's event loop, as a supervised part (`Service`): a scrape
asks for fresh values with `request()` and gets the latest ones read, at most one
scrape old. Nothing is read while nobody scrapes. Each shard is exported by its
leader only, so summing over nodes counts every shard once.
"""

from __future__ import annotations

import asyncio
import logging

from wheelq.core.observe import ShardObservation
from wheelq.producer.operations import drive_async
from wheelq.runtime.service import Service
from wheelq.scheduler.scheduler import Scheduler
from wheelq.store.observe import observe_shards

log = logging.getLogger(__name__)

MIN_INTERVAL_MS = 1000
"""Scrapes closer together than this share one read."""


class ShardGauges(Service):
    """Reads the led shards' observations when a scrape asks (`request`).

    Args:
        node: The scheduler node whose led shards are read, with its executor and clock.
    """

    name = "gauges"
    title = "metrics gauges"

    def __init__(self, node: Scheduler) -> None:
        super().__init__(node.clock, log, max_pause_ms=node.settings.failure_pause_max_ms)
        self._node = node
        self._event_loop: asyncio.AbstractEventLoop | None = None
        self._read_ms: int | None = None
        self.latest: list[ShardObservation] = []
        """The last observations read (empty until the first scrape's read)."""

    async def start(self) -> None:
        self._event_loop = asyncio.get_running_loop()
        await super().start()

    def request(self) -> None:
        """Ask for a read (from any thread): the next scrape sees its values."""
        loop = self._event_loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.wake)

    async def first_wait(self) -> float | None:
        return None  # until the first scrape

    async def step(self) -> float | None:
        now_ms = self.clock.now_ms()
        if self._read_ms is not None and now_ms - self._read_ms < MIN_INTERVAL_MS:
            return None
        self._read_ms = now_ms
        shards = sorted((lead.keys for lead in self._node.leads.all()), key=lambda k: k.tag)
        executor = self._node.executor
        self.latest = await drive_async(
            observe_shards(shards, now_ms, sample=1),
            lambda calls: executor.run(calls, return_exceptions=True),
        )
        return None
