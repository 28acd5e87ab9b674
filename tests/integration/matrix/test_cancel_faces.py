"""Cancel and reschedule, every face: a pending job cancelled through each face (library
sync and async, CLI, HTTP, console form, confirmed) never runs; one moved to now through
each face runs once, on each consumer kind (workers with async and ``def`` handlers, the
callback deliverer, an HTTP pull consumer).
"""

from __future__ import annotations

from collections import Counter

import pytest
import redis.asyncio

from tests.support import consumers
from tests.support.callback_server import ScriptedServer
from tests.support.faces import Face, having
from tests.support.waiting import eventually
from tests.support.web import Served
from tests.support.workers import Workers
from wheelq import AsyncClient, JobState

pytestmark = pytest.mark.cluster_too

SHARDS = 2
HOUR_S = 3600


@pytest.mark.parametrize("face", having("cancel"), indirect=True)
async def test_a_job_cancelled_through_every_face_is_cancelled(
    face: Face, client: AsyncClient, topic: str
) -> None:
    job_id = await client.enqueue(topic, "x", delay=HOUR_S)
    kept = await client.enqueue(topic, "y", delay=HOUR_S)
    await face.cancel(topic, job_id)
    assert (await client.get(topic, job_id)).state is JobState.CANCELLED
    assert (await client.get(topic, kept)).state is JobState.PENDING
    assert not await client.cancel(topic, job_id)  # once


@pytest.mark.parametrize("face", having("payload_known"), indirect=True)
async def test_a_job_cancelled_before_it_fired_shows_its_payload_unknown_in_every_face(
    face: Face, client: AsyncClient, topic: str
) -> None:
    """Issue 43: a cancelled job's page and GET showed ``payload: null``, as a job whose
    payload is null does; every face now says the payload is not kept."""
    cancelled = await client.enqueue(topic, "x", delay=HOUR_S)
    null = await client.enqueue(topic, None, delay=HOUR_S)  # a payload that is null
    assert await client.cancel(topic, cancelled)
    assert not await face.payload_known(topic, cancelled)
    assert await face.payload_known(topic, null)


ROWS = [(name, "async-worker") for name in having("reschedule")] + [
    ("async", kind) for kind in ("sync-worker", "callbacks", "pull")
]


@pytest.fixture
def pull_app(request: pytest.FixtureRequest) -> Served | None:
    """`served` for the pull consumer's row."""
    return (
        request.getfixturevalue("served")
        if request.node.callspec.params["kind"] == "pull"
        else None
    )


@pytest.mark.parametrize(("face", "kind"), ROWS, indirect=["face"])
async def test_a_job_moved_to_now_through_every_face_runs_once_on_every_consumer(
    face: Face,
    kind: str,
    pull_app: Served | None,
    client: AsyncClient,
    pool: Workers,
    redis_async: redis.asyncio.Redis,
    receiver: ScriptedServer,
    topic: str,
) -> None:
    consumer = consumers.make(kind, pool, redis_async, topic, receiver, pull_app)
    await consumer.start()
    try:
        job_id = await client.enqueue(topic, "m", delay=HOUR_S, **consumer.enqueue_options())
        later = await client.enqueue(topic, "l", delay=HOUR_S, **consumer.enqueue_options())
        await face.reschedule(topic, job_id, 0)

        async def ran() -> bool:
            return Counter(consumer.handled) == Counter([job_id])

        await eventually(ran, timeout_s=10, what="the moved job ran")
        assert (await client.get(topic, later)).state is JobState.PENDING
    finally:
        await consumer.stop()
