"""The producer's breaker without a server: a manual clock and a scripted executor. It opens
on a connection-level failure, fails calls at once without sending them while open, lets
one probe through when the open period is over, and closes when the probe succeeds."""

from __future__ import annotations

from typing import Any

import pytest
from redis.exceptions import BusyLoadingError, MaxConnectionsError, ReadOnlyError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from tests.support.fakes import ScriptedExecutor
from wheelq.core.clock import ManualClock
from wheelq.errors import RedisUnavailableError
from wheelq.producer.operations import Op, guarded
from wheelq.runtime.breaker import Breaker
from wheelq.store.call import Call
from wheelq.store.executor import drive_async

OPEN_MS = 1000
PING: Call[Any] = Call(command=("PING",))


def ping() -> Op[Any]:
    (reply,) = yield [PING]
    return reply


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_000_000)


@pytest.fixture
def breaker(clock: ManualClock) -> Breaker:
    return Breaker(OPEN_MS, clock)


@pytest.fixture
def executor() -> ScriptedExecutor:
    scripted = ScriptedExecutor()
    scripted.answer("PING", lambda call: b"PONG")
    return scripted


async def call(breaker: Breaker, executor: ScriptedExecutor) -> Any:
    return await drive_async(guarded(breaker, ping()), executor.run)


async def test_a_connection_failure_opens_it_and_calls_then_fail_without_being_sent(
    breaker: Breaker, executor: ScriptedExecutor, clock: ManualClock
) -> None:
    executor.fail_next(RedisConnectionError("Connection refused"))
    with pytest.raises(RedisUnavailableError) as first:
        await call(breaker, executor)
    assert first.value.reason == "unreachable"
    assert isinstance(first.value.__cause__, RedisConnectionError)

    clock.advance(OPEN_MS - 1)
    with pytest.raises(RedisUnavailableError) as fast:
        await call(breaker, executor)

    assert fast.value.reason == "breaker_open"
    assert "Connection refused" in str(fast.value)
    assert len(executor.rounds) == 1  # the second call was never sent
    assert breaker.state == "open"


async def test_after_the_open_period_one_probe_goes_through_and_its_success_closes_it(
    breaker: Breaker, executor: ScriptedExecutor, clock: ManualClock
) -> None:
    executor.fail_next(RedisTimeoutError("Timeout reading from socket"))
    with pytest.raises(RedisUnavailableError):
        await call(breaker, executor)
    clock.advance(OPEN_MS)
    assert breaker.state == "half_open"

    assert await call(breaker, executor) == b"PONG"

    assert breaker.state == "closed"
    assert await call(breaker, executor) == b"PONG"
    assert len(executor.rounds) == 3


async def test_a_failed_probe_opens_it_again_for_a_full_period(
    breaker: Breaker, executor: ScriptedExecutor, clock: ManualClock
) -> None:
    executor.fail_next(RedisConnectionError("refused"), RedisConnectionError("refused again"))
    with pytest.raises(RedisUnavailableError):
        await call(breaker, executor)
    clock.advance(OPEN_MS)
    with pytest.raises(RedisUnavailableError) as probe:
        await call(breaker, executor)
    assert probe.value.reason == "unreachable"

    clock.advance(OPEN_MS - 1)
    with pytest.raises(RedisUnavailableError, match="refused again") as fast:
        await call(breaker, executor)
    assert fast.value.reason == "breaker_open"
    assert len(executor.rounds) == 2


def test_while_the_probe_is_out_other_calls_fail_fast(breaker: Breaker, clock: ManualClock) -> None:
    breaker.report(False, RedisConnectionError("refused"))
    clock.advance(OPEN_MS)

    assert breaker.admit() is True  # the probe
    with pytest.raises(RedisUnavailableError, match="a probe") as refused:
        breaker.admit()
    assert refused.value.reason == "breaker_open"

    breaker.abandon(True)  # the probe was cancelled: the next call probes instead
    assert breaker.admit() is True


@pytest.mark.parametrize(
    ("reply", "raised"),
    [
        (ReadOnlyError("READONLY You can't write against a read only replica."), "readonly"),
        (ResponseError("ERR wrong number of arguments"), None),
        # Every connection the client may open to the server in use: the call was never
        # sent, which says nothing of Redis (a stall of one cluster node would otherwise
        # fail every node's calls for a second).
        (MaxConnectionsError("Too many connections"), "connections"),
    ],
)
async def test_an_error_reply_proves_redis_reachable_and_does_not_open_it(
    breaker: Breaker, executor: ScriptedExecutor, reply: Exception, raised: str | None
) -> None:
    executor.fail_next(reply)
    with pytest.raises(Exception) as caught:  # which one: checked below
        await call(breaker, executor)
    if raised is None:
        assert caught.value is reply
    else:
        assert isinstance(caught.value, RedisUnavailableError)
        assert caught.value.reason == raised

    assert breaker.state == "closed"
    assert await call(breaker, executor) == b"PONG"


async def test_loading_opens_it(breaker: Breaker, executor: ScriptedExecutor) -> None:
    executor.fail_next(BusyLoadingError("LOADING Redis is loading the dataset in memory"))
    with pytest.raises(RedisUnavailableError) as loading:
        await call(breaker, executor)

    assert loading.value.reason == "loading"
    assert breaker.state == "open"


async def test_open_ms_0_never_opens(clock: ManualClock, executor: ScriptedExecutor) -> None:
    breaker = Breaker(0, clock)
    executor.fail_next(RedisConnectionError("refused"))
    with pytest.raises(RedisUnavailableError):
        await call(breaker, executor)

    assert breaker.state == "closed"
    assert await call(breaker, executor) == b"PONG"


async def test_a_probe_closed_without_an_outcome_lets_the_next_call_probe(
    breaker: Breaker, executor: ScriptedExecutor, clock: ManualClock
) -> None:
    breaker.report(False, RedisConnectionError("refused"))
    clock.advance(OPEN_MS)
    op = guarded(breaker, ping())
    assert next(op) == [PING]  # the probe is out ...
    op.close()  # ... and its caller was cancelled

    assert await call(breaker, executor) == b"PONG"
    assert breaker.state == "closed"
