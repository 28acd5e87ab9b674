"""The due line, seen (docs/architecture.md, "Seeing the line"): with jobs waiting on the line
of a real server, `Admin.line`, ``GET /v1/topics/{t}/line``, the console's topic page,
``wheelq top`` and the metrics show the same counts and the keys furthest behind, in order,
from one reader (`wheelq.store.line`), and the metrics' key labels stay bounded."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import redis

from tests.integration.test_metrics import _scrape
from tests.integration.test_web_dashboard import get
from tests.support.cli import run_wheelq
from tests.support.waiting import eventually, until
from tests.support.web import serving
from wheelq import AsyncAdmin, AsyncClient, EnqueueItem, Job, Scheduler, Worker
from wheelq.core.job import Envelope
from wheelq.core.keys import ShardKeys, all_shards
from wheelq.core.line import OTHER, TOP_KEYS
from wheelq.metrics import MetricsServer

pytestmark = pytest.mark.cluster_too  # every shard's line read in one pipeline, slot by slot

SHARDS = 2
FLOODS = {"a": (300, 0.3), "b": (50, 0.45), "c": (20, 0.6)}
"""key -> (jobs, delay s): due one after the other, so the line's keys are behind in order."""
SMALL = [f"k{i}" for i in range(TOP_KEYS)]
"""Ten more keys of 3 jobs each, due last: thirteen keys, more than the metrics label."""


@dataclass(frozen=True)
class Held:
    """What the test reads of the line straight from Redis."""

    waiting: int
    by_key: dict[str, int]
    lanes: int
    """Lanes with jobs, every shard (a key's jobs wait in each shard they are in)."""
    node: Scheduler
    """The scheduler node leading every shard."""


@pytest.fixture
async def line(redis_url: str, redis_sync: redis.Redis, topic: str) -> AsyncIterator[Held]:
    """A topic of two ordered, fair shards whose one group reads nothing: each stream fills to
    its lead and the rest of the jobs wait on the line, still (a scheduler runs throughout)."""
    node = Scheduler.from_url(redis_url, topic, window_ms=2000, preload_interval_ms=100)
    async with AsyncClient.from_url(redis_url) as c:
        admin = AsyncAdmin.of(c)
        await admin.create_topic(topic, SHARDS)
        await admin.create_group(topic, "idle")
        for keys in all_shards(topic, SHARDS):
            redis_sync.hset(keys.limits, mapping={"ordered": "1", "fair": "1"})
        await node.start()
        try:
            items = [
                EnqueueItem(payload=i, delay=delay, key=key)
                for key, (n, delay) in FLOODS.items()
                for i in range(n)
            ] + [EnqueueItem(payload=i, delay=0.75, key=k) for k in SMALL for i in range(3)]
            await c.enqueue_many(topic, items)

            async def settled() -> bool:
                fired = sum(redis_sync.xlen(k.ready) for k in all_shards(topic, SHARDS))
                held = sum(redis_sync.hlen(k.held) for k in all_shards(topic, SHARDS))
                pending = sum(redis_sync.zcard(k.delayed) for k in all_shards(topic, SHARDS))
                return pending == 0 and held > 0 and fired + held == len(items)

            await eventually(settled, timeout_s=30, what="every job fired or on the line")
            yield _held(redis_sync, topic, node)
        finally:
            await node.stop()


def _held(r: redis.Redis, topic: str, node: Scheduler) -> Held:
    by_key: dict[str, int] = {}
    waiting = lanes = 0
    for keys in all_shards(topic, SHARDS):
        waiting += r.hlen(keys.held)
        lanes += r.zcard(keys.turns)
        for value in r.hvals(keys.held):
            lane = value.decode().partition(" ")[2]
            by_key[lane[2:]] = by_key.get(lane[2:], 0) + 1
    return Held(waiting, by_key, lanes, node)


async def test_the_view_counts_the_line_and_lists_the_keys_furthest_behind_in_order(
    redis_url: str, topic: str, line: Held
) -> None:
    async with AsyncClient.from_url(redis_url) as c:
        view = await AsyncAdmin.of(c).line(topic)
    assert view.waiting == line.waiting
    assert view.lanes == line.lanes > len(line.by_key)
    # nothing was enqueued with a priority: every job read counts as 5, and all are read
    assert view.by_priority == {5: line.waiting} and view.sampled == line.waiting
    assert [lane.key for lane in view.behind[:3]] == ["a", "b", "c"], view.behind
    assert {lane.key: lane.waiting for lane in view.behind} == {
        k: line.by_key[k] for k in [lane.key for lane in view.behind]
    }
    ages = [view.behind_ms(lane) for lane in view.behind[:3]]
    assert ages == sorted(ages, reverse=True) and ages[2] is not None and ages[2] > 0


async def test_the_http_route_the_console_and_top_show_the_same_line(
    redis_url: str, topic: str, line: Held
) -> None:
    async with serving(redis_url) as api:
        status, body, _ = await api.call("GET", f"/v1/topics/{topic}/line")
        assert status == 200, body
        assert body["waiting"] == line.waiting
        assert body["by_priority"] == {"5": line.waiting}
        assert [lane["key"] for lane in body["behind"][:3]] == ["a", "b", "c"]
        status, body, _ = await api.call("GET", f"/v1/topics/{topic}-nope/line")
        assert status == 404, body

        _, page = await get(api, f"/ui/topics/{topic}")
    assert page.ids["total-line"] == f"{line.waiting:,}"
    assert page.ids["line-priority-5"] == f"{line.waiting:,}"
    for i, key in enumerate(["a", "b", "c"], start=1):
        assert page.ids[f"line-behind-{i}"] == key
        assert page.ids[f"line-behind-{i}-waiting"] == f"{line.by_key[key]:,}"

    done = await asyncio.to_thread(
        run_wheelq,
        "top",
        "--once",
        "--interval",
        "0.1",
        "--topics",
        topic,
        "--redis-url",
        redis_url,
    )
    assert done.returncode == 0, done.stderr
    assert "on the due line" in done.stdout
    rows = [row for row in done.stdout.splitlines() if " waiting, " in row]
    assert [row.split("│")[-2].split()[0] for row in rows[:3]] == ["a", "b", "c"], done.stdout
    assert f"{line.waiting:,}" in done.stdout and "p5 " in done.stdout


async def test_the_metrics_label_the_ten_busiest_keys_and_sum_the_rest(
    redis_sync: redis.Redis, topic: str, line: Held
) -> None:
    async with MetricsServer(line.node, port=0, host="127.0.0.1") as metrics:

        async def read() -> dict[str, list[tuple[dict[str, str], float]]] | None:
            found = await asyncio.to_thread(_scrape, metrics.port)
            mine = [v for labels, v in found["wheelq_line_jobs"] if labels["topic"] == topic]
            return found if len(mine) == SHARDS else None  # read at a scrape, seen at the next

        scraped = await eventually(read, timeout_s=30, what="the line's gauges")
    per_shard = {
        int(labels["shard"]): value
        for labels, value in scraped["wheelq_line_jobs"]
        if labels["topic"] == topic
    }
    assert (
        per_shard == {k.shard: redis_sync.hlen(k.held) for k in all_shards(topic, SHARDS)}
        and sum(per_shard.values()) == line.waiting
    )
    keys = {
        labels["key"]: value
        for labels, value in scraped["wheelq_line_key_jobs"]
        if labels["topic"] == topic
    }
    assert len(keys) == TOP_KEYS + 1 and OTHER in keys  # 13 keys: 10 labelled, the rest summed
    assert sum(keys.values()) == line.waiting
    busiest = sorted(line.by_key.items(), key=lambda kv: (-kv[1], kv[0]))
    assert {k: keys[k] for k, _ in busiest[:TOP_KEYS]} == dict(busiest[:TOP_KEYS])
    behind = {
        labels["key"]: value
        for labels, value in scraped["wheelq_line_key_behind_seconds"]
        if labels["topic"] == topic
    }
    assert behind.keys() == keys.keys()
    assert behind["a"] > behind["b"] > behind["c"] > 0


async def test_the_backlog_by_priority_is_each_waiting_jobs_and_lateness_is_by_priority(
    redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    """Jobs of priorities 0, 5 and 9 on the line: the view counts each one's envelope, and
    once a worker runs them all, the start lateness histogram counts each priority's runs."""
    keys = ShardKeys(topic, 0)
    priorities = [(0, 5, 9)[i % 3] for i in range(100)]
    async with AsyncClient.from_url(redis_url) as c:
        admin = AsyncAdmin.of(c)
        await admin.create_topic(topic, 1)
        await admin.create_group(topic, "idle")
        redis_sync.hset(keys.limits, mapping={"ordered": "1"})
        async with Scheduler.from_url(redis_url, topic, window_ms=2000, preload_interval_ms=100):
            items = [
                EnqueueItem(payload=i, delay=0.3, priority=p) for i, p in enumerate(priorities)
            ]
            await c.enqueue_many(topic, items)

            async def settled() -> bool:
                return redis_sync.zcard(keys.delayed) == 0 and redis_sync.hlen(keys.held) > 0

            await eventually(settled, timeout_s=30, what="the jobs on the line")
            view = await admin.line(topic)
            envelopes = redis_sync.hmget(keys.jobs, list(redis_sync.hkeys(keys.held)))
        waiting = Counter(getattr(Envelope.unpack(e), "priority") for e in envelopes)  # noqa: B009
        assert view.by_priority == dict(waiting) and view.sampled == view.waiting
        assert len(view.by_priority) > 1  # more than one priority waits

        ran: list[int] = []

        async def handler(job: Job) -> None:
            ran.append(job.priority)

        worker = Worker.from_url(redis_url, topic, handler, group="idle")
        node = Scheduler.from_url(redis_url, topic, window_ms=2000, preload_interval_ms=100)
        async with worker, node, MetricsServer(worker, port=0, host="127.0.0.1") as metrics:
            await until(lambda: len(ran) == len(priorities), timeout_s=30, what="every job run")
            scraped = await asyncio.to_thread(_scrape, metrics.port)
    counts = {
        labels["priority"]: value
        for labels, value in scraped["wheelq_worker_handler_start_lateness_seconds_count"]
        if labels["topic"] == topic
    }
    assert counts == {str(p): n for p, n in Counter(priorities).items()}
