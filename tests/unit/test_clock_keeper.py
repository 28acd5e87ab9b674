"""The clock keeper against a scripted TIME and a fake clock: each step gives the clock one
round trip timed on the clock's own local readings, and a failed one gives it nothing."""

from __future__ import annotations

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from tests.support.fakes import ScriptedExecutor
from tests.support.waiting import until
from wheelq.runtime.clock import ClockKeeper, RedisClock

SERVER_MS = 1_700_000_000_123.5


class FakeClock:
    """A `SyncedClock` whose local clock moves 4 ms per reading."""

    def __init__(self) -> None:
        self.local = 100.0
        self.samples: list[tuple[float, float, float]] = []

    def now_ms(self) -> int:
        return 0

    def local_ms(self) -> float:
        self.local += 4
        return self.local

    def add_sample(self, before_ms: float, server_ms: float, after_ms: float) -> None:
        self.samples.append((before_ms, server_ms, after_ms))


@pytest.fixture
def executor() -> ScriptedExecutor:
    executor = ScriptedExecutor()
    executor.answer("TIME", lambda call: SERVER_MS)
    return executor


async def test_a_step_gives_the_clock_one_round_trip_and_waits_an_interval(
    executor: ScriptedExecutor,
) -> None:
    clock = FakeClock()
    keeper = ClockKeeper(executor, clock, 5000)
    assert await keeper.first_wait() == 5.0
    assert await keeper.step() == 5.0
    assert clock.samples == [(104.0, SERVER_MS, 108.0)]
    assert [c.command for c in executor.sent("TIME")] == [("TIME",)]


async def test_a_failed_round_trip_gives_the_clock_nothing(executor: ScriptedExecutor) -> None:
    clock = FakeClock()
    keeper = ClockKeeper(executor, clock, 5000)
    executor.fail_next(RedisConnectionError("Connection refused"))
    with pytest.raises(RedisConnectionError):
        await keeper.step()
    assert clock.samples == []


async def test_the_redis_clock_takes_its_offset_from_the_samples(
    executor: ScriptedExecutor,
) -> None:
    clock = RedisClock()
    keeper = ClockKeeper(executor, clock, 5000)
    await keeper.sample()
    assert clock.error_bound_ms < 1000, "one sample taken, over a round trip of no length"
    assert abs(clock.now_ms() - SERVER_MS) < 1000


async def test_a_failing_keeper_shows_it_and_recovers(executor: ScriptedExecutor) -> None:
    clock = FakeClock()
    keeper = ClockKeeper(executor, clock, 100, max_pause_ms=10)
    executor.answer("TIME", lambda call: RedisConnectionError("Connection refused"))
    await keeper.start()
    try:
        await until(lambda: keeper.failures >= 2, what="failed samples")
        assert keeper.status()["last_error"] == "ConnectionError: Connection refused"
        executor.answer("TIME", lambda call: SERVER_MS)
        await until(lambda: clock.samples, what="a sample")
        assert keeper.status() == {"running": True, "failures": 0, "last_error": None}
    finally:
        await keeper.stop()
