"""A worker: runs a handler on every job of a topic, for one consumer group.

```
StreamReader ──XREADGROUP──▶ held entries ──slots──▶ HandlerRunner ──▶ Settler ──XACK / retry.lua /
ClaimKeeper ──XAUTOCLAIM──▶      ▲                                                 dead_letter.lua
            ──touch.lua (keep-alive)┘
```
Delivery is at-least-once: an entry is acked only after its handler
returned, so a worker that dies mid-job leaves the entry pending, and a
live worker takes it over after the visibility timeout. Handlers should be
idempotent (or use the job id to make them so).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import secrets
import signal
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import redis.asyncio
from redis.exceptions import ResponseError

from wheelq.core.job import Job
from wheelq.core.keys import ShardKeys, all_shards, validate_topic
from wheelq.core.retry import Reason, RetryPolicy, after_failure
from wheelq.core.settings import ClientSettings, WorkerSettings
from wheelq.errors import InvalidArgumentError
from wheelq.runtime.claims import ClaimKeeper
from wheelq.runtime.client import AsyncClient
from wheelq.runtime.clock import WallClock
from wheelq.runtime.handler import Handler, HandlerRunner
from wheelq.runtime.reader import StreamReader
from wheelq.runtime.settler import Settler
from wheelq.store import consume
from wheelq.store.calls import AsyncExecutor

log = logging.getLogger("wheelq.worker")

PENDING_PAGE = 1000


@dataclass(frozen=True, slots=True)
class WorkerStopReport:
    """What a stop left: entries handed on to other workers, handlers abandoned running."""

    finished: int
    """Handlers that were running when the stop began and finished within the grace."""
    handed_on: int
    """Entries still pending for this worker, made idle so others take them over at once."""
    abandoned: int
    """Handlers still running at the end of the grace (their entries were handed on)."""


@dataclass(slots=True)
class _Held:
    job: Job
    payload: bytes
    task: asyncio.Task[None] | None = None
    started: bool = False


class Worker:
    """Runs `handler` on the jobs of `topic` for consumer group `group`.

    `serve()` runs it until `stop()`; `run()` blocks and stops on SIGINT/SIGTERM (a second
    signal stops at once). A worker made by `from_url` owns its connection.
    """

    def __init__(
        self,
        connection: redis.asyncio.Redis,
        topic: str,
        handler: Handler,
        *,
        group: str = "default",
        settings: WorkerSettings | None = None,
        consumer: str | None = None,
    ) -> None:
        self.topic = validate_topic(topic)
        if not isinstance(group, str) or not group or not group.isprintable() or len(group) > 200:
            raise InvalidArgumentError(
                "group", f"group must be a printable str of 1-200 characters, got {group!r}"
            )
        self.group = group
        self.settings = settings or WorkerSettings()
        self.redis = connection
        self.consumer = consumer or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.runner = HandlerRunner(
            handler,
            timeout_ms=self.settings.handler_timeout_ms,
            threads=self.settings.concurrency,
        )
        self._executor = AsyncExecutor(connection)
        self._policy = RetryPolicy(
            self.settings.retry_base_ms,
            self.settings.retry_max_ms,
            self.settings.retry_jitter_pct,
        )
        self._clock = WallClock()
        self._held: dict[tuple[int, str], _Held] = {}
        self._slots = asyncio.Semaphore(self.settings.concurrency)
        self._room = asyncio.Event()
        self._hurry = asyncio.Event()
        self._shards: list[ShardKeys] = []
        self.settler = Settler(self._executor, self.topic, group)
        self._reader: StreamReader | None = None
        self._claims: ClaimKeeper | None = None
        self._stopped: asyncio.Event | None = None
        self._started = False
        self._closing = False
        self._owns_connection = False
        self.handled = 0
        self.failed = 0
        self.skipped = 0

    @classmethod
    def from_url(
        cls,
        url: str,
        topic: str,
        handler: Handler,
        *,
        group: str = "default",
        concurrency: int | None = None,
        redis_options: Mapping[str, Any] | None = None,
        consumer: str | None = None,
        **settings: Any,
    ) -> Self:
        """A worker for the Redis at `url`. `settings` are `WorkerSettings` fields."""
        if concurrency is not None:
            settings["concurrency"] = concurrency
        worker = cls(
            redis.asyncio.Redis.from_url(url, **dict(redis_options or {})),
            topic,
            handler,
            group=group,
            settings=WorkerSettings.from_kwargs(settings),
            consumer=consumer,
        )
        worker._owns_connection = True
        return worker

    # --- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Create the topic and the group if missing, and start reading."""
        if self._started:
            return
        self._started = True
        self._closing = False
        self._hurry = asyncio.Event()
        self._stopped = asyncio.Event()
        client = AsyncClient(
            self.redis, ClientSettings(default_shards=self.settings.default_shards)
        )
        shards = await client.create_topic(self.topic)
        self._shards = all_shards(self.topic, shards)
        await self._ensure_groups()
        s = self.settings
        self._claims = ClaimKeeper(
            self._executor,
            self._shards,
            self.group,
            self.consumer,
            s,
            held=self._held_ids,
            free=self._free,
            accept=self._accept,
            lost=self._lost,
        )
        self._reader = StreamReader(
            self._executor,
            self._shards,
            self.group,
            self.consumer,
            s.block_ms,
            free=self._free,
            room=self._room,
            accept=self._accept,
            ensure_groups=self._ensure_groups,
        )
        for service in (self.settler, self._claims, self._reader):
            await service.start()
        log.info(
            "worker %s started on %s (group %s, %d shards, concurrency %d)",
            self.consumer,
            self.topic,
            self.group,
            shards,
            s.concurrency,
        )

    async def stop(self, grace_ms: int | None = None) -> WorkerStopReport:
        """Stop taking work, let running handlers finish within the grace (default
        `shutdown_grace_ms`), and hand every entry not finished on to other workers.
        Called again while stopping, it cuts the grace short."""
        if self._closing:
            self._hurry.set()
            return WorkerStopReport(0, 0, 0)
        if not self._started:
            return WorkerStopReport(0, 0, 0)
        self._closing = True
        assert self._reader is not None and self._claims is not None
        await self._reader.stop()
        self._claims.claiming = False
        for held in self._held.values():
            if not held.started and held.task is not None:
                held.task.cancel()
        running = [h.task for h in self._held.values() if h.started and h.task is not None]
        handed_on = await self._hand_on(waiting_only=True)
        grace_s = (self.settings.shutdown_grace_ms if grace_ms is None else grace_ms) / 1000
        finished = await self._finish(running, grace_s)
        abandoned = len(running) - finished
        for task in running:
            task.cancel()
        await self._claims.stop()
        await self.settler.stop()
        handed_on += await self._hand_on(waiting_only=False)
        await self._forget_consumer()
        self.runner.close()
        if self._owns_connection:
            await self.redis.aclose()
        self._started = False
        if self._stopped is not None:
            self._stopped.set()
        report = WorkerStopReport(finished, handed_on, abandoned)
        log.info("worker %s stopped: %s", self.consumer, report)
        return report

    async def _finish(self, running: list[asyncio.Task[None]], grace_s: float) -> int:
        """Wait for running handlers until the grace ends or `_hurry` is set."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        hurry = asyncio.ensure_future(self._hurry.wait())
        pending: set[asyncio.Future[Any]] = set(running)
        try:
            while pending and not self._hurry.is_set() and loop.time() < deadline:
                _, pending = await asyncio.wait(
                    pending | {hurry}, timeout=deadline - loop.time(), return_when="FIRST_COMPLETED"
                )
                pending.discard(hurry)
        finally:
            hurry.cancel()
        return sum(1 for t in running if t.done() and not t.cancelled())

    async def _hand_on(self, *, waiting_only: bool) -> int:
        """Make entries this worker will not run look idle past the visibility timeout, so the
        next worker to scan takes them over at once. `waiting_only`: the ones read but not
        started; else everything still pending for this consumer (including entries a
        cancelled read had delivered)."""
        idle_ms = self.settings.visibility_timeout_ms
        by_shard: dict[int, list[str]] = {}
        if waiting_only:
            for (shard, entry_id), held in list(self._held.items()):
                if not held.started:
                    by_shard.setdefault(shard, []).append(entry_id)
                    self._held.pop((shard, entry_id), None)
        else:
            pages = await self._executor.run(
                [
                    consume.pending_of(k, self.group, self.consumer, PENDING_PAGE)
                    for k in self._shards
                ],
                return_exceptions=True,
            )
            for keys, ids in zip(self._shards, pages, strict=True):
                if isinstance(ids, list) and ids:
                    by_shard[keys.shard] = ids
        calls = [
            consume.touch(ShardKeys(self.topic, shard), self.group, self.consumer, idle_ms, ids)
            for shard, ids in by_shard.items()
        ]
        if not calls:
            return 0
        replies = await self._executor.run(calls, return_exceptions=True)
        return sum(
            len(ids) - len(lost)
            for ids, lost in zip(by_shard.values(), replies, strict=True)
            if isinstance(lost, list)
        )

    async def _forget_consumer(self) -> None:
        """Delete this consumer from the group when it holds nothing (it leaves no trace)."""
        calls = [consume.pending_of(k, self.group, self.consumer, 1) for k in self._shards]
        pages = await self._executor.run(calls, return_exceptions=True)
        if all(isinstance(p, list) and not p for p in pages):
            await self._executor.run(
                [consume.delete_consumer(k, self.group, self.consumer) for k in self._shards],
                return_exceptions=True,
            )

    async def serve(self) -> None:
        """Start and run until `stop()`."""
        await self.start()
        assert self._stopped is not None
        await self._stopped.wait()

    def run(self) -> WorkerStopReport:
        """Run in the foreground; SIGINT/SIGTERM stop gracefully, a second one at once."""
        report = WorkerStopReport(0, 0, 0)

        async def main() -> None:
            nonlocal report
            loop = asyncio.get_running_loop()
            stopping: list[asyncio.Task[WorkerStopReport]] = []

            def on_signal() -> None:
                if stopping:
                    log.warning("second signal: stopping at once")
                    self._hurry.set()
                else:
                    log.info("signal: finishing running jobs (a second signal stops at once)")
                    stopping.append(asyncio.ensure_future(self.stop()))

            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, on_signal)
            await self.serve()
            if stopping:
                report = await stopping[0]

        asyncio.run(main())
        if (
            report.abandoned
            and self.runner.stuck_threads + report.abandoned
            and not self.runner.is_async
        ):
            # Threads running sync handlers cannot be stopped; do not wait for them at exit.
            logging.shutdown()
            os._exit(1)
        return report

    def status(self) -> dict[str, Any]:
        """Counters for logs and health checks."""
        c = self.settler.counts
        return {
            "consumer": self.consumer,
            "topic": self.topic,
            "group": self.group,
            "held": len(self._held),
            "running": sum(1 for h in self._held.values() if h.started),
            "handled": self.handled,
            "failed": self.failed,
            "skipped": self.skipped,
            "acked": c.acked,
            "retried": c.retried,
            "dead_lettered": c.dead_lettered + (self._claims.dead_lettered if self._claims else 0),
            "taken_over": self._claims.taken_over if self._claims else 0,
        }

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # --- the work -------------------------------------------------------------------------

    async def _ensure_groups(self) -> None:
        replies = await self._executor.run(
            [consume.create_group(k, self.group) for k in self._shards], return_exceptions=True
        )
        for reply in replies:
            if isinstance(reply, Exception) and not (
                isinstance(reply, ResponseError) and "BUSYGROUP" in str(reply)
            ):
                raise reply

    def _free(self) -> int:
        return 0 if self._closing else self.settings.concurrency - len(self._held)

    def _held_ids(self) -> dict[int, list[str]]:
        out: dict[int, list[str]] = {}
        for shard, entry_id in self._held:
            out.setdefault(shard, []).append(entry_id)
        return out

    def _lost(self, shard: int, entry_ids: list[str]) -> None:
        log.warning(
            "%d entries of %s shard %d were taken over by another worker while held here "
            "(this worker stalled past the visibility timeout); only the first to finish counts",
            len(entry_ids),
            self.topic,
            shard,
        )

    def _accept(self, shard: int, entries: list[consume.Entry]) -> None:
        for entry_id, fields in entries:
            if (shard, entry_id) in self._held:
                continue  # our own entry, claimed back after a missed keep-alive
            try:
                job = Job.from_entry(entry_id, fields, shard)
            except ValueError as exc:
                log.error(
                    "dead-lettering entry %s of %s shard %d: %s", entry_id, self.topic, shard, exc
                )
                self.settler.dead(shard, entry_id, Reason.MALFORMED, str(exc))
                continue
            if job.group is not None and job.group != self.group:
                self.skipped += 1  # a retry or replay meant for another group
                self.settler.ack(shard, entry_id)
                continue
            held = _Held(job, fields[b"payload"])
            self._held[(shard, entry_id)] = held
            held.task = asyncio.create_task(self._run_job(held), name=f"wheelq-job-{job.id}")

    async def _run_job(self, held: _Held) -> None:
        job = held.job
        try:
            async with self._slots:
                if self._closing:
                    return
                held.started = True
                error = await self.runner.run(job)
            if error is None:
                self.handled += 1
                self.settler.ack(job.shard, job.entry_id)
                return
            self.failed += 1
            outcome = after_failure(
                job.attempt, job.max_attempts, error, self._policy, random.random()
            )
            if outcome.delay_ms is None:
                log.warning(
                    "job %s of %s dead-lettered: %s",
                    job.id,
                    self.topic,
                    outcome.error.splitlines()[0],
                )
                self.settler.dead(job.shard, job.entry_id, Reason.FAILED, outcome.error)
            else:
                log.info(
                    "job %s of %s failed (attempt %d of %d), retry in %d ms: %s",
                    job.id,
                    self.topic,
                    job.attempt,
                    job.max_attempts,
                    outcome.delay_ms,
                    outcome.error.splitlines()[0],
                )
                self.settler.retry(job, held.payload, outcome.delay_ms, self._clock.now_ms())
        finally:
            if self._held.get((job.shard, job.entry_id)) is held:
                del self._held[(job.shard, job.entry_id)]
            self._room.set()
