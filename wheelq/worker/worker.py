"""`Worker`, the worker role's public face."""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self

from wheelq.core.flow import Flow
from wheelq.core.keys import READY, STREAMS, all_shards, validate_group, validate_topic
from wheelq.core.retry import RetryPolicy
from wheelq.core.settings import WorkerSettings
from wheelq.errors import InvalidArgumentError
from wheelq.runtime import tracing
from wheelq.runtime.clock import LocalClock, WallClock
from wheelq.runtime.outage import StopBudget
from wheelq.runtime.role import Connection, Role, executor_of
from wheelq.store import connect, ops
from wheelq.worker.flow_gate import FlowGate
from wheelq.worker.handler_runner import Handler, HandlerRunner
from wheelq.worker.in_flight import InFlightSet
from wheelq.worker.settler import Settler
from wheelq.worker.stream_reader import ClaimKeeper, Consumer, Membership, ReadSlots, StreamReader

log = logging.getLogger(__name__)

__all__ = ["STARTS", "Worker", "WorkerStopReport"]


@dataclass(frozen=True, slots=True)
class WorkerStopReport:
    """What a stop left; nothing is lost, it only takes longer."""

    finished: int
    """Handlers that were running when the stop began and finished within the grace."""
    handed_on: int
    """Entries still pending for this worker, made idle so others take them over at once."""
    abandoned: int
    """Handlers still running at the end of the grace (their entries were handed on)."""
    not_handed_on: int = 0
    """Entries not handed on: taken over after the visibility timeout."""
    unsettled: int = 0
    """Settlements not written: the entries run again after the visibility timeout."""


NOTHING_RAN = WorkerStopReport(0, 0, 0)
"""The report of a stop that found nothing running (never started, or already stopping)."""


@dataclass(frozen=True, slots=True)
class RunningParts:
    """What `Worker.start()` made, and `shut_down` stops in order."""

    readers: tuple[StreamReader, ...]
    claims: ClaimKeeper
    settler: Settler
    in_flight: InFlightSet
    members: Membership
    visibility_timeout_ms: int

    async def shut_down(
        self,
        budget: StopBudget,
        running: list[asyncio.Future[None]],
        grace_s: float,
        hurry: asyncio.Event,
    ) -> WorkerStopReport:
        """Stop every part within `budget`, giving `running` handlers `grace_s`; what was left."""
        for reader in self.readers:
            await reader.stop()
        self.claims.claiming = False
        waiting = self.in_flight.drop_waiting()
        handed_on, not_handed_on = await self._hand_on(budget, waiting, "waiting")
        finished = await wait_for_handlers(running, grace_s, hurry)
        abandoned = len(running) - finished
        for task in running:
            task.cancel()
        await self.claims.stop(budget)
        await self.settler.stop(budget)
        pending: dict[int, list[str]] | None = await budget.attempt(
            "read the entries still pending here",  # incl. what a cancelled read delivered
            self.members.still_pending,
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
                await budget.attempt("leave the group", self.members.leave, default=None)
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
        idle_ms = self.visibility_timeout_ms
        done = await budget.attempt(
            f"hand on {count} {what} entries",
            lambda: self.members.hand_on({k: v for k, v in by_shard.items() if v}, idle_ms),
            default=-1,
        )
        return (0, count) if done < 0 else (done, 0)


async def wait_for_handlers(
    running: list[asyncio.Future[None]], grace_s: float, hurry: asyncio.Event
) -> int:
    """Wait for `running` handlers until the grace ends or `hurry`; returns how many finished."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace_s
    hurried = asyncio.ensure_future(hurry.wait())
    pending: set[asyncio.Future[Any]] = set(running)
    try:
        while pending and not hurry.is_set() and loop.time() < deadline:
            _, pending = await asyncio.wait(
                pending | {hurried},
                timeout=deadline - loop.time(),
                return_when=asyncio.FIRST_COMPLETED,
            )
            pending.discard(hurried)
    finally:
        hurried.cancel()
    return sum(1 for t in running if t.done() and not t.cancelled())


STARTS = {"earliest": "0", "now": "$"}
"""Where a consumer group that does not exist yet starts reading (`Worker(start=)`)."""


NOT_STARTED = {"running": False, "failures": 0, "last_error": None}


class Worker(Role[WorkerStopReport]):
    """Runs `handler` on the jobs of `topic` for consumer group `group`.

    Args:
        connection: The redis-py asyncio client, plain or cluster (the worker leaves it open).
        handler: ``def`` (run on threads) or ``async def``, taking one `wheelq.Job`; one that
            raises or runs over `handler_timeout_ms` is retried with backoff, or dead-lettered.
        group: The consumer group; each group on a topic gets every job.
        settings: `WorkerSettings` (defaults when None).
        consumer: This worker's name in the group (default: host:pid:random).
        start: Where a new group starts: "earliest" (every job in the stream) or "now".
        flow: The group's flow control (`wheelq.Flow`).
        stream: "ready" (jobs without an HTTP callback) or "callbacks" (the deliverer's).

    Raises:
        InvalidHandlerError: `handler` is not callable, is a generator or async generator
            function, or cannot take one argument.
        InvalidArgumentError: `topic`, `group` or `start` is not valid.
    """

    def __init__(
        self,
        connection: Connection,
        topic: str,
        handler: Handler,
        *,
        group: str = "default",
        settings: WorkerSettings | None = None,
        consumer: str | None = None,
        start: str = "earliest",
        flow: Flow | None = None,
        stream: str = READY,
    ) -> None:
        self.topic = validate_topic(topic)
        if stream not in STREAMS:
            raise InvalidArgumentError(
                "stream", f"stream must be one of {', '.join(STREAMS)}, got {stream!r}"
            )
        self.stream = stream
        if not isinstance(start, str) or start not in STARTS:
            raise InvalidArgumentError("start", f"start must be 'earliest' or 'now', got {start!r}")
        self.start_from = start
        self.group = validate_group(group)
        self.settings = settings or WorkerSettings()
        s = self.settings
        super().__init__(executor_of(connection), s.start_timeout_ms, s.stop_timeout_ms, log)
        self.consumer = consumer or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.runner = HandlerRunner(
            handler,
            timeout_ms=s.handler_timeout_ms,
            threads=s.concurrency,
            tracing=tracing.load(),
            group=group,
            result_max_bytes=s.result_max_bytes,
        )
        self._hurry = asyncio.Event()
        self._members = Membership(Consumer(self._executor, self.topic, [], group, self.consumer))
        self.clock = LocalClock()
        self.settler = Settler(
            self._executor,
            self.topic,
            group,
            self.clock,
            max_pause_ms=s.failure_pause_max_ms,
            lane=stream,
        )
        self._in_flight = InFlightSet(
            self.topic,
            group,
            s.concurrency,
            self.runner,
            self.settler,
            RetryPolicy(s.retry_base_ms, s.retry_max_ms, s.retry_jitter_pct),
            WallClock(),
            gate=self._flow_gate(Flow() if flow is None else flow),
            read_ahead_ms=s.read_ahead_ms,
        )
        self._parts: RunningParts | None = None

    def _flow_gate(self, flow: Flow) -> FlowGate:
        if not isinstance(flow, Flow):
            raise InvalidArgumentError("flow", f"flow must be a wheelq.Flow, got {flow!r}")
        s = self.settings
        ttl_ms = max(s.visibility_timeout_ms, s.handler_timeout_ms) * 2
        return FlowGate(self._executor, self.topic, self.group, self.consumer, flow, ttl_ms)

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
        cluster: bool | None = None,
        consumer: str | None = None,
        start: str = "earliest",
        flow: Flow | None = None,
        stream: str = READY,
        **settings: Any,
    ) -> Self:
        """A worker for the Redis at `url` (any node of a cluster; `cluster` None: found at start).

        Raises:
            InvalidArgumentError: A setting unknown or out of range, or `cluster` not a bool
                or None; and as `Worker`.
        """
        if concurrency is not None:
            settings["concurrency"] = concurrency
        worker = cls(
            connect.async_executor(url, redis_options or {}, cluster),
            topic,
            handler,
            group=group,
            settings=WorkerSettings.from_kwargs(settings),
            consumer=consumer,
            start=start,
            flow=flow,
            stream=stream,
        )
        worker.owns_connection = True  # closed by stop()
        return worker

    @property
    def in_flight(self) -> InFlightSet:
        """The entries this worker holds, and its handler timings (`wheelq.metrics`)."""
        return self._in_flight

    # --- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Wait for Redis (`RedisUnavailableError` after ``start_timeout_ms``), create the topic
        and the group if missing, and start reading."""
        if self._gate.started:
            return
        self._in_flight.closing = False
        self._hurry = asyncio.Event()
        await self._start_through_gate(self._start)

    async def _start(self) -> None:
        _, shards = await self._executor.run(  # the topic is created on first use
            [
                ops.register_topic(self.topic, self.settings.default_shards),
                ops.topic_shards(self.topic),
            ]
        )
        me = Consumer(
            self._executor,
            self.topic,
            all_shards(self.topic, shards, self.stream),
            self.group,
            self.consumer,
        )
        connect.check_blocking_reads(self.redis, [keys.stream for keys in me.shards])
        self._members = Membership(me)
        await self._members.join(STARTS[self.start_from])
        s, in_flight = self.settings, self._in_flight
        claims = ClaimKeeper(
            me,
            s,
            held=in_flight.held_ids,
            free=in_flight.free_slots,
            accept=in_flight.accept,
            clock=self.clock,
        )
        # A cluster serves a command from one slot only: there, one blocking read per shard.
        groups = [[keys] for keys in me.shards] if self.cluster else [None]
        slots = ReadSlots(in_flight.free, in_flight.room, len(me.shards), len(groups))
        readers = tuple(
            StreamReader(
                me,
                s.block_ms,
                slots=slots,
                accept=in_flight.accept,
                ensure_groups=self._members.join,
                clock=self.clock,
                max_pause_ms=s.failure_pause_max_ms,
                shards=shards,
            )
            for shards in groups
        )
        self._parts = RunningParts(
            readers, claims, self.settler, in_flight, self._members, s.visibility_timeout_ms
        )
        for service in (self.settler, claims, *readers):
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
        """Stop: let handlers finish within the grace, hand the rest on; bounded, safe twice."""
        if not self._gate.started:
            return NOTHING_RAN
        if self._in_flight.closing:
            self._hurry.set()
            return NOTHING_RAN
        running = self._in_flight.close()
        if not await self._gate.abort():  # the start failed or was aborted: nothing runs
            return NOTHING_RAN
        budget = self._stop_budget()
        if self._hurry.is_set():
            budget.cut()
        assert self._parts is not None  # made by the start that `abort()` saw through
        grace_s = (self.settings.shutdown_grace_ms if grace_ms is None else grace_ms) / 1000
        try:
            report = await self._parts.shut_down(budget, running, grace_s, self._hurry)
        finally:
            self.runner.close()
            await self._stopped()
        budget.log_end(
            log,
            f"worker {self.consumer} stopped: {report}",
            "entries not handed on are taken over after visibility_timeout_ms "
            f"({self.settings.visibility_timeout_ms} ms), and those not settled run again",
        )
        return report

    def hurry(self) -> None:
        """Cut a stop short: abandon running handlers, wait for Redis only a moment."""
        self._hurry.set()
        super().hurry()

    def status(self) -> dict[str, Any]:
        """Counters for logs and health checks (``held`` counts the read-ahead too)."""
        c, w, parts = self.settler.counts, self._in_flight, self._parts
        return {
            "consumer": self.consumer,
            "topic": self.topic,
            "group": self.group,
            "stopping": w.closing,
            "held": len(w.held),
            "running": len(w.running()),
            "read_ahead": w.read_ahead.extra,
            "handled": w.handled,
            "failed": w.failed,
            "skipped": w.skipped,
            "acked": c.acked,
            "retried": c.retried,
            "dead_lettered": c.dead_lettered + (parts.claims.dead_lettered if parts else 0),
            "taken_over": parts.claims.taken_over if parts else 0,
            "wedged": self.runner.wedged,
            "parts": {
                "settler": self.settler.status(),
                "claims": parts.claims.status() if parts else NOT_STARTED,
                "reader": combined([r.status() for r in parts.readers]) if parts else NOT_STARTED,
            },
        }


def combined(statuses: list[dict[str, Any]]) -> dict[str, Any]:
    """One status for several readers: running if all are, most failures, first error."""
    if len(statuses) == 1:
        return statuses[0]
    errors = [st["last_error"] for st in statuses if st["last_error"] is not None]
    return {
        "running": all(st["running"] for st in statuses),
        "failures": max(st["failures"] for st in statuses),
        "last_error": errors[0] if errors else None,
    }
