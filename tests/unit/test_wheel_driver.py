"""The wheel driver's step against scripted emit replies and a manual clock: what it sends
when, what it does with each kind of reply, and how a failure reaches the base."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.exceptions import BusyLoadingError
from redis.exceptions import ConnectionError as RedisConnectionError

from tests.support.node_context import START_MS, NodeParts, keys
from tests.support.waiting import until
from wheelq.errors import LeaseLostError, ScriptError
from wheelq.scheduler.led_shards import Lead
from wheelq.scheduler.wheel_driver import FIRST_ROUND, ROUND_MOST, WheelDriver
from wheelq.store.call import Call
from wheelq.store.fire import EmitResult


def ids_of(call: Call[Any]) -> list[str]:
    """The job ids of a wheel-mode emit_due call."""
    return [str(i) for i in call.args[5:]]


def emit_all(call: Call[Any]) -> EmitResult:
    return EmitResult(len(ids_of(call)), False, 0, [])


def wrong_type(shard: int) -> ScriptError:
    return ScriptError(
        f"emit_due.lua: key '{keys(shard).ready}' holds a value of the wrong type; "
        "nothing was written"
    )


def two_due_jobs(parts: NodeParts, driver: WheelDriver, errors: dict[int, Exception]) -> list[Lead]:
    """Lead shards 0 and 1, each with one job due now ("a", "b"); emits of a shard in
    `errors` answer its error."""
    parts.executor.answer(
        "emit_due",
        lambda call: (
            next(
                (e for shard, e in errors.items() if call.keys[0] == keys(shard).delayed),
                None,
            )
            or emit_all(call)
        ),
    )
    leads = [parts.lead(0), parts.lead(1)]
    driver.schedule(leads[0], [("a", START_MS)])
    driver.schedule(leads[1], [("b", START_MS)])
    return leads


@pytest.fixture
def parts() -> NodeParts:
    parts = NodeParts.make({"emit_batch": 2})
    parts.executor.answer("emit_due", emit_all)
    return parts


async def turns(n: int = 20) -> None:
    """Let the event loop run `n` rounds of ready callbacks (no time passes)."""
    for _ in range(n):
        await asyncio.sleep(0)


def in_wheel(driver: WheelDriver, lead: Lead, job_id: str) -> int | None:
    return driver.wheel.due_of((lead.slot, job_id))


async def test_emits_exactly_the_ids_due_at_the_manual_time(parts: NodeParts) -> None:
    driver = WheelDriver(parts.ctx)
    lead = parts.lead(0)
    driver.schedule(lead, [("a", START_MS + 5), ("b", START_MS + 5), ("c", START_MS + 7)])

    assert await driver.step() == pytest.approx(0.005)
    assert parts.executor.rounds == [], "nothing is due yet"

    parts.clock.set(START_MS + 5)
    assert await driver.step() == 0.0
    (call,) = parts.executor.sent("emit_due")
    assert sorted(ids_of(call)) == ["a", "b"]
    assert call.keys[0] == keys(0).delayed
    assert call.args[0] == "node-1" and call.args[2] == START_MS + 5
    assert await driver.step() == pytest.approx(0.002)
    assert len(parts.executor.rounds) == 1

    parts.clock.set(START_MS + 9)
    await driver.step()
    assert [ids_of(c) for c in parts.executor.sent("emit_due")] == [["a", "b"], ["c"]]
    assert await driver.step() is None, "an empty wheel waits for a wake"
    assert [(e.kind, e.count, e.sent_ms) for e in parts.events] == [
        ("emitted", 2, START_MS + 5),
        ("emitted", 1, START_MS + 9),
    ]
    assert lead.emitted == 3


async def test_one_round_sends_one_call_per_shard_and_batch(parts: NodeParts) -> None:
    driver = WheelDriver(parts.ctx)
    first, second = parts.lead(0), parts.lead(1)
    driver.schedule(first, [(f"a{i}", START_MS) for i in range(5)])
    driver.schedule(second, [("b0", START_MS)])
    await driver.step()
    (round_,) = parts.executor.rounds
    assert [(c.keys[0], ids_of(c)) for c in round_] == [
        (keys(0).delayed, ["a0", "a1"]),
        (keys(0).delayed, ["a2", "a3"]),
        (keys(0).delayed, ["a4"]),
        (keys(1).delayed, ["b0"]),
    ]


async def test_a_burst_sends_its_earliest_jobs_in_a_round_of_their_own_first(
    parts: NodeParts,
) -> None:
    driver = WheelDriver(parts.ctx)
    first, second = parts.lead(0), parts.lead(1)
    n = FIRST_ROUND + 5
    driver.schedule(first, [(f"a{i}", START_MS - 1) for i in range(n)])  # the earliest
    driver.schedule(second, [(f"b{i}", START_MS) for i in range(3)])
    await driver.step()
    head, rest = parts.executor.rounds
    assert [i for call in head for i in ids_of(call)] == [f"a{i}" for i in range(FIRST_ROUND)]
    sent_later = sorted(i for call in rest for i in ids_of(call))
    assert sent_later == sorted([f"a{i}" for i in range(FIRST_ROUND, n)] + ["b0", "b1", "b2"])
    assert (first.emitted, second.emitted, len(driver.wheel)) == (n, 3, 0)


async def test_a_job_due_during_a_burst_goes_out_before_the_bursts_later_rounds(
    parts: NodeParts,
) -> None:
    """A burst's rest goes in rounds of at most `ROUND_MOST`; before each, what came due
    while the last was sent goes first (a burst of 100,000 takes about a second to send)."""
    driver = WheelDriver(parts.ctx)
    lead = parts.lead(0)
    n = FIRST_ROUND + 2 * ROUND_MOST + 5
    driver.schedule(lead, [(f"a{i:05}", START_MS - 1) for i in range(n)])
    driver.schedule(lead, [("late", START_MS + 5)])
    calls = 0

    def answer(call: Any) -> EmitResult:
        nonlocal calls
        calls += 1
        if calls == 1:
            parts.clock.advance(10)  # "late" comes due while the first round is sent
        return EmitResult(len(ids_of(call)), False, 0, [], waiting=n)  # the line holds jobs

    parts.executor.answer("emit_due", answer)
    await driver.step()
    sent = [[i for call in r for i in ids_of(call)] for r in parts.executor.rounds]
    assert [len(r) for r in sent] == [FIRST_ROUND, 1, ROUND_MOST, ROUND_MOST, 5]
    assert sent[1] == ["late"], "due during the burst: before its later rounds"
    assert [i for r in sent[2:] for i in r] == [f"a{i:05}" for i in range(FIRST_ROUND, n)]
    assert (lead.emitted, len(driver.wheel)) == (n + 1, 0)


async def test_a_burst_on_a_shard_without_a_line_goes_in_one_round_after_its_first(
    parts: NodeParts,
) -> None:
    """A stream keeps due order: a burst's rest goes out soonest in one round."""
    driver = WheelDriver(parts.ctx)
    lead = parts.lead(0)
    n = FIRST_ROUND + 2 * ROUND_MOST + 5
    driver.schedule(lead, [(f"a{i:05}", START_MS - 1) for i in range(n)])
    parts.executor.answer("emit_due", lambda call: EmitResult(len(ids_of(call)), False, 0, []))
    await driver.step()
    sizes = [sum(len(ids_of(c)) for c in r) for r in parts.executor.rounds]
    assert sizes == [FIRST_ROUND, n - FIRST_ROUND]


async def test_a_later_round_without_a_reply_puts_the_rounds_after_it_back(
    parts: NodeParts,
) -> None:
    driver = WheelDriver(parts.ctx)
    lead = parts.lead(0)
    burst = [(f"a{i:05}", START_MS - 1) for i in range(FIRST_ROUND + 2 * ROUND_MOST)]
    driver.schedule(lead, burst)

    def answer(call: Any) -> EmitResult:
        # The connection goes once the first round is answered: the next round gets none.
        parts.executor.fail_next(RedisConnectionError("Connection reset by peer"))
        return EmitResult(len(ids_of(call)), False, 0, [], waiting=len(burst))

    parts.executor.answer("emit_due", answer)
    with pytest.raises(RedisConnectionError):
        await driver.step()
    unsent = {f"a{i:05}" for i in range(FIRST_ROUND, len(burst))}
    assert {job_id for (_, job_id), _ in driver.wheel.advance_to(START_MS)} == unsent


async def test_a_crowded_millisecond_is_sliced_even_after_the_wheel_sat_idle(
    parts: NodeParts,
) -> None:
    driver = WheelDriver(parts.ctx)
    lead = parts.lead(0)
    parts.clock.advance(60_000)  # the wheel's levels are a minute old
    due = parts.clock.now_ms() + 3000
    driver.schedule(lead, [(f"j{i:04}", due) for i in range(1000)])
    parts.clock.advance(3000)
    slices = driver.wheel.advance_to(due, FIRST_ROUND)
    assert [job_id for (_, job_id), _ in slices] == [f"j{i:04}" for i in range(FIRST_ROUND)], (
        "the jobs went straight to level 0 (no cascade): the millisecond is sliced"
    )


async def test_a_first_round_without_a_reply_puts_the_whole_burst_back(parts: NodeParts) -> None:
    driver = WheelDriver(parts.ctx)
    lead = parts.lead(0)
    burst = [(f"a{i}", START_MS - (i % 3)) for i in range(FIRST_ROUND + 5)]
    driver.schedule(lead, burst)
    parts.executor.fail_next(RedisConnectionError("Connection reset by peer"))
    with pytest.raises(RedisConnectionError):
        await driver.step()
    (head,) = parts.executor.rounds  # the rest was never sent
    assert len([i for call in head for i in ids_of(call)]) == FIRST_ROUND
    assert {job_id: in_wheel(driver, lead, job_id) for job_id, _ in burst} == dict(burst)


async def test_puts_back_what_was_rescheduled_later_or_held_back(parts: NodeParts) -> None:
    driver = WheelDriver(parts.ctx)
    lead = parts.lead(0)
    parts.executor.answer(
        "emit_due",
        lambda call: EmitResult(
            0, False, 0, [("a", START_MS + 500), ("b", START_MS - 3)], held=["c"]
        ),
    )
    driver.schedule(lead, [("a", START_MS), ("b", START_MS), ("c", START_MS)])
    await driver.step()
    assert in_wheel(driver, lead, "a") == START_MS + 500, "rescheduled later: its new time"
    assert in_wheel(driver, lead, "b") == START_MS + 1, "redis clock behind ours: next ms"
    assert in_wheel(driver, lead, "c") == START_MS, "held back by the byte budget: at once"

    parts.executor.answer("emit_due", emit_all)
    await driver.step()
    assert ids_of(parts.executor.sent("emit_due")[-1]) == ["c"]
    parts.clock.set(START_MS + 500)
    await driver.step()
    assert sorted(ids_of(parts.executor.sent("emit_due")[-1])) == ["a", "b"]


async def test_a_lost_lease_drops_the_lead_and_the_other_shards_still_fire(
    parts: NodeParts,
) -> None:
    driver = WheelDriver(parts.ctx)
    lost = LeaseLostError("emit_due.lua: this node does not hold the shard's lease")
    first, second = two_due_jobs(parts, driver, {0: lost})
    await driver.step()
    assert parts.lost == [first]
    assert second.emitted == 1 and first.emitted == 0
    assert driver.failures == 0, "a lost lease is not a failure of the driver"


async def test_ids_of_a_lead_no_longer_held_are_not_sent(parts: NodeParts) -> None:
    driver = WheelDriver(parts.ctx)
    lead = parts.lead(0)
    driver.schedule(lead, [("a", START_MS)])
    parts.leads.remove(lead.keys)
    await driver.step()
    assert parts.executor.rounds == []
    assert len(driver.wheel) == 0


async def test_a_refused_shard_is_reported_with_failed_and_the_others_still_fire(
    parts: NodeParts,
) -> None:
    driver = WheelDriver(parts.ctx)
    first, second = two_due_jobs(parts, driver, {1: wrong_type(1)})
    assert await driver.step() == 0.0, "one shard refused: no pause for the others"
    assert first.emitted == 1
    assert driver.failures == 1
    assert driver.last_error is not None and keys(1).ready in driver.last_error
    assert driver.last_error.startswith("ScriptError: ")
    assert parts.lost == []
    retry_ms = in_wheel(driver, second, "b")
    assert retry_ms is not None and START_MS < retry_ms <= START_MS + 10, "after the pause"


async def test_a_connection_error_raises_and_puts_the_round_back_at_its_due_times(
    parts: NodeParts,
) -> None:
    driver = WheelDriver(parts.ctx)
    lead = parts.lead(0)
    driver.schedule(lead, [("a", START_MS - 3), ("b", START_MS)])
    parts.executor.fail_next(RedisConnectionError("Connection reset by peer"))
    with pytest.raises(RedisConnectionError):
        await driver.step()
    assert in_wheel(driver, lead, "a") == START_MS - 3, "sent again after the pause"
    assert in_wheel(driver, lead, "b") == START_MS
    assert lead.emitted == 0 and parts.lost == []


async def test_a_loading_reply_settles_the_other_shards_then_raises(parts: NodeParts) -> None:
    driver = WheelDriver(parts.ctx)
    loading = BusyLoadingError("Redis is loading the dataset in memory")
    first, second = two_due_jobs(parts, driver, {0: loading})
    with pytest.raises(BusyLoadingError):
        await driver.step()
    assert second.emitted == 1
    assert driver.failures == 0, "counted once, by the base, not also per shard"
    assert in_wheel(driver, first, "a") == START_MS, "the loading shard's job waits"
    assert in_wheel(driver, second, "b") is None


async def test_a_job_scheduled_earlier_wakes_a_driver_waiting_for_a_later_one(
    parts: NodeParts,
) -> None:
    driver = WheelDriver(parts.ctx)
    lead = parts.lead(0)
    driver.schedule(lead, [("later", START_MS + 3_600_000)])
    await driver.start()
    try:
        await turns()  # the driver waits an hour for "later"
        driver.schedule(lead, [("now", START_MS)])
        await until(lambda: parts.executor.sent("emit_due"), what="the emit of the new job")
        assert [ids_of(c) for c in parts.executor.sent("emit_due")] == [["now"]]
    finally:
        await driver.stop()


async def test_a_refused_shard_stays_failed_until_its_retry_gets_through(
    parts: NodeParts,
) -> None:
    driver = WheelDriver(parts.ctx)
    first, second = parts.lead(0), parts.lead(1)
    refused = {keys(1).delayed}
    parts.executor.answer(
        "emit_due",
        lambda call: wrong_type(1) if call.keys[0] in refused else emit_all(call),
    )
    driver.schedule(second, [("b", START_MS)])
    await driver.start()
    try:
        await until(lambda: driver.failures == 1, what="the refused emit")
        assert in_wheel(driver, second, "b") is not None, "kept for a retry"
        for n in (1, 2, 3):  # steps that fire shard 0 but retry nothing: the count stands
            driver.schedule(first, [(f"a{n}", parts.clock.now_ms())])
            await until(lambda n=n: first.emitted == n, what="shard 0 to fire")
            await turns()
            assert driver.status()["failures"] == 1
            parts.clock.advance(1)

        parts.clock.advance(60_000)  # the retry is due: still refused
        driver.wake()
        await until(lambda: driver.failures == 2, what="the refused retry")

        refused.clear()  # the key is fixed
        parts.clock.advance(60_000)
        driver.wake()
        await until(lambda: second.emitted == 1, what="the retry to get through")
        await until(lambda: driver.failures == 0, what="the count to reset")
        assert driver.status() == {"running": True, "failures": 0, "last_error": None}
        assert [
            ids_of(c) for c in parts.executor.sent("emit_due") if c.keys[0] == keys(1).delayed
        ] == [
            ["b"],
            ["b"],
            ["b"],
        ]
    finally:
        await driver.stop()


async def test_a_refused_shard_that_is_lost_no_longer_holds_the_count(parts: NodeParts) -> None:
    driver = WheelDriver(parts.ctx)
    lead = parts.lead(0)
    parts.executor.answer("emit_due", lambda call: wrong_type(0))
    driver.schedule(lead, [("a", START_MS)])
    await driver.start()
    try:
        await until(lambda: driver.failures == 1, what="the refused emit")
        parts.leads.remove(lead.keys)
        driver.wake()
        await until(lambda: driver.failures == 0, what="the count to reset")
    finally:
        await driver.stop()


async def test_after_a_failed_round_the_driver_fires_again_and_is_well(parts: NodeParts) -> None:
    driver = WheelDriver(parts.ctx)
    lead = parts.lead(0)
    parts.executor.fail_next(RedisConnectionError("Connection reset by peer"))
    await driver.start()
    try:
        driver.schedule(lead, [("a", START_MS)])
        await until(lambda: lead.emitted == 1, what="the failed round sent again")
        driver.schedule(lead, [("b", START_MS)])
        await until(lambda: lead.emitted == 2, what="the next round")
        await until(lambda: driver.failures == 0, what="the count to reset")
        sent = [ids_of(c) for c in parts.executor.sent("emit_due")]
        assert sent == [["a"], ["a"], ["b"]], "after the pause, the failed round again"
    finally:
        await driver.stop()
