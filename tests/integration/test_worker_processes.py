"""Workers as real processes (tests/support/worker_proc.py): kill -9 with jobs in flight,
SIGSTOP past the visibility timeout, a poison job that kills its worker every time, SIGTERM.

docs/architecture.md, invariants 1 and 2: whatever happens to worker processes, every job is
handled (at least once) or dead-lettered, and ends acked; duplicates come only from a crashed
worker.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.support.ids import balanced_ids
from tests.support.waiting import eventually_sync
from tests.support.worker_proc import WorkerProcess
from wheelq import Admin, Client, EnqueueItem
from wheelq.core.keys import all_shards, shard_of

SHARDS = 4
FAST: dict[str, Any] = {"visibility_timeout_ms": 800, "claim_interval_ms": 100}


class Procs:
    """Worker processes of one test; every one is killed and reaped at teardown."""

    def __init__(self, url: str, topic: str, out_dir: Path) -> None:
        self.url = url
        self.topic = topic
        self.out_dir = out_dir
        self.all: list[WorkerProcess] = []

    def spawn(self, name: str, behaviour: dict[str, Any], **settings: Any) -> WorkerProcess:
        proc = WorkerProcess(self.url, self.topic, name, self.out_dir, behaviour, settings)
        self.all.append(proc)
        return proc

    def finish(self) -> None:
        for proc in self.all:
            proc.finish()

    def jobs(self, event: str) -> Counter[str]:
        """How often each job id had an `event` line, over every process."""
        return Counter(job for proc in self.all for job in proc.jobs(event))

    def logs(self) -> str:
        return "\n".join(f"--- {p.consumer} (rc {p.proc.poll()})\n{p.log_tail()}" for p in self.all)

    def wait(
        self,
        check: Callable[[], object],
        *,
        timeout_s: float,
        what: str,
        state: Callable[[], str] | None = None,
    ) -> None:
        """`eventually_sync`, with the workers' logs (and `state()`) in the failure."""
        try:
            eventually_sync(check, timeout_s=timeout_s, what=what)
        except AssertionError as exc:
            seen = f"\n{state()}" if state is not None else ""
            raise AssertionError(f"{exc}{seen}\n{self.logs()}") from None


@pytest.fixture
def client(redis_url: str) -> Iterator[Client]:
    with Client.from_url(redis_url) as c:
        yield c


@pytest.fixture
def procs(redis_url: str, topic: str, tmp_path: Path) -> Iterator[Procs]:
    spawned = Procs(redis_url, topic, tmp_path)
    try:
        yield spawned
    finally:
        spawned.finish()


def enqueue_in_every_shard(client: Client, topic: str, per_shard: int = 3) -> list[str]:
    """Jobs due now, `per_shard` in each shard: a worker's first read (one entry per shard
    when its slots are fewer than the shards) then holds more than it can run."""
    Admin.of(client).create_topic(topic, SHARDS)
    ids = balanced_ids("job", per_shard, SHARDS)
    return client.enqueue_many(topic, [EnqueueItem(payload=i, job_id=i) for i in ids])


def holding(worker: WorkerProcess, r: redis.Redis) -> str:
    """What `worker` started and holds in each shard, for a failure message."""
    held = [
        len(r.xpending_range(k.ready, "default", "-", "+", 1000, consumername=worker.consumer))
        for k in all_shards(worker.topic, SHARDS)
    ]
    ready = [r.xlen(k.ready) for k in all_shards(worker.topic, SHARDS)]
    return f"{worker.consumer} started {worker.jobs('start')}, holds {held}, streams {ready}"


def pending(r: redis.Redis, topic: str, shards: int, group: str = "default") -> int:
    return sum(int(r.xpending(k.ready, group)["pending"]) for k in all_shards(topic, shards))


def pending_of(r: redis.Redis, topic: str, shards: int, consumer: str) -> int:
    return sum(
        len(r.xpending_range(k.ready, "default", "-", "+", 1000, consumername=consumer))
        for k in all_shards(topic, shards)
    )


def test_kill_9_with_jobs_in_flight_loses_nothing(
    procs: Procs, client: Client, admin: Admin, redis_sync: redis.Redis, topic: str
) -> None:
    admin.create_topic(topic, SHARDS)
    a = procs.spawn("a", {"sleep_s": 0.5}, **FAST, concurrency=3)
    ids = client.enqueue_many(topic, [{"payload": i} for i in range(12)])

    def in_flight() -> set[str]:
        return set(a.jobs("start")) - set(a.jobs("finish"))

    procs.wait(
        lambda: a.jobs("finish") and len(in_flight()) >= 2,
        timeout_s=20,
        what="worker a to finish a job and have 2 in flight",
    )
    a.signal(signal.SIGKILL)
    assert a.proc.wait(timeout=10) == -signal.SIGKILL
    lost_with_a = in_flight()
    assert lost_with_a

    b = procs.spawn("b", {"sleep_s": 0.5}, **FAST, concurrency=12)
    procs.wait(
        lambda: set(ids) <= set(procs.jobs("finish")),
        timeout_s=20,
        what="every job to be handled",
    )
    procs.wait(
        lambda: pending(redis_sync, topic, SHARDS) == 0,
        timeout_s=5,
        what="every entry to be acked",
    )
    assert lost_with_a <= set(b.jobs("finish")), "b did not take over a's jobs in flight"
    rerun = [x for x in b.lines() if x["event"] == "start" and x["job"] in lost_with_a]
    assert {(x["attempt"], x["deliveries"]) for x in rerun} == {(1, 2)}, (
        "a job taken over from a killed worker must reach the handler as the same attempt, "
        "on its second delivery"
    )
    twice = {job for job, n in procs.jobs("finish").items() if n > 1}
    assert twice <= set(a.jobs("start")), f"jobs run twice without a crash: {twice}"
    assert admin.dead_letters(topic) == []
    assert b.alive()


def test_a_worker_stopped_past_its_visibility_timeout_is_taken_over_and_its_late_acks_do_nothing(
    procs: Procs, client: Client, admin: Admin, redis_sync: redis.Redis, topic: str
) -> None:
    admin.create_topic(topic, SHARDS)
    a = procs.spawn("a", {"sleep_s": 0.3}, **FAST, concurrency=3)
    ids = client.enqueue_many(topic, [{"payload": i} for i in range(12)])

    def in_flight() -> set[str]:
        return set(a.jobs("start")) - set(a.jobs("finish"))

    procs.wait(lambda: len(in_flight()) >= 2, timeout_s=20, what="a to have 2 jobs in flight")
    a.signal(signal.SIGSTOP)
    held = in_flight()
    b = procs.spawn("b", {"sleep_s": 0.05}, **FAST, concurrency=12)
    procs.wait(lambda: held <= set(b.jobs("finish")), timeout_s=20, what="b to run a's jobs")
    a.signal(signal.SIGCONT)  # a finishes them too, late, and tries to settle them
    procs.wait(lambda: held <= set(a.jobs("finish")), timeout_s=20, what="a to finish late")
    procs.wait(
        lambda: set(ids) <= set(procs.jobs("finish")) and pending(redis_sync, topic, SHARDS) == 0,
        timeout_s=20,
        what="every job handled and acked",
    )
    runs = procs.jobs("start")
    twice = {j for j, n in runs.items() if n > 1}
    assert held <= twice, "the jobs a was running when stopped ran again on b"
    assert twice <= set(a.jobs("start")), "only jobs a had been given ran twice"
    assert max(runs.values()) == 2
    assert admin.dead_letters(topic) == [], "a's late settlements took no second effect"
    assert a.alive() and b.alive()


def test_poison_job_that_kills_its_worker_is_dead_lettered_after_max_deliveries(
    procs: Procs, client: Client, admin: Admin, redis_sync: redis.Redis, topic: str
) -> None:
    max_deliveries = 3
    # One slot, and every job in one shard (of 2: a worker cannot restart on a 1-shard
    # topic, see test_worker.py::test_workers_start_on_a_topic_of_one_shard): the poison is
    # never held together with another job, so only the poison keeps being delivered to
    # dying workers.
    admin.create_topic(topic, 2)
    ids = iter(i for i in (f"job-{n}" for n in range(1000)) if shard_of(i, 2) == 0)
    settings = {
        **FAST,
        "visibility_timeout_ms": 500,
        "concurrency": 1,
        "max_deliveries": max_deliveries,
    }
    before = [client.enqueue(topic, f"good-{i}", job_id=next(ids)) for i in range(4)]
    poison = client.enqueue(topic, "poison", job_id=next(ids))
    after = [client.enqueue(topic, f"good-{i}", job_id=next(ids)) for i in range(4, 8)]
    good = set(before + after)
    behaviour = {"poison": "poison"}
    workers = [procs.spawn("w0", behaviour, **settings)]

    def settled() -> bool:
        return good <= set(procs.jobs("finish")) and bool(admin.dead_letters(topic))

    for _ in range(max_deliveries + 3):  # restart the worker each time the poison kills it
        current = workers[-1]
        procs.wait(
            lambda: not current.alive() or settled(),  # noqa: B023 (called in this iteration)
            timeout_s=15,
            what=f"{current.consumer} to die or everything to settle",
        )
        if current.alive():
            break
        assert current.proc.returncode == -signal.SIGKILL, procs.logs()
        workers.append(procs.spawn(f"w{len(workers)}", behaviour, **settings))
    else:
        pytest.fail(f"the poison job was never dead-lettered\n{procs.logs()}")

    (letter,) = admin.dead_letters(topic)
    assert (letter.job_id, letter.reason, letter.payload) == (poison, "deliveries", "poison")
    assert f"max_deliveries {max_deliveries}" in letter.error
    assert procs.jobs("start")[poison] == max_deliveries, "the poison ran more (or less) often"
    assert len(workers) == max_deliveries + 1, "a worker died of something else than the poison"
    assert good <= set(procs.jobs("finish"))
    eventually_sync(
        lambda: pending(redis_sync, topic, 2) == 0, timeout_s=5, what="every entry to be acked"
    )
    assert workers[-1].alive()


def test_sigterm_finishes_running_jobs_and_hands_the_rest_on(
    procs: Procs, client: Client, redis_sync: redis.Redis, topic: str
) -> None:
    grace_s = 5.0
    # A visibility timeout far longer than the test: b can run a's entries only if a hands
    # them on.
    settings = {
        **FAST,
        "visibility_timeout_ms": 60_000,
        "shutdown_grace_ms": int(grace_s * 1000),
    }
    ids = enqueue_in_every_shard(client, topic)
    a = procs.spawn("a", {"sleep_s": 1.5}, **settings, concurrency=2)
    procs.wait(
        lambda: len(a.jobs("start")) == 2 and pending_of(redis_sync, topic, SHARDS, "a") > 2,
        timeout_s=15,
        what="a to run 2 jobs and hold more",
        state=lambda: holding(a, redis_sync),
    )
    running = set(a.jobs("start"))
    seen = len(a.lines())
    assert not a.jobs("finish")

    signalled = time.monotonic()
    a.signal(signal.SIGTERM)
    code = a.proc.wait(timeout=grace_s + 5)
    took_s = time.monotonic() - signalled

    assert code == 0, procs.logs()
    assert took_s < grace_s, f"a took {took_s:.1f} s to stop (grace {grace_s} s)"
    after_signal = a.lines()[seen:]
    assert {x["job"] for x in after_signal if x["event"] == "finish"} == running
    assert set(a.jobs("start")) == running, "a started a job after SIGTERM"
    report = a.report()
    assert report is not None
    assert (report["finished"], report["abandoned"]) == (2, 0)
    assert pending_of(redis_sync, topic, SHARDS, "a") > 0, "nothing was left to hand on"

    procs.spawn("b", {}, **settings, concurrency=12)
    procs.wait(
        lambda: set(ids) <= set(procs.jobs("finish")),
        timeout_s=15,
        what="b to run what a left (long before the visibility timeout)",
    )
    eventually_sync(
        lambda: pending(redis_sync, topic, SHARDS) == 0,
        timeout_s=5,
        what="every entry to be acked",
    )
    assert procs.jobs("finish") == Counter(ids), "a job was lost or run twice"


def test_a_second_sigterm_stops_at_once_and_hands_running_jobs_on(
    procs: Procs, client: Client, redis_sync: redis.Redis, topic: str
) -> None:
    visibility_ms = 60_000
    settings = {
        **FAST,
        "visibility_timeout_ms": visibility_ms,
        "shutdown_grace_ms": 30_000,
    }
    ids = enqueue_in_every_shard(client, topic)
    # Jobs far longer than the test: only the second signal can end them.
    a = procs.spawn("a", {"sleep_s": 60}, **settings, concurrency=2)
    procs.wait(
        lambda: len(a.jobs("start")) == 2 and pending_of(redis_sync, topic, SHARDS, "a") > 2,
        timeout_s=15,
        what="a to run 2 jobs and hold more",
        state=lambda: holding(a, redis_sync),
    )
    running = set(a.jobs("start"))

    def handed_on() -> int:
        rows = [
            row
            for k in all_shards(topic, SHARDS)
            for row in redis_sync.xpending_range(k.ready, "default", "-", "+", 100, "a")
        ]
        return sum(1 for row in rows if row["time_since_delivered"] >= visibility_ms)

    a.signal(signal.SIGTERM)
    procs.wait(lambda: handed_on() > 0, timeout_s=10, what="a to hand on its waiting entries")
    assert a.alive(), "a stopped before its running jobs finished or the grace ended"
    signalled = time.monotonic()
    a.signal(signal.SIGTERM)
    code = a.proc.wait(timeout=20)
    took_s = time.monotonic() - signalled

    assert code == 0, procs.logs()
    assert took_s < 5, f"a took {took_s:.1f} s to stop after the second signal"
    assert not a.jobs("finish")
    report = a.report()
    assert report is not None
    assert (report["finished"], report["abandoned"]) == (0, 2)
    assert handed_on() == pending_of(redis_sync, topic, SHARDS, "a"), "not all handed on"

    b = procs.spawn("b", {}, **settings, concurrency=12)
    procs.wait(
        lambda: set(ids) <= set(procs.jobs("finish")),
        timeout_s=15,
        what="b to run everything, the abandoned jobs too (long before the visibility timeout)",
    )
    procs.wait(lambda: pending(redis_sync, topic, SHARDS) == 0, timeout_s=5, what="acks")
    assert procs.jobs("finish") == Counter(ids)
    assert running <= set(b.jobs("start"))
