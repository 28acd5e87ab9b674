"""What the endpoints share: the client, the puller, the clock, the token guard, and the
callback deliveries run beside them; started and stopped with the app (its lifespan)."""

from __future__ import annotations

import logging

from wheelq.callbacks.delivery import Deliveries
from wheelq.core.retry import RetryPolicy
from wheelq.core.settings import ServeSettings, WorkerSettings
from wheelq.producer.async_client import AsyncClient
from wheelq.runtime.clock import ClockKeeper, RedisClock, WallClock
from wheelq.runtime.outage import StartGate
from wheelq.web.auth import Guard, Token
from wheelq.web.coalesce import Coalescer
from wheelq.worker.pull import Puller

log = logging.getLogger(__name__)

CLOCK_SYNC_MS = 5000


class WebService:
    """The state behind the app (`wheelq.web.app.create_app`).

    Args:
        client: The producer client every endpoint goes through (closed with the service
            when `owns_client`).
        settings: `ServeSettings`.
        worker_settings: Pull consumers' visibility timeout, deliveries and retries.
        tokens: Who may do what (none: everyone, everything).
        deliveries: Callback delivery to run beside the API (None: none here).
        allow_private: Whether callbacks may target private addresses (checked when a job
            is accepted, as the deliverer checks when it connects).
        allowed_hosts: Names accepted in ``Host`` besides the service's own address
            (`wheelq.web.auth.Guard`).
        receipt_secret: The key pull receipts are sealed with, the same on every service of
            a deployment (empty: one kept in Redis; see `wheelq.worker.pull.Puller`).
    """

    def __init__(
        self,
        client: AsyncClient,
        *,
        settings: ServeSettings | None = None,
        worker_settings: WorkerSettings | None = None,
        tokens: tuple[Token, ...] = (),
        deliveries: Deliveries | None = None,
        allow_private: bool = False,
        allowed_hosts: tuple[str, ...] = (),
        receipt_secret: str = "",
    ) -> None:
        self.client = client
        self.settings = settings or ServeSettings()
        ws = worker_settings or WorkerSettings()
        self.clock = RedisClock()
        self.puller = Puller(
            client.executor,
            WallClock(),
            visibility_timeout_ms=ws.visibility_timeout_ms,
            max_deliveries=ws.max_deliveries,
            policy=RetryPolicy(ws.retry_base_ms, ws.retry_max_ms, ws.retry_jitter_pct),
            claim_interval_ms=ws.claim_interval_ms,
            receipt_secret=receipt_secret,
            pull_connections=self.settings.pull_connections,
        )
        self.guard = Guard(tokens, allowed_hosts)
        self.coalescer = Coalescer(client.enqueue_many)
        """Single enqueues of one event-loop turn go to Redis as one batch."""
        self.deliveries = deliveries
        self.allow_private = allow_private
        self.owns_client = False
        self._closed = False
        self._keeper = ClockKeeper(client.executor, self.clock, CLOCK_SYNC_MS)
        self._gate = StartGate(client.executor, self.settings.start_timeout_ms, log)
        self.requests: dict[tuple[str, int], int] = {}
        """(route, status) -> requests answered (``/metrics``)."""

    @property
    def started(self) -> bool:
        """Once `start()` returned: whether it started anything (False when `stop()`
        ended its wait for Redis; False again once stopping)."""
        return self._gate.started

    async def start(self) -> None:
        """Wait for Redis as a scheduler node or a worker does (`StartGate`: up to
        ``start_timeout_ms``; `stop()` ends the wait), then start what runs beside the
        endpoints; nothing if started already. A failed start closes an owned client.

        Raises:
            RedisUnavailableError: Redis was unreachable for all of ``start_timeout_ms``.
            redis.exceptions.RedisError: Any other failure (wrong password, ...), at once.
        """
        try:
            await self._gate.run(self._start)
        except BaseException:
            await self._close()
            raise

    async def _start(self) -> None:
        await self._keeper.sample()  # due_ms in answers is on the Redis clock from the start
        await self._keeper.start()
        if self.deliveries is not None:
            await self.deliveries.start()

    def closing(self) -> None:
        """The server stops taking requests: those that wait answer now (long-poll pulls,
        with what they have), so the stop does not wait them out."""
        self.puller.close()

    async def stop(self) -> None:
        """Stop what `start()` started (called during its wait, end the wait); safe to
        call twice."""
        self.closing()
        if await self._gate.abort():
            self._gate.started = False
            if self.deliveries is not None:
                await self.deliveries.stop()
            await self._keeper.stop()
        await self.puller.aclose()
        await self._close()

    async def _close(self) -> None:
        if self.owns_client and not self._closed:
            self._closed = True
            await self.client.aclose()
