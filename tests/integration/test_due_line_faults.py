"""The due line through faults (docs/architecture.md, "The due line"): jobs waiting on a
fair, prioritised topic's lines while a worker is killed -9 and the scheduler node leading a
shard is killed -9 (the other takes its shards over) all fire once, none before its due time,
in the line's order within each shard's lanes, and run, with a sync handler and an async
one."""

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
SLACK_MS = 100
"""How long a due job may take to join its line: the leader lines what is due at each sweep
(a few ms apart), and a job due within `SLACK_MS` of another's firing may miss that turn."""
NODE = {"lease_ttl_ms": 2000, "window_ms": 5000, "preload_interval_ms": 100}
WORKER = {"visibility_timeout_ms": 1000, "claim_interval_ms": 200, "block_ms": 200}

pytestmark = [pytest.mark.slow, pytest.mark.both_servers]


def out_of_order(entries: list[tuple[int, dict[bytes, bytes]]]) -> list[str]:
    """Each pair of one shard's entries (in stream order) that breaks the line's order, said
    as text: a job fired while another of its lane (its key: the topic is fair) had been due
    for `SLACK_MS` and ranked ahead of it by more than `SLACK_MS` (rank: due - priority x
    credit, docs/architecture.md "The due line")."""

    def rank(f: dict[bytes, bytes]) -> int:
        return int(f[Field.DUE]) - int(f.get(Field.PRIORITY, b"5")) * CREDIT_MS

    def said(ms: int, f: dict[bytes, bytes]) -> str:
        key, priority = f.get(Field.KEY, b"").decode(), f.get(Field.PRIORITY, b"5").decode()
        due = f[Field.DUE].decode()
        return f"{f[Field.ID].decode()} (key {key!r}, p{priority}, due {due}, fired {ms})"

    broken = []
    for i, (fired_ms, first) in enumerate(entries):
        for later_ms, later in entries[i + 1 :]:
            same_lane = first.get(Field.KEY) == later.get(Field.KEY)
            was_due = int(later[Field.DUE]) + SLACK_MS <= fired_ms
            if same_lane and was_due and rank(later) + SLACK_MS < rank(first):
                broken.append(f"{said(fired_ms, first)} before {said(later_ms, later)}")
    return broken


def fired(r: redis.Redis, topic: str) -> list[list[tuple[int, dict[bytes, bytes]]]]:
    """Every entry of the topic's ready streams: (its stream ms, its fields), a list per
    shard, in stream order."""
    return [
        [(int(entry_id.split(b"-")[0]), fields) for entry_id, fields in r.xrange(keys.ready)]
        for keys in all_shards(topic, SHARDS)
    ]


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
            # The nodes share the shards (a lease each) before the jobs come: the leader
            # killed below is then the one leading shard 0, not one handing it over.
            leases = [keys.lease for keys in all_shards(topic, SHARDS)]
            eventually_sync(
                lambda: len({r.get(lease) for lease in leases} - {None}) == SHARDS,
                timeout_s=30,
                what="each node leading a shard",
            )
            # Each lane mixes priorities: key a's priority-9 jobs come due behind its own
            # backlog of priority 0 and pass it; b (weight 2) and the keyless lane share turns.
            items = [EnqueueItem(payload=i, delay=0.5, key="a", priority=0) for i in range(600)]
            items += [EnqueueItem(payload=i, delay=0.6, key="a", priority=9) for i in range(60)]
            items += [
                EnqueueItem(payload=p, delay=0.6, key="b", priority=p % 10) for p in range(60)
            ]
            items += [EnqueueItem(payload=p, delay=0.7, priority=p % 10) for p in range(60)]
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

    times = Counter(fields[Field.ID].decode() for shard in entries for _, fields in shard)
    assert set(times) == set(ids), "a job never fired"
    assert [job for job, n in times.items() if n > 1] == [], "a job fired twice"
    early = [f for shard in entries for ms, f in shard if ms < int(f[Field.DUE])]
    assert early == [], f"{len(early)} jobs fired before their due time"
    for shard, fired_there in enumerate(entries):
        broken = out_of_order(fired_there)
        assert broken == [], f"shard {shard}: {len(broken)} pairs out of order, {broken[:3]}"
    with redis.Redis.from_url(redis_url) as r:
        for keys in all_shards(topic, SHARDS):
            assert r.hlen(keys.held) == 0 and r.hlen(keys.jobs) == 0
