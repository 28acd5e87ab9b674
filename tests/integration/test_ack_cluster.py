"""ack="replicated" on a Redis Cluster with one replica per primary: each write is
confirmed by WAIT on the connection of the node that owns it, never by a default node.

The cluster (3 primaries, 3 replicas) is shared by this module's tests, per server kind;
a test that pauses a replica (SIGSTOP) resumes it in ``finally``.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.cluster

from tests.support.clients import MakeClient, admin_of, cluster_client
from tests.support.waiting import eventually_sync
from wheelq import DurabilityError
from wheelq.core.history import JobState
from wheelq.core.keys import ShardKeys, shard_of
from wheelq.testing import EmbeddedCluster, EmbeddedServer, ServerBinary

pytestmark = pytest.mark.both_servers  # a cluster's replication acks

SHARDS = 12


@pytest.fixture(scope="module")
def replicated(server_binary: ServerBinary) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(server_binary, primaries=3, replicas=1) as cluster:
        yield cluster


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    return "ac-" + re.sub(r"[^A-Za-z0-9_.-]", "-", request.node.name)[-90:]


@pytest.fixture
def make(make_client_at: MakeClient) -> MakeClient:
    """Clients of the kind under test: ``make(url, **settings)``, with this file's shards."""
    return lambda url, **settings: make_client_at(url, **{"default_shards": SHARDS, **settings})


def owners(cluster: EmbeddedCluster, topic: str, ids: list[str]) -> dict[str, int]:
    """Each job id -> the port of the primary that owns its shard now."""
    with cluster_client(host=cluster.primaries[0].host, port=cluster.primaries[0].port) as rc:
        return {
            i: rc.get_node_from_key(ShardKeys(topic, shard_of(i, SHARDS)).jobs).port for i in ids
        }


def replica_holds(replica: EmbeddedServer, topic: str, job_id: str) -> bool:
    with redis.Redis(port=replica.port) as r:
        r.execute_command("READONLY")
        return bool(r.hexists(ShardKeys(topic, shard_of(job_id, SHARDS)).jobs, job_id))


@pytest.mark.parametrize("stopped", [0, 1, 2])
async def test_a_stopped_replica_fails_exactly_the_jobs_of_its_primary(
    replicated: EmbeddedCluster, topic: str, make: Any, stopped: int
) -> None:
    # The URL of a primary other than the one whose replica stops: a WAIT sent to the
    # client's default node would confirm every job, or fail every job.
    url = replicated.primaries[(stopped + 1) % 3].url
    client = make(url, ack="replicated", ack_timeout_ms=300)
    admin = admin_of(client)
    ids = [f"j{i}" for i in range(120)]
    owner = owners(replicated, topic, ids)
    victim = replicated.primaries[stopped].port
    assert len(set(owner.values())) == 3  # the jobs span every primary
    pid = replicated.replicas[stopped].pid
    assert pid is not None
    await admin.create_topic(topic)
    os.kill(pid, signal.SIGSTOP)
    try:
        with pytest.raises(DurabilityError) as info:
            await client.enqueue_many(
                topic, [{"payload": 1, "delay": 600, "job_id": i} for i in ids]
            )
    finally:
        os.kill(pid, signal.SIGCONT)
    assert sorted(info.value.job_ids) == sorted(i for i in ids if owner[i] == victim)
    assert info.value.result == ids
    assert info.value.confirmed == 0

    # resumed: every job confirmed, and each replica has its own primary's jobs
    more = await client.enqueue_many(topic, [{"payload": 2, "delay": 600} for _ in range(120)])
    owner = owners(replicated, topic, more)
    for primary, replica in zip(replicated.primaries, replicated.replicas, strict=True):
        mine = [i for i in more if owner[i] == primary.port]
        assert mine and all(replica_holds(replica, topic, i) for i in mine)
    await admin.drop_topic(topic, force=True)


async def test_cancel_and_reschedule_wait_on_the_node_of_their_job(
    replicated: EmbeddedCluster, topic: str, make: Any
) -> None:
    client = make(replicated.url, cluster=True, ack="replicated", ack_timeout_ms=300)
    ids = await client.enqueue_many(topic, [{"payload": i, "delay": 600} for i in range(30)])
    owner = owners(replicated, topic, ids)
    ours = next(i for i in ids if owner[i] == replicated.primaries[2].port)
    other = next(i for i in ids if owner[i] != replicated.primaries[2].port)
    pid = replicated.replicas[2].pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        assert await client.reschedule(topic, other, delay=900) is True
        assert await client.cancel(topic, other) is True
        with pytest.raises(DurabilityError) as info:
            await client.cancel(topic, ours)
        assert (info.value.job_ids, info.value.result) == ([ours], True)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert (await client.get(topic, ours)).state is JobState.CANCELLED
    eventually_sync(
        lambda: not replica_holds(replicated.replicas[2], topic, ours),
        timeout_s=10,
        what="the cancel to reach the resumed replica",
    )
