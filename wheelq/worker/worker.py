"""`Worker`, the worker role's public face: one consumer group over one topic or several
(weighted or strictly ordered, sharing its slots; docs/architecture.md, "Several topics in
one worker")."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import secrets
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Self

from wheelq.core.due import MAX_DELAY_MS, duration_ms
from wheelq.core.flow import Flow
from wheelq.core.keys import READY, STREAMS, ShardKeys, all_shards, validate_group, validate_topic
from wheelq.core.options import validate_max_attempts
from wheelq.core.process import RoleInfo, role_info
from wheelq.core.retry import RetryPolicy
from wheelq.core.settings import WorkerSettings
from wheelq.errors import InvalidArgumentError, int_in
from wheelq.runtime import tracing
from wheelq.runtime.clock import LocalClock, WallClock
from wheelq.runtime.outage import StopBudget
from wheelq.runtime.role import Connection, Role, executor_of
from wheelq.store import connect, events, line, pauses, topics
from wheelq.store.call import Call
from wheelq.worker.flow_gate import FlowGate
from wheelq.worker.handler_runner import Handler, HandlerRunner, handler_threads, is_async
from wheelq.worker.in_flight import InFlightSet
from wheelq.worker.pause_watch import PauseWatch
from wheelq.worker.read_ahead import ReadAhead
from wheelq.worker.settler import Settler
from wheelq.worker.slots import Slots
from wheelq.worker.stream_reader import ClaimKeeper, Consumer, Membership, ReadSlots, StreamReader

log = logging.getLogger(__name__)

__all__ = [
    "MAX_TOPICS",
    "MAX_WEIGHT",
    "STARTS",
    "Route",
    "Worker",
    "WorkerStopReport",
    "topic_weights",
]


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


@dataclass(slots=True)
class RunningParts:
    """What `Worker.start()` made for one topic; the worker stops them in order."""

    readers: tuple[StreamReader, ...]
    claims: ClaimKeeper
    settler: Settler
    in_flight: InFlightSet
    members: Membership
    visibility_timeout_ms: int
    watch: PauseWatch | None = None

    async def set_paused(self, paused: bool) -> None:
        """Pause: no free slots, so nothing is read or taken over (running handlers go on
        and settle; held entries wait); resume: slots free again. Safe to repeat."""
        in_flight = self.in_flight
        if in_flight.closing:
            return  # stopping: the stop hands on what is held
        if not paused:
            in_flight.resume()
            self.claims.claim_soon()  # what the pause handed on
            return
        in_flight.paused = True
        for reader in self.readers:  # a blocked read is cancelled; it waits for a slot now
            await reader.stop()
            await reader.start()
        # A cancelled read may have been delivered entries this worker never saw: hand them
        # on now, so a claim takes them at resume instead of after the visibility timeout.
        pending = await self.members.still_pending()
        unseen = {
            shard: [i for i in ids if (shard, i) not in in_flight.held]
            for shard, ids in pending.items()
        }
        if any(unseen.values()):
            await self.members.hand_on(unseen, self.visibility_timeout_ms)

    async def quiesce(self, budget: StopBudget) -> tuple[dict[int, list[str]], int, int]:
        """Stop taking entries and hand on the waiting ones: (their ids, handed on, not)."""
        if self.watch is not None:
            await self.watch.stop()
        for reader in self.readers:
            await reader.stop()
        self.claims.claiming = False
        waiting = self.in_flight.drop_waiting()
        handed_on, not_handed_on = await self._hand_on(budget, waiting, "waiting")
        return waiting, handed_on, not_handed_on

    async def finish(
        self, budget: StopBudget, waiting: dict[int, list[str]], abandoned: int
    ) -> tuple[int, int]:
        """Once the handlers are done or abandoned: stop the rest and hand on what is still
        pending here; returns (handed on, not handed on)."""
        await self.claims.stop(budget)
        await self.settler.stop(budget)
        pending: dict[int, list[str]] | None = await budget.attempt(
            "read the entries still pending here",  # incl. what a cancelled read delivered
            self.members.still_pending,
            default=None,
        )
        if pending is None:
            return 0, abandoned  # known held, not handed on (the unsettled too)
        done = {(shard, entry_id) for shard, ids in waiting.items() for entry_id in ids}
        rest = {k: [i for i in ids if (k, i) not in done] for k, ids in pending.items()}
        handed_on, not_handed_on = await self._hand_on(budget, rest, "pending")
        if not pending:  # it holds nothing: leave no trace in the group
            await budget.attempt("leave the group", self.members.leave, default=None)
        return handed_on, not_handed_on

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


async def shut_down(
    parts: Sequence[RunningParts],
    budget: StopBudget,
    running: list[asyncio.Future[None]],
    grace_s: float,
    hurry: asyncio.Event,
) -> WorkerStopReport:
    """Stop every topic's parts within `budget`, giving `running` handlers `grace_s`."""
    handed_on = not_handed_on = 0
    waiting = []
    for part in parts:
        ids, done, not_done = await part.quiesce(budget)
        waiting.append(ids)
        handed_on, not_handed_on = handed_on + done, not_handed_on + not_done
    finished = await wait_for_handlers(running, grace_s, hurry)
    left = {t for t in running if not t.done() or t.cancelled()}
    abandoned = [sum(1 for t in part.in_flight.running() if t in left) for part in parts]
    for task in running:
        task.cancel()
    for part, ids, mine in zip(parts, waiting, abandoned, strict=True):
        done, not_done = await part.finish(budget, ids, mine)
        handed_on, not_handed_on = handed_on + done, not_handed_on + not_done
    unsettled = sum(part.settler.queued for part in parts)
    return WorkerStopReport(
        finished, handed_on, len(running) - finished, not_handed_on, unsettled=unsettled
    )


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

MAX_TOPICS = 100
"""Most topics one worker serves."""
MAX_WEIGHT = 1000
"""Largest weight of a topic."""

NOT_STARTED = {"running": False, "failures": 0, "last_error": None}

Topics = str | Mapping[str, int] | Sequence[str]
"""One topic, or several: a mapping of topic -> weight, or a list (weight 1 each)."""


def topic_weights(topic: object) -> dict[str, int]:
    """The topics `Worker(topic=)` names, each with its weight, in the order given.

    Raises:
        InvalidArgumentError: On ``topic``: not a topic name, a list of them or a mapping of
            topic -> int weight in [1, `MAX_WEIGHT`]; none or more than `MAX_TOPICS`; a
            topic twice.
        InvalidTopicError: A topic name is not valid.
    """
    if isinstance(topic, str):
        return {validate_topic(topic): 1}
    if isinstance(topic, Mapping):
        items = list(topic.items())
    elif isinstance(topic, list | tuple):
        items = [(name, 1) for name in topic]
    else:
        raise InvalidArgumentError(
            "topic",
            "topic must be a topic name, a list of them, or a mapping of topic -> weight, "
            f"got {topic!r:.80}",
        )
    if not 1 <= len(items) <= MAX_TOPICS:
        raise InvalidArgumentError(
            "topic", f"a worker serves 1-{MAX_TOPICS} topics, got {len(items)}"
        )
    out: dict[str, int] = {}
    for name, weight in items:
        validate_topic(name)
        if isinstance(weight, bool) or not isinstance(weight, int):
            raise _bad_weight(name, weight)
        if not 1 <= weight <= MAX_WEIGHT:
            raise _bad_weight(name, weight)
        if name in out:
            raise InvalidArgumentError("topic", f"topic {name!r} is named twice")
        out[name] = weight
    return out


def _bad_weight(name: str, weight: object) -> InvalidArgumentError:
    return InvalidArgumentError(
        "topic",
        f"the weight of topic {name!r} must be an int in [1, {MAX_WEIGHT}], got {weight!r:.40}",
    )


@dataclass(frozen=True, slots=True)
class Route:
    """A topic's handler with its own time limit, backoff and attempts, over the worker's
    settings (``handler_timeout_ms`` and ``retry_*``) and the job's own ``max_attempts``:
    what a task's options become in its worker (`wheelq.App`). A value of `Worker`'s
    handler mapping may be one."""

    handler: Handler
    timeout_ms: int | None = None
    """A run longer than this fails (0: no limit; None: the worker's ``handler_timeout_ms``)."""
    retry: RetryPolicy | None = None
    """The backoff of its retries (None: the worker's ``retry_*`` settings)."""
    max_attempts: int | None = None
    """Runs before a failing job of the topic is dead-lettered, whatever the job was
    enqueued with (1-1000; None: each job's own ``max_attempts``)."""
    result_ttl_ms: int | None = None
    """How long a run's result stays fetchable, from when it is settled (a task's
    ``result_ttl``; None: as long as the job's history record, the scheduler's
    ``retention_ms`` at most)."""

    def __post_init__(self) -> None:
        if self.timeout_ms is not None:
            int_in("timeout_ms", self.timeout_ms, 0, 86_400_000)
        if self.result_ttl_ms is not None:
            int_in("result_ttl_ms", self.result_ttl_ms, 1, MAX_DELAY_MS)
        if self.max_attempts is not None:
            validate_max_attempts(self.max_attempts)
        if self.retry is not None and not isinstance(self.retry, RetryPolicy):
            raise InvalidArgumentError(
                "retry", f"retry must be a wheelq.RetryPolicy or None, got {self.retry!r:.60}"
            )


Routable = Handler | Route
"""What `Worker` runs on a topic: a handler, or a `Route` with its own limits."""


def _handlers(topics: Sequence[str], handler: Routable | Mapping[str, Routable]) -> list[Route]:
    """One route per topic: `handler` for every one, or as the mapping says."""
    if not isinstance(handler, Mapping):
        return [_route(handler)] * len(topics)
    missing = [t for t in topics if t not in handler]
    unknown = [t for t in handler if t not in topics]
    if missing or unknown:
        said = f"no handler for {missing[0]!r}" if missing else f"{unknown[0]!r} is not served"
        raise InvalidArgumentError(
            "handler", f"handler must map each topic the worker serves to its handler: {said}"
        )
    return [_route(handler[t]) for t in topics]


def _route(handler: Routable) -> Route:
    return handler if isinstance(handler, Route) else Route(handler)


@dataclass(slots=True)
class TopicLane:
    """One topic of a worker: its handler's runner, its settlements and its held entries."""

    topic: str
    weight: int
    runner: HandlerRunner
    settler: Settler
    in_flight: InFlightSet
    members: Membership
    parts: RunningParts | None = field(default=None)


class Worker(Role[WorkerStopReport]):
    """Runs `handler` on the jobs of `topic` (or of several topics) for consumer group `group`.

    Args:
        connection: The redis-py asyncio client, plain or cluster (the worker leaves it open).
        topic: A topic, or several sharing the worker's `concurrency` slots: a mapping of
            topic -> weight (``{"critical": 6, "default": 3, "low": 1}``) or a list (weight
            1 each). While every topic has jobs waiting, each starts jobs in proportion to
            its weight; a topic with none leaves its share to the others.
        handler: ``def`` (run on threads) or ``async def``, taking one `wheelq.Job`; one that
            raises or runs over `handler_timeout_ms` is retried with backoff, or dead-lettered.
            Several topics: one handler for all, or a mapping of topic -> handler. A
            `Route` in its place gives a handler its own time limit, backoff and attempts.
        group: The consumer group; each group on a topic gets every job.
        settings: `WorkerSettings` (defaults when None).
        consumer: This worker's name in the group (default: host:pid:random).
        start: Where a new group starts: "earliest" (every job in the stream) or "now".
        flow: The group's flow control (`wheelq.Flow`), on each topic.
        stream: "ready" (jobs without an HTTP callback) or "callbacks" (the deliverer's).
        strict: Several topics in strict priority, highest weight first (the order given
            among equal weights): a topic's job starts only when no topic above it has one
            waiting or on its way.

    Raises:
        InvalidHandlerError: `handler` is not callable, is a generator or async generator
            function, or cannot take one argument.
        InvalidArgumentError: `topic`, `handler`, `group`, `start` or `strict` is not valid.
    """

    def __init__(
        self,
        connection: Connection,
        topic: Topics,
        handler: Routable | Mapping[str, Routable],
        *,
        group: str = "default",
        settings: WorkerSettings | None = None,
        consumer: str | None = None,
        start: str = "earliest",
        flow: Flow | None = None,
        stream: str = READY,
        strict: bool = False,
    ) -> None:
        weights = topic_weights(topic)
        if not isinstance(strict, bool):
            raise InvalidArgumentError("strict", f"strict must be a bool, got {strict!r:.40}")
        if strict:  # highest first; equal weights keep their order
            weights = dict(sorted(weights.items(), key=lambda item: -item[1]))
        self.weights = weights
        self.topics = tuple(weights)
        self.topic = self.topics[0]
        self.strict = strict
        if stream not in STREAMS:
            raise InvalidArgumentError(
                "stream", f"stream must be one of {', '.join(STREAMS)}, got {stream!r}"
            )
        self.stream = stream
        if not isinstance(start, str) or start not in STARTS:
            raise InvalidArgumentError("start", f"start must be 'earliest' or 'now', got {start!r}")
        self.start_from = start
        self.group = validate_group(group)
        flow = Flow() if flow is None else flow
        if not isinstance(flow, Flow):
            raise InvalidArgumentError("flow", f"flow must be a wheelq.Flow, got {flow!r}")
        self.settings = settings or WorkerSettings()
        s = self.settings
        super().__init__(executor_of(connection), s.start_timeout_ms, s.stop_timeout_ms, log)
        self.consumer = consumer or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self._hurry = asyncio.Event()
        self.clock = LocalClock()
        self.slots = Slots(
            s.concurrency, strict=strict, read_ahead=ReadAhead(s.concurrency, s.read_ahead_ms)
        )
        handlers = _handlers(self.topics, handler)
        # Sync handlers share `concurrency` threads, which take each topic's entries in turn
        # by weight; with every handler sync, the read-ahead is queued to them too.
        self._threads = handler_threads(
            s.concurrency, s.handler_timeout_ms, list(weights.values()), strict=strict
        )
        self._queue_to_threads = not any(is_async(route.handler) for route in handlers)
        self.lanes = [
            self._lane(name, weights[name], route, flow, n)
            for n, (name, route) in enumerate(zip(self.topics, handlers, strict=True))
        ]
        first = self.lanes[0]  # the only one of a worker of one topic
        self.runner, self.settler = first.runner, first.settler
        self._in_flight = first.in_flight
        self._parts: list[RunningParts] = []

    def _lane(self, topic: str, weight: int, route: Route, flow: Flow, number: int) -> TopicLane:
        s, group = self.settings, self.group
        timeout_ms = s.handler_timeout_ms if route.timeout_ms is None else route.timeout_ms
        runner = HandlerRunner(
            route.handler,
            timeout_ms=timeout_ms,
            threads=s.concurrency,
            tracing=tracing.load(),
            group=group,
            result_max_bytes=s.result_max_bytes,
            pool=self._threads,
            lane=number,
        )
        settler = Settler(
            self._executor,
            topic,
            group,
            self.clock,
            max_pause_ms=s.failure_pause_max_ms,
            lane=self.stream,
            result_ttl_ms=route.result_ttl_ms or 0,
        )
        ttl_ms = max(s.visibility_timeout_ms, timeout_ms) * 2
        in_flight = InFlightSet(
            topic,
            group,
            s.concurrency,
            runner,
            settler,
            route.retry
            or RetryPolicy(
                base_ms=s.retry_base_ms, max_ms=s.retry_max_ms, jitter_pct=s.retry_jitter_pct
            ),
            WallClock(),
            gate=FlowGate(self._executor, topic, group, self.consumer, flow, ttl_ms),
            slots=self.slots,
            queue_to_threads=self._queue_to_threads,
            max_attempts=route.max_attempts,
        )
        self.slots.add(in_flight, weight)
        members = Membership(Consumer(self._executor, topic, [], group, self.consumer))
        return TopicLane(topic, weight, runner, settler, in_flight, members)

    @classmethod
    def from_url(
        cls,
        url: str,
        topic: Topics,
        handler: Routable | Mapping[str, Routable],
        *,
        group: str = "default",
        concurrency: int | None = None,
        redis_options: Mapping[str, Any] | None = None,
        cluster: bool | None = None,
        consumer: str | None = None,
        start: str = "earliest",
        flow: Flow | None = None,
        stream: str = READY,
        strict: bool = False,
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
            strict=strict,
        )
        worker.owns_connection = True  # closed by stop()
        return worker

    @property
    def in_flight(self) -> InFlightSet:
        """The entries this worker holds of its (first) topic, and its handler timings."""
        return self._in_flight

    # --- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Wait for Redis (`RedisUnavailableError` after ``start_timeout_ms``), create the
        topics and the group if missing, and start reading."""
        if self._gate.started:
            return
        for lane in self.lanes:
            lane.in_flight.closing = False
            lane.in_flight.slots.runners.closing = False  # a stop ended them: new ones come
        self._hurry = asyncio.Event()
        await self._start_through_gate(self._start)

    async def _start(self) -> None:
        default = self.settings.default_shards
        calls: list[Call[Any]] = []
        for topic in self.topics:  # a topic is created on first use
            calls += [topics.register_topic(topic, default), topics.topic_shards(topic)]
        shards = (await self._executor.run(calls))[1::2]
        mine = [
            Consumer(
                self._executor,
                lane.topic,
                all_shards(lane.topic, n, self.stream),
                self.group,
                self.consumer,
            )
            for lane, n in zip(self.lanes, shards, strict=True)
        ]
        streams = [keys.stream for me in mine for keys in me.shards]
        connect.check_blocking_reads(self.redis, streams)
        paused = await self._executor.run(
            [pauses.read_pause_of(topic, self.group) for topic in self.topics]
        )
        firsts = [ShardKeys(topic, 0) for topic in self.topics]
        # Each topic's events switch and due line, read off its shard 0 in one round trip.
        read = await self._executor.run(
            [call for keys in firsts for call in (events.enabled(keys), line.orders(keys))]
        )
        noted, lined = read[0::2], read[1::2]
        for lane, events_on, has_line in zip(self.lanes, noted, lined, strict=True):
            lane.in_flight.events_on = events_on
            self.slots.read_ahead.line(lane.topic, has_line)
        self._parts = []
        for lane, me, held_back in zip(self.lanes, mine, paused, strict=True):
            lane.members = Membership(me)
            await lane.members.join(STARTS[self.start_from])
            lane.parts = self._lane_parts(lane, me, held_back)
            self._parts.append(lane.parts)
        for parts in self._parts:
            assert parts.watch is not None
            for service in (parts.settler, parts.claims, parts.watch, *parts.readers):
                await service.start()
        await self._join_processes(self.process_role, self.settings)
        log.info(
            "worker %s started on %s (group %s, %s shards, concurrency %d%s%s)",
            self.consumer,
            ", ".join(f"{t} (weight {w})" for t, w in self.weights.items())
            if len(self.topics) > 1
            else self.topic,
            self.group,
            "/".join(map(str, shards)),
            self.settings.concurrency,
            ", strict" if self.strict and len(self.topics) > 1 else "",
            ", paused: " + ", ".join(t for t, p in zip(self.topics, paused, strict=True) if p)
            if any(paused)
            else "",
        )

    def _lane_parts(self, lane: TopicLane, me: Consumer, paused: bool) -> RunningParts:
        """The readers, claim keeper and pause watch of one topic (not started)."""
        s, in_flight = self.settings, lane.in_flight
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
        in_flight.readers = len(groups)
        readers = tuple(
            StreamReader(
                me,
                self._executor.block_ms(s.block_ms),  # within the socket timeout
                slots=slots,
                accept=in_flight.accept,
                ensure_groups=lane.members.join,
                clock=self.clock,
                max_pause_ms=s.failure_pause_max_ms,
                shards=shards,
                noted=functools.partial(in_flight.note_read, n),
            )
            for n, shards in enumerate(groups)
        )
        parts = RunningParts(
            readers, claims, lane.settler, in_flight, lane.members, s.visibility_timeout_ms
        )
        in_flight.paused = paused
        parts.watch = PauseWatch(
            self._executor,
            lane.topic,
            self.group,
            self.clock,
            parts.set_paused,
            functools.partial(setattr, in_flight, "events_on"),
            functools.partial(self.slots.read_ahead.line, lane.topic),
            paused=paused,
            max_pause_ms=s.failure_pause_max_ms,
            poll_ms=s.pause_poll_ms,
            paused_poll_ms=s.paused_poll_ms,
        )
        parts.watch.events_on = in_flight.events_on
        return parts

    async def stop(
        self, grace_ms: int | None = None, *, grace: float | timedelta | None = None
    ) -> WorkerStopReport:
        """Stop: let handlers finish within the grace, hand the rest on; bounded, safe twice.

        Args:
            grace_ms: The grace in whole ms (the alias of `grace`; default the
                ``shutdown_grace_ms`` setting).
            grace: How long running handlers may take to finish, seconds or a timedelta.

        Raises:
            InvalidArgumentError: Both were given, or a grace out of [0, an hour] (as the
                setting's).
        """
        grace_ms = duration_ms(grace, grace_ms, name="grace", alias="grace_ms", max_ms=3_600_000)
        if not self._gate.started:
            return NOTHING_RAN
        if self._in_flight.closing:
            self._hurry.set()
            return NOTHING_RAN
        running = [task for lane in self.lanes for task in lane.in_flight.close()]
        if not await self._gate.abort():  # the start failed or was aborted: nothing runs
            return NOTHING_RAN
        budget = self._stop_budget()
        if self._hurry.is_set():
            budget.cut()
        assert self._parts  # made by the start that `abort()` saw through
        grace_s = (self.settings.shutdown_grace_ms if grace_ms is None else grace_ms) / 1000
        try:
            report = await shut_down(self._parts, budget, running, grace_s, self._hurry)
        finally:
            for lane in self.lanes:
                lane.runner.close()
            await self._leave_processes(budget)
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

    @property
    def wedged(self) -> int:
        """Threads still running sync handlers past `handler_timeout_ms`, over every topic."""
        return sum(lane.runner.wedged for lane in self.lanes)

    @property
    def threads_used(self) -> bool:
        """Whether some topic's handler runs on threads (a sync ``def``)."""
        return any(not lane.runner.is_async for lane in self.lanes)

    def process_role(self) -> RoleInfo:
        """This worker in its process's heartbeat record: topics, group, slots, entries in
        flight (held: running or read ahead, and which), handler runs and failures, over its
        topics."""
        return role_info(
            "worker",
            self.consumer,
            topics=self.topics,
            groups=(self.group,),
            concurrency=self.settings.concurrency,
            in_flight=sum(len(lane.in_flight.held) for lane in self.lanes),
            handled=sum(lane.in_flight.handled for lane in self.lanes),
            failed=sum(lane.in_flight.failed for lane in self.lanes),
            held=[h for lane in self.lanes for h in lane.in_flight.held_entries()],
        )

    def lane_status(self, lane: TopicLane) -> dict[str, Any]:
        """One topic's counters and parts (what `status()` sums; the metrics label them)."""
        c, w, parts = lane.settler.counts, lane.in_flight, lane.parts
        return {
            "topic": lane.topic,
            "paused": bool(parts and parts.watch and parts.watch.paused),
            "held": len(w.held),
            "running": len(w.running()),
            "read_ahead": w.read_ahead.extra,
            "handled": w.handled,
            "failed": w.failed,
            "skipped": w.skipped,
            "expired": w.expired,
            "acked": c.acked,
            "retried": c.retried,
            "dead_lettered": c.dead_lettered + (parts.claims.dead_lettered if parts else 0),
            "taken_over": parts.claims.taken_over if parts else 0,
            "wedged": lane.runner.wedged,
            "parts": {
                "settler": lane.settler.status(),
                "claims": parts.claims.status() if parts else NOT_STARTED,
                "reader": combined([r.status() for r in parts.readers]) if parts else NOT_STARTED,
                "pause": parts.watch.status() if parts and parts.watch else NOT_STARTED,
            },
        }

    def status(self) -> dict[str, Any]:
        """Counters for logs and health checks (``held`` counts the read-ahead too); with
        several topics, summed over them (``paused``: every one is; ``read_ahead`` is the
        worker's, as each topic's is), and each in ``topics``. ``internal_errors``: entries
        the worker failed to run for an error of its own, not a handler's (logged; each is
        taken over and runs again)."""
        lanes = [self.lane_status(lane) for lane in self.lanes]
        out: dict[str, Any] = {
            "consumer": self.consumer,
            "group": self.group,
            "stopping": self._in_flight.closing,
            "internal_errors": self.slots.runners.errors,
        }
        if len(lanes) == 1:
            return out | lanes[0]
        sums = {k: sum(st[k] for st in lanes) for k, v in lanes[0].items() if type(v) is int}
        sums["read_ahead"] = self.slots.read_ahead.extra  # the worker's, not one per topic
        parts = {name: combined([st["parts"][name] for st in lanes]) for name in lanes[0]["parts"]}
        return out | {
            "topic": self.topic,
            "paused": all(st["paused"] for st in lanes),
            **sums,
            "parts": parts,
            "topics": {st["topic"]: st for st in lanes},
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
