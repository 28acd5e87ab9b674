"""Blocking calls inside the socket timeout (docs/guides/producing.md, "Connect with a
password, TLS or extra options"): wheelq's
connections give up on a silent server after their socket timeout (5 s unless
``redis_options`` says otherwise), so a call that blocks on purpose asks at most
`BLOCK_SHARE` of it and reads again: an idle worker, an events follower, a result wait and
a long pull never take their own quiet for a dead server, however long the block they are
given. WAIT cannot be read again (it counts the writes of its connection), so an
``ack_timeout_ms`` past the share is refused by name. On both servers, one and a cluster."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.support.web import serving
from wheelq import (
    AsyncAdmin,
    AsyncClient,
    Client,
    InvalidArgumentError,
    Job,
    JobState,
    Scheduler,
    Worker,
)
from wheelq.store.executor import BLOCK_SHARE, SOCKET_TIMEOUT_S

pytestmark = [
    pytest.mark.cluster_too,
    pytest.mark.both_servers,  # the server's blocking reads
]

SHORT = {"socket_timeout": 1.0, "socket_connect_timeout": 2}
"""A socket timeout below every block asked here (2 s and more)."""
QUIET_S = 2.0
"""How long each face waits on an idle topic: past SHORT's timeout, so a block asked of
the connection as given would have timed out (the job is due then)."""
FAST = {"preload_interval_ms": 100, "check_interval_ms": 100}


@pytest.fixture
async def firing(redis_url: str, topic: str) -> AsyncIterator[None]:
    """`topic` created, and a scheduler node (default timeouts) firing it."""
    async with AsyncClient.from_url(redis_url) as client:
        await AsyncAdmin.of(client).create_topic(topic, 2)
    node = Scheduler.from_url(redis_url, [topic], **FAST)
    await node.start()
    try:
        yield
    finally:
        await node.stop()


def quiet_then_due(client: Client, topic: str, job_id: str) -> None:
    client.enqueue(topic, {"n": 1}, delay=QUIET_S, job_id=job_id)


async def test_an_idle_worker_blocks_within_the_socket_timeout(
    redis_url: str, topic: str, firing: None, caplog: pytest.LogCaptureFixture
) -> None:
    handled = asyncio.get_running_loop().create_future()

    async def handler(job: Job) -> None:
        handled.set_result(job.id)

    worker = Worker.from_url(redis_url, topic, handler, redis_options=SHORT, block_ms=2000)
    await worker.start()
    try:
        with Client.from_url(redis_url) as client, caplog.at_level(logging.DEBUG, "wheelq"):
            quiet_then_due(client, topic, "w")
            assert await asyncio.wait_for(handled, 20) == "w"
            reader = worker.status()["parts"]["reader"]
    finally:
        await worker.stop()
    failed = [r.getMessage() for r in caplog.records if r.name.startswith("wheelq.worker")]
    failed = [m for m in failed if "redis failed" in m or "unreachable" in m]  # debug, then warn
    assert failed == [] and reader["failures"] == 0, (failed, reader)


async def test_an_events_follower_blocks_within_the_socket_timeout(
    redis_url: str, topic: str, firing: None
) -> None:
    async with AsyncClient.from_url(redis_url, redis_options=SHORT) as client:
        admin = AsyncAdmin.of(client)
        await admin.set_events(topic, True)
        async with contextlib.aclosing(admin.events(topic, block_ms=10_000)) as events:
            with Client.from_url(redis_url) as producer:
                quiet_then_due(producer, topic, "e")

            async def first() -> tuple[str, str | None]:
                async for event in events:
                    return event.kind, event.job_id
                raise AssertionError("the events ended")

            assert await asyncio.wait_for(first(), 20) == ("fired", "e")


@pytest.mark.parametrize("face", ["sync", "async"])
async def test_a_result_wait_blocks_within_the_socket_timeout(
    redis_url: str, topic: str, firing: None, face: str
) -> None:
    async def handler(job: Job) -> dict[str, Any]:
        return {"echo": job.payload}

    worker = Worker.from_url(redis_url, topic, handler)
    await worker.start()
    try:
        with Client.from_url(redis_url, redis_options=SHORT) as client:
            quiet_then_due(client, topic, "r")
            if face == "sync":
                got = await asyncio.to_thread(client.result, topic, "r", timeout=20)
            else:
                async with AsyncClient.from_url(redis_url, redis_options=SHORT) as async_client:
                    got = await async_client.result(topic, "r", timeout=20)
    finally:
        await worker.stop()
    assert got == {"echo": {"n": 1}}


async def test_a_long_pull_blocks_within_the_socket_timeout(
    redis_url: str, topic: str, firing: None
) -> None:
    async with serving(redis_url, redis_options=SHORT) as api:
        group = f"/v1/topics/{topic}/groups"
        status, body, _ = await api.call("POST", group, {"name": "g"})
        assert status == 201, body
        with Client.from_url(redis_url) as client:
            quiet_then_due(client, topic, "p")
            started = time.monotonic()
            status, body, _ = await api.call("POST", f"{group}/g/pull", {"wait_ms": 20_000})
    assert status == 200, body
    assert [job["id"] for job in body["jobs"]] == ["p"], body
    assert time.monotonic() - started < 15  # handed out when it fired, not at the wait's end


LONGEST_ACK_MS = int(SOCKET_TIMEOUT_S * 1000 * BLOCK_SHARE)


@pytest.mark.parametrize(
    ("options", "ack_timeout_ms", "refused"),
    [
        ({}, LONGEST_ACK_MS, False),
        ({}, LONGEST_ACK_MS + 1, True),
        ({}, 600_000, True),
        (SHORT, int(1000 * BLOCK_SHARE) + 1, True),
        ({"socket_timeout": None}, 600_000, False),
        ({"socket_timeout": 60}, 30_000, False),
        ({"?": "socket_timeout=12"}, 6000, False),  # in the URL, as the CLI gives it
        ({"?": "socket_timeout=12"}, 6001, True),
    ],
    ids=[
        "share",
        "past-share",
        "longest",
        "short-socket",
        "no-timeout",
        "long-socket",
        "url-socket",
        "past-url-socket",
    ],
)
async def test_an_ack_timeout_past_the_socket_timeout_is_refused_by_name(
    redis_url: str, topic: str, options: dict[str, Any], ack_timeout_ms: int, refused: bool
) -> None:
    """At construction for a default level that waits, and at the call for one asked
    there: InvalidArgumentError naming ack_timeout_ms and the longest accepted, nothing
    written. Sync and async clients."""
    settings: dict[str, Any] = {"ack_replicas": 1, "ack_timeout_ms": ack_timeout_ms}
    options = dict(options)
    url = redis_url + (f"?{options.pop('?')}" if "?" in options else "")
    with Client.from_url(redis_url) as seeding:
        seeding.enqueue(topic, 0, delay=60, job_id="seed")  # the topic exists
    for level in ("replicated", "persisted"):
        for make in (Client.from_url, AsyncClient.from_url):
            try:
                made = make(url, redis_options=options, ack=level, **settings)
            except InvalidArgumentError as exc:
                assert refused and exc.parameter == "ack_timeout_ms", exc
                assert "ack_timeout_ms must be an int in [1, " in str(exc)
            else:
                assert not refused, (make, level)
                await made.aclose() if isinstance(made, AsyncClient) else made.close()
        with Client.from_url(url, redis_options=options, **settings) as client:
            job_id = f"x-{level}"
            if refused:
                with pytest.raises(InvalidArgumentError) as caught:
                    client.enqueue(topic, 0, delay=60, job_id=job_id, ack=level)
                assert caught.value.parameter == "ack_timeout_ms"
                assert client.get(topic, job_id).state is JobState.UNKNOWN  # nothing written
