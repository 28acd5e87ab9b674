"""The in-flight set without Redis: a handler the test releases job by job, a real settler
on a scripted executor (its step sends what the set asked for), a manual clock.

Entries wait for one of `concurrency` slots, then run; free() tells the reader and the claim
keeper how many more to take; accept() decodes, skips and dead-letters; drop_waiting() gives
up the entries not started (a stop hands them on) and leaves the running ones alone.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgpack
import pytest

from tests.support.fakes import ScriptedExecutor
from tests.support.worker_parts import GROUP, TOPIC, WAIT_S, HeldHandler, entry
from wheelq.core.clock import ManualClock
from wheelq.core.history import SEPARATOR, read_record
from wheelq.core.job import Envelope, Field, Job
from wheelq.core.retry import RetryPolicy
from wheelq.store.call import Call
from wheelq.store.settle import Retried
from wheelq.worker.handler_runner import HandlerRunner
from wheelq.worker.in_flight import InFlightSet
from wheelq.worker.read_ahead import READ_AHEAD_MAX
from wheelq.worker.settler import Settler
from wheelq.worker.worker import wait_for_handlers

NOW_MS = 1_700_000_123_456


def runs(call: Call[Any]) -> list[tuple[Any, ...]]:
    """The (entry, job, finished ms, duration ms) of each run an ack script call records."""
    entries = msgpack.unpackb(call.args[1])
    pairs = msgpack.unpackb(call.args[2], raw=True)
    out: list[tuple[Any, ...]] = []
    for entry_id, field, raw in zip(entries, pairs[0::2], pairs[1::2], strict=True):
        record = read_record(raw)
        assert record is not None and record.kind == "S" and record.entry == entry_id
        job_id, _, _ = field.decode().partition(SEPARATOR)
        out.append((entry_id, job_id, record.at_ms, record.duration_ms))
    return out


class Parts:
    def __init__(
        self,
        concurrency: int,
        failing: set[str] | None = None,
        read_ahead_ms: int = 0,
        sync_handler: Callable[[Job], None] | None = None,
    ) -> None:
        self.handler = HeldHandler(failing)
        self.executor = ScriptedExecutor()
        self.executor.answer("XACK", lambda call: len(call.command) - 3)
        self.executor.answer("ack", lambda call: len(runs(call)))
        self.executor.answer("retry", lambda call: Retried(True, 1, "m"))
        self.executor.answer("dead_letter", lambda call: (len(call.args) - 1) // 3)
        self.settler = Settler(self.executor, TOPIC, GROUP, ManualClock())
        self.runner = HandlerRunner(sync_handler or self.handler, timeout_ms=0, threads=concurrency)
        self.clock = ManualClock(NOW_MS)
        self.in_flight = InFlightSet(
            TOPIC,
            GROUP,
            concurrency,
            self.runner,
            self.settler,
            RetryPolicy(base_ms=1000, max_ms=60_000, jitter_pct=0),
            self.clock,
            read_ahead_ms=read_ahead_ms,
            timer=lambda: 0.0,  # every run takes 0 s, as the manual clock has it
        )

    def succeeded(self) -> list[tuple[str, ...]]:
        """The entry ids of each ack script call (runs that succeeded), in order."""
        return [tuple(run[0] for run in runs(c)) for c in self.executor.sent("ack")]

    def waiting(self) -> list[str]:
        return sorted(h.job.id for h in self.in_flight.held.values() if not h.started)

    def running(self) -> list[str]:
        return sorted(h.job.id for h in self.in_flight.held.values() if h.started)

    async def settle(self) -> None:
        """What the settler's task would do: send the outcomes queued so far."""
        await self.settler.step()

    async def done(self, *job_ids: str) -> None:
        """Release `job_ids` and wait until they are no longer held (an async handler's
        runner goes on to the next entry: its task does not end with the run)."""
        self.handler.release(*job_ids)

        async def gone() -> None:
            while any(h.job.id in job_ids for h in self.in_flight.held.values()):
                await asyncio.sleep(0)  # the loop's turn: the runs end

        await asyncio.wait_for(gone(), WAIT_S)


@pytest.fixture
async def parts() -> AsyncIterator[Parts]:
    made = Parts(concurrency=2)
    yield made
    for held in list(made.in_flight.held.values()):
        if held.task is not None:
            held.task.cancel()
            await asyncio.gather(held.task, return_exceptions=True)


async def test_entries_wait_for_a_slot_and_a_freed_slot_goes_to_the_next(parts: Parts) -> None:
    assert parts.in_flight.free() == 2
    parts.in_flight.accept(0, [entry("a1"), entry("a2"), entry("a3")])
    assert parts.in_flight.free() == -1  # held, though one waits: the reader takes no more
    await parts.handler.started_by("a1", "a2")
    assert (parts.running(), parts.waiting()) == (["a1", "a2"], ["a3"])
    assert len(parts.in_flight.running()) == 2
    assert not parts.handler.started("a3")

    parts.in_flight.room.clear()
    await parts.done("a1")
    assert parts.in_flight.room.is_set()  # the reader's wait ends
    await parts.handler.started_by("a3")
    assert (parts.running(), parts.waiting()) == (["a2", "a3"], [])
    assert parts.in_flight.free() == 0
    assert parts.in_flight.held_ids() == {0: ["2-0", "3-0"]}

    await parts.settle()
    assert parts.succeeded() == [("1-0",)]
    (ack,) = parts.executor.sent("ack")
    assert ack.args[0] == GROUP
    assert runs(ack) == [("1-0", "a1", NOW_MS, 0)]  # entry, job, finished, duration
    assert parts.in_flight.handled == 1


async def test_free_grows_by_the_read_ahead_once_runs_show_the_pace() -> None:
    parts = Parts(concurrency=2, read_ahead_ms=10)
    parts.in_flight.accept(0, [entry("a1"), entry("a2"), entry("a3")])
    assert parts.in_flight.free() == -1  # no run yet: the pace is unknown, nothing ahead
    await parts.handler.started_by("a1", "a2")
    await parts.done("a1")  # took 0 s on the test's timer: as fast as it gets
    assert parts.in_flight.read_ahead.extra == READ_AHEAD_MAX
    assert parts.in_flight.free() == 2 + READ_AHEAD_MAX - 2
    parts.in_flight.closing = True
    assert parts.in_flight.free() == 0
    for held in list(parts.in_flight.held.values()):
        assert held.task is not None
        held.task.cancel()
        await asyncio.gather(held.task, return_exceptions=True)


async def test_free_is_zero_once_closing(parts: Parts) -> None:
    parts.in_flight.closing = True
    assert parts.in_flight.free() == 0


async def test_accept_dead_letters_malformed_entries_and_skips_other_groups(parts: Parts) -> None:
    malformed = ("5-0", {Field.ID: b"x"})  # no payload, no due time
    parts.in_flight.accept(
        1, [entry("b1"), malformed, entry("b2", group="other"), entry("b3", group=GROUP)]
    )
    await parts.handler.started_by("b1", "b3")
    assert sorted(parts.in_flight.held) == [(1, "1-0"), (1, "3-0")]
    assert parts.in_flight.skipped == 1

    await parts.settle()
    (dead,) = parts.executor.sent("dead_letter")
    # group, no receipt's delivery ("", 0: a worker's own), then the entry
    assert list(dead.args[:5]) == [GROUP, "", 0, "5-0", "malformed"]
    assert [c.command[3:] for c in parts.executor.sent("XACK")] == [("2-0",)]  # the skipped one


async def test_accept_ignores_an_entry_already_held_and_keeps_claimed_delivery_counts(
    parts: Parts,
) -> None:
    parts.in_flight.accept(0, [entry("c1")], [3])
    await parts.handler.started_by("c1")
    parts.in_flight.accept(0, [entry("c1")], [4])  # our own entry, claimed back
    assert [(j.id, j.deliveries) for j in parts.handler.seen] == [("c1", 3)]
    assert len(parts.in_flight.held) == 1


async def test_drop_waiting_gives_up_the_entries_not_started_and_leaves_running_ones(
    parts: Parts,
) -> None:
    parts.in_flight.accept(0, [entry("d1"), entry("d2"), entry("d3")])
    parts.in_flight.accept(1, [entry("d4")])
    await parts.handler.started_by("d1", "d2")
    waiting_tasks = [h.task for h in parts.in_flight.held.values() if not h.started]

    assert parts.in_flight.drop_waiting() == {0: ["3-0"], 1: ["4-0"]}
    assert (parts.running(), parts.waiting()) == (["d1", "d2"], [])
    await asyncio.gather(*(t for t in waiting_tasks if t is not None), return_exceptions=True)
    # entries beyond the slots wait without a task; any that had one saw it cancelled
    assert all(t is None or t.cancelled() for t in waiting_tasks)

    parts.in_flight.closing = True
    await parts.done("d1", "d2")  # running handlers still finish and are acked
    assert not parts.handler.started("d3") and not parts.handler.started("d4")
    await parts.settle()
    assert parts.succeeded() == [("1-0", "2-0")]


async def test_a_failed_handler_is_retried_stamped_by_the_clock_then_dead_lettered() -> None:
    parts = Parts(concurrency=2, failing={"e1", "e2"})
    parts.in_flight.accept(0, [entry("e1", attempt=1, max_attempts=2)])
    parts.in_flight.accept(0, [entry("e2", attempt=2, max_attempts=2)])
    await parts.done("e1", "e2")
    await parts.settle()

    (retry,) = parts.executor.sent("retry")
    assert list(retry.args[1:4]) == ["1-0", "e1", 1000]  # retry_base_ms at attempt 1, no jitter
    packed = retry.args[4]
    assert isinstance(packed, bytes)
    envelope = Envelope.unpack(packed)
    assert (envelope.attempt, envelope.enqueued_ms, envelope.group) == (2, NOW_MS, GROUP)
    (dead,) = parts.executor.sent("dead_letter")
    assert list(dead.args[3:5]) == ["2-0", "failed"]
    assert "ValueError: e2 failed" in str(dead.args[5])
    assert parts.in_flight.failed == 2


async def test_wait_for_handlers_waits_for_running_handlers_until_hurried(parts: Parts) -> None:
    parts.in_flight.accept(0, [entry("f1"), entry("f2")])
    await parts.handler.started_by("f1", "f2")
    running = parts.in_flight.close()  # as a stop does: their runners end with the runs
    hurry = asyncio.Event()

    parts.handler.release("f1")
    finishing = asyncio.ensure_future(wait_for_handlers(running, 60.0, hurry))
    await asyncio.wait_for(asyncio.shield(running[0]), WAIT_S)
    assert not finishing.done()  # f2 still runs, and the grace is long
    hurry.set()
    assert await asyncio.wait_for(finishing, WAIT_S) == 1


async def test_a_sync_handler_runs_without_a_task_and_its_outcomes_are_settled() -> None:
    gates = {job_id: threading.Event() for job_id in ("s1", "s2", "s3")}

    def handler(job: Job) -> None:
        gates[job.id].wait(WAIT_S)
        if job.id == "s2":
            raise ValueError(f"{job.id} failed")

    parts = Parts(concurrency=2, sync_handler=handler)
    parts.in_flight.accept(0, [entry("s1"), entry("s2", attempt=1, max_attempts=3), entry("s3")])
    first = [h.task for h in parts.in_flight.held.values() if h.task is not None]
    assert len(first) == 2 and not any(isinstance(t, asyncio.Task) for t in first), (
        "two slots: two runs queued to the threads, their futures, no task"
    )
    for job_id in ("s1", "s2"):
        gates[job_id].set()
    await asyncio.wait_for(asyncio.gather(*first, return_exceptions=True), WAIT_S)
    (third,) = [h.task for h in parts.in_flight.held.values()]
    assert third is not None, "a run that ended started the next"
    gates["s3"].set()
    await asyncio.wait_for(asyncio.gather(third, return_exceptions=True), WAIT_S)
    await parts.settle()
    assert sorted(e for ack in parts.succeeded() for e in ack) == ["1-0", "3-0"]
    (retry,) = parts.executor.sent("retry")
    assert list(retry.args[1:3]) == ["2-0", "s2"]
    assert (parts.in_flight.handled, parts.in_flight.failed) == (2, 1)
    assert parts.in_flight.held == {}, "each run, once settled, is forgotten"


def expiring(job_id: str, expires_ms: int) -> tuple[str, dict[bytes, bytes]]:
    """`entry(job_id)` with an ``expires`` field."""
    entry_id, fields = entry(job_id)
    return entry_id, {**fields, Field.EXPIRES: str(expires_ms).encode()}


def expirations(parts: Parts) -> list[tuple[str, str, int]]:
    """(entry, job, at ms) of each ``X`` record the ack calls of expired entries wrote."""
    out = []
    for call in parts.executor.sent("ack"):
        if call.args[-1] != "expired":
            continue
        pairs = msgpack.unpackb(call.args[2], raw=True)
        for field, raw in zip(pairs[0::2], pairs[1::2], strict=True):
            record = read_record(raw)
            assert record is not None and record.kind == "X" and record.reason == "expired"
            out.append((record.entry, field.decode().partition(SEPARATOR)[0], record.at_ms))
    return out


async def test_an_entry_read_past_its_expiry_is_acked_unrun_and_noted_expired() -> None:
    parts = Parts(concurrency=2)
    parts.executor.answer("ack", lambda call: len(msgpack.unpackb(call.args[1])))
    parts.in_flight.accept(0, [expiring("x1", NOW_MS - 1), expiring("k2", NOW_MS), entry("p3")])
    await parts.handler.started_by("k2", "p3")  # at its expiry ms: still in time
    assert "x1" not in {j.id for j in parts.handler.seen}
    assert parts.in_flight.expired == 1 and parts.in_flight.free() == 0
    await parts.settle()
    assert expirations(parts) == [("1-0", "x1", NOW_MS)]
    assert parts.settler.counts.expired == 1
    await parts.done("k2", "p3")


async def test_an_entry_that_waits_for_a_slot_past_its_expiry_never_starts() -> None:
    parts = Parts(concurrency=1)
    parts.executor.answer("ack", lambda call: len(msgpack.unpackb(call.args[1])))
    parts.in_flight.accept(0, [entry("a1"), expiring("w2", NOW_MS + 10), entry("a3")])
    await parts.handler.started_by("a1")
    parts.clock.advance(11)  # w2 waits behind a1 past its expiry
    await parts.done("a1")
    await parts.handler.started_by("a3")
    assert [j.id for j in parts.handler.seen] == ["a1", "a3"]
    assert parts.in_flight.expired == 1 and ("0", "2-0") not in parts.in_flight.held
    await parts.settle()
    assert expirations(parts) == [("2-0", "w2", NOW_MS + 11)]
    await parts.done("a3")
