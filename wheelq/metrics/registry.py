"""Which collector exports which role, and a registry of them for library users."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry
from prometheus_client.registry import Collector

from wheelq.errors import InvalidArgumentError
from wheelq.metrics.role_collectors import ClientCollector, WorkerCollector
from wheelq.metrics.scheduler_collector import SchedulerCollector
from wheelq.metrics.shard_gauges import ShardGauges
from wheelq.producer.async_client import AsyncClient
from wheelq.producer.client import Client
from wheelq.scheduler.scheduler import Scheduler
from wheelq.worker.worker import Worker

Observed = Scheduler | Worker | Client | AsyncClient
"""What wheelq exports metrics of."""


def collector_for(role: Observed) -> Collector:
    """A collector of `role`'s counters, histograms and gauges, to register in a registry
    of your own. A scheduler's per-shard gauges need its `ShardGauges` part running, which
    `MetricsServer` starts; without it they are left out.

    Raises:
        InvalidArgumentError: `role` is none of Scheduler, Worker, Client, AsyncClient.
    """
    ((collector, _),) = collectors_for([role], gauges=False)
    return collector


def registry_for(*roles: Observed) -> CollectorRegistry:
    """A `CollectorRegistry` with a collector of each of `roles` (see `collector_for`)."""
    registry = CollectorRegistry(auto_describe=False)
    for role in roles:
        registry.register(collector_for(role))
    return registry


def collectors_for(
    roles: Iterable[Observed], *, gauges: bool = True
) -> list[tuple[Collector, ShardGauges | None]]:
    """A collector per role, with the `ShardGauges` part of each scheduler (to start on its
    loop) when `gauges`.

    Raises:
        InvalidArgumentError: A role of another type.
    """
    out: list[tuple[Collector, ShardGauges | None]] = []
    for role in roles:
        if isinstance(role, Scheduler):
            part = ShardGauges(role) if gauges else None
            out.append((SchedulerCollector(role, part), part))
        elif isinstance(role, Worker):
            out.append((WorkerCollector(role), None))
        elif isinstance(role, Client | AsyncClient):
            out.append((ClientCollector(role), None))
        else:
            raise InvalidArgumentError(
                "role",
                "role must be a Scheduler, Worker, Client or AsyncClient, "
                f"got {type(role).__name__}",
            )
    return out
