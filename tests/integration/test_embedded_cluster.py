"""The embedded cluster: a real 3-primary Redis Cluster on loopback from each binary, formed
without redis-cli (the fixture the cluster tests of the producer, scheduler and worker
build on)."""

from __future__ import annotations

import threading
import time

import pytest
import redis
from redis.cluster import RedisCluster

from wheelq.core.keys import all_shards
from wheelq.embedded.cluster import SLOTS, EmbeddedCluster
from wheelq.store.executor import close_sync
from wheelq.testing import EmbeddedServer, ServerBinary

PONG = 1  # the cluster bus's message type (CLUSTERMSG_TYPE_PONG)

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


def _handshakes(cluster: EmbeddedCluster, node: EmbeddedServer) -> int:
    with cluster.client(node) as c:
        return c.execute_command("CLUSTER", "NODES").decode().count("handshake")


def test_a_handshake_timed_out_on_one_side_is_met_again(server_binary: ServerBinary) -> None:
    # A node drops a handshake unanswered within max(node timeout, 1 s). Here node 1 drops
    # every PONG until its handshakes have timed out: the nodes that met it know it, it
    # knows none of them, and Redis 7.0 never meets it again (Valkey 8.1 does): the cluster
    # never formed. A loaded machine (CI's parallel tiers) drops none but delays as long.
    cluster = EmbeddedCluster(
        server_binary,
        primaries=3,
        node_timeout_ms=1000,
        extra_args=("--enable-debug-command", "yes"),
    )
    deaf, formed = cluster.primaries[1], threading.Event()

    def hear_again_once_its_handshakes_timed_out() -> None:
        seen = False
        while not formed.is_set() and (not seen or _handshakes(cluster, deaf)):
            seen = seen or _handshakes(cluster, deaf) > 0
            time.sleep(0.02)  # polls a condition; the fault lasts until it holds
        if not formed.is_set():
            with cluster.client(deaf) as c:
                c.execute_command("DEBUG", "DROP-CLUSTER-PACKET-FILTER", -1)

    lifter = threading.Thread(target=hear_again_once_its_handshakes_timed_out)
    try:
        for node in cluster.nodes:
            node.start()
        with cluster.client(deaf) as c:
            c.execute_command("DEBUG", "DROP-CLUSTER-PACKET-FILTER", PONG)
        lifter.start()
        cluster.start(timeout_s=30)
        formed.set()
        ports = {node.port for node in cluster.nodes}
        for node in cluster.nodes:
            with cluster.client(node) as c:
                listed = c.execute_command("CLUSTER", "NODES").decode()
            known = {
                int(address.split("@")[0].rsplit(":", 1)[1])
                for _, address, flags, *_ in map(str.split, listed.splitlines())
                if "handshake" not in flags  # a MEET again may leave one, gone within 1 s
            }
            assert known == ports, listed
    finally:
        formed.set()
        if lifter.is_alive():
            lifter.join()
        cluster.stop()


def test_bad_sizes_are_refused_before_anything_starts() -> None:
    with pytest.raises(ValueError, match="primaries >= 1"):
        EmbeddedCluster(primaries=0)
    with pytest.raises(ValueError, match="replicas >= 0"):
        EmbeddedCluster(replicas=-1)
