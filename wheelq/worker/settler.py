"""Writing outcomes back (acks, retries, dead letters), batched into one round trip.

A connection error keeps what it stopped queued for the next round; a settlement that fails
for any other reason fails alone (logged, counted in status() and as dropped: its entry
stays pending and runs again), never holding back the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, assert_never

from wheelq.core.clock import Clock
from wheelq.core.job import Job
from wheelq.core.keys import READY, ShardKeys
from wheelq.core.retry import Reason, retry_envelope
from wheelq.runtime import crash
from wheelq.runtime.outage import StopBudget, is_transient
from wheelq.runtime.service import DEFAULT_MAX_PAUSE_MS, PartStopped, Service
from wheelq.store import events, settle
from wheelq.store.call import Call
from wheelq.store.executor import Executor

log = logging.getLogger(__name__)

ACKS_PER_CALL = 1000
STOP_S = 2.0  # How long `stop()` tries to write what is queued when the worker gives no budget.


@dataclass(slots=True)
class Counts:
    """What this worker's settlements did (only the ones that took effect)."""

    acked: int = 0
    retried: int = 0
    dead_lettered: int = 0
    expired: int = 0  # Read past their expiry: acked unrun, noted expired.
    dropped: int = 0  # Refused by Redis (not a connection error): the entries stay pending.


@dataclass(frozen=True, slots=True)
class Starts:
    """Handlers that started on a shard: (job id, attempt) each, noted as job events."""

    shard: int
    jobs: list[tuple[str, int]]


@dataclass(frozen=True, slots=True)
class Acks:
    """Entries of a shard acked unrecorded (meant for another group)."""

    shard: int
    entry_ids: list[str]


@dataclass(frozen=True, slots=True)
class Successes:
    """Runs of a shard that succeeded, and the starts that ride on their call."""

    shard: int
    done: list[settle.Done]
    started: list[tuple[str, int]]


@dataclass(frozen=True, slots=True)
class Retrying:
    """One job to run again after `delay_ms`, its attempt ended at `ended_ms`."""

    shard: int
    entry_id: str
    job_id: str
    delay_ms: int
    envelope: bytes
    error: str
    ended_ms: int


@dataclass(frozen=True, slots=True)
class DeadLetters:
    """Entries of a shard to dead-letter: (entry id, reason, error) each."""

    shard: int
    entries: list[tuple[str, str, str]]


@dataclass(frozen=True, slots=True)
class Expirations:
    """Entries of a shard read past their expiry: acked unrun, each noted expired."""

    shard: int
    expired: list[settle.Expired]


Settlement = Starts | Acks | Successes | Retrying | DeadLetters | Expirations
"""What one call of a flush writes, and what goes back in the queue if it cannot."""


@dataclass(slots=True)
class _Queued:
    """Outcomes not written yet: acks and dead letters by shard, retries one by one."""

    acks: dict[int, list[str]] = field(default_factory=lambda: defaultdict(list))
    done: dict[int, list[settle.Done]] = field(default_factory=lambda: defaultdict(list))
    retries: list[Retrying] = field(default_factory=list)
    dead: dict[int, list[tuple[str, str, str]]] = field(default_factory=lambda: defaultdict(list))
    started: dict[int, list[tuple[str, int]]] = field(default_factory=lambda: defaultdict(list))
    expired: dict[int, list[settle.Expired]] = field(default_factory=lambda: defaultdict(list))

    def __len__(self) -> int:
        return (
            sum(map(len, self.expired.values()))
            + sum(map(len, self.started.values()))
            + sum(map(len, self.acks.values()))
            + sum(map(len, self.done.values()))
            + len(self.retries)
            + sum(map(len, self.dead.values()))
        )


class Settler(Service):
    """Writes the outcomes handlers asked for, batched; keeps them while Redis is away."""

    name = "settler"

    def __init__(
        self,
        executor: Executor,
        topic: str,
        group: str,
        clock: Clock,
        *,
        max_pause_ms: int = DEFAULT_MAX_PAUSE_MS,
        lane: str = READY,
        result_ttl_ms: int = 0,
    ) -> None:
        title = f"worker settler of {topic}"
        super().__init__(clock, log, max_pause_ms=max_pause_ms, title=title)
        self._executor = executor
        self._topic = topic
        self._lane = lane
        self._group = group
        self._result_ttl_ms = result_ttl_ms
        """Results are kept apart for this long (a task's ``result_ttl``; 0: in the history)."""
        self._queued = _Queued()
        self.counts = Counts()

    @property
    def queued(self) -> int:
        return len(self._queued)

    def ack(self, shard: int, entry_id: str) -> None:
        """Ack an entry this group does not run (meant for another group), unrecorded."""
        self._queued.acks[shard].append(entry_id)
        self.wake()

    def done(
        self, job: Job, finished_ms: int, duration_ms: int, result: bytes | None = None
    ) -> None:
        """Ack a run that succeeded; `result`: what it returned, as msgpack (None: nothing)."""
        done = (job.entry_id, job.id, finished_ms, duration_ms, result, job.attempt)
        self._queued.done[job.shard].append(done)
        self.wake()

    def retry(
        self,
        job: Job,
        payload: bytes,
        delay_ms: int,
        ended_ms: int,
        error: str = "",
        counts: bool = True,
    ) -> None:
        """Run `job` again after `delay_ms`; `ended_ms`: when the attempt ended (its record's
        time, and the next attempt's enqueue time); `counts` False keeps the attempt."""
        envelope = retry_envelope(job, payload, ended_ms, self._group, counts)
        item = Retrying(job.shard, job.entry_id, job.id, delay_ms, envelope, error, ended_ms)
        self._queued.retries.append(item)
        self.wake()

    def started(self, job: Job) -> None:
        """Note that `job`'s handler started (a job event; only while the topic has them on)."""
        self._queued.started[job.shard].append((job.id, job.attempt))
        self.wake()

    def expired(self, job: Job, now_ms: int) -> None:
        """Ack `job`'s entry without running it: read at `now_ms`, past its expiry."""
        self._queued.expired[job.shard].append((job.entry_id, job.id, now_ms, job.attempt))
        self.wake()

    def dead(self, shard: int, entry_id: str, reason: Reason, error: str) -> None:
        self._queued.dead[shard].append((entry_id, reason.value, error))
        self.wake()

    async def step(self) -> float | None:
        """Send what is queued; raises the connection error that kept some of it."""
        if self._queued and (error := await self.flush()) is not None:
            raise error
        return 0.0 if self._queued else None

    async def stop(self, budget: StopBudget | None = None) -> PartStopped:
        """Stop, then write what is still queued within `budget` (default `STOP_S`)."""
        stopped = await super().stop(budget)
        if self._queued:
            budget = budget or StopBudget(STOP_S)
            await budget.attempt(f"write {self.queued} settlements", self._flush_all, None)
        if self._queued:
            log.warning("%d settlements not written; their entries stay pending", self.queued)
        return stopped

    async def _flush_all(self) -> None:
        while self._queued:
            if (error := await self.flush()) is not None:
                raise error

    async def flush(self) -> BaseException | None:
        """Send everything queued; returns the connection error that kept some (None: all sent)."""
        batch, self._queued = self._queued, _Queued()
        calls: list[tuple[Settlement, Call[Any]]] = []
        # A job's start must precede its end in the events stream, and calls of one round
        # trip may be re-sent out of order (a script loaded again, a slot moved). A shard's
        # starts therefore ride on its first success call (ack.lua writes them first); alone
        # in the round trip when the shard settles nothing else; and in a round trip of their
        # own first only when the shard has failures this round (rare: they end in scripts
        # of their own).
        failing = {item.shard for item in batch.retries} | set(batch.dead)
        early = {s: jobs for s, jobs in batch.started.items() if s in failing}
        if early:
            notes = [
                events.note(self._keys(shard), "started", self._group, jobs)
                for shard, jobs in early.items()
            ]
            with contextlib.suppress(Exception):  # an event lost, never a settlement
                await self._executor.run(notes, return_exceptions=True)
        for shard, jobs in batch.started.items():
            if shard not in early and shard not in batch.done:
                note = events.note(self._keys(shard), "started", self._group, jobs)
                calls.append((Starts(shard, jobs), note))
        for shard, ids in batch.acks.items():
            for i in range(0, len(ids), ACKS_PER_CALL):
                chunk = ids[i : i + ACKS_PER_CALL]
                acked = settle.ack(self._keys(shard), self._group, chunk)
                calls.append((Acks(shard, chunk), acked))
        for shard, done in batch.done.items():
            started = [] if shard in early else batch.started.get(shard, [])
            for i in range(0, len(done), ACKS_PER_CALL):
                part = done[i : i + ACKS_PER_CALL]
                acked = settle.ack_done(
                    self._keys(shard), self._group, part, started, self._result_ttl_ms
                )
                calls.append((Successes(shard, part, started), acked))
                started = []
        for r in batch.retries:
            retried = settle.retry(
                self._keys(r.shard),
                self._group,
                r.entry_id,
                r.job_id,
                r.delay_ms,
                r.envelope,
                r.error,
                r.ended_ms,
            )
            calls.append((r, retried))
        for shard, triples in batch.dead.items():
            dead = settle.dead_letter(self._keys(shard), self._group, triples)
            calls.append((DeadLetters(shard, triples), dead))
        for shard, gone in batch.expired.items():
            for i in range(0, len(gone), ACKS_PER_CALL):
                dropped = gone[i : i + ACKS_PER_CALL]
                expired = settle.ack_expired(self._keys(shard), self._group, dropped)
                calls.append((Expirations(shard, dropped), expired))
        try:
            crash.point("ack.before_send")
            replies = await self._send([c for _, c in calls])
            crash.point("ack.after_reply")
        except asyncio.CancelledError:  # a stop that could not wait: keep them counted
            for settlement, _ in calls:
                self._requeue(settlement)
            raise
        error: BaseException | None = None
        for (settlement, _), reply in zip(calls, replies, strict=True):
            if isinstance(reply, Exception) and is_transient(reply):
                self._requeue(settlement)
                error = reply
            elif isinstance(reply, Exception):
                # Refused (a wrong-type key), or failed in this process (a bug, a file gone):
                # the entry stays pending, runs again after the visibility timeout, and is
                # settled then. Logged and counted in status(), no pause, nothing held back.
                self.failed(reply)
                self.counts.dropped += 1
            else:
                self._count(settlement, reply)
        return error

    def _count(self, settlement: Settlement, reply: Any) -> None:
        match settlement:
            case Starts():
                pass
            case Acks() | Successes():
                self.counts.acked += int(reply)
            case Retrying():
                self.counts.retried += int(reply.done)
                if reply.cancelled:
                    log.info(
                        "job %s of %s was cancelled: not retried", settlement.job_id, self._topic
                    )
            case DeadLetters():
                self.counts.dead_lettered += int(reply)
            case Expirations():
                self.counts.expired += int(reply)
            case _:
                assert_never(settlement)

    async def _send(self, calls: list[Call[Any]]) -> list[Any]:
        """The calls' replies, errors in place: a round that fails as a whole on anything but
        a connection error is sent again call by call, so a call that cannot go (whatever
        the reason) fails alone and never holds back the others."""
        try:
            return await self._executor.run(calls, return_exceptions=True)
        except Exception as exc:
            if is_transient(exc) or len(calls) == 1:
                return [exc] * len(calls)
        replies: list[Any] = []
        for call in calls:
            try:
                replies += await self._executor.run([call], return_exceptions=True)
            except Exception as exc:
                replies.append(exc)
        return replies

    def _requeue(self, settlement: Settlement) -> None:
        queued = self._queued
        match settlement:
            case Starts(shard, jobs):
                queued.started[shard] += jobs
            case Acks(shard, entry_ids):
                queued.acks[shard] += entry_ids
            case Successes(shard, done, started):
                queued.done[shard] += done
                queued.started[shard] += started
            case Retrying():
                queued.retries.append(settlement)
            case DeadLetters(shard, entries):
                queued.dead[shard] += entries
            case Expirations(shard, expired):
                queued.expired[shard] += expired
            case _:
                assert_never(settlement)

    def _keys(self, shard: int) -> ShardKeys:
        return ShardKeys(self._topic, shard, self._lane)
