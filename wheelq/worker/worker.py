"""A worker: runs a handler on every job of a topic, for one consumer group.

```
StreamReader ──XREADGROUP──▶ held entries ──slots──▶ HandlerRunner ──▶ Settler ──XACK / retry.lua /
ClaimKeeper ──XAUTOCLAIM──▶      ▲                                                 dead_letter.lua
            ──touch.lua (keep-alive)┘
```
Delivery is at-least-once: an entry is acked only after its handler
returned, so a worker that dies mid-job leaves the entry pending, and a
live worker takes it over after the visibility timeout. Handlers should be
idempotent (or use the job id to make them so); `Job.deliveries` > 1 tells
a re-run of a taken-over entry.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self

import redis.asyncio

from wheelq.core.keys import ShardKeys, all_shards, validate_topic
from wheelq.core.retry import RetryPolicy
from wheelq.core.settings import WorkerSettings
from wheelq.errors import InvalidArgumentError
from wheelq.runtime.clock import LocalClock
from wheelq.runtime.lifecycle import StartGate, StopBudget, close, serve_until_stopped
from wheelq.runtime.service import Lifecycle
from wheelq.store import ops
from wheelq.store.calls import AsyncExecutor
from wheelq.worker.claim_keeper import ClaimKeeper
from wheelq.worker.handler_runner import Handler, HandlerRunner
from wheelq.worker.in_flight import Dispatcher
from wheelq.worker.membership import Consumer, Membership
from wheelq.worker.settler import Settler
from wheelq.worker.stream_reader import StreamReader

log = logging.getLogger("wheelq.worker")

STARTS = {"earliest": "0", "now": "$"}
"""Where a consumer group that does not exist yet starts reading (`Worker(start=)`)."""


NOT_STARTED = {"running": False, "failures": 0, "last_error": None}
"""A part's status before `start()` made it."""


@dataclass(frozen=True, slots=True)
class WorkerStopReport:
    """What a stop left: entries handed on to other workers, handlers abandoned running,
    and what Redis could not be told (it was unreachable): nothing is lost, it only
    takes longer."""

    finished: int
    """Handlers that were running when the stop began and finished within the grace."""
    handed_on: int
    """Entries still pending for this worker, made idle so others take them over at once."""
    abandoned: int
    """Handlers still running at the end of the grace (their entries were handed on)."""
    not_handed_on: int = 0
    """Entries this worker knew it held but could not hand on: others take them over
    after the visibility timeout."""
    unsettled: int = 0
    """Acks, retries and dead letters not written: their entries stay pending and run
    again elsewhere after the visibility timeout."""


class Worker(Lifecycle):
    """Runs `handler` on the jobs of `topic` for consumer group `group`.

    `serve()` runs it until `stop()`; `run()` blocks and stops on SIGINT/SIGTERM (a second
    signal stops at once). A worker made by `from_url` owns its connection.

    Args:
        connection: The Redis client (not closed by the worker).
        topic: The topic to consume.
        handler: A function taking one `wheelq.Job`, ``def`` (run on threads, at most
            `concurrency` at once) or ``async def``; its return value is ignored. A handler
            that raises (`SystemExit` and `KeyboardInterrupt` included) or runs over
            `handler_timeout_ms` fails that attempt: the job is retried with backoff, or
            dead-lettered after its last attempt.
        group: The consumer group; several groups on one topic each get every job.
        settings: `WorkerSettings` (defaults when None).
        consumer: This worker's name in the group (default: host:pid:random).
        start: Where `group` starts if it does not exist yet on a shard: "earliest" (every
            job still in the stream, including ones fired before it existed) or "now"
            (only jobs fired from then on). An existing group is never moved.

    Raises:
        InvalidHandlerError: `handler` is not callable, is a generator or async generator
            function, or cannot take one argument.
        InvalidArgumentError: `topic`, `group` or `start` is not valid.
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
        start: str = "earliest",
    ) -> None:
        self.topic = validate_topic(topic)
        if not isinstance(start, str) or start not in STARTS:
            raise InvalidArgumentError("start", f"start must be 'earliest' or 'now', got {start!r}")
        self.start_from = start
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
        self._hurry = asyncio.Event()
        self._shards: list[ShardKeys] = []
        self._members = Membership(Consumer(self._executor, self.topic, [], group, self.consumer))
        self.clock = LocalClock()
        self.settler = Settler(
            self._executor,
            self.topic,
            group,
            self.clock,
            max_pause_ms=self.settings.failure_pause_max_ms,
        )
        s = self.settings
        self._work = Dispatcher(
            self.topic,
            group,
            s.concurrency,
            self.runner,
            self.settler,
            RetryPolicy(s.retry_base_ms, s.retry_max_ms, s.retry_jitter_pct),
        )
        self._reader: StreamReader | None = None
        self._claims: ClaimKeeper | None = None
        self._gate = StartGate(connection, self.settings.start_timeout_ms, log)
        self._budget: StopBudget | None = None
        self._owns_connection = False

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
        start: str = "earliest",
        **settings: Any,
    ) -> Self:
        """A worker for the Redis at `url`. `settings` are `WorkerSettings` fields; the
        other arguments are as in `Worker`."""
        if concurrency is not None:
            settings["concurrency"] = concurrency
        worker = cls(
            redis.asyncio.Redis.from_url(url, **dict(redis_options or {})),
            topic,
            handler,
            group=group,
            settings=WorkerSettings.from_kwargs(settings),
            consumer=consumer,
            start=start,
        )
        worker._owns_connection = True
        return worker

    # --- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Wait for Redis (up to ``start_timeout_ms``, ended by `stop()`: see `StartGate`),
        create the topic and the group if missing, and start reading.

        Raises:
            RedisUnavailableError: Redis stayed unreachable for ``start_timeout_ms``.
            redis.exceptions.RedisError: Any other failure (wrong password, ...), at once.
        """
        if self._gate.started:
            return
        self._work.closing = False
        self._hurry = asyncio.Event()
        await self._gate.run(self._start)

    async def _start(self) -> None:
        _, shards = await self._executor.run(  # the topic is created on first use
            [
                ops.register_topic(self.topic, self.settings.default_shards),
                ops.topic_shards(self.topic),
            ]
        )
        self._shards = all_shards(self.topic, shards)
        me = Consumer(self._executor, self.topic, self._shards, self.group, self.consumer)
        self._members = Membership(me)
        await self._members.join(STARTS[self.start_from])
        s = self.settings
        self._claims = ClaimKeeper(
            me,
            s,
            held=self._work.held_ids,
            free=self._work.free,
            accept=self._work.accept,
            lost=self._lost,
            clock=self.clock,
        )
        self._reader = StreamReader(
            me,
            s.block_ms,
            free=self._work.free,
            room=self._work.room,
            accept=self._work.accept,
            ensure_groups=self._members.join,
            clock=self.clock,
            max_pause_ms=s.failure_pause_max_ms,
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

        Bounded even when Redis does not answer: besides the grace it waits for Redis at
        most ``stop_timeout_ms`` in all, and skips the rest once Redis is found
        unreachable; the report says what was left undone. Called again while stopping,
        it cuts the grace short; called while starting, it ends a wait for Redis, or
        waits for the start to end."""
        if not self._gate.started:
            return WorkerStopReport(0, 0, 0)
        if self._work.closing:
            self._hurry.set()
            return WorkerStopReport(0, 0, 0)
        self._work.closing = True
        if not await self._gate.abort():  # the start failed or was aborted: nothing runs
            return WorkerStopReport(0, 0, 0)
        self._budget = budget = StopBudget(self.settings.stop_timeout_ms / 1000)
        if self._hurry.is_set():
            budget.cut()
        try:
            report = await self._stop(budget, grace_ms)
        finally:  # whatever happened, no connection outlives the worker
            self.runner.close()
            if self._owns_connection:
                await close(self.redis)
            self._gate.started = False
            self._gate.stopped.set()
        budget.log_end(
            log,
            f"worker {self.consumer} stopped: {report}",
            "entries not handed on are taken over after visibility_timeout_ms "
            f"({self.settings.visibility_timeout_ms} ms), and those not settled run again",
        )
        return report

    async def _stop(self, budget: StopBudget, grace_ms: int | None) -> WorkerStopReport:
        assert self._reader is not None and self._claims is not None
        await self._reader.stop()
        self._claims.claiming = False
        running = self._work.running()
        waiting = self._work.drop_waiting()
        handed_on, not_handed_on = await self._hand_on(budget, waiting, "waiting")
        grace_s = (self.settings.shutdown_grace_ms if grace_ms is None else grace_ms) / 1000
        finished = await self._work.finish(running, grace_s, self._hurry)
        abandoned = len(running) - finished
        for task in running:
            task.cancel()
        await self._claims.stop(budget)
        await self.settler.stop(budget)
        pending: dict[int, list[str]] | None = await budget.attempt(
            "read the entries still pending here",  # incl. what a cancelled read delivered
            self._members.still_pending,
            default=None,
        )
        if pending is None:
            not_handed_on += abandoned  # known held, not handed on (the unsettled too)
        else:
            done = {(shard, entry_id) for shard, ids in waiting.items() for entry_id in ids}
            rest = {k: [i for i in ids if (k, i) not in done] for k, ids in pending.items()}
            more, not_more = await self._hand_on(budget, rest, "pending")
            handed_on += more
            not_handed_on += not_more
            if not pending:  # it holds nothing: leave no trace in the group
                await budget.attempt("leave the group", self._members.leave, default=None)
        return WorkerStopReport(
            finished, handed_on, abandoned, not_handed_on, unsettled=self.settler.queued
        )

    async def _hand_on(
        self, budget: StopBudget, by_shard: dict[int, list[str]], what: str
    ) -> tuple[int, int]:
        """Hand entries on within `budget`; returns (handed on, not handed on)."""
        count = sum(map(len, by_shard.values()))
        if not count:
            return 0, 0
        idle_ms = self.settings.visibility_timeout_ms
        done = await budget.attempt(
            f"hand on {count} {what} entries",
            lambda: self._members.hand_on({k: v for k, v in by_shard.items() if v}, idle_ms),
            default=-1,
        )
        return (0, count) if done < 0 else (done, 0)

    async def serve(self) -> None:
        """Start and run until `stop()`."""
        await self.start()
        await self._gate.stopped.wait()

    def run(self) -> WorkerStopReport:
        """Run in the foreground until `stop()` or Ctrl-C, then stop gracefully and return
        the report; after a Ctrl-C, KeyboardInterrupt is raised once stopped. The
        `wheelq worker` command also stops on SIGTERM, and a second signal hurries."""
        return asyncio.run(serve_until_stopped(self))

    def hurry(self) -> None:
        """Cut a stop under way short: stop waiting for handlers (they are abandoned and
        handed on), and for Redis all but a moment."""
        self._hurry.set()
        if self._budget is not None:
            self._budget.cut()

    def status(self) -> dict[str, Any]:
        """Counters for logs and health checks. ``wedged``: threads still running sync
        handlers that ran over `handler_timeout_ms` (each replaced by a new thread, up to
        `concurrency` of them)."""
        c, w = self.settler.counts, self._work
        return {
            "consumer": self.consumer,
            "topic": self.topic,
            "group": self.group,
            "held": len(w.held),
            "running": len(w.running()),
            "handled": w.handled,
            "failed": w.failed,
            "skipped": w.skipped,
            "acked": c.acked,
            "retried": c.retried,
            "dead_lettered": c.dead_lettered + (self._claims.dead_lettered if self._claims else 0),
            "taken_over": self._claims.taken_over if self._claims else 0,
            "wedged": self.runner.wedged,
            "parts": {
                "settler": self.settler.status(),
                "claims": self._claims.status() if self._claims else NOT_STARTED,
                "reader": self._reader.status() if self._reader else NOT_STARTED,
            },
        }

    # --- the work -------------------------------------------------------------------------

    def _lost(self, shard: int, entry_ids: list[str]) -> None:
        log.warning(
            "%d entries of %s shard %d were taken over by another worker while held here "
            "(this worker stalled past the visibility timeout); only the first to finish counts",
            len(entry_ids),
            self.topic,
            shard,
        )
