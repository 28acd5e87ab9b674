""" "ready" means one thing in every interface: fired and not yet delivered (to the consumer
group furthest behind). On one topic holding handled, in-flight and undelivered entries, the
library's stats and forecast, ``wheelq topics``, ``wheelq stats``, ``wheelq topics
forecast``, the HTTP API, the dashboard and the metrics all count the same entries, and the
stream's length has a name of its own."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.request
from pathlib import Path

import pytest
import redis.asyncio

from tests.integration.test_web_dashboard import get, num
from tests.support.cli import run_wheelq
from tests.support.waiting import eventually
from tests.support.web import serving
from wheelq import AsyncAdmin, AsyncClient, Scheduler
from wheelq.core.keys import ShardKeys
from wheelq.metrics import MetricsServer

pytestmark = pytest.mark.cluster_too  # on the single server and on the cluster

HANDLED, IN_FLIGHT, READY = 3, 2, 4


async def fill(client: AsyncClient, r: redis.asyncio.Redis, topic: str) -> None:
    """One shard: 9 jobs fired; group g handled 3, holds 2, has 4 still to read."""
    await AsyncAdmin.of(client).create_topic(topic, 1)
    for i in range(HANDLED + IN_FLIGHT + READY):
        await client.enqueue(topic, i)
    key = ShardKeys(topic, 0).ready
    await r.xgroup_create(key, "g", "0")
    read = await r.xreadgroup("g", "c", {key: ">"}, count=HANDLED + IN_FLIGHT)
    entries = [entry_id for entry_id, _ in read[0][1]]
    await r.xack(key, "g", *entries[:HANDLED])


def scrape_ready(port: int) -> float | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        lines = reply.read().decode().splitlines()
    found = [line for line in lines if line.startswith("wheelq_ready_entries{")]
    return sum(float(line.rsplit(" ", 1)[1]) for line in found) if found else None


async def test_every_interface_counts_the_same_entries_as_ready(
    redis_url: str, redis_async: redis.asyncio.Redis, topic: str
) -> None:
    async with AsyncClient.from_url(redis_url) as client:
        admin = AsyncAdmin.of(client)
        await fill(client, redis_async, topic)
        stats = await admin.stats(topic)
        assert stats is not None
        assert (stats.ready, stats.in_flight, stats.in_stream) == (READY, IN_FLIGHT, 9)
        assert (await admin.forecast(topic)).ready == READY

    topics = await asyncio.to_thread(run_wheelq, "topics", "--redis-url", redis_url)
    assert topics.returncode == 0, topics.stderr
    header, *rows = topics.stdout.splitlines()
    columns = header.split()
    (row,) = [r.split() for r in rows if r.split()[0] == topic]
    listed = dict(zip(columns, row, strict=True))
    assert (listed["READY"], listed["IN_FLIGHT"], listed["IN_STREAM"]) == ("4", "2", "9")

    shown = await asyncio.to_thread(run_wheelq, "stats", topic, "--json", "--redis-url", redis_url)
    assert shown.returncode == 0, shown.stderr
    (shard,) = [json.loads(line) for line in shown.stdout.splitlines()]
    assert (shard["ready"], shard["in_flight"], shard["in_stream"]) == (READY, IN_FLIGHT, 9)
    forecast = await asyncio.to_thread(
        run_wheelq, "topics", "forecast", topic, "--json", "--redis-url", redis_url
    )
    assert forecast.returncode == 0, forecast.stderr
    assert json.loads(forecast.stdout)["ready"] == READY

    async with serving(redis_url) as api:
        status, body, _ = await api.call("GET", f"/v1/topics/{topic}")
        assert status == 200
        assert (body["ready"], body["in_flight"], body["in_stream"]) == (READY, IN_FLIGHT, 9)
        status, body, _ = await api.call("GET", f"/v1/topics/{topic}/forecast")
        assert (status, body["ready"]) == (200, READY)
        _, page = await get(api, f"/ui/topics/{topic}")
        assert num(page.ids["total-ready"]) == READY
        assert num(page.ids["total-in-stream"]) == 9
        _, listing = await get(api, "/ui?limit=500")
        if f"{topic}-ready" in listing.ids:  # the shared server's list may page past it
            assert num(listing.ids[f"{topic}-ready"]) == READY

    node = Scheduler.from_url(redis_url, [topic])
    async with node, MetricsServer(node, port=0, host="127.0.0.1") as metrics:

        async def gauge() -> float | None:
            return await asyncio.to_thread(scrape_ready, metrics.port)

        assert await eventually(gauge, timeout_s=10, what="the ready gauge") == READY


def test_the_dashboard_guide_defines_ready_as_the_dashboard_does() -> None:
    # Issue 43 item 18: the guide called the stream's length "ready" and the pages' ready
    # "undelivered".
    root = Path(__file__).resolve().parents[2]
    page = (root / "wheelq/web/templates/topic.html").read_text()
    guide = (root / "docs/guides/dashboard.md").read_text()
    terms = dict(re.findall(r"<dt>([^<]+)</dt><dd>([^<(]+)", page))
    for term in ("ready", "in stream"):
        said = re.search(rf"^- \*\*{term}\*\*: (.+?)(?=^- |^$)", guide, re.MULTILINE | re.DOTALL)
        assert said is not None, term
        assert " ".join(said[1].split()).startswith(terms[term].strip()), (term, said[1])
    assert "undelivered" not in guide  # one word for it: ready
