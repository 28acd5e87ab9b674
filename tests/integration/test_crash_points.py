"""A node or a worker process that dies at a named crash point (`wheelq.runtime.crash`,
armed through ``WHEELQ_CRASH_AT``) in the middle of emitting or settling: another takes
over, and the account shows nothing lost, nothing fired twice or early, and no job run
more often than at-least-once allows.

The worst moments are the ones between Redis acting and the process knowing it did:
``emit.after_reply`` (the jobs are in the stream, the node never recorded it) and
``ack.after_reply`` / ``handler.after`` (the handler ran, the ack was or was not written).
"""

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
from wheelq.core.keys import all_shards
from wheelq.testing import Fired, reconcile

SHARDS = 4
NODE = {
    "lease_ttl_ms": 1500,
    "window_ms": 5000,
    "preload_interval_ms": 200,
    "check_interval_ms": 100,
}
WORKER = {"visibility_timeout_ms": 1000, "claim_interval_ms": 200, "block_ms": 200}

pytestmark = pytest.mark.slow


def fired(r: redis.Redis, topic: str) -> list[Fired]:
    out = []
    for keys in all_shards(topic, SHARDS):
        out += [Fired.from_entry(entry_id, f) for entry_id, f in r.xrange(keys.ready)]
    return out


def pending(r: redis.Redis, topic: str) -> list[str]:
    return [m.decode() for k in all_shards(topic, SHARDS) for m in r.zrange(k.delayed, 0, -1)]


def unacked(r: redis.Redis, topic: str) -> int:
    return sum(int(r.xpending(k.ready, "default")["pending"]) for k in all_shards(topic, SHARDS))


def dies_at_its_point(proc: NodeProcess | WorkerProcess, point: str) -> int | None:
    """Wait for the process to end by itself; its return code (-9: it killed itself)."""
    eventually_sync(lambda: not proc.alive(), timeout_s=20, what=f"a death at {point}")
    return proc.proc.poll()


@pytest.mark.parametrize("point", ["emit.before_send", "emit.after_reply", "sweep.after_reply"])
def test_a_node_dying_at_a_crash_point_loses_and_repeats_nothing(
    redis_url: str, topic: str, tmp_path: Path, point: str
) -> None:
    with Client.from_url(redis_url) as client, redis.Redis.from_url(redis_url) as r:
        admin = Admin.of(client)
        admin.create_topic(topic, SHARDS)
        items = [
            EnqueueItem(payload=i, delay=1.0 + 3.0 * i / 400, job_id=f"j{i}") for i in range(400)
        ]
        ids = client.enqueue_many(topic, items)
        doomed = NodeProcess(redis_url, topic, "doomed", tmp_path, NODE, crash_at=f"{point}:4")
        other: NodeProcess | None = None
        try:
            code = dies_at_its_point(doomed, point)
            other = NodeProcess(redis_url, topic, "other", tmp_path, NODE)

            def every_job_fired() -> bool:
                return {f.job_id for f in fired(r, topic)} >= set(ids)

            eventually_sync(every_job_fired, timeout_s=30, what="the other node to fire all")
            account = reconcile(ids, fired(r, topic), pending=pending(r, topic))
        finally:
            doomed.finish()
            if other is not None:
                other.finish()
        assert code == -signal.SIGKILL, doomed.log_tail()
        assert account.ok, account.examples
        assert account.fired == len(ids)


@pytest.mark.parametrize("point", ["handler.after", "ack.before_send", "ack.after_reply"])
def test_a_worker_dying_at_a_crash_point_has_its_jobs_run_again_elsewhere(
    redis_url: str, topic: str, tmp_path: Path, point: str
) -> None:
    with Client.from_url(redis_url) as client, redis.Redis.from_url(redis_url) as r:
        admin = Admin.of(client)
        admin.create_topic(topic, SHARDS)
        doomed = WorkerProcess(
            redis_url, topic, "doomed", tmp_path, {"sleep_s": 0.01}, WORKER, f"{point}:5"
        )
        other: WorkerProcess | None = None
        try:
            ids = [client.enqueue(topic, i, job_id=f"j{i}") for i in range(200)]  # due now
            code = dies_at_its_point(doomed, point)
            other = WorkerProcess(redis_url, topic, "other", tmp_path, {}, WORKER)
            started_by_doomed = set(doomed.jobs("start"))

            def all_settled() -> bool:
                runs = Counter(doomed.jobs("start") + other.jobs("start"))
                return set(runs) >= set(ids) and unacked(r, topic) == 0

            eventually_sync(all_settled, timeout_s=30, what="every job run and acked")
            runs = Counter(doomed.jobs("start") + other.jobs("start"))
            account = reconcile(ids, fired(r, topic), handled=runs, max_runs=2)
        finally:
            doomed.finish()
            if other is not None:
                other.finish()
        assert code == -signal.SIGKILL, doomed.log_tail()
        assert account.ok, account.examples
        assert started_by_doomed, "the doomed worker got jobs before it died"
        if point != "ack.after_reply":  # its acks were written: nothing to run again
            again = {i for i in started_by_doomed if runs[i] == 2}
            assert again, "a job the dead worker held ran again on the other one"
