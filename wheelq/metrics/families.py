"""Building Prometheus metric families from what the roles count.

The roles keep plain ints and `wheelq.core.histogram.Histogram`s (ms); a collector
reads them when Prometheus scrapes and turns them into families here: counters end
in ``_total``, durations are in seconds (``_seconds``), labels are the topic, the
shard, the group or a part's name, never a job id, so the number of series is
bounded by the deployment, not by the traffic.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from wheelq.core.histogram import HistogramSnapshot

PREFIX = "wheelq_"


def counter(
    name: str, doc: str, labels: Sequence[str], values: Iterable[tuple[Sequence[str], float]]
) -> CounterMetricFamily:
    """A counter family ``wheelq_<name>_total`` with one sample per (label values, value)."""
    family = CounterMetricFamily(PREFIX + name, doc, labels=labels)
    for label_values, value in values:
        family.add_metric(list(label_values), value)
    return family


def gauge(
    name: str, doc: str, labels: Sequence[str], values: Iterable[tuple[Sequence[str], float]]
) -> GaugeMetricFamily:
    """A gauge family ``wheelq_<name>`` with one sample per (label values, value)."""
    family = GaugeMetricFamily(PREFIX + name, doc, labels=labels)
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
