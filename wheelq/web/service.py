"""What the endpoints share, at the bottom of `wheelq.web` so that no router imports the app:
`WebService` (the client, the puller, the clock, the token guard, the deliveries, the pools
of long reads), `service(request)`, which finds it, and `json_response`, the hot paths'
answer."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import Request, Response

from wheelq.admin.async_admin import AsyncAdmin
from wheelq.callbacks.delivery import Deliveries
from wheelq.callbacks.resolver import private_target
from wheelq.core.callback import validate_callback
from wheelq.core.process import RoleInfo, role_info
from wheelq.core.retry import RetryPolicy
from wheelq.core.settings import ServeSettings, WorkerSettings
from wheelq.errors import InvalidArgumentError, UnknownTopicError
from wheelq.producer.async_client import AsyncClient
from wheelq.runtime import heartbeat
from wheelq.runtime.clock import ClockKeeper, RedisClock, WallClock
from wheelq.runtime.outage import StartGate
from wheelq.runtime.unled_watch import UnledWatch
from wheelq.web.auth import Guard, Token
from wheelq.web.charts import ChartSource
from wheelq.web.coalescer import Coalescer
from wheelq.web.event_streams import EventStreams
from wheelq.web.prometheus import PrometheusCharts
from wheelq.web.result_waits import ResultWaits
from wheelq.web.samples import Sampler
from wheelq.worker.pull import Puller

log = logging.getLogger("wheelq.web.app")  # the name its lines had before the move

CLOCK_SYNC_MS = 5000

Endpoint = TypeVar("Endpoint", bound=Callable[..., Any])


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
        prometheus_url: str = "",
    ) -> None:
        self.client = client
        self.admin = AsyncAdmin.of(client)
        """The management calls, on the client's connections."""
        self.settings = settings or ServeSettings()
        ws = worker_settings or WorkerSettings()
        self.clock = RedisClock()
        self.puller = Puller(
            client.executor,
            WallClock(),
            visibility_timeout_ms=ws.visibility_timeout_ms,
            max_deliveries=ws.max_deliveries,
            policy=RetryPolicy(
                base_ms=ws.retry_base_ms, max_ms=ws.retry_max_ms, jitter_pct=ws.retry_jitter_pct
            ),
            claim_interval_ms=ws.claim_interval_ms,
            receipt_secret=receipt_secret,
            pull_connections=self.settings.pull_connections,
            max_bytes=self.settings.pull_max_bytes,
        )
        self.guard = Guard(tokens, allowed_hosts)
        self.results = ResultWaits(client, self.settings.pull_connections)
        """Long-polls of results, on connections of their own (``pull_connections`` wide)."""
        self.event_streams = EventStreams(client, self.settings.pull_connections)
        """Server-Sent Events streams, on connections of their own (``pull_connections``)."""
        self.coalescer = Coalescer(client.enqueue_many)
        """Single enqueues of one event-loop turn go to Redis as one batch."""
        self.deliveries = deliveries
        self.allow_private = allow_private
        self.owns_client = False
        self._closed = False
        self._keeper = ClockKeeper(client.executor, self.clock, CLOCK_SYNC_MS)
        self._gate = StartGate(client.executor, self.settings.start_timeout_ms, log)
        self.unled = UnledWatch(client.executor, self.clock, self.settings.unled_check_ms)
        """Which registered topics have unled shards (`wheelq.store.unled`), warned of."""
        self.prometheus: PrometheusCharts | None = None
        self.sampler: Sampler | None = None
        self.charts: ChartSource
        """Where the dashboard's charts come from: Prometheus, else the service's samples."""
        if prometheus_url:
            self.charts = self.prometheus = PrometheusCharts(prometheus_url)
        else:
            self.charts = self.sampler = Sampler(client.executor, self.admin.topics, self.clock)
        self.requests: dict[tuple[str, int], int] = {}
        """(route, status) -> requests answered (``/metrics``)."""
        self._beat_ms, self._ttl_ms = ws.process_beat_ms, ws.process_ttl_ms
        self._beating: heartbeat.Beating | None = None

    def check_callback(self, callback: object) -> None:
        """Raise InvalidArgumentError when `callback` is not one this service delivers: a bad
        form, or (unless allowed) a private target, as the deliverer's HTTP client resolves
        it."""
        checked = validate_callback(callback)
        why = "" if self.allow_private else private_target(checked.url)
        if why:
            raise InvalidArgumentError(
                "callback.url",
                f"{why}, which this service does not call ([callbacks] allow_private)",
            )

    def deliver(self, topic: str) -> None:
        """Jobs of `topic` carry callbacks: the service's deliverer (if it runs one) serves
        it."""
        if self.deliveries is not None:
            self.deliveries.want(topic)

    @property
    def started(self) -> bool:
        """Once `start()` returned: whether it started anything (False when `stop()`
        ended its wait for Redis; False again once stopping)."""
        return self._gate.started

    async def start(self) -> None:
        """Wait for Redis (`StartGate`), then start what runs beside the endpoints; a failed
        start closes an owned client."""
        try:
            await self._gate.run(self._start)
        except BaseException:
            await self._close()
            raise

    async def _start(self) -> None:
        await self._keeper.sample()  # due_ms in answers is on the Redis clock from the start
        await self._keeper.start()
        await self.unled.start()
        if self.sampler is not None:
            await self.sampler.start()
        if self.deliveries is not None:
            await self.deliveries.start()
        self._beating = await heartbeat.join(
            self.client.executor, self.process_role, self._beat_ms, self._ttl_ms
        )

    def process_role(self) -> RoleInfo:
        """The service in its process's heartbeat record: requests answered, and those
        answered 5xx as failed."""
        return role_info(
            "service",
            "serve",
            handled=sum(self.requests.values()),
            failed=sum(n for (_, status), n in self.requests.items() if status >= 500),
        )

    def status(self) -> dict[str, dict[str, dict[str, object]]]:
        """``{"parts": {name: {"running", "failures", "last_error"}}}`` of what runs beside
        the endpoints: the clock keeper and, when it samples, the chart sampler (the
        callback deliveries' workers report as workers)."""
        parts = {self._keeper.name: self._keeper.status(), self.unled.name: self.unled.status()}
        if self.sampler is not None:
            parts[self.sampler.name] = self.sampler.status()
        return {"parts": parts}

    def closing(self) -> None:
        """The server stops taking requests: those that wait answer now (long-poll pulls and
        results, with what they have), so the stop does not wait them out."""
        self.puller.close()
        self.results.close()
        self.event_streams.close()

    async def stop(self) -> None:
        """Stop what `start()` started (called during its wait, end the wait); safe to
        call twice."""
        self.closing()
        if await self._gate.abort():
            self._gate.started = False
            beating, self._beating = self._beating, None
            if beating is not None:
                await beating.leave()
            if self.deliveries is not None:
                await self.deliveries.stop()
            if self.sampler is not None:
                await self.sampler.stop()
            await self.unled.stop()
            await self._keeper.stop()
        if self.prometheus is not None:
            await self.prometheus.aclose()
        await self.puller.aclose()
        await self.results.aclose()
        await self.event_streams.aclose()
        await self._close()

    async def _close(self) -> None:
        if self.owns_client and not self._closed:
            self._closed = True
            await self.client.aclose()


def service(request: Request) -> WebService:
    """The service behind `request`'s app (`wheelq.web.app.create_app`)."""
    svc: WebService = request.app.state.service
    return svc


ANY_TOPIC: set[Callable[..., Any]] = set()
"""The endpoints that take a topic that does not exist: those that create it (enqueue,
limits, a schedule, events on) and a result's 405. Every other route under ``{topic}``
answers 404 for one (`known_topic`)."""


def any_topic(endpoint: Endpoint) -> Endpoint:
    """Mark `endpoint` as one that takes a topic that does not exist (under the route's
    decorator)."""
    ANY_TOPIC.add(endpoint)
    return endpoint


async def known_topic(request: Request) -> None:
    """The dependency of every route (`create_app`): the same 404 problem on every route of
    a topic that does not exist, reads and writes alike, but on those `any_topic` marks. Runs
    after the token check (`Guard.admit`), so a caller learns of no topic it may not see."""
    topic = request.path_params.get("topic")
    endpoint = getattr(request.scope.get("route"), "endpoint", None)
    if not isinstance(topic, str) or endpoint in ANY_TOPIC:
        return
    if await service(request).admin.shards(topic) is None:
        raise UnknownTopicError(topic)


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """A JSON answer without a response model's second validation (the hot paths)."""
    return Response(json_bytes(body), status, headers=headers, media_type="application/json")


def json_bytes(value: object) -> bytes:
    """`value` as compact UTF-8 JSON."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
