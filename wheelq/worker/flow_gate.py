"""The worker's side of flow control (docs/architecture.md, "Flow control")."""

from __future__ import annotations

import asyncio
import random

from wheelq.core import keys as k
from wheelq.core.flow import ORDER_GRACE_MS, Flow, Rate, flow_key, order_keys
from wheelq.core.history import JobState, job_info
from wheelq.core.job import Job
from wheelq.runtime.batch import CallBatch
from wheelq.store import flow as calls
from wheelq.store import history, topics
from wheelq.store.executor import Executor

ORDER_RETENTION_MS = 3 * 86_400_000  # Key-order registrations go this long after due.
GONE = {JobState.SUCCEEDED, JobState.DEAD, JobState.CANCELLED, JobState.EXPIRED}


class FlowGate:
    """Admits a group's jobs under its `Flow`, ordered jobs in their turn."""

    def __init__(
        self,
        executor: Executor,
        topic: str,
        group: str,
        consumer: str,
        flow: Flow,
        slot_ttl_ms: int,
    ) -> None:
        self._batch = CallBatch(executor)
        self._topic, self._group, self._consumer = topic, group, consumer
        self.flow = flow
        self._ttl_ms = slot_ttl_ms
        self._rate = flow.group_rate
        self._key_rate = flow.per_key_rate
        self.limits = bool(flow.rate or flow.key_rate or flow.key_concurrency)
        """Whether any job waits for a limit (else only ordered jobs go through the gate)."""
        self._shards: int | None = None
        self.deferred = 0  # Jobs deferred by a limit or by their key's order.

    def key_of(self, job: Job) -> str | None:
        """The job's key: the flow's `key` function's (errors are the handler's), else its own."""
        if self.flow.key is None:
            return job.key
        value = self.flow.key(job)
        return None if value is None else str(value)

    async def admit(self, job: Job, key: str | None) -> int:
        """0 once the job may start (any rate wait taken); else ms to defer it by."""
        f = self.flow
        if job.ordered and job.key is not None and not await self._its_turn(job):
            return self._defer_retry()
        holder = self._holder(job)
        running = None
        if key is not None and f.key_concurrency is not None:
            running = flow_key(self._topic, self._group, "running", key)
            slots = f.key_concurrency
            taken = await self._batch.call(calls.enter(running, holder, slots, self._ttl_ms))
            if not taken:
                return self._defer_retry()
        buckets: list[tuple[Rate, str | None]] = []
        if self._rate is not None:
            buckets.append((self._rate, None))
        if self._key_rate is not None and key is not None:
            buckets.append((self._key_rate, key))
        wait_us = 0
        for rate, bucket_key in buckets:
            bucket = flow_key(self._topic, self._group, "rate", bucket_key)
            waited, reserved = await self._batch.call(
                calls.take_rate(bucket, rate.interval_us, f.burst, f.max_wait_ms * 1000)
            )
            if not reserved:
                if running is not None:
                    await self._batch.call(calls.leave(running, holder))
                return self._defer(-(-waited // 1000))
            wait_us = max(wait_us, waited)
        if wait_us:
            await asyncio.sleep(wait_us / 1_000_000)
        return 0

    async def release(self, job: Job, key: str | None, finished: bool) -> None:
        """Give back the key's slot; a `finished` ordered job lets its key's next one start."""
        if key is not None and self.flow.key_concurrency is not None:
            running = flow_key(self._topic, self._group, "running", key)
            await self._batch.call(calls.leave(running, self._holder(job)))
        if finished and job.ordered and job.key is not None:
            await self._done(job.key, job.id, job.due_ms)

    async def _its_turn(self, job: Job) -> bool:
        """Whether `job` is its key's next; a first job that will never run is passed over."""
        assert job.key is not None
        keys = order_keys(self._topic, job.key)
        for _ in range(3):
            first = await self._batch.call(calls.order_enter(keys, self._group, job.id, job.due_ms))
            if first is None:
                return True
            head, due_ms = first
            if not await self._gone(head, due_ms, job):
                return False
            await self._done(job.key, head, due_ms)
        return False

    async def _gone(self, head: str, due_ms: int, job: Job) -> bool:
        if self._shards is None:
            self._shards = await self._batch.call(topics.topic_shards(self._topic))
        assert self._shards is not None
        shard = k.ShardKeys(self._topic, k.shard_of(head, self._shards))
        raw = await self._batch.call(history.lookup(shard, head))
        info = job_info(self._topic, head, raw)
        mine = next((g for g in info.groups if g.group == self._group), None)
        if mine is not None:
            return mine.state in GONE
        if info.state is JobState.UNKNOWN:
            # registered, never written; judged against the job waiting's due time
            return due_ms < job.fired_ms - ORDER_GRACE_MS
        return info.state in GONE

    async def _done(self, key: str, job_id: str, due_ms: int) -> None:
        keys = order_keys(self._topic, key)
        await self._batch.call(
            calls.order_done(keys, self._group, job_id, due_ms, ORDER_RETENTION_MS)
        )

    def _holder(self, job: Job) -> str:
        return f"{self._consumer}\x1f{job.shard}\x1f{job.entry_id}"

    def _defer_retry(self) -> int:
        """A deferral by ``retry_ms``, jittered up to twice that."""
        return self._defer(self.flow.retry_ms + random.randrange(self.flow.retry_ms + 1))

    def _defer(self, ms: int) -> int:
        self.deferred += 1
        return max(1, ms)
