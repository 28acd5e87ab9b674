"""Prometheus metrics of wheelq's roles (docs/operations/monitoring.md): `MetricsServer` serves
``/metrics`` while they run (``--metrics-port``), `registry_for` gives a registry to serve
your own way, `collector_for` one collector to register in yours.
"""

from wheelq.metrics.collectors import collector_for, registry_for
from wheelq.metrics.server import MetricsServer

__all__ = ["MetricsServer", "collector_for", "registry_for"]
