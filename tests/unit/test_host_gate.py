"""callbacks.hosts.HostGate on a manual clock: the per-host cap (slots, waiters, deferral
spread at the host's pace) and the breaker (opens after N failures, fails fast while open,
one probe when half-open, closes on its success, opens again on its failure)."""

from __future__ import annotations

import asyncio

import pytest

from wheelq.callbacks.hosts import HostGate
from wheelq.core.clock import ManualClock
from wheelq.core.retry import Defer, Retry
from wheelq.core.settings import CallbackSettings

A = "http://a:80"
B = "http://b:80"


def gate(**settings: int) -> tuple[HostGate, ManualClock]:
    clock = ManualClock(1_000_000)
    return HostGate(CallbackSettings(**settings), clock), clock


async def test_a_slow_host_gets_its_cap_then_as_many_waiters_then_deferrals() -> None:
    g, _ = gate(per_host_concurrency=2)
    await g.enter(A)
    g.leave(A, 10_000, True)  # it answers in seconds: only its cap may wait
    await g.enter(A)
    await g.enter(A)
    waiters = [asyncio.create_task(g.enter(A)) for _ in range(2)]
    await asyncio.sleep(0)
    assert not any(w.done() for w in waiters)
    with pytest.raises(Defer):
        await g.enter(A)
    await g.enter(B)  # another host is not held up
    g.leave(A, 10, True)
    await asyncio.sleep(0)
    assert [w.done() for w in waiters] == [True, False], "the slot went to the first waiter"
    assert g.hosts[A].in_flight == 2


async def test_a_fast_hosts_burst_waits_instead_of_being_deferred() -> None:
    g, _ = gate(per_host_concurrency=2)
    for _ in range(30):
        await g.enter(A)
        g.leave(A, 1, True)  # it answers in about a millisecond
    await g.enter(A)
    await g.enter(A)
    waiters = [asyncio.create_task(g.enter(A)) for _ in range(50)]
    await asyncio.sleep(0)
    assert g.deferred == 0 and len(g.hosts[A].waiters) == 50
    for _ in range(52):
        g.leave(A, 1, True)
        await asyncio.sleep(0)
    assert all(w.done() for w in waiters)


async def test_deferrals_are_spread_at_the_hosts_pace() -> None:
    g, _ = gate(per_host_concurrency=1)
    for _ in range(3):
        await g.enter(A)
        g.leave(A, 5000, True)  # the host answers in seconds
    await g.enter(A)
    waiter = asyncio.create_task(g.enter(A))
    await asyncio.sleep(0)
    delays = []
    for _ in range(3):
        with pytest.raises(Defer) as raised:
            await g.enter(A)
        assert raised.value.delay_ms is not None
        delays.append(raised.value.delay_ms)
    assert delays == sorted(delays) and delays[0] < delays[1] < delays[2]
    step = g.hosts[A].latency_ms
    assert delays[1] - delays[0] == pytest.approx(step, abs=1)
    waiter.cancel()


async def test_the_breaker_opens_fails_fast_probes_once_and_closes() -> None:
    g, clock = gate(breaker_failures=3, breaker_open_ms=1000)
    for _ in range(3):
        await g.enter(A)
        g.leave(A, 5, False)
    with pytest.raises(Retry) as fast:
        await g.enter(A)
    assert not isinstance(fast.value, Defer), "an open breaker's refusal counts"
    assert fast.value.delay_ms is not None and 1000 <= fast.value.delay_ms <= 1200
    await g.enter(B)  # another host's breaker is its own
    clock.advance(1000)
    await g.enter(A)  # the probe
    with pytest.raises(Defer):
        await g.enter(A)  # while it runs
    g.leave(A, 5, False)  # the probe failed: open again
    with pytest.raises(Retry):
        await g.enter(A)
    clock.advance(1000)
    await g.enter(A)
    g.leave(A, 5, True)  # the probe succeeded
    assert g.hosts[A].open_until_ms == 0
    await g.enter(A)
    await g.enter(A)


async def test_a_waiter_let_in_after_the_breaker_opened_is_refused_and_frees_its_slot() -> None:
    g, _ = gate(per_host_concurrency=1, breaker_failures=1, breaker_open_ms=1000)
    await g.enter(A)
    waiter = asyncio.create_task(g.enter(A))
    await asyncio.sleep(0)
    g.leave(A, 5, False)  # opens the breaker; the slot passes to the waiter
    with pytest.raises(Retry):
        await waiter
    assert g.hosts[A].in_flight == 0


async def test_a_429_neither_opens_nor_closes_the_breaker() -> None:
    g, _ = gate(breaker_failures=2)
    await g.enter(A)
    g.leave(A, 5, False)
    await g.enter(A)
    g.leave(A, 5, None)
    assert g.hosts[A].failures == 1
    await g.enter(A)
    g.leave(A, 5, False)
    assert g.hosts[A].open_until_ms > 0
