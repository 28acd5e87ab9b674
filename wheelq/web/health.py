"""The HTTP service's ``/healthz``, ``/readyz`` and ``/metrics``: what a container's probes
and Prometheus read (docs/guides/http-service.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from fastapi import APIRouter, Request, Response
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from wheelq.metrics.collectors import (
    ClientCollector,
    WorkerCollector,
    counter,
    histogram,
    merge_families,
    part_health,
    shards_unled,
)
from wheelq.metrics.server import READY_PING_S
from wheelq.store import server
from wheelq.web import problems
from wheelq.web.problems import problem_response
from wheelq.web.service import WebService, json_response


def router(service: WebService) -> APIRouter:
    """The three routes over `service` (``/readyz`` shares one PING among its probes)."""
    routes = APIRouter()

    @routes.get("/healthz", tags=["health"], include_in_schema=True)
    async def healthz() -> dict[str, str]:
        """The process is up (it does not ask Redis)."""
        return {"status": "ok"}

    pinging: list[asyncio.Task[list[object]]] = []  # the PING in flight, if any

    @routes.get("/readyz", tags=["health"], responses={503: problems.RESPONSES[503]})
    async def readyz(request: Request) -> Response:
        """Redis answers PING within 1 s (one PING at a time, shared by the probes waiting)."""
        # READY_PING_S, a probe's usual 1-3 s. The PING in flight is not cancelled (a cluster
        # client cancelled mid-connect leaves its socket open) nor doubled by a flood of probes.
        if not pinging or pinging[0].done():
            pinging[:] = [asyncio.ensure_future(service.client.executor.run([server.ping()]))]
            pinging[0].add_done_callback(lambda done: done.cancelled() or done.exception())
        ping = pinging[0]
        await asyncio.wait([ping], timeout=READY_PING_S)
        if not ping.done():
            detail = f"no answer within {READY_PING_S:g} s"
        elif (exc := ping.exception()) is not None:
            detail = f"{type(exc).__name__}: {exc}"
        else:
            return json_response({"status": "ready"})
        return problem_response(
            request,
            503,
            "unavailable",
            "Redis is unavailable",
            detail,
            headers={"Retry-After": problems.RETRY_AFTER_S},
        )

    @routes.get("/metrics", tags=["health"], response_class=Response)
    async def metrics(request: Request) -> Response:
        """Prometheus metrics (text format)."""
        service.guard.check(request, "read")
        return Response(exposition(service), media_type="text/plain; version=0.0.4")

    return routes


class ServiceCollector(Collector):
    """The service's client, its delivery workers and its own parts (families of one name
    merged, a repeated sample kept once), the HTTP requests answered and the deliverer's
    requests."""

    def __init__(self, service: WebService) -> None:
        self._service = service

    def collect(self) -> Iterator[Metric]:
        svc = self._service
        parts: list[Collector] = [ClientCollector(svc.client)]
        deliveries = svc.deliveries
        if deliveries is not None:
            parts += [WorkerCollector(w) for w in list(deliveries.workers.values())]
        families = [family for part in parts for family in part.collect()]
        families += part_health("serve", svc.status()["parts"])
        families.append(shards_unled(svc.unled))
        yield from merge_families(families)
        yield counter(
            "http_requests",
            "HTTP requests answered, by route and status",
            ("route", "status"),
            [((route, str(status)), n) for (route, status), n in sorted(svc.requests.items())],
        )
        coalescer = svc.coalescer
        yield counter(
            "http_enqueue_batches",
            "enqueue_many calls that carried the single enqueues of one event-loop turn",
            (),
            [((), coalescer.batches)],
        )
        yield counter(
            "http_enqueue_batched_jobs",
            "Single enqueues sent in those calls",
            (),
            [((), coalescer.items)],
        )
        yield counter(
            "pull_dead_lettered",
            "Entries pull consumers' take-overs dead-lettered (delivered past max_deliveries)",
            (),
            [((), svc.puller.dead_lettered)],
        )
        if deliveries is not None:
            d = deliveries.deliverer
            yield counter(
                "callback_requests",
                "Callback requests by outcome: delivered (2xx), retried (5xx, 408, 429, "
                "timeouts, connection errors), refused (other answers, private targets), "
                "skipped (jobs without a callback)",
                ("outcome",),
                [((name,), value) for name, value in vars_of(d.counts).items()],
            )
            yield histogram(
                "callback_lateness_seconds",
                "Due time to the callback's 2xx answer (the deliverer's wall clock against "
                "the Redis clock's due time)",
                (),
                [((), d.lateness.snapshot())],
            )


def vars_of(counts: object) -> dict[str, int]:
    return {name: getattr(counts, name) for name in counts.__slots__}  # type: ignore[attr-defined]


def exposition(service: WebService) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ServiceCollector(service))
    return generate_latest(registry)
