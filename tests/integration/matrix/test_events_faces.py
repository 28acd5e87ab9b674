"""Job events, every face: turned on and read back through each face that has the setting
(library sync and async, CLI; the console shows it), and the events of jobs run by workers
with async and ``def`` handlers (one succeeding, one dead) read the same through each face
that follows them (the async library, ``wheelq events``, the SSE endpoint).
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from tests.support.cli import run_wheelq
from tests.support.consumers import WorkerConsumer
from tests.support.faces import Face, Refused, cli_once, having
from tests.support.waiting import eventually, until
from tests.support.workers import Workers
from wheelq import Admin, AsyncAdmin, AsyncClient, EventsOffError
from wheelq.testing import ServerBinary

pytestmark = pytest.mark.cluster_too

SHARDS = 2


@pytest.mark.parametrize("face", having("events_on"), indirect=True)
async def test_events_turned_on_and_off_through_every_face_read_the_same(
    face: Face, client: AsyncClient, admin: AsyncAdmin, topic: str
) -> None:
    setter = face if face.name in having("set_events") else None
    await (setter.set_events(topic, True) if setter else admin.set_events(topic, True))
    assert await face.events_on(topic) and (await admin.events_config(topic)).enabled
    await (setter.set_events(topic, False) if setter else admin.set_events(topic, False))
    assert not await face.events_on(topic)


@pytest.mark.parametrize("face", having("events"), indirect=True)
async def test_the_events_of_jobs_run_by_both_handler_kinds_read_the_same_in_every_face(
    face: Face, client: AsyncClient, admin: AsyncAdmin, pool: Workers, topic: str
) -> None:
    await admin.set_events(topic, True)
    workers = [WorkerConsumer(pool, "async", sync=False), WorkerConsumer(pool, "sync", sync=True)]
    for worker in workers:
        await worker.start()
    ok = await client.enqueue(topic, "ok")
    dead = await client.enqueue(topic, {"fail": 1}, max_attempts=1)
    await until(
        lambda: all(len(w.handled) == 2 for w in workers), timeout_s=10, what="both jobs ran"
    )
    expected = Counter(
        [("fired", ok, None), ("fired", dead, None)]
        + [("started", job, w.group) for w in workers for job in (ok, dead)]
        + [("succeeded", ok, w.group) for w in workers]
        + [("dead", dead, w.group) for w in workers]
    )

    async def settled() -> bool:
        stats = await admin.stats(topic)
        return stats is not None and stats.dead == 2

    await eventually(settled, timeout_s=10, what="the dead job dead in both groups")
    for worker in workers:
        await worker.stop()
    got = await face.events(topic, sum(expected.values()))
    assert Counter(got) == expected


def test_wheelq_events_on_a_topic_with_events_off_says_so_and_exits(
    request: pytest.FixtureRequest,
    redis_url: str,
    deployment: str,
    server_binary: ServerBinary,
    topic: str,
) -> None:
    cli_once(request.node, deployment, server_binary)

    with Admin.from_url(redis_url) as admin:
        admin.create_topic(topic, SHARDS)
    done = run_wheelq("events", topic, "--redis-url", redis_url, timeout_s=3)
    assert done.returncode != 0 and "events" in done.stderr, done.stderr


@pytest.mark.parametrize("face", having("events"), indirect=True)
async def test_following_a_topic_whose_events_are_off_refuses_at_once_in_every_face(
    face: Face, client: AsyncClient, admin: AsyncAdmin, topic: str
) -> None:
    """Issue 43: `AsyncClient.events` waited silently where the CLI exits 1 and SSE 409s."""
    await admin.create_topic(topic, SHARDS)
    with pytest.raises((EventsOffError, Refused)) as raised:
        await asyncio.wait_for(face.events(topic, 1), 10)
    if isinstance(raised.value, Refused):
        assert raised.value.code == (409 if face.name == "http" else 1), raised.value
    assert "keeps no job events" in str(raised.value)
