"""One scheduler node and one worker, in-process, firing and running jobs while a test
injects a fault; then the exact account of `wheelq.testing.reconcile`.

    async with FaultRun(srv.url, role_url=via_proxy) as run:
        ids = await run.enqueue(400, span_s=3.0)      # due over the next 3 s
        await run.when_fired(50)                      # some fired: the fault hits mid-stream
        ...inject the fault...
        account = await run.account()                 # waits until every job was handled
    assert account.ok, account.examples

The node and the worker connect to `role_url` (a proxy's, to cut or stall them), the
producer and the account to the server itself. Every job has an explicit id and is due
at an absolute time, so a retried enqueue could not have made it twice.
"""

from __future__ import annotations

import secrets
from collections import Counter
from types import TracebackType
from typing import Any, Self

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from tests.support.waiting import eventually
from wheelq import AsyncAdmin, AsyncClient, Job, Scheduler, Worker
from wheelq.core.keys import all_shards
from wheelq.core.settings import SchedulerSettings
from wheelq.runtime.clock import RedisClock
from wheelq.store import connect
from wheelq.testing import Reconciliation, read_fired, reconcile

SHARDS = 4
NODE = {"lease_ttl_ms": 2000, "window_ms": 2000, "preload_interval_ms": 200}
WORKER = {"block_ms": 200, "claim_interval_ms": 200, "visibility_timeout_ms": 2000}
TIMEOUTS = {"socket_timeout": 1, "socket_connect_timeout": 1}


class FaultRun:
    def __init__(
        self,
        url: str,
        *,
        role_url: str | None = None,
        node: dict[str, Any] | None = None,
        worker: dict[str, Any] | None = None,
        clock: RedisClock | None = None,
    ) -> None:
        """`clock` (default `RedisClock`): the node's, a `SkewedClock` to make it wrong."""
        self.url, self.role_url = url, role_url or url
        self.topic = f"fault-{secrets.token_hex(3)}"
        self.runs: Counter[str] = Counter()
        self.ids: list[str] = []
        self._node_settings = {**NODE, **(node or {})}
        self._worker_settings = {**WORKER, **(worker or {})}
        self.client = AsyncClient.from_url(url)
        self.clock = clock or RedisClock()
        self.node: Scheduler | None = None
        self.worker: Worker | None = None

    async def __aenter__(self) -> Self:
        await AsyncAdmin.of(self.client).create_topic(self.topic, SHARDS)
        self.node = Scheduler(
            connect.async_executor(self.role_url, TIMEOUTS, None),
            [self.topic],
            SchedulerSettings.from_kwargs(self._node_settings),
            clock=self.clock,
        )
        self.node.owns_connection = True
        await self.node.start()

        async def handle(job: Job) -> None:
            self.runs[job.id] += 1

        self.worker = Worker.from_url(
            self.role_url, self.topic, handle, redis_options=TIMEOUTS, **self._worker_settings
        )
        await self.worker.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for role in (self.worker, self.node):
            if role is not None:
                await role.stop()
        await self.client.aclose()

    async def now_ms(self) -> int:
        seconds, micros = await self.client.redis.time()
        return int(seconds) * 1000 + int(micros) // 1000

    async def enqueue(self, count: int, *, span_s: float, lead_s: float = 0.3) -> list[str]:
        """`count` jobs due evenly over `span_s`, the first `lead_s` from now (Redis clock)."""
        start = await self.now_ms() + lead_s * 1000
        base = len(self.ids)
        items = [
            {
                "payload": i,
                "job_id": f"j{base + i}",
                "at": (start + i * span_s * 1000 / count) / 1000,
            }
            for i in range(count)
        ]
        ids = await self.client.enqueue_many(self.topic, items)
        self.ids += ids
        return ids

    async def fired(self) -> int:
        """Jobs fired so far; 0 when the read failed (a fault cut this client's link too)."""
        try:
            return len({r.job_id for r in await read_fired(self.client.redis, self.topic, SHARDS)})
        except (RedisConnectionError, RedisTimeoutError):
            return 0

    async def when_fired(self, count: int, timeout_s: float = 10) -> None:
        async def enough() -> bool:
            return await self.fired() >= count

        await eventually(enough, timeout_s=timeout_s, what=f"{count} jobs fired")

    async def account(self, timeout_s: float = 30, max_runs: int = 1) -> Reconciliation:
        """Wait until every job was handled, then set the ids against the streams."""

        async def all_handled() -> bool:
            return all(self.runs[i] for i in self.ids)

        await eventually(all_handled, timeout_s=timeout_s, what="every job handled")
        await eventually(self.fired, timeout_s=5, what="a read after the fault")  # reconnected
        fired = await read_fired(self.client.redis, self.topic, SHARDS)
        pending: list[str] = []
        for keys in all_shards(self.topic, SHARDS):
            pending += [m.decode() for m in await self.client.redis.zrange(keys.delayed, 0, -1)]
        return reconcile(self.ids, fired, pending=pending, handled=self.runs, max_runs=max_runs)
