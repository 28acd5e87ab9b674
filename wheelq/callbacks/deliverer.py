"""The deliverer: the handler that POSTs each due job to its callback URL.

It runs in a `wheelq.Worker` of group ``callbacks`` (`delivery_worker`), so retries,
dead letters, crash recovery and the job's history are the worker's. A request is JSON
``{"id", "topic", "payload", "due_ms", "attempt", "priority", "key"}`` (``key`` null for a
job without one) with the headers ``Wheelq-Id``,
``Wheelq-Topic``, ``Wheelq-Attempt`` and, with a signing secret, ``Wheelq-Signature``
(`wheelq.callbacks.sign`: the body only). The answer decides the job's fate:

- 2xx: delivered (the entry is acked); the job's result is ``{"status": <the status>,
  "body": <the answer's first 1 KiB as text>}`` (`result()`, ``GET .../result``);
- 5xx, 408, 429, a timeout or a connection error: retried with the worker's backoff, or
  after ``Retry-After`` when the answer has one (at most ``max_retry_after_ms``); dead-
  lettered after the job's last attempt;
- anything else (3xx: redirects are not followed; 4xx): dead-lettered at once, with the
  status and the start of the body;
- a private or loopback target without ``allow_private``: dead-lettered at once
  (`wheelq.callbacks.resolver`).

Per-host caps and breakers are `wheelq.callbacks.hosts.HostGate`'s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

import aiohttp
from yarl import URL

from wheelq.callbacks import HEADER, sign
from wheelq.callbacks.hosts import HostGate
from wheelq.callbacks.resolver import (
    ALLOW_HINT,
    PrivateTargetError,
    PublicOnlyResolver,
    private_target,
    public_socket,
)
from wheelq.core.callback import Callback
from wheelq.core.clock import Clock
from wheelq.core.histogram import Histogram
from wheelq.core.job import Job
from wheelq.core.payload import jsonable
from wheelq.core.retry import Fail, Retry
from wheelq.core.settings import CallbackSettings
from wheelq.runtime.clock import LocalClock, monotonic_ms, wall_ms
from wheelq.runtime.service import Lifecycle

EXCERPT_BYTES = 500
"""How much of a refusing answer's body goes into the dead letter."""
RESULT_BODY_BYTES = 1024
"""How much of an accepting answer's body goes into the job's result."""
USER_AGENT = "wheelq-deliver"


@dataclass(slots=True)
class DeliveryCounts:
    """What the deliverer's requests came to (plain ints; `wheelq.metrics` exports them)."""

    delivered: int = 0
    """Answered 2xx."""
    retried: int = 0
    """Failed in a way worth another attempt (5xx, 408, 429, timeouts, connection errors)."""
    refused: int = 0
    """Answered in a way no retry changes (3xx, 4xx) or refused as private."""
    skipped: int = 0
    """Jobs without a callback (acked without a request)."""


class Deliverer(Lifecycle):
    """POSTs due jobs to their callbacks (see the module docstring); a worker handler.

    Use it as an async context manager, or call `aclose`, to close its connections.

    Args:
        settings: `CallbackSettings`.
        signing_secret: The HMAC key of ``Wheelq-Signature`` ("" = requests unsigned).
        allow_private: Whether callbacks may target private, loopback and link-local
            addresses (off: SSRF protection).
        clock: Times the per-host breakers (the local monotonic clock by default).
    """

    def __init__(
        self,
        settings: CallbackSettings | None = None,
        *,
        signing_secret: str = "",
        allow_private: bool = False,
        clock: Clock | None = None,
    ) -> None:
        self.settings = settings or CallbackSettings()
        self.gate = HostGate(self.settings, clock or LocalClock())
        self.signing_secret = signing_secret
        self.allow_private = allow_private
        self.counts = DeliveryCounts()
        self.lateness = Histogram()
        """Due -> answered 2xx, ms (wall clock against the Redis clock's due time)."""
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=self.settings.concurrency,
                limit_per_host=self.settings.per_host_concurrency,
                resolver=None if self.allow_private else PublicOnlyResolver(),
                socket_factory=None if self.allow_private else public_socket,
                ttl_dns_cache=10,
            )
            self._session = aiohttp.ClientSession(
                connector=connector, headers={"User-Agent": USER_AGENT}, auto_decompress=False
            )
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    stop = aclose  # what ``async with`` ends with

    async def __call__(self, job: Job) -> dict[str, Any] | None:
        """Deliver `job`; returns the answer on a 2xx (the job's result: its status and its
        body's first 1 KiB as text), raises `Retry`, `Defer` (no room at the host) or `Fail`
        (refused for good, or a private target)."""
        callback = job.callback
        if callback is None:
            self.counts.skipped += 1
            return None
        try:
            url = URL(callback.url)  # parsed once: the host checked is the one connected to
        except ValueError as exc:
            self.counts.refused += 1
            raise Fail(
                f"callback {callback.url} cannot be read by the HTTP client: {exc}"
            ) from None
        why = "" if self.allow_private else private_target(url)
        if why:
            self.counts.refused += 1
            raise Fail(f"{why}; {ALLOW_HINT} it")
        try:
            payload = jsonable(job.payload, exact=True)  # the receiver gets it as it is, or not
        except ValueError as exc:
            self.counts.refused += 1
            raise Fail(str(exc)) from None
        body = json.dumps(
            {
                "id": job.id,
                "topic": job.topic,
                "payload": payload,
                "due_ms": job.due_ms,
                "attempt": job.attempt,
                "priority": job.priority,
                "key": job.key,
            },
            separators=(",", ":"),
            ensure_ascii=False,
        ).encode()
        headers = self._headers(job, callback, body)
        origin = _origin(url)
        await self.gate.enter(origin)
        started = monotonic_ms()
        ok: bool | None = None
        try:
            answer = await self._post(url, callback, body, headers)
            ok = True
            self.lateness.observe(wall_ms() - job.due_ms)
        except _BreakerFailure:
            ok = False
            raise
        finally:
            self.gate.leave(origin, monotonic_ms() - started, ok)
        return answer

    def _headers(self, job: Job, callback: Callback, body: bytes) -> dict[str, str]:
        headers = {
            **callback.headers,
            "Content-Type": "application/json",
            "Wheelq-Id": job.id,
            "Wheelq-Topic": job.topic,
            "Wheelq-Attempt": str(job.attempt),
        }
        if self.signing_secret:
            headers[HEADER] = sign(self.signing_secret, wall_ms(), body)
        return headers

    async def _post(
        self, url: URL, callback: Callback, body: bytes, headers: dict[str, str]
    ) -> dict[str, Any]:
        """One request to `url` (`callback`'s, parsed): its status and the start of its body
        on 2xx; otherwise raises what the job's fate is (a `_BreakerFailure` for what the
        host's breaker counts)."""
        timeout = aiohttp.ClientTimeout(total=callback.timeout_ms / 1000)
        try:
            async with self._client().post(
                url, data=body, headers=headers, timeout=timeout, allow_redirects=False
            ) as answer:
                excerpt = await answer.content.read(RESULT_BODY_BYTES)
                status = answer.status
                if 200 <= status < 300:
                    self.counts.delivered += 1
                    return {"status": status, "body": excerpt.decode("utf-8", "replace")}
                retry_after = answer.headers.get("Retry-After")
        except aiohttp.ClientConnectorError as exc:
            if isinstance(exc.os_error, PrivateTargetError):
                self.counts.refused += 1
                raise Fail(f"callback {callback.url}: {exc.os_error}") from None
            self.counts.retried += 1
            raise _BreakerFailure(None, f"{callback.url}: cannot connect: {exc}") from exc
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.counts.retried += 1
            what = f"no answer within {callback.timeout_ms} ms"
            why = what if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc}"
            raise _BreakerFailure(None, f"{callback.url}: {why}") from exc
        text = excerpt[:EXCERPT_BYTES].decode("utf-8", "replace")
        summary = f"{callback.url} answered HTTP {status}: {text}"
        if status >= 500 or status in (408, 429):
            self.counts.retried += 1
            delay = _retry_after_s(retry_after, self.settings.max_retry_after_ms, wall_ms())
            if status >= 500:
                raise _BreakerFailure(delay, summary)
            raise Retry(delay, summary)
        self.counts.refused += 1
        raise Fail(summary)


class _BreakerFailure(Retry):
    """A retry the host's breaker counts as a failure (5xx, timeouts, connection errors)."""


def _origin(url: URL) -> str:
    """The breaker's and cap's key: scheme, host as connected to, port (so spellings of
    one host share them)."""
    return f"{url.scheme}://{url.host_subcomponent}:{url.port}"


def _retry_after_s(value: str | None, cap_ms: int, now_ms: int) -> float | None:
    """Seconds from a ``Retry-After`` value (delta seconds or an HTTP date), capped; None
    when absent or unreadable (the usual backoff then)."""
    if not value:
        return None
    value = value.strip()
    seconds: float
    if value.isdigit():
        seconds = float(value)
    else:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - now_ms / 1000
        except (TypeError, ValueError, IndexError):
            return None
    return min(max(seconds, 0.0), cap_ms / 1000)
