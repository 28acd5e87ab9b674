"""The collectors: what Prometheus reads of each role when it scrapes. Labels are topic,
shard, group or part, never a job id; a scrape never waits for Redis (a scheduler's shard
gauges are read on the node's loop by `ShardGauges`, at most one scrape old).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TypeVar

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from wheelq.core.forecast import WITHIN_S, Forecast, forecast_of
from wheelq.core.histogram import Histogram, HistogramSnapshot
from wheelq.core.line import ShardLine, busiest, merged_lanes
from wheelq.core.observe import ShardObservation
from wheelq.core.options import DEFAULT_PRIORITY
from wheelq.errors import InvalidArgumentError
from wheelq.outbox.relay import Relay
from wheelq.producer.async_client import AsyncClient
from wheelq.producer.client import Client
from wheelq.runtime.clock import wall_ms
from wheelq.runtime.service import Service
from wheelq.runtime.unled_watch import UnledWatch
from wheelq.scheduler.scheduler import Scheduler
from wheelq.store.executor import drive_async
from wheelq.store.line import read_lines
from wheelq.store.observe import observe_shards
from wheelq.worker.worker import Worker

log = logging.getLogger(__name__)

PREFIX = "wheelq_"
MIN_INTERVAL_MS = 1000  # scrapes closer together share one read of the shards
FORECAST_MS = tuple(s * 1000 for s in WITHIN_S)
"""The windows of ``wheelq_jobs_due`` (its ``within`` label, in seconds: 10, 60, 300)."""
F = TypeVar("F", CounterMetricFamily, GaugeMetricFamily)
Samples = Iterable[tuple[Sequence[str], float]]  # (label values, value) per sample


def counter(name: str, doc: str, labels: Sequence[str], values: Samples) -> CounterMetricFamily:
    return _filled(CounterMetricFamily(PREFIX + name, doc, labels=labels), values)


def gauge(name: str, doc: str, labels: Sequence[str], values: Samples) -> GaugeMetricFamily:
    return _filled(GaugeMetricFamily(PREFIX + name, doc, labels=labels), values)


def scalar(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return gauge(name, doc, (), [((), value)])


def _filled(family: F, values: Samples) -> F:
    for label_values, value in values:
        family.add_metric(list(label_values), value)
    return family


def histogram(
    name: str,
    doc: str,
    labels: Sequence[str],
    values: Iterable[tuple[Sequence[str], HistogramSnapshot]],
) -> HistogramMetricFamily:
    """A histogram family ``wheelq_<name>`` in seconds from snapshots in ms."""
    family = HistogramMetricFamily(PREFIX + name, doc, labels=labels)
    for label_values, snap in values:
        buckets = [(_le(bound_ms), float(n)) for bound_ms, n in snap.cumulative()]
        family.add_metric(list(label_values), buckets, snap.sum_ms / 1000)
    return family


def _le(bound_ms: float) -> str:
    return "+Inf" if math.isinf(bound_ms) else repr(bound_ms / 1000)


def part_health(role: str, parts: Mapping[str, Mapping[str, object]]) -> list[Metric]:
    """``wheelq_part_up`` and ``wheelq_part_failures`` from ``status()["parts"]``."""
    up = [((role, name), 1.0 if st.get("running") else 0.0) for name, st in sorted(parts.items())]
    failures = [
        ((role, name), float(st.get("failures") or 0))  # type: ignore[arg-type]
        for name, st in sorted(parts.items())
    ]
    return [
        gauge("part_up", "1 while the part's loop runs (status()['parts'])", ("role", "part"), up),
        gauge(
            "part_failures",
            "Failed steps of the part since its last step that worked",
            ("role", "part"),
            failures,
        ),
    ]


class ShardGauges(Service):
    """Reads the shards `node` leads when a scrape asks (`request`), on the node's loop."""

    name = "gauges"
    title = "metrics gauges"

    def __init__(self, node: Scheduler) -> None:
        super().__init__(node.clock, log, max_pause_ms=node.settings.failure_pause_max_ms)
        self._node = node
        self._event_loop: asyncio.AbstractEventLoop | None = None
        self._read_ms: int | None = None
        self.latest: list[ShardObservation] = []  # empty until the first scrape's read
        self.lines: list[ShardLine] = []  # their due lines, read with them (no envelopes)

    async def start(self) -> None:
        self._event_loop = asyncio.get_running_loop()
        await super().start()

    def request(self) -> None:
        """Ask for a read (from any thread): the next scrape sees its values."""
        loop = self._event_loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.wake)

    async def first_wait(self) -> float | None:
        return None  # until the first scrape

    async def step(self) -> float | None:
        now_ms = self.clock.now_ms()
        if self._read_ms is not None and now_ms - self._read_ms < MIN_INTERVAL_MS:
            return None
        self._read_ms = now_ms
        shards = sorted((lead.keys for lead in self._node.leads.all()), key=lambda k: k.tag)
        executor = self._node.executor
        self.latest = await drive_async(
            observe_shards(shards, now_ms, sample=1, within_ms=FORECAST_MS),
            lambda calls: executor.run(calls, return_exceptions=True),
        )
        self.lines = await drive_async(read_lines(shards, now_ms, priorities=False), executor.run)
        return None


TG = ("topic", "group")
WORKER_COUNTERS = {
    "handled": "Handler runs that finished (returned, raised or timed out)",
    "succeeded": "Acks that took effect: handlers that returned, and entries of other groups",
    "failed": "Handler runs that raised or timed out",
    "retried": "Retries that took effect (the job is back in the sorted set)",
    "dead_lettered": "Entries dead-lettered (last attempt failed, too many deliveries, malformed)",
    "taken_over": "Entries this worker took over from stalled or dead workers",
    "skipped": "Entries meant for another group (retries, replays), acked and skipped",
    "expired": "Entries read past their expiry (expires=): acked unrun, noted expired",
}
WORKER_GAUGES = {
    "held_entries": ("held", "Entries this worker holds: waiting for a slot or running"),
    "running_handlers": ("running", "Handlers running now"),
    "wedged_threads": (
        "wedged",
        "Threads still running sync handlers that ran over handler_timeout_ms",
    ),
}


class WorkerCollector(Collector):
    """A prometheus_client collector of one `Worker` (labels: its topic and group)."""

    def __init__(self, worker: Worker) -> None:
        self._worker = worker

    def collect(self) -> Iterator[Metric]:
        w = self._worker
        lanes = [(lane, w.lane_status(lane)) for lane in w.lanes]
        for _, status in lanes:
            status["succeeded"] = status["acked"]
            status["handled"] = status["handled"] + status["failed"]
        rows = [((status["topic"], w.group), status) for _, status in lanes]
        for name, doc in WORKER_COUNTERS.items():
            yield counter(f"worker_{name}", doc, TG, [(at, st[name]) for at, st in rows])
        yield counter(
            "worker_internal_errors",
            "Entries the worker failed to run for an error of its own, not a handler's "
            "(logged; each is taken over and runs again)",
            ("group",),
            [((w.group,), w.slots.runners.errors)],
        )
        yield histogram(
            "worker_handler_start_lateness_seconds",
            "Handler start minus the job's due time: the worker's wall clock against the "
            "Redis clock's due time (includes the skew between the two), by the job's priority",
            (*TG, "priority"),
            [
                ((lane.topic, w.group, str(priority)), found.snapshot())
                for lane, _ in lanes
                for priority, found in _by_priority(lane.in_flight.timings.start_lateness)
            ],
        )
        yield histogram(
            "worker_handler_duration_seconds",
            "How long handlers ran (monotonic clock)",
            TG,
            [
                ((lane.topic, w.group), lane.in_flight.timings.run_time.snapshot())
                for lane, _ in lanes
            ],
        )
        for name, (key, doc) in WORKER_GAUGES.items():
            yield gauge(f"worker_{name}", doc, TG, [(at, st[key]) for at, st in rows])
        paused = "1 while the group is paused (its own pause or its topic's): it takes no new jobs"
        yield gauge("group_paused", paused, TG, [(at, int(st["paused"])) for at, st in rows])
        yield from part_health("worker", w.status()["parts"])


def _by_priority(found: Mapping[int, Histogram]) -> list[tuple[int, Histogram]]:
    """Histograms by priority, lowest first; before any run, an empty one of the default
    priority (a topic's series are there from the start, as the other histograms' are)."""
    return sorted(found.items()) or [(DEFAULT_PRIORITY, Histogram())]


class ClientCollector(Collector):
    """A prometheus_client collector of one `Client` or `AsyncClient`."""

    def __init__(self, client: Client | AsyncClient) -> None:
        self._client = client

    def collect(self) -> Iterator[Metric]:
        counts = self._client.counts
        enqueued = "Jobs whose enqueue returned their id (spooled ones included)"
        yield counter("client_enqueued", enqueued, (), [((), counts.enqueued)])
        cancelled = "Cancels that removed a pending job"
        yield counter("client_cancelled", cancelled, (), [((), counts.cancelled)])


class RelayCollector(Collector):
    """A prometheus_client collector of one outbox `Relay` (docs/guides/outbox.md)."""

    def __init__(self, relay: Relay) -> None:
        self._relay = relay

    def collect(self) -> Iterator[Metric]:
        r = self._relay
        yield scalar("outbox_rows", "Rows in the outbox table, counted every few seconds", r.rows)
        age = "Age of the oldest row in the outbox table (0: none)"
        yield scalar("outbox_oldest_row_age_seconds", age, r.oldest_row_age_ms / 1000)
        relayed = "Outbox rows placed in Redis and deleted by this relay"
        yield counter("outbox_relayed", relayed, (), [((), r.relayed)])
        dup = "Outbox rows not written: a job of that id was pending (replace=False)"
        yield counter("outbox_duplicates", dup, (), [((), r.duplicates)])
        rejected = "Outbox rows Redis refused for good (kept in wheelq_outbox_rejected)"
        yield counter("outbox_rejected", rejected, (), [((), r.rejected)])
        lag = "Relay lag: from a row's INSERT to the relay taking it (the database's clock)"
        yield histogram("outbox_relay_lag_seconds", lag, (), [((), r.lag.snapshot())])
        up = "1 while the relay's loop runs and its last step worked"
        yield scalar("outbox_relay_up", up, float(r.running and not r.failures))


TS = ("topic", "shard")
EVENT_COUNTERS = {
    "emitted": ("scheduler_fired", "Jobs the node moved into the ready streams"),
    "orphans": ("scheduler_orphans", "Job ids found without an envelope and dropped"),
    "malformed": ("scheduler_malformed", "Jobs dead-lettered: their envelope did not decode"),
    "trimmed": ("scheduler_trimmed", "Ready-stream entries trimmed (acked by every group)"),
}
LEASE_CHANGES = ("acquired", "released", "lost", "taken_over_dead")
SHARD_GAUGES = (  # name, help, `ShardObservation` field
    ("pending_jobs", "Jobs waiting for their due time (sorted set), per shard this node leads",
     "pending"),
    ("stream_entries", "Entries in the ready stream (fired, not yet trimmed)", "length"),
    ("dead_letters", "Entries in the dead-letter stream", "dead"),
    ("expired_jobs", "Jobs dropped at their expiry (expires=), never run: at fire or at a "
     "worker's read, since the shard was made", "expired"),
)  # fmt: skip
LATENESS_DOC = (
    "Fire lateness: the node's now when it sent the emit call minus the job's due time, on "
    "the node's clock corrected to the Redis clock (the reply names no entry ids); swept "
    "overdue jobs at their least lateness"
)


class SchedulerCollector(Collector):
    """A prometheus_client collector of one `Scheduler` (`gauges` None: no shard gauges)."""

    def __init__(self, node: Scheduler, gauges: ShardGauges | None = None) -> None:
        self._node = node
        self._gauges = gauges

    def collect(self) -> Iterator[Metric]:
        node, counts = self._node, dict(self._node.node_metrics.counts)
        for kind, (name, doc) in EVENT_COUNTERS.items():
            yield counter(
                name,
                doc,
                TS,
                (((t, str(s)), n) for (k, t, s), n in sorted(counts.items()) if k == kind),
            )
        yield counter(
            "scheduler_lease_changes",
            "Shard leases this node acquired, released or found lost (handovers), and those "
            "it freed from a holder whose process died (taken_over_dead)",
            (*TS, "change"),
            (((t, str(s), k), n) for (k, t, s), n in sorted(counts.items()) if k in LEASE_CHANGES),
        )
        lateness = dict(node.node_metrics.fire_lateness)
        yield histogram(
            "scheduler_fire_lateness_seconds",
            LATENESS_DOC,
            ("topic",),
            (((t,), h.snapshot()) for t, h in sorted(lateness.items())),
        )
        leads = node.leads.all()
        per_topic: dict[str, int] = {}
        for lead in leads:
            per_topic[lead.keys.topic] = per_topic.get(lead.keys.topic, 0) + 1
        yield gauge(
            "scheduler_shards_led",
            "Shards this node leads",
            ("topic",),
            (((t,), n) for t, n in sorted(per_topic.items())),
        )
        yield scalar(
            "scheduler_wheel_jobs", "Jobs preloaded in the timing wheel", len(node.driver.wheel)
        )
        now_ms, window_ms = node.clock.now_ms(), node.settings.window_ms
        yield gauge(
            "scheduler_preload_lag_seconds",
            "How far the preloaded window falls short of now + window_ms",
            TS,
            (
                (
                    (lead.keys.topic, str(lead.keys.shard)),
                    max(0, now_ms + window_ms - lead.cursor_ms) / 1000,
                )
                for lead in leads
            ),
        )
        offset_s = (node.clock.now_ms_float() - wall_ms()) / 1000
        yield scalar(
            "scheduler_clock_offset_seconds",
            "The node's Redis clock minus its local wall clock",
            offset_s,
        )
        yield scalar(
            "scheduler_clock_error_bound_seconds",
            "How far the measured Redis clock offset can be off (half the best round trip)",
            node.clock.error_bound_ms / 1000,
        )
        yield shards_unled(node.unled)
        parts = dict(node.status()["parts"])
        if self._gauges is not None:
            parts[self._gauges.name] = self._gauges.status()
            yield from shard_families(self._gauges)
        yield from part_health("scheduler", parts)


def shards_unled(watch: UnledWatch) -> GaugeMetricFamily:
    """``wheelq_shards_unled``: per registered topic, as the watch last read it."""
    return gauge(
        "shards_unled",
        "Shards of the topic with jobs due within 60 s (overdue included) and no scheduler "
        "node leading them: nothing fires there until one does (0: none)",
        ("topic",),
        (((topic,), n) for topic, n in watch.shards_unled()),
    )


def shard_families(gauges: ShardGauges) -> Iterator[Metric]:
    gauges.request()
    latest = gauges.latest
    tsg = (*TS, "group")
    for name, doc, attr in SHARD_GAUGES:
        yield gauge(name, doc, TS, (((o.topic, str(o.shard)), getattr(o, attr)) for o in latest))
    yield gauge(
        "ready_entries",
        "Entries fired but not yet delivered to the group (XINFO GROUPS lag)",
        tsg,
        (((o.topic, str(o.shard), g.name), o.lag_of(g)) for o in latest for g in o.groups),
    )
    yield gauge(
        "jobs_due",
        "Jobs due within `within` seconds of now on the Redis clock, in the shards this node "
        "leads: overdue ones not fired yet and pending retries included (the forecast)",
        ("topic", "within"),
        (
            ((f.topic, str(within)), n)
            for f in _forecasts(latest)
            for within, n in f.due_within.items()
        ),
    )
    yield from line_families(gauges.lines)
    yield gauge(
        "in_flight_entries",
        "Entries delivered to a worker of the group and not yet settled (XPENDING)",
        tsg,
        (((o.topic, str(o.shard), g.name), g.pending) for o in latest for g in o.groups),
    )
    yield gauge(
        "oldest_in_flight_age_seconds",
        "Age of the group's oldest unsettled entry, since it entered the stream (0: none)",
        tsg,
        (
            # 0 with nothing in flight, not absent: a panel must not read "No data" when healthy
            ((o.topic, str(o.shard), g.name), _age_s(o.at_ms, g.oldest_pending_ms))
            for o in latest
            for g in o.groups
        ),
    )


def line_families(lines: Sequence[ShardLine]) -> Iterator[Metric]:
    """The due line of the shards a node leads (docs/architecture.md, "Seeing the line"): its
    jobs per shard, and per topic the 10 keys with the most jobs waiting, the rest summed
    under ``(other)``: a bounded label set, however many keys wait."""
    yield gauge(
        "line_jobs",
        "Jobs due and waiting on the due line for room in the stream (a shard that orders its "
        "due jobs: priorities, fair shares), per shard this node leads",
        TS,
        (((s.topic, str(s.shard)), s.waiting) for s in lines),
    )
    by_topic: dict[str, list[ShardLine]] = {}
    for s in lines:
        by_topic.setdefault(s.topic, []).append(s)
    rows = [
        (topic, row)
        for topic, found in sorted(by_topic.items())
        for row in busiest(merged_lanes(found), found[0].at_ms, sum(s.waiting for s in found))
    ]
    tk = ("topic", "key")
    yield gauge(
        "line_key_jobs",
        "Jobs waiting on the due line of the 10 keys with the most, the rest summed under "
        'key="(other)"; key="(shared)": the shared lane (jobs without a key, or every job '
        "while fair shares are off); of the first 1000 lanes of each shard this node leads",
        tk,
        (((topic, key), n) for topic, (key, n, _) in rows),
    )
    yield gauge(
        "line_key_behind_seconds",
        "How long the oldest job read from the head of the key's lane has been due (the same "
        'keys as wheelq_line_key_jobs; key="(other)": the most behind of the rest)',
        tk,
        (((topic, key), behind) for topic, (key, _, behind) in rows),
    )


def _forecasts(latest: Sequence[ShardObservation]) -> list[Forecast]:
    """A `Forecast` per topic of `latest`, by name."""
    by_topic: dict[str, list[ShardObservation]] = {}
    for o in latest:
        by_topic.setdefault(o.topic, []).append(o)
    return [forecast_of(t, found[0].at_ms, found) for t, found in sorted(by_topic.items())]


def _age_s(at_ms: int, oldest_ms: int | None) -> float:
    return 0.0 if oldest_ms is None else max(0, at_ms - oldest_ms) / 1000


Observed = Scheduler | Worker | Client | AsyncClient | Relay


def merge_families(families: Iterable[Metric]) -> list[Metric]:
    """Families of one name merged into one (a process's roles each report their parts'
    health, say), a repeated sample kept once: an exposition names each family once."""
    merged: dict[str, Metric] = {}
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    for family in families:
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
    return list(merged.values())


class MergedCollector(Collector):
    """The collectors of one process's roles as one, their families merged."""

    def __init__(self, collectors: Sequence[Collector]) -> None:
        self._collectors = list(collectors)

    def collect(self) -> Iterator[Metric]:
        yield from merge_families(f for c in self._collectors for f in c.collect())


def collector_for(role: Observed) -> Collector:
    """A collector of `role` for a registry of your own (without a scheduler's shard gauges)."""
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
    """A collector per role, with each scheduler's `ShardGauges` part when `gauges`."""
    out: list[tuple[Collector, ShardGauges | None]] = []
    for role in roles:
        if isinstance(role, Scheduler):
            part = ShardGauges(role) if gauges else None
            out.append((SchedulerCollector(role, part), part))
        elif isinstance(role, Worker):
            out.append((WorkerCollector(role), None))
        elif isinstance(role, Client | AsyncClient):
            out.append((ClientCollector(role), None))
        elif isinstance(role, Relay):
            out.append((RelayCollector(role), None))
        else:
            raise InvalidArgumentError(
                "role",
                "role must be a Scheduler, Worker, Client, AsyncClient or Relay, "
                f"got {type(role).__name__}",
            )
    return out
