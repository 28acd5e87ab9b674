"""The circuit breaker (docs/architecture.md, "The producer spool and breaker")."""

from __future__ import annotations

import threading
from typing import Literal

from wheelq.core.clock import Clock
from wheelq.errors import RedisUnavailableError
from wheelq.runtime.outage import is_unreachable

Verdict = Literal["closed", "probe", "open", "probing"]
"""`check()`: go (closed), go as the probe, refused (open), refused (a probe is out)."""


class Breaker:
    """Opens after `failures_to_open` failures for `open_ms` (0: never), then one probe goes."""

    def __init__(self, open_ms: int, clock: Clock, failures_to_open: int = 1) -> None:
        self.open_ms = open_ms
        self._clock = clock
        self._failures_to_open = failures_to_open
        self._lock = threading.Lock()
        self.open_until_ms: int | None = None
        """None: closed; else open until then, half-open after."""
        self.probing = False
        self.failures = 0  # Failures in a row.
        self._last: BaseException | None = None

    @property
    def state(self) -> str:
        """``"closed"``, ``"open"`` or ``"half_open"``."""
        with self._lock:
            if self.open_until_ms is None:
                return "closed"
            return "open" if self._clock.now_ms() < self.open_until_ms else "half_open"

    def check(self) -> Verdict:
        """Whether a call may go; ``"probe"``: it goes as the half-open probe (record it)."""
        if self.open_until_ms is None:  # closed: the common case, no lock (a stale read lets
            return "closed"  # one call through as the breaker opens, as a probe would be)
        with self._lock:
            if self.open_until_ms is None:
                return "closed"
            if self.probing:
                return "probing"
            if self._clock.now_ms() < self.open_until_ms:
                return "open"
            self.probing = True
            return "probe"

    def record(self, probe: bool, ok: bool | None, cause: BaseException | None = None) -> None:
        """How an admitted call went: True closes, False counts a failure, None proves nothing."""
        if ok and not probe and self.open_until_ms is None and not self.failures:
            return  # closed and staying so: the common case, no lock
        with self._lock:
            if probe:
                self.probing = False
            if ok:
                self.failures, self.open_until_ms = 0, None
            elif ok is False:
                self.failures += 1
                if self.open_ms and (probe or self.failures >= self._failures_to_open):
                    self.open_until_ms = self._clock.now_ms() + self.open_ms
                    self._last = cause

    def abandon(self, probe: bool) -> None:
        """An admitted call ended without an outcome (cancelled): the next call probes."""
        if probe:
            self.record(True, None)

    def remaining_ms(self) -> int:
        """Ms until the open period ends (0: closed or half-open)."""
        until = self.open_until_ms
        return 0 if until is None else max(0, until - self._clock.now_ms())

    def admit(self) -> bool:
        """`check()` for a Redis call; True when it is the probe."""
        verdict = self.check()
        if verdict in ("closed", "probe"):
            return verdict == "probe"
        left = self.remaining_ms()
        wait = f"{left} ms more" if left else "a probe"
        last = f"{type(self._last).__name__}: {self._last}"
        refused = RedisUnavailableError(
            f"redis unreachable: failing fast for {wait} (breaker_open_ms="
            f"{self.open_ms}) after {last:.200}; not sent",
            "breaker_open",
        )
        refused.__cause__ = self._last
        raise refused

    def report(self, probe: bool, failure: BaseException | None) -> None:
        """A connection-level `failure` opens the breaker; any other outcome closes it."""
        self.record(probe, failure is None or not is_unreachable(failure), failure)
