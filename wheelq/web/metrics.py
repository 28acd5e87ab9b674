"""``/metrics`` of the service: its client, its delivery workers (the worker metrics, one
series per topic), the deliverer's requests and the HTTP requests answered.

Families of the same name from several workers are merged into one (the text format
allows a family once); samples that repeat (the health of same-named parts of several
workers) keep the first.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from wheelq.metrics.collectors import ClientCollector, WorkerCollector, counter, histogram
from wheelq.web.service import WebService


class ServiceCollector(Collector):
    def __init__(self, service: WebService) -> None:
        self._service = service

    def collect(self) -> Iterator[Metric]:
        svc = self._service
        parts: list[Collector] = [ClientCollector(svc.client)]
        deliveries = svc.deliveries
        if deliveries is not None:
            parts += [WorkerCollector(w) for w in list(deliveries.workers.values())]
        merged: dict[str, Metric] = {}
        seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
        for part in parts:
            for family in part.collect():
                into = merged.setdefault(family.name, family)
                samples = into.samples if into is family else family.samples
                kept = []
                for sample in samples:
                    key = (sample.name, tuple(sorted(sample.labels.items())))
                    if key not in seen:
                        seen.add(key)
                        kept.append(sample)
                if into is family:
                    into.samples = kept
                else:
                    into.samples += kept
        yield from merged.values()
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
            [((), coalescer.jobs)],
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
