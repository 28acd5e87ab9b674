"""The watch for unled shards (`wheelq.store.unled`): a part of `wheelq serve` (every
registered topic) and of every scheduler node (the topics it does not serve: it leads those
itself) that reads them every ``unled_check_ms``, keeps what it found for the
``wheelq_shards_unled`` gauge, and logs a WARNING when a topic becomes unled and an INFO
line when it is led again: once each, not every round."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence

from wheelq.core.clock import Clock
from wheelq.runtime.service import DEFAULT_MAX_PAUSE_MS, Service
from wheelq.store.executor import Executor, drive_async
from wheelq.store.topics import all_topics
from wheelq.store.unled import HORIZON_MS, unled_topics

log = logging.getLogger(__name__)


def unled_line(topic: str, shards: Sequence[int]) -> str:
    """What the warning says of `topic` with unled `shards` (the log's and the CLI's)."""
    return (
        f"topic {topic} has jobs due within {HORIZON_MS // 1000} s in {len(shards)} shard(s) "
        f"no scheduler node leads ({', '.join(map(str, shards))}): they will not fire until "
        f"one does; run {remedy(topic)}"
    )


def remedy(topic: str) -> str:
    """What to run so that `topic`'s shards have a leader (the log line's and the
    console's advice)."""
    return (
        f"wheelq scheduler --topics {topic} (or wheelq run MODULE:APP --topic "
        f"{topic}=MODULE:HANDLER, or wheelq run MODULE:APP for a task app's topic)"
    )


class UnledWatch(Service):
    """Reads which topics have unled shards every `interval_ms` (the first read after one
    interval: a node starting takes its leases meanwhile).

    Args:
        executor: Where to read.
        clock: The Redis clock (the horizon is on it).
        interval_ms: Between reads.
        skip: The topics the caller leads itself (a scheduler node's served topics: it
            takes their free shards on its own), not read.
    """

    name = "unled"
    title = "unled-shards watch"

    def __init__(
        self,
        executor: Executor,
        clock: Clock,
        interval_ms: int,
        *,
        skip: Callable[[], Collection[str]] = tuple,
        max_pause_ms: int = DEFAULT_MAX_PAUSE_MS,
    ) -> None:
        super().__init__(clock, log, max_pause_ms=max_pause_ms)
        self._executor = executor
        self._interval_ms = interval_ms
        self._skip = skip
        self.topics: tuple[str, ...] = ()
        """Every registered topic at the last read (the gauge's 0s)."""
        self.unled: dict[str, tuple[int, ...]] = {}
        """Topic -> its unled shards at the last read; topics without any are left out."""
        self.reads = 0
        """Reads done."""

    def shards_unled(self) -> list[tuple[str, int]]:
        """(topic, unled shards) for every registered topic at the last read, 0s included;
        none while reads fail (a stale count would outlive what it counted)."""
        if self.failures:
            return []
        return [(topic, len(self.unled.get(topic, ()))) for topic in self.topics]

    async def first_wait(self) -> float:
        return self._interval_ms / 1000

    async def step(self) -> float:
        await self.check()
        return self._interval_ms / 1000

    async def check(self) -> dict[str, tuple[int, ...]]:
        """Read now, log what changed since the last read, and return what was found."""
        executor = self._executor
        (registry,) = await executor.run([all_topics()])
        found = await drive_async(
            unled_topics(registry.shards, self.clock.now_ms(), self._skip()), executor.run
        )
        for topic in sorted(found.keys() - self.unled.keys()):
            log.warning("%s", unled_line(topic, found[topic]))
        for topic in sorted(self.unled.keys() - found.keys()):
            if topic in registry.shards:
                log.info(
                    "topic %s is led again: every shard with jobs due has a scheduler node", topic
                )
        self.topics = tuple(sorted(registry.shards))
        self.unled = found
        self.reads += 1
        return found
