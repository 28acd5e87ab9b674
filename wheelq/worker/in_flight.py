"""The entries a worker holds, run in slots, and what a failure leads to."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import functools
import logging
import operator
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from wheelq.core.clock import Clock
from wheelq.core.expiry import expired
from wheelq.core.histogram import RunTimings
from wheelq.core.job import Field, Job
from wheelq.core.process import HeldEntry
from wheelq.core.retry import Reason, RetryPolicy, after_failure
from wheelq.runtime import crash
from wheelq.store.streams import Entry
from wheelq.worker.flow_gate import FlowGate
from wheelq.worker.handler_runner import HandlerRunner, Outcome
from wheelq.worker.read_ahead import ReadAhead
from wheelq.worker.runners import Waits, waiting
from wheelq.worker.settler import Settler
from wheelq.worker.slots import Slots

log = logging.getLogger(__name__)


_priority: Callable[[Job], int] = operator.attrgetter("priority")
"""A job's priority for its start lateness (docs/architecture.md, "Seeing the line")."""


class Fate(enum.Enum):
    """Where a failed run went."""

    RETRIED = "retried"
    """Enqueued again after its backoff, one attempt on."""
    DEFERRED = "deferred"
    """Enqueued again after its delay, the same attempt (it did not fail)."""
    DEAD = "dead"
    """Dead-lettered: its last attempt, or `wheelq.Fail`."""


def settle_failure(
    settler: Settler,
    policy: RetryPolicy,
    topic: str,
    job: Job,
    payload: bytes,
    error: Exception,
    ended_ms: int,
) -> Fate:
    """Retry, defer or dead-letter `job`, whose run raised `error` at `ended_ms`."""
    outcome = after_failure(job.attempt, job.max_attempts, error, policy, random.random())
    summary = outcome.error.splitlines()[0]
    if outcome.delay_ms is None:
        log.warning("job %s of %s dead-lettered: %s", job.id, topic, summary)
        settler.dead(job.shard, job.entry_id, Reason.FAILED, outcome.error)
        return Fate.DEAD
    if outcome.counts:
        log.info(
            "job %s of %s failed (attempt %d of %d), retry in %d ms: %s",
            *(job.id, topic, job.attempt, job.max_attempts, outcome.delay_ms, summary),
        )
    else:
        log.debug("job %s of %s deferred %d ms: %s", job.id, topic, outcome.delay_ms, summary)
    settler.retry(job, payload, outcome.delay_ms, ended_ms, outcome.error, outcome.counts)
    return Fate.RETRIED if outcome.counts else Fate.DEFERRED


def defer(settler: Settler, job: Job, payload: bytes, defer_ms: int, now_ms: int) -> None:
    """Held back by a flow limit: run `job` again after `defer_ms`, keeping the attempt."""
    why = f"deferred {defer_ms} ms by flow control"
    settler.retry(job, payload, defer_ms, now_ms, why, counts=False)


@dataclass(slots=True)
class Held:
    """One held entry: its job, and its task once accepted (`started` once in a slot)."""

    job: Job
    payload: bytes  # As encoded, for a retry.
    task: asyncio.Future[Any] | None = None  # Or a taskless sync run's future.
    started: bool = False
    started_s: float = 0.0  # When it started (the set's timer), once `started`.
    queued: bool = False  # `task` is a run queued to the handler's threads (taskless).


class InFlightSet:
    """The entries a worker holds, by (shard, entry id), and their slots."""

    def __init__(
        self,
        topic: str,
        group: str,
        concurrency: int,
        runner: HandlerRunner,
        settler: Settler,
        policy: RetryPolicy,
        clock: Clock,
        gate: FlowGate | None = None,
        read_ahead_ms: int = 0,
        timer: Callable[[], float] = time.perf_counter,
        slots: Slots | None = None,
        queue_to_threads: bool | None = None,
        max_attempts: int | None = None,
    ) -> None:
        self.topic = topic
        self.group = group
        self.concurrency = concurrency
        self.runner = runner
        self.settler = settler
        self.policy = policy
        self.gate = gate
        """Flow control (`wheelq.worker.flow_gate`): admits each job before it takes a slot."""
        self.max_attempts = max_attempts
        """The topic's own (a task's, `Route.max_attempts`) over each job's; None: the job's."""
        self.held: dict[tuple[int, str], Held] = {}
        self.room = asyncio.Event()  # Set whenever a slot frees up.
        self.closing = False  # Set on stop: nothing new starts, and free() is 0.
        self.paused = False  # Set while the group is paused: held entries wait, none start.
        self.events_on = False  # Set while the topic has job events on: starts are noted.
        if queue_to_threads is None:
            queue_to_threads = not runner.is_async
        self._queue_to_threads = queue_to_threads and not runner.is_async
        """Sync handlers (of every topic of the worker): read-ahead is queued to the threads
        too, saving a thread hop per job; the threads take it in the slots' order of turns."""
        if slots is None:
            slots = Slots(concurrency, read_ahead=ReadAhead(concurrency, read_ahead_ms))
            slots.add(self)
        self.slots = slots
        """The worker's slots, which its topics share (`wheelq.worker.slots`)."""
        self.read_ahead = slots.read_ahead  # the worker's, learnt from every topic's runs
        if self._queue_to_threads:  # a slot's time there includes the queue: time the thread
            runner.time_runs(self.read_ahead.ran)
        self.readers = 1  # Its readers; set by the worker (one per shard on a cluster).
        self._short_reads: dict[int, bool] = {}  # reader -> whether its last read came short
        self._backlog: deque[Held] = deque()
        """Held entries without a task yet, in the order they came."""
        self._timer = timer
        self._now_ms = clock.now_ms
        self.handled = 0
        self.failed = 0
        self.deferred = 0  # Runs that raised `wheelq.Defer` (not counted in `failed`).
        self.skipped = 0
        self.expired = 0  # Entries dropped unrun: past their expiry when read or started.
        self.timings = RunTimings()  # Handler start lateness and run times (`wheelq.metrics`).

    def free(self) -> int:
        """How many more entries to take (0 once closing or while paused; negative when over)."""
        if self.closing or self.paused:
            return 0
        return self.concurrency + self.read_ahead.extra - len(self.held)

    def free_slots(self) -> int:
        """`free` without the read-ahead: what the claim keeper takes over."""
        return 0 if self.closing or self.paused else self.concurrency - len(self.held)

    def held_entries(self) -> list[HeldEntry]:
        """Every held entry, running (for how long, by the set's timer) or not started (read
        ahead, or waiting for a flow limit's turn or a paused group): the heartbeat's."""
        now_s = self._timer()
        out = []
        for (shard, entry_id), h in self.held.items():
            run_ms: float | None = None
            if h.queued and h.task is not None:
                run_ms = self.runner.running_ms(h.task)  # queued to a thread: its own start
            elif h.started:
                run_ms = (now_s - h.started_s) * 1000
            out.append(
                HeldEntry(self.topic, shard, entry_id, None if run_ms is None else int(run_ms))
            )
        return out

    def held_ids(self) -> dict[int, list[str]]:
        """Every held entry's id, by shard (what keep-alive touches)."""
        out: dict[int, list[str]] = {}
        for shard, entry_id in self.held:
            out.setdefault(shard, []).append(entry_id)
        return out

    def close(self) -> list[asyncio.Future[None]]:
        """Start nothing new; returns the handlers running now (the ones given the grace)."""
        self.closing = True
        self.slots.runners.close()
        return self.running()

    def running(self) -> list[asyncio.Future[None]]:
        return [h.task for h in self.held.values() if h.started and h.task is not None]

    def drop_waiting(self) -> dict[int, list[str]]:
        """Cancel the entries not started yet; returns their ids by shard (to hand on)."""
        out: dict[int, list[str]] = {}
        self._backlog.clear()
        self.slots.tasks -= len(self.slots.runners.drop(self))  # started, never run
        for key, held in list(self.held.items()):
            if not held.started:
                if held.task is not None:
                    held.task.cancel()
                del self.held[key]
                out.setdefault(key[0], []).append(key[1])
        return out

    def accept(self, shard: int, entries: list[Entry], deliveries: Sequence[int] = ()) -> None:
        """Take entries read (first deliveries) or claimed (`deliveries`: each one's count)."""
        for i, (entry_id, fields) in enumerate(entries):
            if (shard, entry_id) in self.held:
                continue  # our own entry, claimed back after a missed keep-alive
            try:
                job = Job.from_entry(entry_id, fields, shard, deliveries[i] if deliveries else 1)
            except ValueError as exc:
                log.error("dead-lettering entry %s of %s/%d: %s", entry_id, self.topic, shard, exc)
                self.settler.dead(shard, entry_id, Reason.MALFORMED, str(exc))
                continue
            if job.group is not None and job.group != self.group:
                self.skipped += 1  # a retry or replay meant for another group
                self.settler.ack(shard, entry_id)
                continue
            if job.expires is not None and expired(job.expires, now_ms := self._now_ms()):
                self.expired += 1  # read past its expiry: dropped, never run
                self.settler.expired(job, now_ms)
                continue
            if self.max_attempts is not None and job.max_attempts != self.max_attempts:
                # a task's, whoever wrote the job; its retries carry it on
                job = dataclasses.replace(job, max_attempts=self.max_attempts)
            held = Held(job, fields[Field.PAYLOAD])
            self.held[(shard, entry_id)] = held
            self._backlog.append(held)
        self.slots.fill()

    def resume(self) -> None:
        """The group is resumed: start what waited, and let the readers take slots again."""
        self.paused = False
        self.slots.fill()
        self.room.set()

    def note_read(self, reader: int, short: bool) -> None:
        """Reader `reader`'s read came back `short` (every stream gave fewer than asked):
        once all have, the topic is `drained` and may let a lower one start (strict)."""
        was = self.drained()
        self._short_reads[reader] = short
        if short and not was and self.drained():
            self.slots.fill()

    # --- as a lane of the worker's slots (`wheelq.worker.slots.Lane`) ---------------------

    def ready(self) -> bool:
        """An entry waits, not paused, and a slot (or, for threads, read-ahead room) is free."""
        if not self._backlog or self.paused:
            return False
        room = self.slots.concurrency
        if self._queue_to_threads:
            room += self.read_ahead.extra
        return self.slots.tasks < room

    def drained(self) -> bool:
        if self.paused or self.closing:
            return True
        short = self._short_reads
        return not self._backlog and len(short) >= self.readers and all(short.values())

    def start_next(self) -> None:
        self._start(self._backlog.popleft())

    def _start(self, held: Held) -> None:
        job = held.job
        if job.expires is not None and expired(job.expires, now_ms := self._now_ms()):
            self.expired += 1  # read ahead past its expiry: dropped, never run
            self.settler.expired(job, now_ms)
            if self.held.get(entry := (job.shard, job.entry_id)) is held:
                del self.held[entry]
            self.room.set()
            return
        if self._queue_to_threads and (self.gate is None or not (self.gate.limits or job.ordered)):
            if self.closing:
                return  # stays held, not started: handed on
            self.slots.tasks += 1
            held.started, held.started_s, held.queued = True, self._timer(), True
            if self.events_on:  # queued to a thread: started, as far as the events go
                self.settler.started(job)
            held.task = self.runner.submit(job)
            held.task.add_done_callback(functools.partial(self._ran, held, self._now_ms()))
            return
        self.slots.tasks += 1
        if self.runner.is_async:
            self.slots.runners.start(self, held)
            return
        held.task = asyncio.create_task(self._run_alone(held), name=f"wheelq-job-{job.id}")

    async def _run_alone(self, held: Held) -> None:
        """`_run` in a task of its own (a sync handler's run through the flow gate)."""
        try:
            await self._run(held)
        except Exception:  # not a handler's (its errors are its outcome): the worker's own
            self.slots.runners.failed()

    def _ran(self, held: Held, started_ms: int, done: asyncio.Future[Any]) -> None:
        """A taskless sync run ended: settle it as `_run` does (not if cancelled by a stop)."""
        try:
            if not done.cancelled():
                crash.point("handler.after")
                outcome = self.runner.outcome(held.job, done)
                self._settle(held, outcome, started_ms, self._now_ms())
        except Exception:  # not a handler's (its errors are its outcome): the worker's own
            self.slots.runners.failed()
        finally:
            self._end(held)

    def _settle(self, held: Held, outcome: Outcome, started_ms: int, ended_ms: int) -> bool:
        """Count a run's timings and settle it; True when the job is done with."""
        job = held.job
        self.timings.pending += (started_ms - job.due_ms, ended_ms - started_ms, _priority(job))
        if outcome is None:
            self.handled += 1
            self.settler.done(job, ended_ms, ended_ms - started_ms)
            return True
        if isinstance(outcome, bytes):  # a result to keep
            self.handled += 1
            self.settler.done(job, ended_ms, ended_ms - started_ms, outcome)
            return True
        return self._failed(held, outcome, ended_ms)

    def _end(self, held: Held) -> None:
        """An entry's run (or its task) has ended: forget it, start the next."""
        job = held.job
        if self.held.get(entry := (job.shard, job.entry_id)) is held:
            del self.held[entry]
        if len(self.timings.pending) >= self.timings.batch or not self.held:
            self.timings.count()
        self.slots.tasks -= 1
        self.slots.fill()
        self.room.set()

    def run_taken(self, item: Any, task: asyncio.Task[None], waits: Waits) -> Awaitable[None]:
        """Run a held entry taken by a runner (`wheelq.worker.runners.Taker`)."""
        held: Held = item
        held.task = task
        return self._run(held, waits)

    async def _run(self, held: Held, waits: Waits | None = None) -> None:
        job = held.job
        key: str | None = None
        admitted = finished = False
        try:
            if self.gate is not None and (self.gate.limits or job.ordered):
                try:
                    key = self.gate.key_of(job)
                except Exception as exc:  # the flow's key function failed: the attempt fails
                    finished = self._failed(held, exc, self._now_ms())
                    return
                try:
                    defer_ms = await waiting(self.gate.admit(job, key), waits)
                except Exception as exc:  # Redis could not be asked: the job waits, no attempt
                    log.warning("job %s of %s: flow control failed (%s)", job.id, self.topic, exc)
                    defer_ms = self.gate.flow.retry_ms * 10
                if defer_ms:
                    self._defer(held, defer_ms)
                    return
                admitted = True
            # Its slot was taken at its start (`Slots.tasks`, counted until `_end`).
            if self.closing:
                return
            if job.expires is not None and expired(job.expires, now_ms := self._now_ms()):
                self.expired += 1  # it waited (a flow's turn) past its expiry
                self.settler.expired(job, now_ms)
                finished = True  # done with: its key's next job may start
                return
            started_ms, started_s = self._now_ms(), self._timer()
            held.started, held.started_s = True, started_s
            if self.events_on:
                self.settler.started(job)
            outcome = await self.runner.run(job, waits)
            crash.point("handler.after")
            ended_ms = self._now_ms()
            if not self._queue_to_threads:
                self.read_ahead.ran((self._timer() - started_s) * 1000)
            finished = self._settle(held, outcome, started_ms, ended_ms)
        finally:
            if admitted and self.gate is not None:
                await waiting(self._release(job, key, finished), waits)
            self._end(held)

    async def _release(self, job: Job, key: str | None, finished: bool) -> None:
        try:
            await self.gate.release(job, key, finished)  # type: ignore[union-attr]
        except Exception as exc:  # the slot expires after its ttl all the same
            log.warning("job %s of %s: could not free its key's slot: %s", job.id, self.topic, exc)

    def _defer(self, held: Held, defer_ms: int) -> None:
        self.deferred += 1
        defer(self.settler, held.job, held.payload, defer_ms, self._now_ms())

    def _failed(self, held: Held, error: Exception, ended_ms: int) -> bool:
        """Count a failed run and settle it; True when dead-lettered."""
        fate = settle_failure(
            self.settler, self.policy, self.topic, held.job, held.payload, error, ended_ms
        )
        if fate is Fate.DEFERRED:
            self.deferred += 1
        else:
            self.failed += 1
        return fate is Fate.DEAD
