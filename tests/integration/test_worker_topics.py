"""One worker over several topics, on a real server and cluster: weighted shares of its
slots while every topic has jobs waiting, strict priority, an idle topic's share used by the
others, a handler per topic, and bad topic lists refused by name.
(docs/architecture.md, "Several topics in one worker".)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import run_wheelq, start_wheelq, stop
from tests.support.waiting import eventually_sync, until
from wheelq import AsyncClient, Client, InvalidArgumentError, Job, Worker

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
    await client.create_topic(topic, shards)
    await client.enqueue_many(topic, [{"payload": i} for i in range(n)])


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
        await client.create_topic(idle, 2)
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


def test_wheelq_worker_serves_topics_with_weights_and_refuses_a_bad_one(
    redis_url: str, topic: str, tmp_path: Path
) -> None:
    a, b = f"{topic}-a", f"{topic}-b"
    with Client.from_url(redis_url) as client:
        for name in (a, b):
            client.create_topic(name, 2)
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
