"""The worker's side of flow control (`wheelq.core.flow`): before a handler starts, take a
rate token and a key's concurrency slot in Redis, or say how long to defer the job.

`admit` waits in the worker for a reserved token up to ``max_wait_ms`` (before the job takes
one of the worker's slots, so waiting jobs do not block others); anything longer, or a key
at its concurrency, is a deferral the caller turns into a retry that keeps the attempt.
`release` gives the concurrency slot back when the handler is done; a worker that dies
holding one frees it after the slot's ttl.
"""

from __future__ import annotations

import asyncio
import random

from wheelq.core.flow import Flow, flow_key
from wheelq.core.job import Job
from wheelq.store import flow as calls
from wheelq.store.calls import Executor


class FlowGate:
    """Admits a consumer group's jobs under its `Flow`.

    Args:
        executor: Where the calls go.
        topic, group, consumer: Whose limits, and who holds a slot.
        flow: The limits.
        slot_ttl_ms: How long a concurrency slot outlives a worker that died holding it.
    """

    def __init__(
        self,
        executor: Executor,
        topic: str,
        group: str,
        consumer: str,
        flow: Flow,
        slot_ttl_ms: int,
    ) -> None:
        self._run = executor.run
        self._topic, self._group, self._consumer = topic, group, consumer
        self.flow = flow
        self._ttl_ms = slot_ttl_ms
        self._rate = flow.group_rate
        self._key_rate = flow.per_key_rate
        self.deferred = 0
        """Jobs deferred by a limit."""

    def key_of(self, job: Job) -> str | None:
        """The job's key (the flow's `key` function; its errors are the handler's)."""
        if self.flow.key is None:
            return None
        value = self.flow.key(job)
        return None if value is None else str(value)

    async def admit(self, job: Job, key: str | None) -> int:
        """0 once the job may start (any rate wait taken); else ms to defer it by."""
        f = self.flow
        holder = self._holder(job)
        running = None
        if key is not None and f.key_concurrency is not None:
            running = flow_key(self._topic, self._group, "running", key)
            (taken,) = await self._run(
                [calls.enter(running, holder, f.key_concurrency, self._ttl_ms)]
            )
            if not taken:
                return self._defer(f.retry_ms + random.randrange(f.retry_ms + 1))
        wait_us = 0
        for rate, bucket_key in ((self._rate, None), (self._key_rate, key)):
            if rate is None or (bucket_key is None and rate is self._key_rate):
                continue
            bucket = flow_key(self._topic, self._group, "rate", bucket_key)
            (got,) = await self._run(
                [calls.take_rate(bucket, rate.interval_us, f.burst, f.max_wait_ms * 1000)]
            )
            waited, reserved = got
            if not reserved:
                if running is not None:
                    await self._run([calls.leave(running, holder)])
                return self._defer(-(-waited // 1000))
            wait_us = max(wait_us, waited)
        if wait_us:
            await asyncio.sleep(wait_us / 1_000_000)
        return 0

    async def release(self, job: Job, key: str | None) -> None:
        """Give back the key's concurrency slot, if the flow has one."""
        if key is not None and self.flow.key_concurrency is not None:
            running = flow_key(self._topic, self._group, "running", key)
            await self._run([calls.leave(running, self._holder(job))])

    def _holder(self, job: Job) -> str:
        return f"{self._consumer}\x1f{job.shard}\x1f{job.entry_id}"

    def _defer(self, ms: int) -> int:
        self.deferred += 1
        return max(1, ms)
