"""The far horizon in every face (docs/architecture.md, "The far tier"): a topic keeps jobs
due over an hour ahead in its far tier unless told otherwise; `Admin.set_far_horizon` (sync
and async), ``PUT /v1/topics/{t}/far`` and ``wheelq topics far`` set it, and stats, ``GET
.../far``, the CLI and the console's topic page say the horizon and the jobs kept far; a
horizon of 0 moves them back through a running scheduler; a bad horizon is the same typed
error naming ``horizon_ms`` everywhere, and changes nothing."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

import pytest

from tests.integration.test_web_dashboard import get, num
from tests.support.cli import run_wheelq
from tests.support.waiting import eventually
from tests.support.web import serving
from wheelq import Admin, AsyncAdmin, AsyncClient, Scheduler
from wheelq.core.far_tier import DEFAULT_HORIZON_MS, MAX_HORIZON_MS, MIN_HORIZON_MS
from wheelq.errors import InvalidArgumentError

pytestmark = pytest.mark.cluster_too

HOUR_S = 3600
FAR, NEAR = 3, 2
"""Jobs due in two hours (far by default) and in half an hour (hot)."""


@pytest.fixture
async def client(redis_url: str, topic: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient.from_url(redis_url) as c:
        await AsyncAdmin.of(c).create_topic(topic, 2)
        for i in range(FAR):
            await c.enqueue(topic, {"far": i}, delay=2 * HOUR_S)
        for i in range(NEAR):
            await c.enqueue(topic, {"near": i}, delay=HOUR_S // 2)
        yield c


async def shown_by_cli(redis_url: str, topic: str, *flags: str) -> str:
    done = await asyncio.to_thread(
        run_wheelq, "topics", "far", topic, *flags, "--redis-url", redis_url
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_by_default_jobs_over_an_hour_ahead_are_kept_far_and_every_face_says_so(
    redis_url: str, topic: str, client: AsyncClient
) -> None:
    stats = await AsyncAdmin.of(client).stats(topic)
    assert stats is not None
    assert (stats.far, stats.pending, stats.far_horizon_ms) == (FAR, FAR + NEAR, 3_600_000)
    assert DEFAULT_HORIZON_MS == 3_600_000
    with Admin.from_url(redis_url) as admin:
        blocking = await asyncio.to_thread(admin.stats, topic)
    assert blocking is not None and (blocking.far, blocking.far_horizon_ms) == (FAR, 3_600_000)
    said = await shown_by_cli(redis_url, topic)
    assert f"far horizon 3600000 ms, {FAR} of {FAR + NEAR} pending jobs far" in said
    async with serving(redis_url) as api:
        status, body, _ = await api.call("GET", f"/v1/topics/{topic}/far")
        assert status == 200, body
        assert body == {"topic": topic, "horizon_ms": 3_600_000, "jobs": FAR}
        status, body, _ = await api.call("GET", f"/v1/topics/{topic}")
        assert status == 200, body
        assert (body["far"], body["pending"], body["far_horizon_ms"]) == (
            FAR,
            FAR + NEAR,
            3_600_000,
        )
        _, page = await get(api, f"/ui/topics/{topic}")
        assert num(page.ids["total-far"]) == FAR
        assert num(page.ids["total-pending"]) == FAR + NEAR
        status, body, _ = await api.call("GET", f"/v1/topics/{topic}-missing/far")
        assert status == 404 and body["field"] == "topic"


async def test_each_face_sets_the_horizon_and_0_moves_far_jobs_back_through_a_scheduler(
    redis_url: str, topic: str, client: AsyncClient
) -> None:
    admin = AsyncAdmin.of(client)
    assert await admin.set_far_horizon(topic, 20 * 60_000) == 20 * 60_000
    await client.enqueue(topic, {"now": "far"}, delay=HOUR_S // 2)  # beyond 20 minutes
    assert (await admin.stats(topic)).far == FAR + 1
    with Admin.from_url(redis_url) as sync_admin:
        assert await asyncio.to_thread(sync_admin.set_far_horizon, topic, None) == 3_600_000
    assert (await admin.stats(topic)).far_horizon_ms == 3_600_000
    said = await shown_by_cli(redis_url, topic, "--horizon-ms", "7200000")
    assert "far horizon 7200000 ms" in said
    said = await shown_by_cli(redis_url, topic, "--horizon-ms", "default")
    assert "far horizon 3600000 ms" in said
    ids = await pending_ids(admin, topic)
    async with serving(redis_url) as api:
        status, body, _ = await api.call("PUT", f"/v1/topics/{topic}/far", {"horizon_ms": 0})
        assert status == 200, body
        assert body["horizon_ms"] == 0
    node = Scheduler.from_url(redis_url, [topic])
    async with node:

        async def moved_back() -> bool:
            stats = await admin.stats(topic)
            return stats is not None and stats.far == 0

        await eventually(moved_back, timeout_s=20, what="every far job promoted")
    stats = await admin.stats(topic)
    assert stats is not None and stats.pending == FAR + NEAR + 1  # moved, none fired
    assert await pending_ids(admin, topic) == ids
    said = await shown_by_cli(redis_url, topic)
    assert f"far horizon none (0), 0 of {FAR + NEAR + 1} pending jobs far" in said


async def pending_ids(admin: AsyncAdmin, topic: str) -> list[str]:
    """Every pending job's id, as the job list reads them (both tiers)."""
    return sorted(job.id for job in await admin.jobs(topic, "pending", limit=1000))


BAD: list[tuple[str, object]] = [
    ("negative", -1),
    ("one", 1),
    ("under ten minutes", MIN_HORIZON_MS - 1),
    ("over a year", MAX_HORIZON_MS + 1),
    ("a fraction", 600_000.5),
    ("a bool", True),
    ("text", "1h"),
]
ACCEPTED = f"0 (no far tier) or an int in [{MIN_HORIZON_MS}, {MAX_HORIZON_MS}]"


@pytest.mark.parametrize(("name", "horizon"), BAD, ids=[b[0] for b in BAD])
async def test_a_bad_horizon_is_a_typed_error_naming_horizon_ms_in_every_face(
    redis_url: str, topic: str, client: AsyncClient, name: str, horizon: object
) -> None:
    admin = AsyncAdmin.of(client)
    await admin.set_far_horizon(topic, 2 * 3_600_000)
    with pytest.raises(InvalidArgumentError) as raised:
        await admin.set_far_horizon(topic, horizon)  # type: ignore[arg-type]
    assert raised.value.parameter == "horizon_ms" and ACCEPTED in str(raised.value)
    with Admin.from_url(redis_url) as sync_admin, pytest.raises(InvalidArgumentError) as blocked:
        sync_admin.set_far_horizon(topic, horizon)  # type: ignore[arg-type]
    assert str(blocked.value) == str(raised.value)
    async with serving(redis_url) as api:
        status, problem, _ = await api.call(
            "PUT", f"/v1/topics/{topic}/far", {"horizon_ms": horizon}
        )
        assert status == 422, problem
        assert problem["field"] == "horizon_ms"
    refused = await asyncio.to_thread(
        run_wheelq, "topics", "far", topic, f"--horizon-ms={horizon}", "--redis-url", redis_url
    )
    assert refused.returncode == 2
    assert re.search(r"--horizon-ms: 0, an int in \[600000, \d+\] or 'default'", refused.stderr)
    assert (await admin.stats(topic)).far_horizon_ms == 2 * 3_600_000  # nothing changed
