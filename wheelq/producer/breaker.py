"""The producer's circuit breaker: after a call fails for want of a connection, calls fail
at once for ``breaker_open_ms`` instead of each waiting out its own connect timeout.

```
 closed ── a call fails: refused, reset, timed out, loading ──▶ open (breaker_open_ms)
   ▲                                                              │ then
   │                          the probe fails: open again ◀──── half-open: the next call
   └──────────────── the probe succeeds (any reply from Redis) ◀──┘ goes through (the probe);
                                                                   others fail at once
```

An open breaker fails a call with `RedisUnavailableError` (reason ``"breaker_open"``)
before anything is sent; with a spool, an enqueue goes to the spool instead, and the
spool's drain is then what tries Redis. A reply that is an error (READONLY, OOM, a
duplicate job) still proves Redis reachable: only connection-level failures open it.

`guarded` puts the breaker around an operation (a sans-I/O generator): it asks the breaker
before each round trip, reports how the round went, and throws what a failed round raised
into the operation as `RedisUnavailableError` when it says Redis cannot take calls now
(`wheelq.runtime.outage.unavailable_reason`), so the operation (the spool's router) can
catch it. Thread-safe: the sync client's threads share one breaker.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, TypeVar

from wheelq.core.clock import Clock
from wheelq.errors import RedisUnavailableError
from wheelq.runtime.outage import is_unreachable, unavailable_reason

if TYPE_CHECKING:
    from wheelq.producer.operations import Op

T = TypeVar("T")


class Breaker:
    """Closed, open or half-open; see the module docstring.

    Args:
        open_ms: How long it stays open (``ClientSettings.breaker_open_ms``); 0: never.
        clock: Ms, monotonic (tests pass a `ManualClock`).
    """

    def __init__(self, open_ms: int, clock: Clock) -> None:
        self.open_ms = open_ms
        self._clock = clock
        self._lock = threading.Lock()
        self._open_until: int | None = None
        """None: closed; else open until then, half-open after."""
        self._probing = False
        self._last: BaseException | None = None

    @property
    def state(self) -> str:
        """``"closed"``, ``"open"`` or ``"half_open"``."""
        with self._lock:
            if self._open_until is None:
                return "closed"
            return "open" if self._clock.now_ms() < self._open_until else "half_open"

    def admit(self) -> bool:
        """Let a call through; True when it is the half-open probe (report it).

        Raises:
            RedisUnavailableError: Open, or half-open with the probe still out (reason
                ``"breaker_open"``); the call must not be sent.
        """
        if self._open_until is None:  # closed: the common case, no lock (a stale read lets
            return False  # one call through as the breaker opens, as a probe would be)
        with self._lock:
            if self._open_until is None:
                return False
            now = self._clock.now_ms()
            if now >= self._open_until and not self._probing:
                self._probing = True
                return True
            wait = f"{self._open_until - now} ms more" if now < self._open_until else "a probe"
            last = f"{type(self._last).__name__}: {self._last}"
            refused = RedisUnavailableError(
                f"redis unreachable: failing fast for {wait} (breaker_open_ms="
                f"{self.open_ms}) after {last:.200}; not sent",
                "breaker_open",
            )
            refused.__cause__ = self._last
            raise refused

    def report(self, probe: bool, failure: BaseException | None) -> None:
        """How an admitted call went: a connection-level `failure` opens the breaker, any
        other outcome (a reply, even an error one) closes it."""
        if failure is None and not probe and self._open_until is None:
            return  # closed and staying so: the common case, no lock
        with self._lock:
            if probe:
                self._probing = False
            if failure is not None and is_unreachable(failure):
                if self.open_ms:
                    self._open_until = self._clock.now_ms() + self.open_ms
                    self._last = failure
            else:
                self._open_until = None

    def abandon(self, probe: bool) -> None:
        """An admitted call ended without an outcome (cancelled): the next call probes."""
        if probe:
            with self._lock:
                self._probing = False


def as_unavailable(exc: Exception) -> Exception:
    """`exc` as `RedisUnavailableError` (with `exc` as its cause) when it says Redis cannot
    take calls now; else `exc` itself."""
    reason = unavailable_reason(exc)
    if reason is None or isinstance(exc, RedisUnavailableError):
        return exc
    unavailable = RedisUnavailableError(f"redis {reason}: {exc}", reason)
    unavailable.__cause__ = exc
    return unavailable


def guarded(breaker: Breaker, op: Op[T]) -> Op[T]:
    """`op` with `breaker` around each of its round trips (see the module docstring)."""
    try:
        calls = next(op)
        while True:
            try:
                probe = breaker.admit()
            except RedisUnavailableError as refused:
                calls = op.throw(refused)
                continue
            try:
                replies: Any = yield calls
            except GeneratorExit:
                breaker.abandon(probe)
                raise
            except Exception as exc:
                breaker.report(probe, exc)
                calls = op.throw(as_unavailable(exc))
                continue
            breaker.report(probe, None)
            calls = op.send(replies)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
