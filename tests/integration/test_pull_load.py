"""Long polls under load: 150 pulls waiting at once beside a steady enqueue load, against
the service over a real server. Waiting pulls block on connections of their own, a
bounded number at once (``[serve] pull_connections``): every enqueue succeeds, no request
gets a 5xx other than a 503 with Retry-After, the service's own parts keep reaching
Redis, and a pull that finds every connection taken waits for one within its ``wait_ms``,
then answers with what is there."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

import aiohttp
import pytest
import redis.asyncio

from tests.support.waiting import eventually
from tests.support.web import Served, serving
from wheelq.core.keys import all_shards
from wheelq.core.settings import ServeSettings

pytestmark = pytest.mark.cluster_too

PULLS = 150
WAIT_MS = 6000
DAY_MS = 86_400_000


async def made_group(r: redis.asyncio.Redis, api: Served, topic: str, group: str) -> None:
    """The topic (one job due tomorrow) and its group on every shard, made with plain
    stream commands."""
    status, _, _ = await api.call(
        "POST", f"/v1/topics/{topic}/jobs", {"payload": 0, "delay_ms": DAY_MS}
    )
    assert status == 201
    shards = await api.service.admin.create_topic(topic)
    for k in all_shards(topic, shards):
        await r.xgroup_create(k.ready, group, id="0", mkstream=True)


async def blocked_clients(r: redis.asyncio.Redis) -> int:
    """Clients blocked in a command, over every node."""
    info = await r.info("clients")
    nodes = info.values() if all(isinstance(v, dict) for v in info.values()) else [info]
    return sum(int(node.get("blocked_clients", 0)) for node in nodes)


async def post(http: aiohttp.ClientSession, url: str, body: Any) -> tuple[int, Any, Any]:
    async with http.post(url, json=body) as r:
        text = await r.text()
        return r.status, text, r.headers.get("Retry-After")


async def test_150_long_polls_beside_enqueues_starve_nothing(
    redis_url: str, topic: str, redis_async: redis.asyncio.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    async with serving(redis_url) as api:
        await made_group(redis_async, api, topic, "g")
        url = f"{api.base}/v1/topics/{topic}/groups/g/pull"
        enqueued: Counter[int] = Counter()
        # aiohttp's default connector holds 100 connections: these clients are many.
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
            pulls = [
                asyncio.create_task(
                    post(http, url, {"max": 1, "wait_ms": WAIT_MS, "consumer": f"c{i}"})
                )
                for i in range(PULLS)
            ]
            await eventually(
                lambda: _at_least(blocked_clients(redis_async), 1), timeout_s=10, what="pulls"
            )

            async def enqueue_while_pulls_wait(n: int) -> None:
                jobs = f"{api.base}/v1/topics/{topic}/jobs"
                i = 0
                while not all(p.done() for p in pulls):
                    body = {"payload": i, "id": f"e{n}-{i}", "delay_ms": DAY_MS}
                    status, text, _ = await post(http, jobs, body)
                    enqueued[status] += 1
                    assert status == 201, text
                    i += 1

            loads = [asyncio.create_task(enqueue_while_pulls_wait(n)) for n in range(4)]
            # One job due now while every pull waits: one of them gets it.
            status, text, _ = await post(
                http, f"{api.base}/v1/topics/{topic}/jobs", {"payload": 1, "id": "wanted"}
            )
            assert status == 201, text
            answers = await asyncio.gather(*pulls)
            await asyncio.gather(*loads)
    assert set(enqueued) == {201} and enqueued[201] > 0, enqueued
    statuses = Counter(status for status, _, _ in answers)
    bad = [(s, t[:200], retry) for s, t, retry in answers if s != 200 and not (s == 503 and retry)]
    assert bad == [], statuses
    got = [t for s, t, _ in answers if s == 200 and '"wanted"' in t]
    assert len(got) == 1, statuses
    unreachable = [r.getMessage() for r in caplog.records if "unreachable" in r.getMessage()]
    assert unreachable == []


async def _at_least(count: Any, n: int) -> bool:
    return int(await count) >= n


async def test_waiting_pulls_hold_at_most_pull_connections_and_answer_within_their_wait(
    redis_url: str, topic: str, redis_async: redis.asyncio.Redis
) -> None:
    settings = ServeSettings(pull_connections=2)
    async with serving(redis_url, settings=settings) as api:
        await made_group(redis_async, api, topic, "g")
        path = f"/v1/topics/{topic}/groups/g/pull"
        pulls = [
            asyncio.create_task(api.call("POST", path, {"wait_ms": 3000, "consumer": f"c{i}"}))
            for i in range(10)
        ]
        seen = []
        while not all(p.done() for p in pulls):
            seen.append(await blocked_clients(redis_async))
            await asyncio.wait(pulls, timeout=0.05)  # a sample every 50 ms while they wait
        answers = await asyncio.gather(*pulls)
    assert 1 <= max(seen) <= 2, seen  # a cluster's pull blocks on two shards of four
    assert [(status, body) for status, body, _ in answers] == [(200, {"jobs": []})] * 10


async def test_pull_answers_are_bounded_by_pull_max_bytes_and_leave_the_rest_available(
    redis_url: str, topic: str, redis_async: redis.asyncio.Redis
) -> None:
    """Bug: a pull answer had no byte bound (300 jobs of 1 MiB took serve from 87 MB to
    1.28 GB). Now each answer holds at most `pull_max_bytes` of entries (one job alone when
    larger), takes few more than it hands out, and the rest go to the next pulls at once:
    none waits for a visibility timeout, none is lost or dead-lettered."""
    job_bytes, bound, jobs = 64 * 1024, 256 * 1024, 40
    async with serving(redis_url, settings=ServeSettings(pull_max_bytes=bound)) as api:
        base = f"/v1/topics/{topic}"
        items = [{"job_id": f"j{i}", "payload": "x" * job_bytes} for i in range(jobs)]
        await api.service.client.enqueue_many(topic, items)
        assert (await api.call("POST", f"{base}/groups", {"name": "g"}))[0] == 201
        shards = await api.service.admin.create_topic(topic)
        seen: Counter[str] = Counter()
        for _ in range(jobs):  # the visibility timeout (30 s) never passes meanwhile
            status, body, _ = await api.call("POST", f"{base}/groups/g/pull", {"max": 100})
            assert status == 200, body
            if not body["jobs"]:
                break
            # Each entry is a little over job_bytes: three fit in the bound, a fourth not.
            assert 1 <= len(body["jobs"]) <= bound // job_bytes - 1, len(body["jobs"])
            assert all(j["deliveries"] == 1 for j in body["jobs"])
            seen.update(j["id"] for j in body["jobs"])
            taken = 0  # unacked: this answer's jobs, and those read past it
            for k in all_shards(topic, shards):
                taken += (await redis_async.xpending(k.ready, "g"))["pending"]
            assert taken - len(body["jobs"]) <= 4, taken  # a few, never the backlog
            receipts = [j["receipt"] for j in body["jobs"]]
            assert (await api.call("POST", f"{base}/groups/g/ack", {"receipts": receipts}))[
                0
            ] == 200
        assert seen == Counter(f"j{i}" for i in range(jobs))
        status, dead, _ = await api.call("GET", f"{base}/dead")
        assert dead["dead"] == []
