"""Where the deliverer runs: a `wheelq.Worker` of group ``callbacks`` on a topic's callbacks
stream; `Deliveries` keeps one for each topic that has callback jobs (`wheelq serve`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from wheelq.callbacks.deliverer import Deliverer
from wheelq.core.keys import CALLBACKS, all_shards
from wheelq.core.settings import WorkerSettings
from wheelq.runtime.clock import LocalClock
from wheelq.runtime.outage import StopBudget, close
from wheelq.runtime.role import Connection, executor_of
from wheelq.runtime.service import PartStopped, Service
from wheelq.store import topics
from wheelq.worker.worker import Worker

log = logging.getLogger(__name__)

GROUP = "callbacks"
REFRESH_MS = 5000
SCAN_MS = 60_000
SCAN_BATCH = 1000  # shards whose callbacks stream one scan round asks about
UNSIGNED = (
    "the callbacks of topic %s go out unsigned: set [callbacks] signing_secret "
    "(WHEELQ_CALLBACKS_SIGNING_SECRET) so receivers can verify them"
)


def delivery_worker(
    connection: Connection,
    topic: str,
    deliverer: Deliverer,
    settings: WorkerSettings | None = None,
    *,
    group: str = GROUP,
) -> Worker:
    """The worker that delivers `topic`'s callbacks; made without a signing secret, it
    warns that they go out unsigned (callbacks are in use: this process delivers them)."""
    if not deliverer.signing_secret:
        log.warning(UNSIGNED, topic)
    settings = dataclasses.replace(
        settings or WorkerSettings(), concurrency=deliverer.settings.concurrency
    )
    return Worker(connection, topic, deliverer, group=group, settings=settings, stream=CALLBACKS)


class Deliveries(Service):
    """A delivery worker for each topic with callback jobs, of `topics` (None: every topic)."""

    name = "deliveries"
    title = "callback deliveries"

    def __init__(
        self,
        connection: Connection,
        deliverer: Deliverer,
        settings: WorkerSettings | None = None,
        topics: list[str] | None = None,
        *,
        group: str = GROUP,
        refresh_ms: int = REFRESH_MS,
        scan_ms: int = SCAN_MS,
        owns_connection: bool = False,
    ) -> None:
        super().__init__(LocalClock(), log)
        self._refresh_s = refresh_ms / 1000
        self._scan_ms = scan_ms
        self._next_scan_ms = 0
        self._connection = connection
        self._executor = executor_of(connection)
        self._owns_connection = owns_connection
        self.deliverer = deliverer
        self._settings = settings
        self._topics = None if topics is None else set(topics)
        self._group = group
        self.workers: dict[str, Worker] = {}
        self._wanted: set[str] = set()

    def want(self, topic: str) -> None:
        """A job with a callback was just enqueued on `topic`: start its worker now."""
        if topic not in self.workers and (self._topics is None or topic in self._topics):
            self._wanted.add(topic)
            self.wake()

    async def step(self) -> float:
        found, self._wanted = self._wanted, set()
        if not found:
            found = await self._listed()
        new = sorted(t for t in found if t not in self.workers)
        if self._topics is not None:
            new = [t for t in new if t in self._topics]
        for topic in new:
            worker = delivery_worker(
                self._connection, topic, self.deliverer, self._settings, group=self._group
            )
            await worker.start()
            self.workers[topic] = worker
            log.info("delivering the callbacks of topic %s", topic)
        return self._refresh_s

    async def _listed(self) -> set[str]:
        """The deliverer's list; every `scan_ms`, with topics off it that have a stream."""
        listed: set[str] = (await self._executor.run([topics.callback_topics()]))[0]
        now_ms = self.clock.now_ms()
        if now_ms < self._next_scan_ms:
            return listed
        self._next_scan_ms = now_ms + self._scan_ms
        (registry,) = await self._executor.run([topics.all_topics()])
        unlisted = [
            keys
            for topic, shards in sorted(registry.shards.items())
            if topic not in listed and (self._topics is None or topic in self._topics)
            for keys in all_shards(topic, shards)
        ]
        for i in range(0, len(unlisted), SCAN_BATCH):
            batch = unlisted[i : i + SCAN_BATCH]
            exists = await self._executor.run([topics.exists(k.callbacks) for k in batch])
            found = {k.topic for k, there in zip(batch, exists, strict=True) if there}
            if found:
                await self._executor.run([topics.mark_callback_topic(t) for t in sorted(found)])
                listed |= found
        return listed

    async def stop(self, budget: StopBudget | None = None) -> PartStopped:
        stopped = await super().stop(budget)
        # All at once: each waits out its handlers' grace, and one after the other a
        # service with many topics would take that many times its stop budget.
        await asyncio.gather(*(w.stop() for w in self.workers.values()), return_exceptions=True)
        await self.deliverer.aclose()
        if self._owns_connection:
            await close(self._executor)
        return stopped

    def status(self) -> dict[str, object]:
        return {
            **super().status(),
            "topics": {topic: worker.status() for topic, worker in self.workers.items()},
            "counts": dataclasses.asdict(self.deliverer.counts),
        }
