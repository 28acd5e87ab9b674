"""The metrics of a scheduler node, read from it at scrape time.

Counters and the fire lateness histogram come from what the node counts itself
(`wheelq.scheduler.led_shards`); the clock, the wheel and the leads from its
state; pending, ready, in-flight and dead from `ShardGauges`, which reads the led
shards on the node's loop when a scrape asks.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from wheelq.metrics.families import counter, gauge, histogram, part_health
from wheelq.metrics.shard_gauges import ShardGauges
from wheelq.runtime.clock import wall_ms
from wheelq.scheduler.scheduler import Scheduler

TS = ("topic", "shard")
EVENT_COUNTERS = {
    "emitted": ("scheduler_fired", "Jobs the node moved into the ready streams"),
    "orphans": ("scheduler_orphans", "Job ids found without an envelope and dropped"),
    "malformed": ("scheduler_malformed", "Jobs dead-lettered: their envelope did not decode"),
    "trimmed": ("scheduler_trimmed", "Ready-stream entries trimmed (acked by every group)"),
}
LEASE_CHANGES = ("acquired", "released", "lost")
LATENESS_DOC = (
    "Fire lateness: the node's now when it sent the emit call minus the job's due time, on "
    "the node's clock corrected to the Redis clock (the reply names no entry ids); swept "
    "overdue jobs at their least lateness"
)


class SchedulerCollector(Collector):
    """A prometheus_client collector of one `Scheduler`.

    Args:
        node: The node.
        gauges: Its shard gauges (None: no per-shard gauges are exported).
    """

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
            "Shard leases this node acquired, released or found lost (handovers)",
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
        yield gauge(
            "scheduler_wheel_jobs",
            "Jobs preloaded in the timing wheel",
            (),
            [((), len(node.driver.wheel))],
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
        yield gauge(
            "scheduler_clock_offset_seconds",
            "The node's Redis clock minus its local wall clock",
            (),
            [((), (node.clock.now_ms_float() - wall_ms()) / 1000)],
        )
        yield gauge(
            "scheduler_clock_error_bound_seconds",
            "How far the measured Redis clock offset can be off (half the best round trip)",
            (),
            [((), node.clock.error_bound_ms / 1000)],
        )
        parts = dict(node.status()["parts"])
        if self._gauges is not None:
            parts[self._gauges.name] = self._gauges.status()
            yield from shard_families(self._gauges)
        yield from part_health("scheduler", parts)


def shard_families(gauges: ShardGauges) -> Iterator[Metric]:
    """The per-shard gauges from the latest observations (and a request for new ones)."""
    gauges.request()
    latest = gauges.latest
    tsg = (*TS, "group")
    yield gauge(
        "pending_jobs",
        "Jobs waiting for their due time (sorted set), per shard this node leads",
        TS,
        (((o.topic, str(o.shard)), o.pending) for o in latest),
    )
    yield gauge(
        "stream_entries",
        "Entries in the ready stream (fired, not yet trimmed)",
        TS,
        (((o.topic, str(o.shard)), o.length) for o in latest),
    )
    yield gauge(
        "dead_letters",
        "Entries in the dead-letter stream",
        TS,
        (((o.topic, str(o.shard)), o.dead) for o in latest),
    )
    yield gauge(
        "ready_entries",
        "Entries fired but not yet delivered to the group (XINFO GROUPS lag)",
        tsg,
        (
            ((o.topic, str(o.shard), g.name), o.length if g.lag is None else g.lag)
            for o in latest
            for g in o.groups
        ),
    )
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
            # 0 with nothing in flight, not absent: a panel of it must not read "No data"
            # on a healthy system.
            ((o.topic, str(o.shard), g.name), _age_s(o.at_ms, g.oldest_pending_ms))
            for o in latest
            for g in o.groups
        ),
    )


def _age_s(at_ms: int, oldest_ms: int | None) -> float:
    """Seconds from `oldest_ms` to `at_ms`; 0 when nothing is in flight (`oldest_ms` None)."""
    return 0.0 if oldest_ms is None else max(0, at_ms - oldest_ms) / 1000
