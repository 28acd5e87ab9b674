"""Writing outcomes back: acks, retries and dead letters, batched into one round trip.

Handlers finish one by one; the settler gathers what they ask for and sends
it together (one XACK per shard for all successes, one script call per retry
and per shard of dead letters). Every settlement is fenced by XACK inside
its script, so sending one twice (after a connection error, or when two
workers raced on a taken-over entry) has no second effect. Settlements that
failed on a connection error are kept and sent again, with backoff while
Redis is unreachable; the entries stay pending meanwhile, so a crash here
only means they run again elsewhere.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from wheelq.core.job import Envelope, Job
from wheelq.core.keys import ShardKeys
from wheelq.core.retry import Reason
from wheelq.runtime.outage import Outage
from wheelq.runtime.service import Service, StopBudget
from wheelq.store import consume
from wheelq.store.calls import AsyncExecutor, Call

log = logging.getLogger("wheelq.worker")

ACKS_PER_CALL = 1000
STOP_S = 2.0
"""How long `stop()` tries to write what is queued when the worker gives no budget."""
_TRANSIENT = (RedisConnectionError, RedisTimeoutError, OSError)


@dataclass(slots=True)
class Counts:
    """What this worker's settlements did (only the ones that took effect)."""

    acked: int = 0
    retried: int = 0
    dead_lettered: int = 0
    dropped: int = 0
    """Settlements Redis refused (not a connection error); their entries stay pending."""


@dataclass(slots=True)
class _Queued:
    acks: dict[int, list[str]] = field(default_factory=lambda: defaultdict(list))
    retries: list[tuple[int, str, str, int, bytes]] = field(default_factory=list)
    dead: dict[int, list[tuple[str, str, str]]] = field(default_factory=lambda: defaultdict(list))

    def __len__(self) -> int:
        return (
            sum(map(len, self.acks.values()))
            + len(self.retries)
            + sum(map(len, self.dead.values()))
        )


class Settler(Service):
    name = "settler"

    def __init__(self, executor: AsyncExecutor, topic: str, group: str) -> None:
        super().__init__()
        self._executor = executor
        self._topic = topic
        self._group = group
        self._queued = _Queued()
        self.counts = Counts()
        self._outage = Outage(log, f"worker settler of {topic}")

    @property
    def queued(self) -> int:
        return len(self._queued)

    def ack(self, shard: int, entry_id: str) -> None:
        self._queued.acks[shard].append(entry_id)
        self.wake()

    def retry(self, job: Job, payload: bytes, delay_ms: int, enqueued_ms: int) -> None:
        """Run `job` again after `delay_ms`, in this group only; `payload` as it was encoded."""
        envelope = Envelope(
            payload, job.attempt + 1, job.max_attempts, enqueued_ms, self._group, job.id
        ).pack()
        self._queued.retries.append((job.shard, job.entry_id, job.id, delay_ms, envelope))
        self.wake()

    def dead(self, shard: int, entry_id: str, reason: Reason, error: str) -> None:
        self._queued.dead[shard].append((entry_id, reason.value, error))
        self.wake()

    async def _run(self) -> None:
        paused_until = 0.0  # backoff while Redis is unreachable (new settlements wake us)
        while not self.stopping:
            if not self._queued:
                await self.sleep(None)
            elif paused_until and (pause_s := paused_until - time.monotonic()) > 0:
                await self.sleep(pause_s)
            elif (error := await self.flush()) is None:
                paused_until = 0.0
                self._outage.ok()
            else:
                paused_until = time.monotonic() + self._outage.failed(error)

    async def stop(self, budget: StopBudget | None = None) -> None:
        """Stop, then write what is still queued within `budget` (default `STOP_S`)."""
        await super().stop(budget)
        if self._queued:
            budget = budget or StopBudget(STOP_S)
            await budget.attempt(f"write {self.queued} settlements", self._flush_all, None)
        if self._queued:
            log.warning("%d settlements not written; their entries stay pending", self.queued)

    async def _flush_all(self) -> None:
        while self._queued:
            if (error := await self.flush()) is not None:
                raise error

    async def flush(self) -> BaseException | None:
        """Send everything queued; returns the connection error that left some of it
        queued (None: all sent)."""
        batch, self._queued = self._queued, _Queued()
        calls: list[tuple[str, Any, Call[Any]]] = []
        for shard, ids in batch.acks.items():
            for i in range(0, len(ids), ACKS_PER_CALL):
                chunk = ids[i : i + ACKS_PER_CALL]
                calls.append(
                    ("ack", (shard, chunk), consume.ack(self._keys(shard), self._group, chunk))
                )
        for item in batch.retries:
            shard, entry_id, job_id, delay_ms, envelope = item
            keys = self._keys(shard)
            calls.append(
                (
                    "retry",
                    item,
                    consume.retry(keys, self._group, entry_id, job_id, delay_ms, envelope),
                )
            )
        for shard, triples in batch.dead.items():
            calls.append(
                (
                    "dead",
                    (shard, triples),
                    consume.dead_letter(self._keys(shard), self._group, triples),
                )
            )
        try:
            replies = await self._executor.run([c for _, _, c in calls], return_exceptions=True)
        except _TRANSIENT as exc:
            replies = [exc] * len(calls)
        except asyncio.CancelledError:  # a stop that could not wait: keep them counted
            for kind, item, _ in calls:
                self._requeue(kind, item)
            raise
        error: BaseException | None = None
        for (kind, item, _), reply in zip(calls, replies, strict=True):
            if isinstance(reply, _TRANSIENT):
                self._requeue(kind, item)
                error = reply
            elif isinstance(reply, Exception):
                log.error("%s of %s refused by Redis: %s", kind, self._topic, reply)
                self.counts.dropped += 1
            elif kind == "ack":
                self.counts.acked += int(reply)
            elif kind == "retry":
                self.counts.retried += int(reply.done)
            else:
                self.counts.dead_lettered += int(reply)
        return error

    def _requeue(self, kind: str, item: Any) -> None:
        if kind == "ack":
            self._queued.acks[item[0]] += item[1]
        elif kind == "retry":
            self._queued.retries.append(item)
        else:
            self._queued.dead[item[0]] += item[1]

    def _keys(self, shard: int) -> ShardKeys:
        return ShardKeys(self._topic, shard)
