"""Weighted topics, every face they are exposed on: a saturated worker over three topics
weighted 6:3:1 starts each in proportion to its weight, with an async handler, with a
``def`` handler, and as ``wheelq worker --topic c=6 --topic d=3 --topic l=1``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.support.cli import start_wheelq, stop
from tests.support.faces import cli_once
from tests.support.starts import RUN_S
from tests.support.waiting import until
from wheelq import AsyncAdmin, AsyncClient, Job, Worker
from wheelq.testing import ServerBinary

pytestmark = pytest.mark.cluster_too

WEIGHTS = {"c": 6, "d": 3, "l": 1}
WAITING = 800
"""Jobs waiting in each topic before the worker starts."""
WARM = 100
"""Starts not counted: while the readers of a new worker (one a shard) fill its lanes."""
COUNTED = 600
"""Starts counted after `WARM`, while every topic still has jobs waiting."""
FAST = {"visibility_timeout_ms": 5000, "claim_interval_ms": 500, "concurrency": 10}
"""The default concurrency, as the CLI's rows run: there the 6:3:1 shares are measured
best apart from a def handler's (on c8a53f7 its rows miss them in about 19 runs of 20)."""


async def filled(redis_url: str, topic: str) -> dict[str, int]:
    """The three weighted topics of `topic`, each with `WAITING` jobs in its stream."""
    weights = {f"{topic}-{name}": w for name, w in WEIGHTS.items()}
    async with AsyncClient.from_url(redis_url) as client:
        admin = AsyncAdmin.of(client)
        for name in weights:
            await admin.create_topic(name, 2)
            await client.enqueue_many(name, [{"payload": i} for i in range(WAITING)])
    return weights


def assert_in_proportion(started: list[str]) -> None:
    counted = Counter(name.rsplit("-", 1)[1] for name in started[WARM : WARM + COUNTED])
    for name, weight in WEIGHTS.items():
        expected = COUNTED * weight / sum(WEIGHTS.values())
        assert abs(counted[name] - expected) <= 0.25 * expected + 12, (counted, WEIGHTS)


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_saturated_worker_starts_each_topic_in_proportion_with_either_handler_kind(
    kind: str, redis_url: str, topic: str
) -> None:
    weights = await filled(redis_url, topic)
    started: list[str] = []

    def handle_sync(job: Job) -> None:
        started.append(job.topic)
        time.sleep(RUN_S)

    async def handle(job: Job) -> None:
        started.append(job.topic)
        await asyncio.sleep(RUN_S)

    worker = Worker.from_url(redis_url, weights, handle_sync if kind == "sync" else handle, **FAST)
    await worker.start()
    try:
        await until(lambda: len(started) >= WARM + COUNTED, timeout_s=30, what="the starts")
    finally:
        await worker.stop(grace_ms=0)
    assert_in_proportion(started)


@pytest.mark.parametrize("handler", ["record_async", "record"])
async def test_wheelq_worker_with_weighted_topics_starts_each_in_proportion(
    request: pytest.FixtureRequest,
    handler: str,
    redis_url: str,
    deployment: str,
    server_binary: ServerBinary,
    topic: str,
    tmp_path: Path,
) -> None:
    cli_once(request.node, deployment, server_binary)
    weights = await filled(redis_url, topic)
    log = tmp_path / "starts.jsonl"
    flags = [arg for name, w in weights.items() for arg in ("--topic", f"{name}={w}")]
    proc = start_wheelq(
        "worker", f"tests.support.starts:{handler}", *flags, "--redis-url", redis_url,
        env={"MATRIX_STARTS": str(log)},  # the default concurrency, 10
    )  # fmt: skip
    try:
        await until(
            lambda: log.exists() and len(log.read_text().splitlines()) >= WARM + COUNTED,
            timeout_s=30,
            what="the starts",
        )
    finally:
        stop(proc)
    started = [json.loads(line)["topic"] for line in log.read_text().splitlines()]
    assert_in_proportion(started)
