"""The preloader's step against scripted replies and a manual clock: one round trip per shard
(inbox, page, sweep), each shard settled on its own, rounds repeated while a shard has more."""

from __future__ import annotations

from typing import Any

import pytest
from redis.exceptions import BusyLoadingError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError

from tests.support.node_context import START_MS, NodeParts, keys
from tests.support.waiting import until
from wheelq.errors import LeaseLostError
from wheelq.scheduler.led_shards import Lead
from wheelq.scheduler.preloader import Preloader
from wheelq.scheduler.wheel_driver import WheelDriver
from wheelq.store.call import Call
from wheelq.store.fire import EmitResult, PreloadPage

WINDOW_MS = 5000
WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"


def shard_of(call: Call[Any]) -> int:
    """The shard a call is for, from its first key (``{t:1}:delayed`` -> 1)."""
    key = call.keys[0] if call.keys else str(call.command[1])
    return int(key.split("}", 1)[0].rsplit(":", 1)[1])


PLANNED_MS = START_MS + 2500
"""When the scripted reads plan the next one (the script's plan, `preload.lua`)."""


def page(
    jobs: list[tuple[str, int]],
    full: bool = False,
    next_read_ms: int = PLANNED_MS,
    overdue: bool = False,
) -> PreloadPage:
    return PreloadPage(START_MS + WINDOW_MS, START_MS, full, jobs, next_read_ms, overdue)


def nothing_swept(call: Call[Any]) -> EmitResult:
    return EmitResult(0, False, 0, [])


@pytest.fixture
def parts() -> NodeParts:
    parts = NodeParts.make({"window_ms": WINDOW_MS, "sweep_grace_ms": 1000})
    parts.executor.answer("LPOP", lambda call: [])
    parts.executor.answer("preload", lambda call: page([]))
    parts.executor.answer("emit_due", nothing_swept)
    return parts


def make(parts: NodeParts) -> tuple[Preloader, WheelDriver]:
    driver = WheelDriver(parts.ctx)
    return Preloader(parts.ctx, driver), driver


def in_wheel(driver: WheelDriver, lead: Lead, job_id: str) -> int | None:
    return driver.wheel.due_of((lead.slot, job_id))


async def test_one_round_trip_per_shard_reads_inbox_page_and_sweeps(parts: NodeParts) -> None:
    preloader, driver = make(parts)
    lead = parts.lead(0, acquired_ms=START_MS - 50)
    parts.clock.advance(2000)
    parts.executor.answer("LPOP", lambda call: [("noted", START_MS + 2100)])
    parts.executor.answer("preload", lambda call: page([("paged", START_MS + 4000)]))
    parts.executor.answer("emit_due", lambda call: EmitResult(3, False, 0, []))

    assert await preloader.step() == pytest.approx(0.5), "then the read's plan"
    (round_,) = parts.executor.rounds
    inbox, preload, sweep = round_
    assert inbox.command == ("LPOP", keys(0).inbox, 1000)
    assert preload.keys[0] == keys(0).delayed
    assert list(preload.args[1:3]) == [START_MS - 50, WINDOW_MS], "from the cursor"
    assert list(preload.args[5:]) == [500, 10_000, START_MS + 1000], "plan bounds, overdue"
    assert sweep.args[2] == START_MS + 1000, "overdue by more than the sweep grace"
    assert in_wheel(driver, lead, "noted") == START_MS + 2100
    assert in_wheel(driver, lead, "paged") == START_MS + 4000
    assert lead.cursor_ms == START_MS + WINDOW_MS
    assert lead.emitted == 3
    assert [(e.kind, e.count, e.sent_ms) for e in parts.events] == [("emitted", 3, START_MS + 2000)]


async def test_the_sweep_never_reaches_below_the_acquisition(parts: NodeParts) -> None:
    preloader, _ = make(parts)
    parts.lead(0, acquired_ms=START_MS - 50)
    await preloader.step()
    (sweep,) = parts.executor.sent("emit_due")
    assert sweep.args[2] == START_MS - 50, "the backlog from before the lead is swept"


async def test_each_shard_is_settled_on_its_own(parts: NodeParts) -> None:
    preloader, driver = make(parts)
    well, sick = parts.lead(0), parts.lead(1)
    parts.executor.answer(
        "preload",
        lambda call: ResponseError(WRONGTYPE) if shard_of(call) == 1 else page([("a", 1)]),
    )
    parts.executor.answer(
        "LPOP", lambda call: [("noted-1", START_MS + 10)] if shard_of(call) == 1 else []
    )
    await preloader.step()
    assert in_wheel(driver, well, "a") == 1
    assert well.cursor_ms == START_MS + WINDOW_MS
    assert sick.cursor_ms == START_MS, "a refused page does not move the cursor"
    assert in_wheel(driver, sick, "noted-1") == START_MS + 10, "its inbox is still read"
    assert preloader.failures == 1
    assert preloader.last_error == f"ResponseError: {WRONGTYPE}"
    assert parts.lost == []


async def test_a_lost_lease_drops_the_lead_and_schedules_nothing_of_it(parts: NodeParts) -> None:
    preloader, driver = make(parts)
    lost, kept = parts.lead(0), parts.lead(1)
    parts.executor.answer(
        "preload",
        lambda call: (
            LeaseLostError("preload.lua: this node does not hold the shard's lease")
            if shard_of(call) == 0
            else page([("b", 5)])
        ),
    )
    parts.executor.answer("LPOP", lambda call: [("x", 7)])
    await preloader.step()
    assert parts.lost == [lost]
    assert in_wheel(driver, lost, "x") is None
    assert in_wheel(driver, kept, "b") == 5 and in_wheel(driver, kept, "x") == 7
    assert preloader.failures == 0


async def test_a_shard_with_more_goes_round_again_until_none_has(parts: NodeParts) -> None:
    preloader, driver = make(parts)
    busy, idle = parts.lead(0), parts.lead(1)
    pages = iter([page([("p1", 10)], full=True), page([("p2", 11)], full=True), page([])])
    sweeps = iter([EmitResult(200, True, 0, []), EmitResult(5, False, 0, [])])
    parts.executor.answer("preload", lambda call: next(pages) if shard_of(call) == 0 else page([]))
    parts.executor.answer(
        "emit_due",
        lambda call: (
            next(sweeps, nothing_swept(call)) if shard_of(call) == 0 else nothing_swept(call)
        ),
    )
    await preloader.step()
    assert [shard_of(c) for c in parts.executor.sent("preload")] == [0, 1, 0, 0]
    assert len(parts.executor.rounds) == 4, "one round trip per shard and round"
    assert in_wheel(driver, busy, "p1") == 10 and in_wheel(driver, busy, "p2") == 11
    assert busy.emitted == 205 and idle.emitted == 0


async def test_a_full_inbox_goes_round_again(parts: NodeParts) -> None:
    preloader, _ = make(parts)
    parts.lead(0)
    notes = iter([[(f"n{i}", 5) for i in range(1000)], []])
    parts.executor.answer("LPOP", lambda call: next(notes))
    await preloader.step()
    assert len(parts.executor.sent("LPOP")) == 2


async def test_a_loading_reply_raises_so_the_base_pauses(parts: NodeParts) -> None:
    preloader, driver = make(parts)
    lead = parts.lead(0)
    parts.executor.answer("preload", lambda call: BusyLoadingError("loading"))
    parts.executor.answer("LPOP", lambda call: [("x", 7)])
    with pytest.raises(BusyLoadingError):
        await preloader.step()
    assert in_wheel(driver, lead, "x") is None and preloader.failures == 0


async def test_a_connection_error_raises_so_the_base_pauses(parts: NodeParts) -> None:
    preloader, _ = make(parts)
    parts.lead(0)
    parts.executor.fail_next(RedisConnectionError("Connection refused"))
    with pytest.raises(RedisConnectionError):
        await preloader.step()


async def test_a_refused_shard_keeps_the_count_until_it_is_read_again(parts: NodeParts) -> None:
    preloader, _ = make(parts)
    parts.lead(0)
    refused = [True]
    parts.executor.answer(
        "preload", lambda call: ResponseError(WRONGTYPE) if refused[0] else page([])
    )
    await preloader.start()
    try:
        await until(lambda: preloader.failures == 1, what="the refused page")
        first = len(parts.executor.rounds)
        parts.clock.advance(500)  # a refused shard is tried again after the preload interval
        preloader.wake()
        await until(lambda: len(parts.executor.rounds) > first, what="another round")
        assert preloader.failures == 2
        refused[0] = False
        parts.clock.advance(500)
        preloader.wake()
        await until(lambda: preloader.failures == 0, what="a round that got through")
        assert preloader.last_error is None
    finally:
        await preloader.stop()


async def test_a_shard_not_followed_goes_round_every_preload_interval(parts: NodeParts) -> None:
    preloader, _ = make(parts)
    lead = parts.lead(0)
    parts.executor.answer("preload", lambda call: page([], next_read_ms=START_MS + 60_000))
    assert await preloader.step() == pytest.approx(0.5), "not its plan: its notes may be lost"
    parts.clock.advance(500)
    assert await preloader.step() == pytest.approx(0.5)
    assert len(parts.executor.rounds) == 2
    lead.followed = True
    assert await preloader.step() == pytest.approx(59.5), "followed: sleeps until its plan"
    assert len(parts.executor.rounds) == 2


async def test_a_followed_idle_shard_gets_a_light_round_then_sleeps_until_its_plan(
    parts: NodeParts,
) -> None:
    preloader, _ = make(parts)
    lead = parts.lead(0)
    lead.followed = True
    parts.executor.answer(
        "preload", lambda call: page([], next_read_ms=parts.clock.now_ms() + 10_000)
    )
    await preloader.step()  # the first round is full: the backlog, the inbox
    assert not lead.noted and not lead.overdue
    assert len(parts.executor.rounds[-1]) == 3
    parts.clock.advance(10_000)
    assert await preloader.step() == pytest.approx(10.0), "read, then the new plan"
    (light,) = parts.executor.rounds[-1]
    assert light.keys[0] == keys(0).delayed, "the read alone: nothing noted, nothing overdue"
    parts.clock.advance(1)
    before = len(parts.executor.rounds)
    await preloader.step()
    assert len(parts.executor.rounds) == before, "nothing before its plan"


async def test_a_light_round_that_sees_an_overdue_job_is_followed_by_a_full_one(
    parts: NodeParts,
) -> None:
    preloader, _ = make(parts)
    lead = parts.lead(0)
    lead.followed, lead.noted, lead.overdue = True, False, False
    reads = iter([page([], overdue=True), page([])])
    parts.executor.answer("preload", lambda call: next(reads))
    await preloader.step()
    assert [len(r) for r in parts.executor.rounds] == [1, 3], "light, then full with the sweep"
    assert not lead.overdue


async def test_a_note_makes_the_next_round_drain_the_inbox(parts: NodeParts) -> None:
    preloader, _ = make(parts)
    lead = parts.lead(0)
    lead.followed, lead.overdue, lead.noted = True, False, True
    await preloader.step()
    assert [len(r) for r in parts.executor.rounds] == [3]
    assert not lead.noted


async def test_a_line_sweep_between_reads_sends_the_emit_alone(parts: NodeParts) -> None:
    """While jobs wait on a shard's due line, its sweeps (every few ms) carry only the emit:
    the inbox and the page are read when a note comes or the read's plan is due."""
    preloader, _ = make(parts)
    lead = parts.lead(0)
    lead.followed, lead.overdue, lead.noted = True, False, False
    lead.planned_ms = START_MS + 10_000
    swept = iter([EmitResult(40, False, 0, [], waiting=500), EmitResult(8, False, 0, [])])
    parts.executor.answer("emit_due", lambda call: next(swept))
    lead.waiting = 1
    assert await preloader.step() == pytest.approx(0.002), "then at the line's pace"
    (alone,) = parts.executor.rounds[-1]
    assert alone.keys[0] == keys(0).delayed and lead.waiting == 500
    parts.clock.advance(2)
    lead.noted = True  # a wake note: the next round reads the inbox again
    await preloader.step()
    assert [len(r) for r in parts.executor.rounds] == [1, 3]
    assert lead.waiting == 0 and not lead.noted
