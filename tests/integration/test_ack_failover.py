"""kill -9 of a cluster primary while a producer enqueues at ack="replicated": after its
replica has taken over, every job whose enqueue returned is there. (What the default
level loses in the same scenario is measured by loadtest/ack_loss.py, not asserted.)
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest
import redis.cluster

from tests.support.clients import cluster_client
from tests.support.waiting import eventually_sync
from wheelq import Admin, Client, DurabilityError, RedisUnavailableError
from wheelq.core.keys import ShardKeys, all_shards, shard_of
from wheelq.testing import EmbeddedCluster, ServerBinary

pytestmark = pytest.mark.both_servers  # a cluster's own failover

SHARDS = 12
TOPIC = "failover"


class Producer:
    """Enqueues jobs j0, j1, ... one call each on a thread, and keeps the ids whose call
    returned (acknowledged) apart from the calls that raised."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.acked: list[str] = []
        self.errors: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Producer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            job_id, n = f"j{n}", n + 1
            try:
                self.client.enqueue(TOPIC, n, delay=3600, job_id=job_id)
            except (DurabilityError, RedisUnavailableError, redis.exceptions.RedisError) as exc:
                self.errors[type(exc).__name__] += 1  # not acknowledged: not checked
            else:
                self.acked.append(job_id)


def pending(cluster: EmbeddedCluster) -> set[str]:
    """Every job id pending on the topic, read through a fresh cluster client."""
    node = next(n for n in cluster.primaries if n.pid is not None)
    with cluster_client(host=node.host, port=node.port) as rc:
        found: set[str] = set()
        for keys in all_shards(TOPIC, SHARDS):
            found |= {m.decode() for m in rc.zrange(keys.delayed, 0, -1)}
        return found


@pytest.mark.slow
def test_kill_9_of_a_primary_loses_no_job_acknowledged_at_replicated(
    server_binary: ServerBinary,
) -> None:
    with EmbeddedCluster(server_binary, primaries=3, replicas=1, node_timeout_ms=1000) as cluster:
        victim = cluster.primaries[1]
        with cluster_client(host=victim.host, port=victim.port) as rc:
            on_victim = {
                s
                for s in range(SHARDS)
                if rc.get_node_from_key(ShardKeys(TOPIC, s).jobs).port == victim.port
            }
        assert 0 < len(on_victim) < SHARDS
        settings = {"ack": "replicated", "ack_timeout_ms": 200, "default_shards": SHARDS}
        with Client.from_url(cluster.url, cluster=True, **settings) as client:
            admin = Admin.of(client)
            admin.create_topic(TOPIC)
            with Producer(client) as producer:
                eventually_sync(
                    lambda: len(producer.acked) >= 300, timeout_s=30, what="300 acked jobs"
                )
                before = list(producer.acked)
                cluster.kill_primary(1)  # returns once the replica is the primary
                at_failover = len(producer.acked)
                eventually_sync(
                    lambda: len(producer.acked) >= at_failover + 30,
                    timeout_s=60,
                    what="30 more acked jobs after the failover",
                )
            acked = producer.acked
        assert any(shard_of(i, SHARDS) in on_victim for i in before)
        lost = sorted(set(acked) - pending(cluster), key=lambda i: int(i[1:]))
        assert lost == [], f"{len(lost)} of {len(acked)} acked jobs lost: {lost[:10]}"
        assert producer.errors, "the kill was not noticed: the test did not exercise it"
