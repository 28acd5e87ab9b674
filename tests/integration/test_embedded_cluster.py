"""The embedded cluster: a real 3-primary Redis Cluster on loopback from each binary, formed
without redis-cli (the fixture the cluster tests of the producer, scheduler and worker
build on)."""

from __future__ import annotations

import pytest
import redis
from redis.cluster import RedisCluster

from wheelq.core.keys import all_shards
from wheelq.embedded.cluster import SLOTS, EmbeddedCluster
from wheelq.store.executor import close_sync
from wheelq.testing import ServerBinary

pytestmark = pytest.mark.both_servers  # the embedded launcher's cluster


def _slots_by_port(client: redis.Redis) -> dict[int, int]:
    """How many slots each primary's port serves, as one node sees the cluster."""
    owned: dict[int, int] = {}
    for low, high, primary, *_ in client.execute_command("CLUSTER", "SLOTS"):
        port = int(primary[1])
        owned[port] = owned.get(port, 0) + int(high) - int(low) + 1
    return owned


def test_three_primaries_share_every_slot_and_serve_keys_of_every_shard(
    server_binary: ServerBinary,
) -> None:
    with EmbeddedCluster(server_binary, primaries=3) as cluster:
        ports = {node.port for node in cluster.primaries}
        for node in cluster.nodes:
            with cluster.client(node) as c:
                owned = _slots_by_port(c)
            assert set(owned) == ports, "every node sees the same three primaries"
            assert sum(owned.values()) == SLOTS, "every slot is served"
            assert max(owned.values()) - min(owned.values()) <= 2, owned

        client = RedisCluster.from_url(cluster.url)
        try:
            shards = all_shards("emails", 16)
            for keys in shards:
                client.set(keys.lease, keys.tag)
            assert [client.get(keys.lease) for keys in shards] == [k.tag.encode() for k in shards]
            serving = {client.get_node_from_key(keys.lease).port for keys in shards}
            assert serving == ports, "16 shards of one topic spread over all three primaries"
        finally:
            close_sync(client)


def test_a_replica_follows_its_primary(server_binary: ServerBinary) -> None:
    with EmbeddedCluster(server_binary, primaries=3, replicas=1) as cluster:
        assert len(cluster.replicas) == 3
        for replica in cluster.replicas:
            with cluster.client(replica) as c:
                info = c.info("replication")
            assert info["role"] == "slave"
            assert info["master_link_status"] == "up"
            assert int(info["master_port"]) in {node.port for node in cluster.primaries}


def test_bad_sizes_are_refused_before_anything_starts() -> None:
    with pytest.raises(ValueError, match="primaries >= 1"):
        EmbeddedCluster(primaries=0)
    with pytest.raises(ValueError, match="replicas >= 0"):
        EmbeddedCluster(replicas=-1)
