"""The accuracy scenario: jobs due at a steady rate, fired by a scheduler node in its own
process (and, with workers, handled by worker processes), with what it cost Redis.

Every job is enqueued before the first is due, so the producer does not compete for CPU
while the node fires. Entry lateness is stream entry id - due time (both Redis clock);
handler-start lateness is handler start (worker clock corrected to Redis's) - due time.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.cluster

from benchlib.common import (
    Bench,
    ServerLoad,
    cpu_seconds,
    drop_topic,
    lateness,
    redis_ms,
    rss_bytes,
    wait_until,
)
from benchlib.nodes import Workers, start_scheduler
from wheelq import Admin, Client, EnqueueItem
from wheelq.core.keys import all_shards
from wheelq.testing import read_fired, summarize

ENQUEUE_CHUNK = 20_000


def all_handled(r: redis.Redis, topic: str, shards: int, n: int) -> bool:
    """Every one of `n` entries delivered to the group and acked."""
    if sum(r.xlen(k.ready) for k in all_shards(topic, shards)) < n:
        return False
    for keys in all_shards(topic, shards):
        last = r.xrevrange(keys.ready, count=1)
        groups = r.xinfo_groups(keys.ready)
        if not groups:
            return False
        if groups[0]["pending"] or (last and groups[0]["last-delivered-id"] != last[0][0]):
            return False
    return True


def _fill_backlog(
    bench: Bench, client: Client, topic: str, n: int, payload: bytes
) -> dict[str, Any]:
    """Enqueue n jobs due an hour or more from now; Redis memory per job."""
    r = bench.redis()
    before = int(r.info("memory")["used_memory"])
    bench.log(f"backlog: enqueueing {n} jobs due in an hour or more")
    t0 = time.perf_counter()
    for i in range(0, n, ENQUEUE_CHUNK):
        client.enqueue_many(
            topic,
            [
                EnqueueItem(payload=payload, delay=3600 + j / 1000)
                for j in range(i, min(n, i + ENQUEUE_CHUNK))
            ],
        )
    seconds = time.perf_counter() - t0
    after = int(r.info("memory")["used_memory"])
    return {
        "backlog_jobs": n,
        "backlog_enqueue_jobs_per_s": round(n / seconds),
        "redis_bytes_per_pending_job": round((after - before) / n, 1),
        "redis_used_memory_mb": round(after / 2**20, 1),
    }


def enqueue_spread(
    client: Client, topic: str, start_ms: int, n: int, rate: float, payload: bytes
) -> list[str]:
    """Enqueue n jobs due evenly from `start_ms` at `rate` per second; their ids."""
    ids: list[str] = []
    for i in range(0, n, ENQUEUE_CHUNK):
        ids += client.enqueue_many(
            topic,
            [
                EnqueueItem(payload=payload, at=(start_ms + j * 1000.0 / rate) / 1000)
                for j in range(i, min(n, i + ENQUEUE_CHUNK))
            ],
        )
    return ids


async def fired(url: str, topic: str, shards: int, *, cluster: bool = False) -> list[Any]:
    """Every entry of the topic's ready streams; `cluster`: `url` is a Redis Cluster node."""
    kind = redis.asyncio.cluster.RedisCluster if cluster else redis.asyncio.Redis
    connection = kind.from_url(url)
    try:
        return await read_fired(connection, topic, shards)
    finally:
        await connection.aclose()


def run_accuracy(
    bench: Bench,
    *,
    rate: float,
    duration_s: float,
    shards: int = 4,
    workers: int = 0,
    concurrency: int = 200,
    payload_bytes: int = 100,
    scheduler_settings: tuple[str, ...] = (),
    keep_values: bool = False,
    backlog: int = 0,
    scheduler_config: str | None = None,
    sync: bool = False,
) -> dict[str, Any]:
    """Run one accuracy measurement (`sync`: the workers' handler a plain ``def``, on their
    threads); with `keep_values`, raw lateness lists are returned
    under ``_entry_values`` / ``_handler_values`` (for plots; strip before writing JSON).
    With `backlog`, that many jobs due in an hour or more are enqueued on the topic first,
    and Redis memory per pending job and the node's RSS are reported."""
    topic = bench.topic(f"acc{int(rate)}")
    n = int(rate * duration_s)
    r = bench.redis()
    client = Client.from_url(bench.url)
    admin = Admin.of(client)
    admin.create_topic(topic, shards)
    extra: dict[str, Any] = {}
    if backlog:
        extra = _fill_backlog(bench, client, topic, backlog, b"x" * payload_bytes)
    node = start_scheduler(bench, topic, *scheduler_settings, config=scheduler_config)
    pool = Workers(bench, topic, workers, concurrency, sync=sync).start() if workers else None
    try:
        wait_until(lambda: all(r.get(k.lease) for k in all_shards(topic, shards)), 30)
        lead_s = 2.0 + n / 40_000
        start_ms = redis_ms(r) + int(lead_s * 1000)
        t0 = time.perf_counter()
        ids = enqueue_spread(client, topic, start_ms, n, rate, b"x" * payload_bytes)
        enqueue_s = time.perf_counter() - t0
        wait_until(lambda: redis_ms(r) >= start_ms, lead_s + 5, poll_s=0.005)
        load0, node_cpu0 = ServerLoad.read(r), cpu_seconds(node.pid)
        workers_cpu0 = sum(cpu_seconds(p.pid) for p in pool.procs) if pool else 0.0

        def done() -> bool:
            if pool:
                return all_handled(r, topic, shards, n)
            return sum(r.xlen(k.ready) for k in all_shards(topic, shards)) >= n

        finished = wait_until(done, duration_s + 60, poll_s=0.1)
        load = ServerLoad.read(r).since(load0)
        extra["scheduler_rss_mb"] = round(rss_bytes(node.pid) / 2**20, 1)
        node_cpu = cpu_seconds(node.pid) - node_cpu0
        workers_cpu = sum(cpu_seconds(p.pid) for p in pool.procs) - workers_cpu0 if pool else 0
        records = asyncio.run(fired(bench.url, topic, shards))
    finally:
        if pool:
            pool.stop()
        bench.stop(node)
        drop_topic(r, topic)
        client.close()
    summary = summarize(records, ids)
    entry_values = [rec.lateness_ms for rec in records]
    out: dict[str, Any] = {
        "rate_per_s": rate,
        "duration_s": duration_s,
        "jobs": n,
        "shards": shards,
        "finished": finished,
        "enqueue_jobs_per_s": round(n / enqueue_s),
        "fired": summary["fired"],
        "missing": summary["missing"],
        "duplicates": summary["duplicates"],
        "early": summary["early"],
        "entry_lateness_ms": lateness(entry_values),
        "scheduler_cpu_s": round(node_cpu, 2),
        "redis_load": load,
        "redis_commands_per_1000_fired": round(load["commands"] * 1000 / max(1, n), 1),
        "redis_cpu_ms_per_1000_fired": round(load["redis_cpu_s"] * 1e6 / max(1, n), 2),
    }
    out.update(extra)
    if keep_values:
        out["_entry_values"] = entry_values
    if pool:
        expected = set(ids)
        handled = [(job_id, start - due) for job_id, due, start in pool.records()]
        seen = [job_id for job_id, _ in handled if job_id in expected]
        handler_values = [late for job_id, late in handled if job_id in expected]
        out["handled"] = {
            "workers": workers,
            "handler": "sync" if sync else "async",
            "concurrency": concurrency,
            "handled": len(set(seen)),
            "missing": len(expected - set(seen)),
            "run_twice": len(seen) - len(set(seen)),
            "handler_start_lateness_ms": lateness(handler_values),
            "worker_cpu_s": round(workers_cpu, 2),
        }
        if keep_values:
            out["_handler_values"] = handler_values
    return out
