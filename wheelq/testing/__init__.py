"""Helpers for testing code that uses wheelq (docs/guides/testing.md): a real
server or cluster (`EmbeddedServer`, `EmbeddedCluster`), what a topic fired (`read_fired`,
`summarize`), an exact account after faults (`reconcile`); `faults` and `proxy` inject
server, node and network faults.
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
