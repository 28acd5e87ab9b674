"""The due line through faults (docs/architecture.md, "The due line"): jobs waiting on a
fair, prioritised topic's lines while a worker is killed -9 and the scheduler node leading a
shard is killed -9 (the other takes its shards over) all fire once, none before its due time,
and run, with a sync handler and an async one."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

import pytest
import redis

from tests.support.node_proc import NodeProcess
from tests.support.waiting import eventually_sync
from tests.support.worker_proc import WorkerProcess
from wheelq import Admin, Client, EnqueueItem
from wheelq.core.job import Field
from wheelq.core.keys import all_shards

SHARDS = 2
CREDIT_MS = 1000
NODE = {"lease_ttl_ms": 2000, "window_ms": 5000, "preload_interval_ms": 100}
WORKER = {"visibility_timeout_ms": 1000, "claim_interval_ms": 200, "block_ms": 200}

pytestmark = [pytest.mark.slow, pytest.mark.both_servers]


def fired(r: redis.Redis, topic: str) -> list[tuple[int, dict[bytes, bytes]]]:
    """Every entry of the topic's ready streams: (its stream ms, its fields), per shard in
    stream order, the shards one after the other."""
    out = []
    for keys in all_shards(topic, SHARDS):
        for entry_id, fields in r.xrange(keys.ready):
            out.append((int(entry_id.split(b"-")[0]), fields))
    return out


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
def test_jobs_on_the_line_fire_once_on_time_through_a_worker_and_a_leaders_kill_9(
    redis_url: str, topic: str, tmp_path: Path, sync: bool
) -> None:
    with Client.from_url(redis_url) as client, redis.Redis.from_url(redis_url) as r:
        admin = Admin.of(client)
        admin.create_topic(topic, SHARDS)
        admin.set_limits(topic, fair=True, fair_weights={"b": 2}, priority_credit_ms=CREDIT_MS)
        nodes = {n: NodeProcess(redis_url, topic, n, tmp_path, NODE) for n in ("node-a", "node-b")}
        behaviour = {"sleep_s": 0.003, "sync": sync}
        doomed = WorkerProcess(redis_url, topic, "doomed", tmp_path, behaviour, WORKER)
        workers = [doomed]
        try:
            items = [EnqueueItem(payload=i, delay=0.5, key="a", priority=0) for i in range(600)]
            items += [EnqueueItem(payload=i, delay=0.6, key="b", priority=9) for i in range(60)]
            items += [EnqueueItem(payload=i, delay=0.7, key="c") for i in range(60)]
            ids = client.enqueue_many(topic, items)
            eventually_sync(
                lambda: len(doomed.jobs("start")) >= 50, timeout_s=30, what="50 jobs started"
            )
            doomed.signal(signal.SIGKILL)
            holder = r.get(all_shards(topic, SHARDS)[0].lease)
            assert holder is not None
            nodes[holder.decode()].signal(signal.SIGKILL)  # a lease's token is its node's id
            workers.append(WorkerProcess(redis_url, topic, "heir", tmp_path, behaviour, WORKER))

            def all_ran() -> bool:
                return set(ids) <= {j for w in workers for j in w.jobs("finish")}

            eventually_sync(all_ran, timeout_s=90, what="every job to run")
            entries = fired(r, topic)
        finally:
            for process in [*workers, *nodes.values()]:
                process.finish()

    times = Counter(fields[Field.ID].decode() for _, fields in entries)
    assert set(times) == set(ids), "a job never fired"
    assert [job for job, n in times.items() if n > 1] == [], "a job fired twice"
    early = [f for ms, f in entries if ms < int(f[Field.DUE])]
    assert early == [], f"{len(early)} jobs fired before their due time"
    with redis.Redis.from_url(redis_url) as r:
        for keys in all_shards(topic, SHARDS):
            assert r.hlen(keys.held) == 0 and r.hlen(keys.jobs) == 0
