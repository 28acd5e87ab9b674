"""Where the deliverer runs: a `wheelq.Worker` of group ``callbacks`` per topic.

`delivery_worker` makes one for one topic (`wheelq deliver --topic T`). `Deliveries`
keeps one running for each of a list of topics, or for every topic of the registry, new
ones included (`wheelq serve`), checking the registry every `REFRESH_MS`, and at once for a
topic the service has just taken a job with a callback for (`want`). A topic whose
jobs carry no callbacks costs a read and an ack per job in the ``callbacks`` group.
"""

from __future__ import annotations

import dataclasses
import logging

from wheelq.callbacks.deliverer import Deliverer
from wheelq.core.keys import CALLBACKS
from wheelq.core.settings import WorkerSettings
from wheelq.runtime.clock import LocalClock
from wheelq.runtime.lifecycle import StopBudget
from wheelq.runtime.role import Connection, executor_of
from wheelq.runtime.service import PartStopped, Service
from wheelq.store import ops
from wheelq.worker.worker import Worker

log = logging.getLogger(__name__)

GROUP = "callbacks"
REFRESH_MS = 5000


def delivery_worker(
    connection: Connection,
    topic: str,
    deliverer: Deliverer,
    settings: WorkerSettings | None = None,
    *,
    group: str = GROUP,
) -> Worker:
    """The worker that delivers `topic`'s callbacks: `settings` (the topic's retries,
    visibility timeout, ...) with the deliverer's ``concurrency``."""
    settings = dataclasses.replace(
        settings or WorkerSettings(), concurrency=deliverer.settings.concurrency
    )
    return Worker(connection, topic, deliverer, group=group, settings=settings, stream=CALLBACKS)


class Deliveries(Service):
    """A delivery worker for each topic of `topics` (None: every topic, new ones too).

    Args:
        connection: The redis-py asyncio client the workers share.
        deliverer: The handler they share (one connection pool, one set of breakers).
        settings: Each worker's `WorkerSettings`.
        topics: The topics to deliver for; None for all.
        group: The consumer group of the workers.
        refresh_ms: How often the registry is checked for new topics (with `topics` None).
    """

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
    ) -> None:
        super().__init__(LocalClock(), log)
        self._refresh_s = refresh_ms / 1000
        self._connection = connection
        self._executor = executor_of(connection)
        self.deliverer = deliverer
        self._settings = settings
        self._topics = topics
        self._group = group
        self.workers: dict[str, Worker] = {}
        self._wanted: set[str] = set()

    def want(self, topic: str) -> None:
        """A job with a callback was just enqueued on `topic`: start its worker now if it
        has none (new topics are otherwise found at the next registry check)."""
        if topic not in self.workers and (self._topics is None or topic in self._topics):
            self._wanted.add(topic)
            self.wake()

    async def step(self) -> float:
        topics = self._topics
        if self._wanted:
            wanted, self._wanted = self._wanted, set()
            topics = sorted(wanted)
        elif topics is None:
            (registry,) = await self._executor.run([ops.all_topics()])
            topics = sorted(registry.shards)
        for topic in topics:
            if topic not in self.workers:
                worker = delivery_worker(
                    self._connection, topic, self.deliverer, self._settings, group=self._group
                )
                await worker.start()
                self.workers[topic] = worker
                log.info("delivering the callbacks of topic %s", topic)
        return self._refresh_s if self._topics is None else 3600.0

    async def stop(self, budget: StopBudget | None = None) -> PartStopped:
        stopped = await super().stop(budget)
        for worker in self.workers.values():
            await worker.stop()
        await self.deliverer.aclose()
        return stopped

    def status(self) -> dict[str, object]:
        return {
            **super().status(),
            "topics": {topic: worker.status() for topic, worker in self.workers.items()},
            "counts": dataclasses.asdict(self.deliverer.counts),
        }
