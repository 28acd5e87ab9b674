"""Living with an absent Redis (docs/architecture.md, "Service lifecycle", invariant 16)."""

from __future__ import annotations

import asyncio
import errno
import logging
import random
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

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
    MaxConnectionsError,
    MovedError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from wheelq.core.retry import RetryPolicy
from wheelq.errors import RedisUnavailableError, UnsupportedServerError
from wheelq.store import server
from wheelq.store.executor import AsyncExecutor

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
    """True when the same call may work later: Redis down, slow, loading, busy running a
    script, refusing writes (out of memory, a replica, its primary down) or moving a slot;
    what `unavailable_reason` names. Every part waits these out alike, a role's start too."""
    return unavailable_reason(exc) is not None


def is_unreachable(exc: BaseException) -> bool:
    """The connection-level part of `is_transient`: refused, reset, timed out, loading.

    Only a connection's failure counts: an `OSError` of a file (a script or template gone
    from disk) or of anything else that is not a socket is a fault of this process, not an
    outage, and waiting for Redis would never end it.
    """
    if isinstance(exc, (*_NOT_TRANSIENT, MaxConnectionsError)):
        return False  # every connection of a node in use: this process's, nothing was sent
    if isinstance(exc, BusyLoadingError):
        return True
    if not _connection_error(exc):
        return False
    for err in (exc, exc.__cause__, exc.__context__):
        if isinstance(err, _BAD_CONFIG):
            return False
        if isinstance(err, ssl.SSLError) and not isinstance(
            err, ssl.SSLEOFError | ssl.SSLZeroReturnError
        ):
            return False  # a TLS handshake that cannot work (wrong port, protocol)
    return True


_NETWORK_ERRNOS = frozenset(
    {
        errno.ECONNREFUSED,
        errno.ECONNRESET,
        errno.ECONNABORTED,
        errno.EPIPE,
        errno.ETIMEDOUT,
        errno.ENOTCONN,
        errno.ENETUNREACH,
        errno.ENETDOWN,
        errno.ENETRESET,
        errno.EHOSTUNREACH,
        errno.EHOSTDOWN,
        errno.ESHUTDOWN,
        errno.EADDRNOTAVAIL,
    }
)
"""The errnos of an `OSError` that a socket raised (redis-py wraps most; a few get through)."""


def _connection_error(exc: BaseException) -> bool:
    """redis-py's connection and timeout errors, or an `OSError` a socket raised."""
    if isinstance(exc, RedisConnectionError | RedisTimeoutError | ConnectionError | TimeoutError):
        return True  # the builtins: ConnectionRefusedError, BrokenPipeError, socket timeouts
    if isinstance(exc, ssl.SSLError):
        return True  # judged with its causes by the caller
    return isinstance(exc, OSError) and exc.errno in _NETWORK_ERRNOS


_REFUSALS: tuple[tuple[type[Exception], str], ...] = (
    (ReadOnlyError, "readonly"),  # READONLY: a replica (a primary demoted by a failover)
    (OutOfMemoryError, "oom"),  # OOM: over maxmemory with nothing to evict
    (MasterDownError, "masterdown"),  # a replica cut from its primary; before ClusterDownError
    (ClusterDownError, "clusterdown"),
    (TryAgainError, "tryagain"),
)
BUSY = "BUSY "
"""How a reply starts while the server runs a script or function past its
``busy-reply-threshold`` (redis-py has no class for it: a plain `ResponseError`; not BUSYKEY
nor BUSYGROUP, which are answers)."""


def unavailable_reason(exc: BaseException) -> str | None:
    """Why `exc` says Redis cannot take calls now, or None: the one table of what is waited
    out (`is_transient`) and what a producer raises as `RedisUnavailableError`:

    ``"unreachable"`` (refused, reset, timed out), ``"connections"`` (every connection
    the client may open to a node in use: not sent), ``"loading"`` (LOADING), ``"busy"``
    (BUSY), ``"readonly"`` (READONLY), ``"oom"`` (OOM), ``"masterdown"`` (MASTERDOWN),
    ``"clusterdown"`` (CLUSTERDOWN), ``"tryagain"`` (TRYAGAIN, or a redirect redis-py gave
    up on: a slot moving)."""
    if isinstance(exc, BusyLoadingError):
        return "loading"
    if isinstance(exc, MaxConnectionsError):
        return "connections"
    if is_unreachable(exc):
        return "unreachable"
    for kind, reason in _REFUSALS:
        if isinstance(exc, kind):
            return reason
    if isinstance(exc, _CLUSTER_MOVING):
        return "tryagain"
    if isinstance(exc, ResponseError) and str(exc).startswith(BUSY):
        return "busy"
    return None


def unavailable_text(exc: BaseException) -> str:
    """A failure waiting may fix, for a log line: ``"unreachable (Error 111 ...)"``, or
    ``"unavailable (oom: command not allowed ...)"`` for a refusal."""
    reason = unavailable_reason(exc)
    if reason is None or reason == "unreachable":
        return f"unreachable ({exc})"
    return f"unavailable ({reason}: {exc})"


class Backoff:
    """Jittered pauses between tries, `first_s` doubling to `cap_s`."""

    def __init__(self, first_s: float = FIRST_PAUSE_S, cap_s: float = CAP_S) -> None:
        self.first_s = first_s
        self.cap_s = cap_s
        self._policy = RetryPolicy(
            base_ms=max(1, round(first_s * 1000)), max_ms=round(cap_s * 1000), jitter_pct=50
        )
        self.failures = 0

    def next_s(self) -> float:
        self.failures += 1
        return self._policy.backoff_ms(self.failures, random.random()) / 1000

    def reset(self) -> None:
        self.failures = 0


class Outage:
    """One part's view of Redis: backoff, and one log line per state change."""

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
        self.failures = 0  # Failed tries since Redis was last reached.

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
                "%s: redis %s; retrying with backoff, quiet until it is back",
                self.part,
                unavailable_text(exc),
            )
        elif now - self._reminded >= REMIND_S:
            self._reminded = now
            self._log.warning(
                "%s: redis still %s after %.0f s (%d failed tries; last: %s)",
                self.part,
                "unreachable" if unavailable_reason(exc) == "unreachable" else "unavailable",
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
    """``host:port`` (or socket path, or a cluster's startup node) of a client, for logs."""
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


log = logging.getLogger(__name__)

T = TypeVar("T")

MIN_REDIS = (7, 0)  # Its scripts use SPUBLISH (Redis 7.0, Valkey 7.2).

MIN_PING_WAIT_S = 1.0  # Each start PING may take this long, whatever is left.
CUT_S = 0.25  # A stop's budget after a second signal: a last chance for calls that answer at once.
CLOSE_S = 1.0  # Longest wait for a client's connections to close at the end of a stop.


ABORT_GRACE_S = 3.0  # how long an aborted start lets its ping end before cancelling it


class StartGate:
    """A role's start: PING until Redis answers, resolve the executor, check the version, then
    the role's own `start()`. Redis refusing any of it for now (`is_transient`: unreachable,
    LOADING, BUSY, OOM, READONLY, MASTERDOWN, ...) is waited out alike, with backoff, within
    ``start_timeout_ms``; a role's `start()` must therefore leave nothing running when it
    raises, for it runs again."""

    def __init__(self, executor: AsyncExecutor, timeout_ms: int, log: logging.Logger):
        self._executor = executor
        self._timeout_s = timeout_ms / 1000
        self._log = log
        self._aborted = asyncio.Event()
        self._ready: asyncio.Event | None = None
        self.started = False
        """True from `run()` until the start fails, is aborted, or the owner stops."""
        self.up = False
        """True from the end of a start that worked until `abort()` (a stop begins)."""
        self.stopped = asyncio.Event()
        self.waiting: str | None = None
        """While the start waits for Redis: why (`unavailable_reason`); else None."""

    async def run(self, start: Callable[[], Awaitable[None]]) -> None:
        """Wait for Redis, then `start()`; nothing if started already or aborted."""
        if self.started:
            return
        self.started = True
        self.stopped = asyncio.Event()
        self._ready = asyncio.Event()
        self._aborted.clear()
        try:
            if await self._start(start):
                self.up = not self._aborted.is_set()
                return
            self.started = False
            self.stopped.set()
        except BaseException:
            self.started = False
            self.stopped.set()
            raise
        finally:
            self.waiting = None
            self._ready.set()

    async def _check_version(self) -> None:
        (version,) = await self._executor.run([server.server_version()])
        if version < MIN_REDIS:
            where = address(self._executor.client)
            raise UnsupportedServerError(
                f"the server at {where} is Redis {'.'.join(map(str, version))}; wheelq needs "
                f"Redis >= {'.'.join(map(str, MIN_REDIS))} or Valkey >= 7.2 (sharded pub/sub)"
            )

    async def abort(self) -> bool:
        """End a wait for Redis at once, wait for the start to end; returns `started`."""
        self.up = False
        self._aborted.set()
        if self._ready is not None:
            await self._ready.wait()
        return self.started

    async def _start(self, start: Callable[[], Awaitable[None]]) -> bool:
        """Wait for Redis, then start; a start refused for now is tried again. False:
        aborted first."""
        wait = _Wait(self._timeout_s, address(self._executor.client))
        while True:
            if not await self._wait(wait):
                return False
            try:
                await self._executor.resolve()
                await self._check_version()
                await start()
            except Exception as exc:
                if not is_transient(exc):
                    raise
                if not await self._pause(wait, exc):
                    return False
                continue
            if wait.refused:
                self._log.info("redis at %s took the start after %.1f s", wait.where, wait.took_s())
            return True

    async def _wait(self, wait: _Wait) -> bool:
        """PING until Redis answers; False: aborted first."""
        loop = asyncio.get_running_loop()
        while True:
            ping: asyncio.Future[Any] = asyncio.ensure_future(self._executor.run([server.ping()]))
            timeout_s = max(MIN_PING_WAIT_S, wait.deadline - loop.time())
            await wait_for_either(ping, self._aborted, timeout_s)
            if not ping.done() or self._aborted.is_set():
                if not ping.done() and self._aborted.is_set():
                    # A connect cancelled half-way can leave a connection its client no
                    # longer knows of (redis-py's cluster client, mid-initialize), which then
                    # outlives the role: give the ping a moment to end on its own first.
                    await asyncio.wait({ping}, timeout=ABORT_GRACE_S)
                ping.cancel()
                await asyncio.gather(ping, return_exceptions=True)
                if self._aborted.is_set():
                    return False
            if not ping.cancelled() and ping.exception() is None:
                if wait.unreached:
                    wait.unreached = False
                    self._log.info("redis at %s reachable after %.1f s", wait.where, wait.took_s())
                return True
            exc = _failure(ping)
            if not is_transient(exc):
                raise exc
            if not await self._pause(wait, exc):
                return False

    async def _pause(self, wait: _Wait, exc: BaseException) -> bool:
        """After a failure that waiting may fix: RedisUnavailableError when no time is left,
        one WARNING when the wait begins (or its reason changes), then a pause; False:
        aborted during it."""
        loop = asyncio.get_running_loop()
        reason = unavailable_reason(exc) or "unreachable"
        left_s = wait.deadline - loop.time()
        if left_s <= 0:
            if reason == "unreachable":
                why = f"not reachable within start_timeout_ms={self._timeout_s * 1000:.0f}"
            else:
                why = f"unavailable for start_timeout_ms={self._timeout_s * 1000:.0f}"
            raise RedisUnavailableError(f"redis at {wait.where} {why} ({exc})", reason) from exc
        if self.waiting != reason:
            shown = "not reachable" if reason == "unreachable" else "unavailable"
            detail = exc if reason == "unreachable" else f"{reason}: {exc}"
            self._log.warning(
                "redis at %s %s (%s), retrying for up to %g s",
                wait.where,
                shown,
                detail,
                self._timeout_s,
            )
        self.waiting = reason
        wait.unreached = wait.unreached or reason == "unreachable"
        wait.refused = wait.refused or reason != "unreachable"
        never = loop.create_future()  # the pause: only the time or abort() ends it
        await wait_for_either(never, self._aborted, min(left_s, wait.backoff.next_s()))
        return not self._aborted.is_set()


class _Wait:
    """One start's wait for Redis: its deadline, backoff and what it has logged."""

    def __init__(self, timeout_s: float, where: str) -> None:
        self.began = asyncio.get_running_loop().time()
        self.deadline = self.began + timeout_s
        self.backoff = Backoff()
        self.where = where
        self.unreached = False
        """A PING failed since the last one answered (its recovery is logged)."""
        self.refused = False
        """Redis refused the start for now at least once (the start's end is logged)."""

    def took_s(self) -> float:
        return asyncio.get_running_loop().time() - self.began


class StopBudget:
    """How long a stop may still wait for Redis (``stop_timeout_ms``), shared by its steps."""

    def __init__(self, seconds: float) -> None:
        self._left_s = max(0.0, seconds)
        self._end: float | None = None
        self._changed = asyncio.Event()
        self._cut = False
        self.problem: str | None = None
        self.undone: list[str] = []

    def cut(self, seconds: float = CUT_S) -> None:
        """Leave at most `seconds` for the rest of the stop (a wait under way included)."""
        self._left_s = min(self._left_s, seconds)
        if self._end is not None:
            self._end = min(self._end, asyncio.get_running_loop().time() + seconds)
        self._cut = True
        self._changed.set()

    async def wait(self, future: asyncio.Future[Any]) -> bool:
        """Wait for `future` within the budget; True when it is done (`problem` set if not)."""
        loop = asyncio.get_running_loop()
        self._end = loop.time() + self._left_s
        try:
            while not future.done() and (left_s := self._end - loop.time()) > 0:
                self._changed.clear()
                await wait_for_either(future, self._changed, left_s)
        finally:
            self._left_s = max(0.0, self._end - loop.time())
            self._end = None
        if not future.done() and self.problem is None:
            self.problem = (
                "cut short by a second signal"
                if self._cut
                else "no answer from redis within stop_timeout_ms"
            )
        return future.done()

    async def attempt(self, what: str, step: Callable[[], Awaitable[T]], default: T) -> T:
        """Run `step()` within the budget; else note `what` in `undone` and return `default`."""
        if self.problem is not None:
            self.undone.append(what)
            return default
        task = asyncio.ensure_future(step())
        try:
            done = await self.wait(task)
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if done and task.exception() is None:
            return task.result()
        self.undone.append(what)
        exc = task.exception() if done else None
        if exc is not None:
            if is_transient(exc):
                self.problem = f"redis {unavailable_text(exc)}"
            else:
                log.error("could not %s: %s: %s", what, type(exc).__name__, exc)
        return default

    def log_end(self, logger: logging.Logger, stopped: str, consequence: str) -> None:
        """INFO `stopped`, or a WARNING with what was left undone and its `consequence`."""
        if self.undone:
            logger.warning("%s; left undone: %s; %s", stopped, self.summary(), consequence)
        else:
            logger.info("%s", stopped)

    def summary(self) -> str:
        """``"release 4 leases, ... (why)"``, or ``""`` when nothing was left undone."""
        if not self.undone:
            return ""
        return f"{', '.join(self.undone)} ({self.problem or 'refused by redis'})"


async def close(connection: redis.asyncio.Redis | AsyncExecutor) -> None:
    """Close a client's connections, waiting at most `CLOSE_S`; a close cut short (or
    failed) closes an executor's sockets at once instead, so none is left open."""
    try:
        await asyncio.wait_for(connection.aclose(), CLOSE_S)
    except (TimeoutError, RedisError, OSError) as exc:
        log.warning("closing the redis connections did not finish: %r", exc)
        if isinstance(connection, AsyncExecutor):
            connection.abort()


def _failure(ping: asyncio.Future[Any]) -> BaseException:
    if ping.cancelled():  # it took longer than the time that was left
        return TimeoutError("no answer to PING in time")
    exc = ping.exception()
    assert exc is not None
    return exc
