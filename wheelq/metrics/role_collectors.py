"""The metrics of a worker and of a producer client, read from them at scrape time.

A worker counts in plain ints (its settler's settlements that took effect, its claim
keeper's take-overs) and two fixed-bucket histograms (handler-start lateness and
handler run time); a client counts what it enqueued and cancelled.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from wheelq.metrics.families import counter, gauge, histogram, part_health
from wheelq.producer.async_client import AsyncClient
from wheelq.producer.client import Client
from wheelq.worker.worker import Worker

TG = ("topic", "group")
WORKER_COUNTERS = {
    "handled": "Handler runs that finished (returned, raised or timed out)",
    "succeeded": "Acks that took effect: handlers that returned, and entries of other groups",
    "failed": "Handler runs that raised or timed out",
    "retried": "Retries that took effect (the job is back in the sorted set)",
    "dead_lettered": "Entries dead-lettered (last attempt failed, too many deliveries, malformed)",
    "taken_over": "Entries this worker took over from stalled or dead workers",
    "skipped": "Entries meant for another group (retries, replays), acked and skipped",
}


class WorkerCollector(Collector):
    """A prometheus_client collector of one `Worker` (labels: its topic and group)."""

    def __init__(self, worker: Worker) -> None:
        self._worker = worker

    def collect(self) -> Iterator[Metric]:
        w = self._worker
        status: dict[str, Any] = w.status()
        status["succeeded"] = status["acked"]
        status["handled"] = status["handled"] + status["failed"]
        labels = (w.topic, w.group)
        for name, doc in WORKER_COUNTERS.items():
            yield counter(f"worker_{name}", doc, TG, [(labels, status[name])])
        in_flight = w.in_flight
        yield histogram(
            "worker_handler_start_lateness_seconds",
            "Handler start minus the job's due time: the worker's wall clock against the "
            "Redis clock's due time (includes the skew between the two)",
            TG,
            [(labels, in_flight.timings.start_lateness.snapshot())],
        )
        yield histogram(
            "worker_handler_duration_seconds",
            "How long handlers ran (monotonic clock)",
            TG,
            [(labels, in_flight.timings.run_time.snapshot())],
        )
        yield gauge(
            "worker_held_entries",
            "Entries this worker holds: waiting for a slot or running",
            TG,
            [(labels, status["held"])],
        )
        yield gauge(
            "worker_running_handlers", "Handlers running now", TG, [(labels, status["running"])]
        )
        yield gauge(
            "worker_wedged_threads",
            "Threads still running sync handlers that ran over handler_timeout_ms",
            TG,
            [(labels, status["wedged"])],
        )
        yield from part_health("worker", status["parts"])


class ClientCollector(Collector):
    """A prometheus_client collector of one `Client` or `AsyncClient`."""

    def __init__(self, client: Client | AsyncClient) -> None:
        self._client = client

    def collect(self) -> Iterator[Metric]:
        counts = self._client.counts
        yield counter(
            "client_enqueued",
            "Jobs whose enqueue returned their id (spooled ones included)",
            (),
            [((), counts.enqueued)],
        )
        yield counter(
            "client_cancelled", "Cancels that removed a pending job", (), [((), counts.cancelled)]
        )
