"""Riding out Redis outages: which errors are transient, backoff, and a log that speaks
once per change.

Every loop that talks to Redis keeps one `Outage`. On a failure it returns how
long to pause before the next try: 100 ms doubling to a cap of a few seconds,
with jitter, reset by the next success. *Transient* failures (connection
refused or reset, a timeout, a server still loading its data) are logged
once, as a WARNING when Redis is found unreachable (the second failure in a
row); then the part stays quiet but for a reminder every `REMIND_S` with the
count of failed tries, and logs one INFO when a call succeeds again. Any
other failure (a refused command, a bug) is logged as an ERROR each time, at
most once per pause.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

import redis.asyncio
from redis.exceptions import (
    AskError,
    AuthenticationError,
    AuthorizationError,
    BusyLoadingError,
    ClusterDownError,
    ClusterError,
    ExternalAuthProviderError,
    MasterDownError,
    MovedError,
    OutOfMemoryError,
    ReadOnlyError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from wheelq.core.retry import RetryPolicy

FIRST_PAUSE_S = 0.1
CAP_S = 2.0
REMIND_S = 30.0

_NOT_TRANSIENT = (AuthenticationError, AuthorizationError, ExternalAuthProviderError)
_BAD_CONFIG = (socket.gaierror, ssl.SSLCertVerificationError)
# A Redis Cluster moving a slot or failing over: redirects and retries redis-py gave up on
# (ClusterError "TTL exhausted"), a slot half moved (TRYAGAIN), no primary for a slot yet.
_CLUSTER_MOVING = (
    ClusterError,
    ClusterDownError,
    MasterDownError,
    MovedError,
    AskError,
    TryAgainError,
    SlotNotCoveredError,
)


def is_transient(exc: BaseException) -> bool:
    """True when `exc` says Redis is not there yet or not now (down, restarting, loading,
    unreachable, too slow, a cluster moving a slot or failing over), so the same call may
    work later; False for wrong credentials, a certificate or host name that will not work,
    and every refused command."""
    return is_unreachable(exc) or isinstance(exc, _CLUSTER_MOVING)


def is_unreachable(exc: BaseException) -> bool:
    """The connection-level part of `is_transient`: refused, reset, timed out, loading."""
    if isinstance(exc, _NOT_TRANSIENT):
        return False
    if isinstance(exc, BusyLoadingError):
        return True
    if not isinstance(exc, RedisConnectionError | RedisTimeoutError | OSError):
        return False  # TimeoutError and ConnectionError (builtins) are OSErrors
    for err in (exc, exc.__cause__, exc.__context__):
        if isinstance(err, _BAD_CONFIG):
            return False
        if isinstance(err, ssl.SSLError) and not isinstance(
            err, ssl.SSLEOFError | ssl.SSLZeroReturnError
        ):
            return False  # a TLS handshake that cannot work (wrong port, protocol)
    return True


_REFUSALS: tuple[tuple[type[Exception], str], ...] = (
    (ReadOnlyError, "readonly"),
    (OutOfMemoryError, "oom"),
    (MasterDownError, "masterdown"),  # before ClusterDownError, its base class
    (ClusterDownError, "clusterdown"),
    (TryAgainError, "tryagain"),
)


def unavailable_reason(exc: BaseException) -> str | None:
    """Why `exc` says Redis cannot take calls now, or None when it says something else.

    ``"loading"`` and ``"unreachable"`` for the transient failures of `is_transient`; and
    the refusals of a server that answers but takes no writes now: ``"readonly"`` (a
    replica), ``"oom"`` (over ``maxmemory`` with ``noeviction``), ``"masterdown"``,
    ``"clusterdown"`` and ``"tryagain"``. A refused command was not run.
    """
    if isinstance(exc, BusyLoadingError):
        return "loading"
    if is_unreachable(exc):
        return "unreachable"
    for kind, reason in _REFUSALS:
        if isinstance(exc, kind):
            return reason
    if isinstance(exc, _CLUSTER_MOVING):  # redirects redis-py gave up on: a slot moving
        return "tryagain"
    return None


class Backoff:
    """Pauses between tries: `first_s` doubling to `cap_s`, each shortened by up to half
    at random so many clients do not retry in step (the jobs' `RetryPolicy`, in seconds)."""

    def __init__(self, first_s: float = FIRST_PAUSE_S, cap_s: float = CAP_S) -> None:
        self.first_s = first_s
        self.cap_s = cap_s
        self._policy = RetryPolicy(
            base_ms=max(1, round(first_s * 1000)), max_ms=round(cap_s * 1000), jitter_pct=50
        )
        self.failures = 0

    def next_s(self) -> float:
        """The pause after one more failure."""
        self.failures += 1
        return self._policy.backoff_ms(self.failures, random.random()) / 1000

    def reset(self) -> None:
        self.failures = 0


class Outage:
    """One part's view of Redis: pauses with backoff, logs once per state change.

    A single failed call that the next try gets through (a stale pooled connection
    after a restart, one dropped connection) is only logged at DEBUG; two transient
    failures in a row are an outage.

    Args:
        log: The part's logger.
        part: How the part is named in log lines ("lease keeper").
        cap_s: Longest pause between tries.
        clock: Seconds, monotonic (tests pass a fake).
    """

    def __init__(
        self,
        log: logging.Logger,
        part: str,
        *,
        cap_s: float = CAP_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = log
        self.part = part
        self._backoff = Backoff(cap_s=cap_s)
        self._clock = clock
        self._since = 0.0
        self._reminded: float | None = None
        """When the outage was last logged; None: not logged (no outage, or a blip)."""
        self.failures = 0
        """Failed tries since Redis was last reached."""

    def failed(self, exc: BaseException, at_least_s: float = 0.0) -> float:
        """Note a failed try; returns how long to pause (at least `at_least_s`)."""
        self.failures += 1
        now = self._clock()
        if self.failures == 1:
            self._since = now
        if not is_transient(exc):
            self._log.error("%s: %s: %s", self.part, type(exc).__name__, exc)
        elif self.failures == 1:
            self._log.debug("%s: a call to redis failed (%s); trying again", self.part, exc)
        elif self._reminded is None:
            self._reminded = now
            self._log.warning(
                "%s: redis unreachable (%s); retrying with backoff, quiet until it is back",
                self.part,
                exc,
            )
        elif now - self._reminded >= REMIND_S:
            self._reminded = now
            self._log.warning(
                "%s: redis still unreachable after %.0f s (%d failed tries; last: %s)",
                self.part,
                now - self._since,
                self.failures,
                exc,
            )
        return max(at_least_s, self._backoff.next_s())

    def ok(self) -> None:
        """Note a successful call: ends an outage (one INFO line) and resets the backoff."""
        if self.failures:
            if self._reminded is not None:
                self._log.info(
                    "%s: redis reachable again after %.1f s (%d failed tries)",
                    self.part,
                    self._clock() - self._since,
                    self.failures,
                )
                self._reminded = None
            self.failures = 0
            self._backoff.reset()


def address(connection: redis.asyncio.Redis) -> str:
    """``host:port`` (or the socket path) a client connects to, for log lines; for a
    cluster client, the node it started from."""
    pool = getattr(connection, "connection_pool", None)
    if pool is None:
        startup = connection.nodes_manager.startup_nodes  # type: ignore[attr-defined]
        return ", ".join(startup) or "a redis cluster"
    kwargs = pool.connection_kwargs
    if "path" in kwargs:
        return str(kwargs["path"])
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


async def wait_for_either(
    future: asyncio.Future[Any], event: asyncio.Event, timeout_s: float | None
) -> None:
    """Wait until `future` is done, `event` is set, or `timeout_s` (None: no limit) passed."""
    if event.is_set():
        return
    woken = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({future, woken}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        woken.cancel()
