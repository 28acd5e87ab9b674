"""Faults of a Redis Cluster under load: a slot of a busy topic moved to another primary, a
coordinated failover, and a primary killed (-9) and failed over by the cluster itself, while
a producer enqueues, a scheduler node fires and a worker runs every job. Each ends with
nothing acknowledged lost, nothing fired twice and nothing fired early (docs/architecture.md,
invariants 1-3), and every acknowledged job handled. And a primary that stalls with more
calls in flight than the client may open connections to it.

Each test has a cluster of its own (3 primaries, a replica each): it moves slots and
promotes replicas, which the shared ``cluster`` fixture must never see.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from tests.support.waiting import eventually
from wheelq import (
    AsyncAdmin,
    AsyncClient,
    DurabilityError,
    Job,
    RedisUnavailableError,
    Scheduler,
    Worker,
)
from wheelq.core.keys import ShardKeys
from wheelq.testing import EmbeddedCluster, ServerBinary, read_fired, summarize

SHARDS = 6
JOBS = 1500
RATE_PER_S = 500  # ~3 s of enqueues: the fault lands in the middle of them
DELAYS_MS = (0, 50, 300, 1500)  # due now (straight to the stream), inside and past the window
TAIL = RATE_PER_S // 5  # enqueues after the fault: it never ends after the load
KILL_JOBS = 4000  # ~8 s of load: the cluster notices the dead primary after its node timeout
FAST = {"lease_ttl_ms": 2000, "window_ms": 1000, "preload_interval_ms": 100}

pytestmark = [
    pytest.mark.slow,
    pytest.mark.both_servers,  # a cluster's slot moves and failovers
]


@pytest.fixture
def faulty_cluster(server_binary: ServerBinary) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(server_binary, primaries=3, replicas=1, node_timeout_ms=2000) as c:
        yield c


@dataclass
class Outcome:
    """What the producer was told and what the worker ran."""

    acknowledged: list[str] = field(default_factory=list)
    in_doubt: list[str] = field(default_factory=list)
    """Enqueues that raised (Redis away, or `ack` not reached): written or not."""
    why: Counter[str] = field(default_factory=Counter)
    """What the in-doubt enqueues raised, and what that was raised from."""
    handled: Counter[str] = field(default_factory=Counter)

    def doubts(self) -> str:
        """The in-doubt enqueues, counted by why: what a failed assertion shows."""
        return f"{len(self.in_doubt)} in doubt: {dict(self.why.most_common(5))}"


async def busy_topic(
    url: str, topic: str, fault: Callable[[], object], ack: str = "primary", jobs: int = JOBS
) -> Outcome:
    """Enqueue at `RATE_PER_S` with a node and a worker running; once `JOBS` // 3 jobs have
    been handled, run `fault` (blocking: in a thread) while the enqueues go on, until `jobs`
    in all and `TAIL` after the fault; return once every acknowledged job has been handled."""
    out = Outcome()

    async def handle(job: Job) -> None:
        out.handled[job.id] += 1

    async with AsyncAdmin.from_url(url) as setup:
        await setup.create_topic(topic, SHARDS)
    async with (
        AsyncClient.from_url(url, ack=ack, ack_timeout_ms=500) as client,
        Scheduler.from_url(url, topic, **FAST) as node,
        Worker.from_url(url, topic, handle, concurrency=50),
    ):

        async def enqueue(i: int) -> None:
            job_id = f"{topic}-{i}"
            try:
                delay_s = DELAYS_MS[i % len(DELAYS_MS)] / 1000
                await client.enqueue(topic, i, delay=delay_s, job_id=job_id)
            except (DurabilityError, RedisUnavailableError) as exc:
                out.in_doubt.append(job_id)
                out.why[f"{exc!r:.120} from {exc.__cause__!r:.160}"] += 1
            else:
                out.acknowledged.append(job_id)

        fault_over = asyncio.Event()

        async def produce() -> None:
            # Calls overlap as a busy service's requests do: an enqueue that waits out its
            # `ack_timeout_ms` on a shard left without a replica slows nobody else. The load
            # lasts until `TAIL` enqueues after the fault, however long the fault takes on a
            # slow host: the fault always lands inside it.
            after = 0
            async with asyncio.TaskGroup() as calls:
                for i in itertools.count():
                    if i >= jobs and after >= TAIL:
                        break
                    after += fault_over.is_set()
                    calls.create_task(enqueue(i))
                    await asyncio.sleep(1 / RATE_PER_S)  # pacing the load, not waiting for it

        producing = asyncio.create_task(produce())
        await eventually(
            lambda: _true(len(out.handled) >= JOBS // 3), timeout_s=30, what="a third handled"
        )
        await asyncio.to_thread(fault)
        fault_over.set()
        await producing
        await eventually(
            lambda: _true(set(out.acknowledged) <= out.handled.keys()),
            timeout_s=60,
            what="every acknowledged job handled",
        )
        assert all(p["running"] for p in node.status()["parts"].values())
        fired = await read_fired(client.redis, topic, SHARDS)
    summary = summarize(fired, out.acknowledged)
    assert summary["missing"] == 0, f"lost: {summary}"
    assert summary["duplicates"] == 0, f"fired twice: {summary}"
    assert summary["early"] == 0, f"fired early: {summary}"
    assert {f.job_id for f in fired} <= {*out.acknowledged, *out.in_doubt}
    return out


async def _true(value: bool) -> bool:
    return value


def shard_slot(cluster: EmbeddedCluster, topic: str, shard: int) -> int:
    with cluster.client(cluster.primaries[0]) as c:
        return int(c.execute_command("CLUSTER", "KEYSLOT", ShardKeys(topic, shard).delayed))


async def test_a_slot_moved_under_load_loses_and_doubles_nothing(
    faulty_cluster: EmbeddedCluster, topic: str
) -> None:
    cluster = faulty_cluster
    slots = [shard_slot(cluster, topic, s) for s in range(SHARDS)]
    moved: list[int] = []

    def migrate() -> None:
        # Every shard's slot, one key at a time with a pause: jobs meet each slot half moved.
        for slot in slots:
            owner = cluster.owner(slot)
            to = next(p for p in cluster.primaries if p is not owner)
            moved.append(cluster.migrate_slot(slot, to, pause_s=0.02))

    out = await busy_topic(cluster.url, topic, migrate)

    assert len(moved) == SHARDS and sum(moved) >= SHARDS * 3  # delayed, jobs, ready at least
    assert not out.in_doubt, out.doubts()
    assert len(out.acknowledged) >= JOBS


async def test_a_coordinated_failover_under_load_loses_and_doubles_nothing(
    faulty_cluster: EmbeddedCluster, topic: str
) -> None:
    cluster = faulty_cluster
    owner = cluster.owner(shard_slot(cluster, topic, 0))
    replica = cluster.replicas[cluster.primaries.index(owner)]

    out = await busy_topic(cluster.url, topic, lambda: cluster.failover(replica))

    assert cluster.owner(shard_slot(cluster, topic, 0)) is replica
    assert not out.in_doubt, out.doubts()
    assert len(out.acknowledged) >= JOBS


async def test_a_primary_killed_under_load_loses_no_job_acknowledged_at_replicated(
    faulty_cluster: EmbeddedCluster, topic: str
) -> None:
    cluster = faulty_cluster
    owner = cluster.owner(shard_slot(cluster, topic, 0))
    index = cluster.primaries.index(owner)
    promoted: list[object] = []

    out = await busy_topic(
        cluster.url,
        topic,
        lambda: promoted.append(cluster.kill_primary(index)),
        "replicated",
        jobs=KILL_JOBS,
    )

    assert promoted == [cluster.replicas[index]]
    assert owner.pid is None, "the primary was killed"
    # The promoted replica has no replica of its own: its shards' writes are in doubt now.
    assert out.in_doubt and len(out.acknowledged) + len(out.in_doubt) >= KILL_JOBS
