"""/metrics of a running scheduler node and worker, scraped over HTTP: the counters equal
what the streams show, and the lateness histograms count every job."""

from __future__ import annotations

import asyncio
import socket
import threading
import urllib.request
from collections import defaultdict

import redis.asyncio
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

import wheelq
from tests.support.waiting import eventually, until
from wheelq.core.keys import all_shards
from wheelq.metrics import MetricsServer, registry_for

SHARDS = 2
JOBS = 300
FAST = {"preload_interval_ms": 100, "check_interval_ms": 100, "lease_ttl_ms": 2000}


def _scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return _parse(text)


def _parse(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    samples: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[s.name].append((s.labels, s.value))
    return samples


def _total(samples: dict[str, list[tuple[dict[str, str], float]]], name: str) -> float:
    assert name in samples, f"{name} not exported; got {sorted(samples)}"
    return sum(value for _, value in samples[name])


async def _streams(r: redis.asyncio.Redis, topic: str) -> tuple[int, int]:
    """(entries ever added to the topic's ready streams, entries group 'default' settled)."""
    added = settled = 0
    for keys in all_shards(topic, SHARDS):
        added += int((await r.xinfo_stream(keys.ready))["entries-added"])
        for group in await r.xinfo_groups(keys.ready):
            settled += int(group["entries-read"]) - int(group["pending"])
    return added, settled


async def test_scraped_counters_equal_the_streams_and_lateness_counts_every_fired_job(
    redis_url: str, redis_async: redis.asyncio.Redis, topic: str
) -> None:
    handled: list[str] = []

    async def handler(job: wheelq.Job) -> None:
        handled.append(job.id)

    async with wheelq.AsyncClient.from_url(redis_url) as client:
        admin = wheelq.AsyncAdmin.of(client)
        await admin.create_topic(topic, SHARDS)
        node = wheelq.Scheduler.from_url(redis_url, [topic], **FAST)
        worker = wheelq.Worker.from_url(redis_url, topic, handler, concurrency=50)
        async with (
            node,
            worker,
            MetricsServer(node, port=0, host="127.0.0.1") as node_metrics,
            MetricsServer(worker, port=0, host="127.0.0.1") as worker_metrics,
        ):
            await until(lambda: len(node.leads) == SHARDS, timeout_s=10, what="leads")
            items = [{"payload": n, "delay": 0.2 + n / 1000} for n in range(JOBS)]
            await client.enqueue_many(topic, items)
            await until(lambda: worker.settler.counts.acked == JOBS, timeout_s=30, what="all acked")
            added, settled = await _streams(redis_async, topic)
            assert added == settled == JOBS

            sched = await asyncio.to_thread(_scrape, node_metrics.port)
            assert _total(sched, "wheelq_scheduler_fired_total") == added
            assert _total(sched, "wheelq_scheduler_fire_lateness_seconds_count") == added
            shards = {labels["shard"] for labels, _ in sched["wheelq_scheduler_fired_total"]}
            assert shards == {"0", "1"}
            assert _total(sched, "wheelq_scheduler_shards_led") == SHARDS
            assert _total(sched, "wheelq_scheduler_lease_changes_total") == SHARDS  # acquired

            work = await asyncio.to_thread(_scrape, worker_metrics.port)
            assert _total(work, "wheelq_worker_succeeded_total") == settled
            assert _total(work, "wheelq_worker_handled_total") == settled == len(handled)
            assert _total(work, "wheelq_worker_handler_start_lateness_seconds_count") == JOBS
            assert _total(work, "wheelq_worker_handler_duration_seconds_count") == JOBS
            assert _total(work, "wheelq_worker_retried_total") == 0
            assert all(v == 1 for _, v in work["wheelq_part_up"])

            # The shard gauges are read on the node's loop when a scrape asks: a later
            # scrape shows them.
            async def gauges() -> dict[str, list[tuple[dict[str, str], float]]] | None:
                found = await asyncio.to_thread(_scrape, node_metrics.port)
                return found if len(found["wheelq_stream_entries"]) == SHARDS else None

            sched = await eventually(gauges, timeout_s=10, what="the shard gauges")
            assert _total(sched, "wheelq_stream_entries") == JOBS
            assert _total(sched, "wheelq_pending_jobs") == 0
            assert _total(sched, "wheelq_in_flight_entries") == 0
            assert _total(sched, "wheelq_ready_entries") == 0

            local = _parse(generate_latest(registry_for(client)).decode())
            assert _total(local, "wheelq_client_enqueued_total") == JOBS
            port = node_metrics.port
            assert len(_serving()) == 2
    # Stopped: the port is closed and no server thread is left.
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0
    assert _serving() == []


def _serving() -> list[threading.Thread]:
    """prometheus_client's HTTP server threads (named after their serve_forever target)."""
    return [t for t in threading.enumerate() if "serve_forever" in t.name]


async def test_oldest_in_flight_age_is_0_with_nothing_in_flight_and_grows_with_one(
    redis_url: str, topic: str
) -> None:
    """The gauge a "stuck jobs" panel plots is there on a healthy, idle system (0), not
    absent ("No data"), and counts up while an entry is unsettled."""
    started, release = asyncio.Event(), asyncio.Event()

    async def handler(job: wheelq.Job) -> None:
        started.set()
        await release.wait()

    async def oldest() -> list[tuple[dict[str, str], float]]:
        found = await asyncio.to_thread(_scrape, metrics.port)
        return found.get("wheelq_oldest_in_flight_age_seconds", [])

    async with wheelq.AsyncClient.from_url(redis_url) as client:
        admin = wheelq.AsyncAdmin.of(client)
        await admin.create_topic(topic, 1)
        node = wheelq.Scheduler.from_url(redis_url, [topic], **FAST)
        worker = wheelq.Worker.from_url(redis_url, topic, handler, group="g")
        async with node, worker, MetricsServer(node, port=0, host="127.0.0.1") as metrics:
            await until(lambda: len(node.leads) == 1, timeout_s=10, what="the lease")
            idle = await eventually(oldest, timeout_s=10, what="the gauge with nothing in flight")
            assert idle == [({"topic": topic, "shard": "0", "group": "g"}, 0.0)]

            await client.enqueue(topic, "stuck")
            await asyncio.wait_for(started.wait(), timeout=10)

            async def grown() -> bool:
                return any(value > 0 for _, value in await oldest())

            await eventually(grown, timeout_s=10, what="an age above 0 with one in flight")
            release.set()


async def test_a_lease_freed_from_a_dead_holder_is_counted_as_taken_over_dead(
    redis_url: str, redis_async: redis.asyncio.Redis, topic: str
) -> None:
    """A leader that confirmed its wake subscription, then lost it with its process: the
    node frees the lease, takes the shard and counts it."""
    async with wheelq.AsyncAdmin.from_url(redis_url) as admin:
        await admin.create_topic(topic, 1)
    (keys,) = all_shards(topic, 1)
    await redis_async.set(keys.lease, "ghost", px=60_000)  # a minute: only the fast path frees it
    await redis_async.set(keys.followed, "ghost")
    ghost = redis_async.pubsub()
    await ghost.ssubscribe(keys.wake_channel)
    assert (await ghost.get_message(timeout=5))["type"] == "ssubscribe"  # type: ignore[index]
    node = wheelq.Scheduler.from_url(redis_url, [topic], **FAST)
    async with node, MetricsServer(node, port=0, host="127.0.0.1") as metrics:
        await eventually(
            lambda: _seen_subscribed(node, keys), timeout_s=10, what="a count with the ghost"
        )
        assert len(node.leads) == 0
        await ghost.aclose()  # the ghost's process dies: Redis drops its connection
        await until(lambda: len(node.leads) == 1, timeout_s=5, what="the node to take the shard")
        scraped = await asyncio.to_thread(_scrape, metrics.port)
    changes = {
        labels["change"]: value for labels, value in scraped["wheelq_scheduler_lease_changes_total"]
    }
    assert changes == {"taken_over_dead": 1.0, "acquired": 1.0}


async def _seen_subscribed(node: wheelq.Scheduler, keys: object) -> bool:
    watch = node.leases._watch
    return watch is not None and keys in watch._subscribed
