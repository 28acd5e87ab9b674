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

`StartGate` is `start()`'s version: PING with the same backoff until Redis
answers, `start_timeout_ms` runs out, or `stop()` aborts the wait.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio
from redis.exceptions import (
    AuthenticationError,
    AuthorizationError,
    BusyLoadingError,
    ExternalAuthProviderError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from wheelq.errors import RedisUnavailableError
from wheelq.store import ops
from wheelq.store.calls import AsyncExecutor

FIRST_PAUSE_S = 0.1
CAP_S = 2.0
REMIND_S = 30.0
MIN_PING_WAIT_S = 1.0
"""start(): each PING may take this long even when less of start_timeout_ms is left."""

_NOT_TRANSIENT = (AuthenticationError, AuthorizationError, ExternalAuthProviderError)
_BAD_CONFIG = (socket.gaierror, ssl.SSLCertVerificationError)


def is_transient(exc: BaseException) -> bool:
    """True when `exc` says Redis is not there yet or not now (down, restarting, loading,
    unreachable, too slow), so the same call may work later; False for wrong credentials,
    a certificate or host name that will not work, and every refused command."""
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


class Backoff:
    """Pauses between tries: `first_s` doubling to `cap_s`, each shortened by up to half
    at random so many clients do not retry in step."""

    def __init__(self, first_s: float = FIRST_PAUSE_S, cap_s: float = CAP_S) -> None:
        self.first_s = first_s
        self.cap_s = cap_s
        self.failures = 0

    def next_s(self) -> float:
        """The pause after one more failure."""
        full = min(self.cap_s, self.first_s * 2.0 ** min(self.failures, 30))
        self.failures += 1
        return full * (0.5 + random.random() / 2)

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
    """``host:port`` (or the socket path) a client connects to, for log lines."""
    kwargs = connection.connection_pool.connection_kwargs
    if "path" in kwargs:
        return str(kwargs["path"])
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


class StartGate:
    """What `start()` and `stop()` of a scheduler node or a worker share.

    `run(start)` waits for Redis (PING with backoff, logging once when it begins to
    wait and once when it got through), then runs `start`. Only transient errors
    (refused, reset, timed out, still loading) are waited out, for up to
    ``start_timeout_ms``; any other fails at once. `abort()`, from `stop()`,
    ends a wait under way at once and waits for a start under way to end. `stopped` is
    set when the start failed or was aborted, and by the owner when it has stopped.

    Args:
        connection: The client whose server is waited for.
        timeout_ms: Longest wait (``start_timeout_ms``); 0: one try, failing at once.
        log: Where the two log lines go.
    """

    def __init__(self, connection: redis.asyncio.Redis, timeout_ms: int, log: logging.Logger):
        self._redis = connection
        self._executor = AsyncExecutor(connection)
        self._timeout_s = timeout_ms / 1000
        self._log = log
        self._aborted = asyncio.Event()
        self._ready: asyncio.Event | None = None
        self.started = False
        """True from `run()` on; back to False when the start fails or is aborted, and
        when the owner begins to stop."""
        self.stopped = asyncio.Event()

    async def run(self, start: Callable[[], Awaitable[None]]) -> None:
        """Wait for Redis, then `start()`; nothing if started already, and nothing more
        when `abort()` ends the wait.

        Raises:
            RedisUnavailableError: Only transient errors for ``start_timeout_ms``; the
                last one is its cause.
            redis.exceptions.RedisError: Any other error (wrong password, ...), at once.
        """
        if self.started:
            return
        self.started = True
        self.stopped = asyncio.Event()
        self._ready = asyncio.Event()
        self._aborted.clear()
        try:
            if await self._wait():
                await start()
                return
            self.started = False
            self.stopped.set()
        except BaseException:
            self.started = False
            self.stopped.set()
            raise
        finally:
            self._ready.set()

    async def abort(self) -> bool:
        """End a wait for Redis under way at once, and wait for the start to end; returns
        `started`."""
        self._aborted.set()
        if self._ready is not None:
            await self._ready.wait()
        return self.started

    async def _wait(self) -> bool:
        loop = asyncio.get_running_loop()
        began = loop.time()
        deadline = began + self._timeout_s
        backoff = Backoff()
        where = address(self._redis)
        waited = False
        while True:
            ping: asyncio.Future[Any] = asyncio.ensure_future(self._executor.run([ops.ping()]))
            timeout_s = max(MIN_PING_WAIT_S, deadline - loop.time())
            await wait_for_either(ping, self._aborted, timeout_s)
            if not ping.done() or self._aborted.is_set():
                ping.cancel()
                await asyncio.gather(ping, return_exceptions=True)
                if self._aborted.is_set():
                    return False
            if not ping.cancelled() and ping.exception() is None:
                if waited:
                    self._log.info("redis at %s reachable after %.1f s", where, loop.time() - began)
                return True
            exc = _failure(ping)
            if not is_transient(exc):
                raise exc
            left_s = deadline - loop.time()
            if left_s <= 0:
                raise RedisUnavailableError(
                    f"redis at {where} not reachable within start_timeout_ms="
                    f"{self._timeout_s * 1000:.0f} ({exc})"
                ) from exc
            if not waited:
                waited = True
                self._log.warning(
                    "redis at %s not reachable (%s), retrying for up to %g s",
                    where,
                    exc,
                    self._timeout_s,
                )
            never = loop.create_future()  # the pause: only the time or abort() ends it
            await wait_for_either(never, self._aborted, min(left_s, backoff.next_s()))
            if self._aborted.is_set():
                return False


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


def _failure(ping: asyncio.Future[Any]) -> BaseException:
    if ping.cancelled():  # it took longer than the time that was left
        return TimeoutError("no answer to PING in time")
    exc = ping.exception()
    assert exc is not None
    return exc
