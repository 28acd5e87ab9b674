"""Per-host flow control for callbacks, so one dead or slow endpoint does not starve the
others: a concurrency cap, a wait budget past which jobs are deferred (spread out at the
host's pace), and a circuit breaker per origin (docs/architecture.md).
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from dataclasses import dataclass, field

from wheelq.core.clock import Clock
from wheelq.core.retry import Defer, Retry
from wheelq.core.settings import CallbackSettings
from wheelq.runtime.breaker import Breaker

LATENCY_WEIGHT = 0.2  # of the newest request in a host's mean answer time
FIRST_LATENCY_MS = 100.0  # a host's mean answer time before it has answered
PROBE_WAIT_MS = (50, 5000)  # a job waits twice the mean answer time for a probe, within these
WAIT_BUDGET_MS = 500  # a job waits for a slot the host should free within this
MAX_DEFER_MS = 3_600_000
MAX_HOSTS = 10_000  # idle hosts are forgotten past this many


@dataclass(slots=True)
class Host:
    """One origin's flow-control state."""

    breaker: Breaker
    in_flight: int = 0
    waiters: deque[asyncio.Future[None]] = field(default_factory=deque)
    latency_ms: float = FIRST_LATENCY_MS
    defer_tail_ms: float = 0.0  # when the last deferred job was told to come back

    @property
    def failures(self) -> int:
        return self.breaker.failures

    @property
    def open_until_ms(self) -> int:
        """When the open breaker lets a probe through (0: closed)."""
        return self.breaker.open_until_ms or 0

    @property
    def idle(self) -> bool:
        return not (self.in_flight or self.waiters or self.failures or self.open_until_ms)


class HostGate:
    """The per-origin caps and breakers of one deliverer."""

    def __init__(self, settings: CallbackSettings, clock: Clock) -> None:
        self.settings = settings
        self._clock = clock
        self.hosts: dict[str, Host] = {}
        self.deferred = 0
        self.refused_open = 0

    def host(self, origin: str) -> Host:
        found = self.hosts.get(origin)
        if found is None:
            if len(self.hosts) >= MAX_HOSTS:
                for name in [n for n, h in self.hosts.items() if h.idle]:
                    del self.hosts[name]
            s = self.settings
            breaker = Breaker(s.breaker_open_ms, self._clock, s.breaker_failures)
            found = self.hosts[origin] = Host(breaker)
        return found

    async def enter(self, origin: str) -> None:
        """Take a slot of `origin`; raises `Retry` (breaker open) or `Defer` (no room)."""
        h = self.host(origin)
        self._check_breaker(h, origin)
        cap = self.settings.per_host_concurrency
        if h.in_flight < cap and not h.waiters:
            h.in_flight += 1
            return
        if len(h.waiters) >= self._max_waiters(h):
            self.deferred += 1
            defer_ms = self._defer_ms(h, self._clock.now_ms())
            raise Defer(defer_ms / 1000, f"{origin}: {cap} callbacks in flight")
        waiter = asyncio.get_running_loop().create_future()
        h.waiters.append(waiter)
        try:
            await waiter  # `leave` hands its slot over: in_flight stays counted
        except BaseException:
            if waiter in h.waiters:
                h.waiters.remove(waiter)
            elif waiter.done() and not waiter.cancelled():
                self._release(h)  # handed a slot just as it was cancelled
            raise
        try:  # the breaker may have opened while it waited
            self._check_breaker(h, origin)
        except BaseException:
            self._release(h)
            raise

    def _check_breaker(self, h: Host, origin: str) -> None:
        """Raise what an open breaker says, or let the probe through."""
        verdict = h.breaker.check()
        if verdict == "probing":
            low, high = PROBE_WAIT_MS
            wait_ms = min(max(2 * h.latency_ms, low), high)
            self.deferred += 1
            raise Defer(_jittered(wait_ms) / 1000, f"{origin}: waiting for the probe")
        if verdict == "open":
            self.refused_open += 1
            raise Retry(
                _jittered(h.breaker.remaining_ms()) / 1000,
                f"{origin}: circuit open after {h.failures} failures in a row",
            )

    def leave(self, origin: str, took_ms: float, ok: bool | None) -> None:
        """Give the slot back; `ok` None: neither success nor failure (a 429)."""
        h = self.host(origin)
        h.latency_ms += LATENCY_WEIGHT * (max(took_ms, 0.0) - h.latency_ms)
        h.breaker.record(h.breaker.probing, ok)  # None (a 429): the next job probes
        self._release(h)

    def _release(self, h: Host) -> None:
        while h.waiters:
            waiter = h.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot passes to it
                return
        h.in_flight -= 1

    def _max_waiters(self, h: Host) -> int:
        """How many may wait for `h`: what it clears within `WAIT_BUDGET_MS`, at least its cap."""
        cap = self.settings.per_host_concurrency
        return max(cap, int(cap * WAIT_BUDGET_MS / max(h.latency_ms, 0.1)))

    def _defer_ms(self, h: Host, now: float) -> float:
        """When a job deferred now should come back, behind those deferred before it."""
        step = h.latency_ms / self.settings.per_host_concurrency
        start = max(now + len(h.waiters) * step, h.defer_tail_ms)
        h.defer_tail_ms = start + step
        return min(max(h.defer_tail_ms - now, 1.0), MAX_DEFER_MS)


def _jittered(ms: float) -> float:
    """`ms` plus up to a fifth more, so jobs sent back together do not return together."""
    return max(ms, 1.0) * (1 + random.random() / 5)
