"""The claim keeper without Redis: its step against a scripted executor, timed by a manual
clock (visibility timeout 3 s: keep-alive every 1 s; take-over every 5 s).

Each duty runs when the clock says it is due; a take-over that fails keeps its timer, so it
is tried again right after the pause, while keep-alive goes on on its own timer; a shard that
refuses its claim does not hold the others up; dead letters and take-overs are counted.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from tests.support.fakes import ScriptedExecutor
from tests.support.worker_parts import GROUP, TOPIC, consumer, entry
from wheelq.core.clock import ManualClock
from wheelq.core.keys import ShardKeys
from wheelq.core.settings import WorkerSettings
from wheelq.errors import ScriptError
from wheelq.store.call import Call
from wheelq.store.consume import Claimed
from wheelq.store.streams import ZERO_ID, Entry
from wheelq.worker.stream_reader import ClaimKeeper

SETTINGS = WorkerSettings(visibility_timeout_ms=3000, claim_interval_ms=5000, max_deliveries=4)
WRONG_TYPE = ScriptError(
    f"claim.lua: key '{ShardKeys(TOPIC, 0).dead}' holds a value of the wrong type"
)


def nothing_idle(call: Call[Any]) -> Claimed:
    return Claimed(ZERO_ID, 0, [], [])


class Keeper:
    """A claim keeper on `shards` shards holding `held`, with `free` slots."""

    def __init__(self, shards: int = 1, free: int = 5) -> None:
        self.executor = ScriptedExecutor()
        self.executor.answer("touch", lambda call: [])
        self.executor.answer("claim", nothing_idle)
        self.clock = ManualClock(0)
        self.held: dict[int, list[str]] = {0: ["1-0", "2-0"]}
        self.free = free
        self.accepted: list[tuple[int, list[Entry], list[int]]] = []
        self.keeper = ClaimKeeper(
            consumer(self.executor, shards=shards),
            SETTINGS,
            held=lambda: self.held,
            free=lambda: self.free,
            accept=lambda shard, entries, deliveries: self.accepted.append(
                (shard, entries, list(deliveries))
            ),
            clock=self.clock,
        )

    def sent(self) -> tuple[int, int]:
        """(touch calls, claim calls) sent so far."""
        return len(self.executor.sent("touch")), len(self.executor.sent("claim"))


async def test_keep_alive_runs_when_the_manual_clock_says_it_is_due() -> None:
    k = Keeper()
    assert await k.keeper.first_wait() == 1.0  # a third of the visibility timeout
    k.clock.advance(999)
    assert await k.keeper.step() == pytest.approx(0.001)
    assert k.sent() == (0, 0)

    k.clock.advance(1)
    assert await k.keeper.step() == 1.0  # next keep-alive at 2000, take-over at 5000
    (touch,) = k.executor.sent("touch")
    assert list(touch.keys) == [ShardKeys(TOPIC, 0).ready]
    assert list(touch.args) == [GROUP, "me", 0, "1-0", "2-0"]  # idle time reset to 0
    assert k.sent() == (1, 0)


async def test_entries_taken_by_another_worker_while_held_are_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    k = Keeper()
    k.executor.answer("touch", lambda call: ["2-0"])
    assert await k.keeper.keep_alive() == 1
    assert any("1 entries of t shard 0 were taken over" in r.getMessage() for r in caplog.records)


async def test_an_entry_taken_over_is_logged_once_however_many_touches_follow(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 43: a stalled worker logged the same take-over at each keep-alive (3 times in
    1.3 s) while its handler ran on; once per take-over, and again for a new one."""
    k = Keeper()
    k.executor.answer("touch", lambda call: ["2-0"])
    for _ in range(3):
        await k.keeper.keep_alive()
    told = [r for r in caplog.records if "were taken over" in r.getMessage()]
    assert len(told) == 1, [r.getMessage() for r in told]
    k.executor.answer("touch", lambda call: ["1-0", "2-0"])
    await k.keeper.keep_alive()
    told = [r.getMessage() for r in caplog.records if "were taken over" in r.getMessage()]
    assert len(told) == 2 and told[-1].startswith("1 entries"), told


async def test_take_over_claims_into_free_slots_and_counts_dead_letters() -> None:
    k = Keeper(shards=2, free=3)
    k.held = {}
    claimed = [entry("x7", entry_id="7-0")]
    replies = iter([Claimed("9-0", 2, claimed, [2]), Claimed(ZERO_ID, 1, [], [])])
    k.executor.answer("claim", lambda call: next(replies))
    k.clock.set(5000)

    assert await k.keeper.step() == 1.0  # keep-alive due at 6000 (held nothing at 5000)
    first, second = k.executor.sent("claim")
    assert list(first.args) == [GROUP, "me", 3000, ZERO_ID, 3, 4]  # idle > visibility, free slots
    assert second.keys[0] == ShardKeys(TOPIC, 1).ready
    assert k.accepted == [(0, claimed, [2])]
    assert (k.keeper.taken_over, k.keeper.dead_lettered) == (1, 3)

    k.executor.answer("claim", nothing_idle)
    k.clock.set(10_000)
    await k.keeper.step()
    assert k.executor.sent("claim")[2].args[3] == "9-0"  # the scan goes on from its cursor


async def test_no_take_over_without_free_slots_or_once_the_worker_stops_claiming() -> None:
    k = Keeper(free=0)
    k.clock.set(5000)
    await k.keeper.step()
    assert k.sent() == (1, 0)

    k.free = 5
    k.keeper.claiming = False
    k.clock.set(10_000)
    await k.keeper.step()
    assert k.sent() == (2, 0)  # keep-alive goes on


async def test_a_failed_take_over_keeps_its_timer_and_keep_alive_goes_on() -> None:
    k = Keeper()
    k.executor.answer("claim", lambda call: WRONG_TYPE)
    k.clock.set(5000)
    with pytest.raises(ScriptError):
        await k.keeper.step()
    assert k.sent() == (1, 1)  # keep-alive was due too, and ran first

    k.clock.advance(100)  # the base's pause: the take-over comes first, not at 10 000
    with pytest.raises(ScriptError):
        await k.keeper.step()
    assert k.sent() == (1, 2)

    k.clock.set(6000)  # keep-alive due again while take-over still fails
    with pytest.raises(ScriptError):
        await k.keeper.step()
    assert k.sent() == (2, 3)

    k.executor.answer("claim", nothing_idle)  # the fault ends
    k.clock.advance(200)
    assert await k.keeper.step() == pytest.approx(0.8)  # back on the timers: keep-alive at 7000
    assert k.sent() == (2, 4)
    k.clock.set(7000)
    await k.keeper.step()
    assert k.sent() == (3, 4)  # next take-over at 11 200


async def test_the_pause_after_a_failure_never_outlasts_the_keep_alive_interval() -> None:
    k = Keeper()
    assert SETTINGS.failure_pause_max_ms > SETTINGS.keepalive_interval_ms
    pauses = [k.keeper.failed(WRONG_TYPE) for _ in range(12)]
    assert max(pauses) <= SETTINGS.keepalive_interval_ms / 1000
    assert k.keeper.failures == 12


async def test_a_shard_that_refuses_its_claim_does_not_hold_the_others_up() -> None:
    k = Keeper(shards=3)
    claimed = [entry("y8", entry_id="8-0")]

    def claim(call: Call[Any]) -> Claimed | ScriptError:
        if call.keys[0] == ShardKeys(TOPIC, 0).ready:
            return WRONG_TYPE
        return Claimed(ZERO_ID, 0, claimed, [2])

    k.executor.answer("claim", claim)
    with pytest.raises(ScriptError):
        await k.keeper.take_over()
    assert len(k.executor.sent("claim")) == 3
    assert [shard for shard, _, _ in k.accepted] == [1, 2]
    assert k.keeper.taken_over == 2


async def test_a_connection_error_ends_the_take_over_at_once() -> None:
    k = Keeper(shards=3)
    k.executor.fail_next(RedisConnectionError("reset"))
    with pytest.raises(RedisConnectionError):
        await k.keeper.take_over()
    assert len(k.executor.sent("claim")) == 1


async def test_keep_alive_touches_held_entries_in_bounded_chunks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    k = Keeper(shards=2)
    k.held = {0: [f"{n}-0" for n in range(501)], 1: ["1-1"]}
    assert await k.keeper.keep_alive() == 502
    assert [len(c.args) - 3 for c in k.executor.sent("touch")] == [500, 1, 1]
    assert len(k.executor.rounds) == 1
    assert not caplog.records
