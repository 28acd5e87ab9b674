"""Dead letters by reason, every face: dead letters made by real consumers (a worker with an
async handler and one with a ``def`` handler failing their last attempt: "failed"; an HTTP
pull consumer that stops holding its batch, taken over past ``max_deliveries``:
"deliveries"), then listed, replayed and purged by reason through each face (library sync
and async, CLI, HTTP, console forms as the filtered page offers them).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest

from tests.integration.test_web_dashboard import get
from tests.support.consumers import PullConsumer, WorkerConsumer
from tests.support.faces import Face, having
from tests.support.waiting import eventually
from tests.support.web import Served, serving
from tests.support.workers import Workers
from wheelq import AsyncClient
from wheelq.core.settings import WorkerSettings

pytestmark = pytest.mark.cluster_too

SHARDS = 2
JOBS = 2


@pytest.fixture
async def served(redis_url: str) -> AsyncIterator[Served]:
    """The app, its pulled entries taken over (and dead past one delivery) fast."""
    settings = WorkerSettings(visibility_timeout_ms=300, claim_interval_ms=100, max_deliveries=1)
    async with serving(redis_url, worker_settings=settings) as app:
        yield app


async def made_dead(
    client: AsyncClient, pool: Workers, served: Served, topic: str
) -> dict[str, set[str]]:
    """`JOBS` jobs that fail every attempt, dead in groups "async" and "sync" (failed) and
    "pull" (deliveries); the refs by reason."""
    puller = PullConsumer(served, topic, "pull")
    puller.hold = True
    workers = [WorkerConsumer(pool, "async", sync=False), WorkerConsumer(pool, "sync", sync=True)]
    for consumer in [*workers, puller]:
        await consumer.start()
    try:
        for _ in range(JOBS):
            await client.enqueue(topic, {"fail": 9}, max_attempts=1)

        async def all_dead() -> dict[str, set[str]] | None:
            page = await client.dead_letters(topic, 1000)
            if len(page) < 3 * JOBS:
                return None
            return {r: {d.ref for d in page if d.reason == r} for r in ("failed", "deliveries")}

        dead = await eventually(all_dead, timeout_s=15, what="the dead letters")
        assert (len(dead["failed"]), len(dead["deliveries"])) == (2 * JOBS, JOBS), dead
        return dead
    finally:
        for consumer in [*workers, puller]:
            await consumer.stop()


@pytest.mark.parametrize("face", having("replay"), indirect=True)
async def test_dead_letters_are_listed_replayed_and_purged_by_reason_through_every_face(
    face: Face,
    client: AsyncClient,
    pool: Workers,
    served: Served,
    topic: str,
) -> None:
    dead = await made_dead(client, pool, served, topic)
    assert await face.dead(topic, "failed") == dead["failed"]
    assert await face.dead(topic, "deliveries") == dead["deliveries"]

    assert await face.replay(topic, "deliveries") == JOBS
    assert {d.ref for d in await client.dead_letters(topic, 1000)} == dead["failed"]
    assert await face.purge(topic, "failed") == 2 * JOBS
    stats = await client.stats(topic)
    assert stats is not None and stats.dead == 0


async def test_the_filtered_dead_letter_page_offers_only_actions_that_keep_its_filter(
    client: AsyncClient, pool: Workers, served: Served, topic: str
) -> None:
    await made_dead(client, pool, served, topic)
    html, _ = await get(served, f"/ui/topics/{topic}/dead?reason=failed")
    every = [f for f in re.findall(r"<form[^>]*>.*?</form>", html, re.DOTALL) if 'name="all"' in f]
    assert len(every) == 2, every  # replay all matching, purge all matching
    for form in every:
        assert re.search(r'name="reason" value="failed"', form), form  # the filter goes along
