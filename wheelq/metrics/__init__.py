"""Prometheus metrics of wheelq's roles (see README, "Metrics").

The roles count in plain ints and fixed-bucket histograms and never import
prometheus_client; the collectors here read them when Prometheus scrapes.

- `MetricsServer(*roles, port=...)`: ``/metrics`` over HTTP while they run
  (what ``wheelq scheduler --metrics-port`` and ``wheelq worker --metrics-port`` use);
- `registry_for(*roles)`: a `CollectorRegistry` to serve your own way;
- `collector_for(role)`: one collector, to register in a registry of yours.
"""

from wheelq.metrics.collectors import collector_for, registry_for
from wheelq.metrics.server import MetricsServer

__all__ = ["MetricsServer", "collector_for", "registry_for"]
