"""``expires=`` on every face: the sync client, a task's ``.options(expires=)``, HTTP
(``expires_ms`` in, ``state: expired`` and ``expired_ms`` out, an HTTP pull that never hands
an expired job over), the console's job page, ``wheelq enqueue --expires`` and ``wheelq job``,
the stats and the far tier (a job kept there keeps its expiry)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from types import ModuleType

import pytest
import redis
import redis.asyncio

import wheelq
from tests.integration.test_tasks import app_module  # noqa: F401 (the task module fixture)
from tests.support.cli import run_wheelq
from tests.support.waiting import eventually
from tests.support.web import Served, serving
from wheelq import Admin, AsyncAdmin, AsyncClient, Client, JobFailedError, JobState
from wheelq.core.keys import ShardKeys
from wheelq.core.settings import WorkerSettings

PAST = datetime(2020, 1, 1, tzinfo=UTC)


async def redis_now_ms(r: redis.asyncio.Redis) -> int:
    sec, usec = await r.time()
    return int(sec) * 1000 + int(usec) // 1000


@pytest.mark.cluster_too
def test_the_sync_client_and_its_stats_count_an_expired_job(redis_url: str, topic: str) -> None:
    with Client.from_url(redis_url) as client:
        admin = Admin.of(client)
        admin.create_topic(topic, 2)
        for n in range(3):
            client.enqueue(topic, n, job_id=f"j{n}", expires=PAST)
        client.enqueue(topic, "kept", job_id="kept", expires=3600)
        assert [client.get(topic, f"j{n}").state for n in range(3)] == [JobState.EXPIRED] * 3
        with pytest.raises(JobFailedError, match="expired") as caught:
            client.result(topic, "j0", timeout=1)
        assert caught.value.state == "expired"
        stats = admin.stats(topic)
        assert stats.expired == 3 and stats.in_stream == 1
        kept = client.get(topic, "kept")
        assert kept.state is JobState.READY and kept.options["expires"] > time.time() * 1000


@pytest.mark.cluster_too
def test_a_tasks_options_take_expires(app_module: ModuleType) -> None:  # noqa: F811
    send = app_module.send
    handle = send.options(expires=PAST).enqueue("a@b", n=1)
    assert handle.info().state is JobState.EXPIRED
    with pytest.raises(JobFailedError, match="expired"):
        handle.result(timeout=1)
    later = send.options(expires=timedelta(hours=1)).enqueue_in(600, "a@b", n=1)
    assert later.info().state is JobState.PENDING
    with pytest.raises(wheelq.InvalidArgumentError) as caught:
        send.options(expires=-1).enqueue("a@b", n=1)
    assert caught.value.parameter == "expires"


@pytest.fixture
async def api(redis_url: str) -> AsyncIterator[Served]:
    ws = WorkerSettings(visibility_timeout_ms=30_000, claim_interval_ms=100)
    async with serving(redis_url, worker_settings=ws) as served:
        yield served


async def test_http_takes_expires_ms_and_shows_an_expired_job(
    api: Served, redis_async: redis.asyncio.Redis, redis_url: str, topic: str
) -> None:
    before = await redis_now_ms(redis_async)
    body = {"payload": 1, "id": "h1", "delay_ms": 3_600_000, "expires_ms": 60_000}
    status, answer, _ = await api.call("POST", f"/v1/topics/{topic}/jobs", body)
    assert status == 201, answer
    status, job, _ = await api.call("GET", f"/v1/topics/{topic}/jobs/h1")
    assert status == 200 and job["state"] == "pending"
    # from the server's clock, as delay_ms: within the call (the clocks are one machine's)
    assert before + 60_000 - 1000 <= job["options"]["expires"] <= before + 60_000 + 5_000
    bad = {"payload": 1, "expires_ms": -1}
    status, problem, _ = await api.call("POST", f"/v1/topics/{topic}/jobs", bad)
    assert status == 422 and "expires_ms" in json.dumps(problem)

    async with AsyncClient.from_url(redis_url) as client:
        await client.enqueue(topic, 2, job_id="h2", expires=PAST)
    status, job, _ = await api.call("GET", f"/v1/topics/{topic}/jobs/h2")
    assert status == 200 and job["state"] == "expired" and job["expired_ms"] is not None
    status, page, _ = await api.call("GET", f"/ui/topics/{topic}/jobs/h2")
    assert status == 200 and 'class="state state-expired"' in page
    assert "dropped at its expiry, never run" in page
    status, page, _ = await api.call("GET", f"/ui/topics/{topic}")
    assert status == 200 and 'never run">1</dd>' in page


async def test_an_http_pull_never_hands_over_an_expired_job(
    api: Served, redis_async: redis.asyncio.Redis, redis_url: str, topic: str
) -> None:
    async with AsyncClient.from_url(redis_url) as client:
        await AsyncAdmin.of(client).create_topic(topic, 1)
        status, _, _ = await api.call("POST", f"/v1/topics/{topic}/groups", {"name": "pullers"})
        assert status == 201
        await client.enqueue(topic, "x", job_id="gone", expires=timedelta(milliseconds=200))
        await client.enqueue(topic, "y", job_id="kept")
        (entry,) = [
            f for _, f in await redis_async.xrange(ShardKeys(topic, 0).ready) if f[b"id"] == b"gone"
        ]

        async def passed() -> bool:
            return await redis_now_ms(redis_async) > int(entry[b"expires"])

        await eventually(passed, timeout_s=5, what="the expiry to pass")
        path = f"/v1/topics/{topic}/groups/pullers/pull"
        status, pulled, _ = await api.call("POST", path, {"max": 10, "consumer": "c1"})
        assert status == 200, pulled
        assert [j["id"] for j in pulled["jobs"]] == ["kept"]
        info = await client.get(topic, "gone")
        assert info.state is JobState.EXPIRED
        assert [g.state for g in info.groups] == [JobState.EXPIRED]


def test_the_cli_enqueues_with_expires_and_shows_it(redis_url: str, topic: str) -> None:
    url = ["--redis-url", redis_url]
    done = run_wheelq(
        "enqueue", topic, "1", "--id", "c1", "--delay", "600", "--expires", "60", *url
    )
    assert done.returncode == 0, done.stderr
    shown = run_wheelq("job", topic, "c1", *url)
    assert shown.returncode == 0, shown.stderr
    assert "expires" in shown.stdout and "Z" in shown.stdout.split("expires", 1)[1]
    bad = run_wheelq("enqueue", topic, "1", "--expires", "nan", *url)
    assert bad.returncode == 2 and "expires" in bad.stderr
    with Client.from_url(redis_url) as client:
        client.enqueue(topic, 2, job_id="c2", expires=PAST)
    shown = run_wheelq("job", topic, "c2", *url)
    assert "expired" in shown.stdout and "never run" in shown.stdout


@pytest.mark.cluster_too
async def test_a_far_tier_job_keeps_its_expiry(
    redis_url: str, redis_async: redis.asyncio.Redis, topic: str
) -> None:
    async with AsyncClient.from_url(redis_url) as client:
        await AsyncAdmin.of(client).create_topic(topic, 1)
        expires = datetime.now(UTC).replace(microsecond=0) + timedelta(days=30)
        await client.enqueue(topic, 1, job_id="far", delay=timedelta(days=20), expires=expires)
        keys = ShardKeys(topic, 0)
        assert await redis_async.zscore(keys.delayed, "far") is None  # kept in the far tier
        info = await client.get(topic, "far")
        assert info.state is JobState.PENDING
        assert info.options["expires"] == int(expires.timestamp() * 1000)
