"""One worker over several topics, on a real server and cluster: weighted shares of its
slots while every topic has jobs waiting, strict priority, an idle topic's share used by the
others, a handler per topic, and bad topic lists refused by name.
(docs/architecture.md, "Several topics in one worker".)
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import run_wheelq, start_wheelq, stop
from tests.support.waiting import eventually_sync, until
from wheelq import Admin, AsyncAdmin, AsyncClient, Client, InvalidArgumentError, Job, Worker

pytestmark = pytest.mark.cluster_too

FAST: dict[str, Any] = {
    "visibility_timeout_ms": 2000,
    "claim_interval_ms": 200,
    "shutdown_grace_ms": 2000,
}


@contextlib.asynccontextmanager
async def started(worker: Worker) -> AsyncIterator[Worker]:
    await worker.start()
    try:
        yield worker
    finally:
        await worker.stop(grace_ms=0)


async def fire(client: AsyncClient, topic: str, n: int, shards: int = 2) -> None:
    """`n` jobs of `topic` in its stream now (due at once: the enqueue fires them)."""
    await AsyncAdmin.of(client).create_topic(topic, shards)
    await client.enqueue_many(topic, [{"payload": i} for i in range(n)])


def assert_shares(started: list[str], weights: dict[str, int], *, first: int) -> None:
    """The `first` starts went to each topic in proportion to its weight: within 10% of its
    share, plus one round of turns (sum of the weights: where a round begins and ends)."""
    counted = Counter(started[:first])
    assert sum(counted.values()) == first, f"only {len(started)} starts"
    total = sum(weights.values())
    for name, weight in weights.items():
        expected = first * weight / total
        assert abs(counted[name] - expected) <= 0.1 * expected + total, (counted, weights)


class SyncStarts:
    """A ``def`` handler (run on the worker's threads) recording the topic of each job it
    starts; each run takes `run_s`."""

    def __init__(self, run_s: float = 0.0) -> None:
        self.topics: list[str] = []
        self.run_s = run_s
        self.running = self.most_running = 0  # handlers running at once (over every topic)
        self._lock = threading.Lock()

    def __call__(self, job: Job) -> None:
        with self._lock:
            self.topics.append(job.topic)
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        try:
            if self.run_s:
                time.sleep(self.run_s)  # the work a job takes, not a synchronisation
        finally:
            with self._lock:
                self.running -= 1


class Starts:
    """A handler recording the topic of each job it starts; each run takes `run_s`."""

    def __init__(self, run_s: float = 0.0) -> None:
        self.topics: list[str] = []
        self.run_s = run_s
        self.gate: asyncio.Event | None = None

    async def __call__(self, job: Job) -> None:
        self.topics.append(job.topic)
        if self.gate is not None:
            await self.gate.wait()
        elif self.run_s:
            await asyncio.sleep(self.run_s)  # the work a job takes, not a synchronisation


async def test_a_saturated_worker_starts_each_topic_in_proportion_to_its_weight(
    redis_url: str, topic: str
) -> None:
    weights = {f"{topic}-critical": 6, f"{topic}-default": 3, f"{topic}-low": 1}
    async with AsyncClient.from_url(redis_url) as client:
        for name in weights:
            await fire(client, name, 3000)
    starts = Starts(run_s=0.004)  # readers keep every lane's backlog full, even on a busy machine
    worker = Worker.from_url(redis_url, weights, starts, concurrency=4, **FAST)
    async with started(worker):
        await until(lambda: len(starts.topics) >= 3000, timeout_s=60, what="3,000 starts")
    counted = Counter(starts.topics[:3000])
    for name, weight in weights.items():
        expected = 3000 * weight / sum(weights.values())
        assert abs(counted[name] - expected) <= 0.1 * expected, (counted, weights)


WEIGHTS = {"critical": 6, "default": 3, "low": 1}
WAITING = 400
"""Jobs waiting in each topic: the first 600 starts (a critical share of 360) find every
topic with jobs waiting, and a concurrency of 1,500 holds every one of them at once."""


@pytest.mark.parametrize(
    ("kind", "concurrency", "run_s"),
    [
        ("sync", 1, 0.0),
        ("async", 1, 0.0),
        ("sync", 8, 0.0),
        ("sync", 8, 0.002),
        ("async", 8, 0.0),
        ("sync", 1500, 0.0),  # more slots than jobs waiting: every job has a slot at once
        ("async", 1500, 0.0),
    ],
)
async def test_weights_hold_for_sync_and_async_handlers_at_any_concurrency(
    redis_url: str, topic: str, kind: str, concurrency: int, run_s: float
) -> None:
    """Issue 43 item 1: a ``def`` handler's topics started in arrival order (no-op: all of
    the first topic read), each topic on threads of its own; weights must hold for both
    handler kinds, from one slot to more slots than jobs, no-op or not."""
    weights = {f"{topic}-{name}": weight for name, weight in WEIGHTS.items()}
    async with AsyncClient.from_url(redis_url) as client:
        for name in weights:
            await fire(client, name, WAITING)
    starts = SyncStarts(run_s) if kind == "sync" else Starts(run_s)
    worker = Worker.from_url(redis_url, weights, starts, concurrency=concurrency, **FAST)
    async with started(worker):
        await until(lambda: len(starts.topics) >= 600, timeout_s=60, what="600 starts")
        status = worker.status()
    assert_shares(starts.topics, weights, first=600)
    if isinstance(starts, SyncStarts):  # the topics share the slots: no threads of their own
        assert starts.most_running <= concurrency
    # one read-ahead, the worker's, learnt from every topic's runs
    assert {t["read_ahead"] for t in status["topics"].values()} == {status["read_ahead"]}


async def test_strict_priority_starts_every_critical_job_before_any_low_one(
    redis_url: str, topic: str
) -> None:
    critical, low = f"{topic}-critical", f"{topic}-low"
    async with AsyncClient.from_url(redis_url) as client:
        await fire(client, critical, 200)
        await fire(client, low, 200)
    starts = Starts()
    topics = {low: 1, critical: 5}  # strict orders by weight, not by the order given
    worker = Worker.from_url(redis_url, topics, starts, concurrency=4, strict=True, **FAST)
    async with started(worker):
        await until(lambda: len(starts.topics) == 400, timeout_s=30, what="all 400 started")
    assert starts.topics == [critical] * 200 + [low] * 200
    assert worker.status()["topics"][low]["handled"] == 200


async def test_an_idle_topic_leaves_every_slot_to_the_busy_one_and_each_has_its_handler(
    redis_url: str, topic: str
) -> None:
    busy, idle = f"{topic}-busy", f"{topic}-idle"
    async with AsyncClient.from_url(redis_url) as client:
        admin = AsyncAdmin.of(client)
        await admin.create_topic(idle, 2)
        await fire(client, busy, 20)
        low = Starts()
        low.gate = asyncio.Event()
        high = Starts()
        handlers = {idle: high, busy: low}
        worker = Worker.from_url(redis_url, {idle: 9, busy: 1}, handlers, concurrency=4, **FAST)
        async with started(worker):
            await until(lambda: len(low.topics) == 4, what="every slot running a busy job")
            assert worker.status()["running"] == 4 and high.topics == []
            await client.enqueue(idle, "now")
            low.gate.set()
            await until(lambda: high.topics == [idle], what="the idle topic's job, on its handler")
            await until(lambda: len(low.topics) == 20, what="the rest of the busy topic")
        assert set(low.topics) == {busy}


@pytest.mark.parametrize(
    ("topic_arg", "handler_arg", "parameter", "says"),
    [
        ({"a": 0}, None, "topic", "must be an int in [1, 1000], got 0"),
        ({"a": -1}, None, "topic", "got -1"),
        ({"a": 1.5}, None, "topic", "got 1.5"),
        ({"a": "6"}, None, "topic", "got '6'"),
        ({"a": True}, None, "topic", "got True"),
        ({}, None, "topic", "serves 1-100 topics, got 0"),
        (["a", "a"], None, "topic", "named twice"),
        ({"a": 1, "bad topic": 1}, None, "topic", "topic"),
        (42, None, "topic", "a mapping of topic -> weight"),
        ({"a": 1, "b": 1}, {"a": print}, "handler", "no handler for 'b'"),
        ({"a": 1}, {"a": print, "c": print}, "handler", "'c' is not served"),
    ],
)
def test_bad_topics_and_handlers_are_refused_by_name(
    redis_url: str, topic_arg: Any, handler_arg: Any, parameter: str, says: str
) -> None:
    with pytest.raises(InvalidArgumentError) as refused:
        Worker.from_url(redis_url, topic_arg, handler_arg or print)
    assert refused.value.parameter == parameter and says in str(refused.value), refused.value
    with pytest.raises(InvalidArgumentError) as refused:
        Worker.from_url(redis_url, "a", print, strict="yes")  # type: ignore[arg-type]
    assert refused.value.parameter == "strict"


RECORDER = """
import os

def record(job):
    with open(os.environ["WHEELQ_TEST_OUT"], "a") as f:
        f.write(f"{job.topic} {job.id}\\n")
"""


ASYNC_RECORDER = """
import os

async def record(job):
    with open(os.environ["WHEELQ_TEST_OUT"], "a") as f:
        f.write(f"{job.topic} {job.id}\\n")
"""


@pytest.mark.parametrize(("kind", "concurrency"), [("sync", None), ("sync", "1"), ("async", None)])
def test_wheelq_worker_starts_topics_by_their_weights_whatever_the_handler(
    redis_url: str, topic: str, tmp_path: Path, kind: str, concurrency: str | None
) -> None:
    """Issue 43 item 1, the CLI face: ``--topic c=6 --topic d=3 --topic l=1`` with a ``def``
    handler started c 386 / d 2,672 / l 1,942 of the first 1,000."""
    weights = {f"{topic}-{name}": weight for name, weight in WEIGHTS.items()}
    with Client.from_url(redis_url) as client:
        admin = Admin.of(client)
        for name in weights:
            admin.create_topic(name, 2)
            client.enqueue_many(name, [{"payload": i} for i in range(WAITING)])
    (tmp_path / "handlers.py").write_text(RECORDER if kind == "sync" else ASYNC_RECORDER)
    out = tmp_path / "handled.txt"
    out.touch()
    args = [f"--topic={name}={weight}" for name, weight in weights.items()]
    if concurrency is not None:  # else the default
        args += ["--concurrency", concurrency]
    worker = start_wheelq(
        "worker", "handlers:record", *args, "--redis-url", redis_url,
        cwd=tmp_path, env={"WHEELQ_TEST_OUT": str(out)},
    )  # fmt: skip
    try:
        eventually_sync(
            lambda: len(out.read_text().splitlines()) >= 600, timeout_s=30, what="600 handled"
        )
    finally:
        _, err = stop(worker)
    assert worker.returncode == 0, err
    # each run appends its line first thing: with one slot the order of lines is the start
    # order; with more it is within the few slots running at once (far under the tolerance)
    handled = [line.split()[0] for line in out.read_text().splitlines()]
    assert_shares(handled, weights, first=600)


def test_wheelq_worker_serves_topics_with_weights_and_refuses_a_bad_one(
    redis_url: str, topic: str, tmp_path: Path
) -> None:
    a, b = f"{topic}-a", f"{topic}-b"
    with Client.from_url(redis_url) as client:
        admin = Admin.of(client)
        for name in (a, b):
            admin.create_topic(name, 2)
            client.enqueue_many(name, [{"payload": i} for i in range(5)])
    (tmp_path / "handlers.py").write_text(RECORDER)
    out = tmp_path / "handled.txt"
    out.touch()
    worker = start_wheelq(
        "worker", "handlers:record", "--topic", f"{a}=2", "--topic", b, "--strict",
        "--concurrency", "1",  # one thread: the order handlers write in is the start order
        "--redis-url", redis_url, cwd=tmp_path, env={"WHEELQ_TEST_OUT": str(out)},
    )  # fmt: skip
    try:
        eventually_sync(
            lambda: len(out.read_text().splitlines()) == 10, timeout_s=30, what="10 handled"
        )
    finally:
        _, err = stop(worker)
    assert worker.returncode == 0, err
    handled = [line.split()[0] for line in out.read_text().splitlines()]
    assert handled == [a] * 5 + [b] * 5  # strict: the heavier first
    refused = run_wheelq(
        "worker", "handlers:record", "--topic", f"{a}=0", "--topic", b, "--redis-url", redis_url,
        cwd=tmp_path,
    )  # fmt: skip
    assert refused.returncode == 2 and "must be an int in [1, 1000], got 0" in refused.stderr
