"""Helpers for testing code that uses wheelq: a real server, and what fired on it.

Nothing here is on a job's path. wheelq's own tests, demo and benchmarks use it, and it
is public so that your tests can do the same (README, "Testing your own code"):

- `EmbeddedServer` / `EmbeddedCluster`: a real Valkey or Redis server, or cluster, on
  loopback, started and stopped by ``with`` (from `wheelq.embedded`);
  `find_server_binaries` lists the binaries it can run (`ServerBinary`).
- `read_fired`, `summarize`: what a topic fired, checked against the ids you enqueued.
- `reconcile`: an exact account of every acknowledged id after faults.
- `faults` (server commands, slowed lease renewals, `faults.SkewedClock`) and
  `proxy.ProxyThread` / `proxy.CuttingProxy` (a TCP proxy that cuts, stalls or slows).
"""

from wheelq.core.observe import percentile
from wheelq.embedded import EmbeddedCluster, EmbeddedServer, ServerBinary, find_server_binaries
from wheelq.testing.fired import Fired, read_fired, summarize
from wheelq.testing.reconcile import Reconciliation, reconcile

__all__ = [
    # a real server
    "EmbeddedServer",
    "EmbeddedCluster",
    "ServerBinary",
    "find_server_binaries",
    # what fired
    "Fired",
    "read_fired",
    "percentile",
    "summarize",
    # an exact account after faults
    "Reconciliation",
    "reconcile",
]
