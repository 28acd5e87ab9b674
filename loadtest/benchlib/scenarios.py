"""The wheelq scenarios besides accuracy: enqueue rates, a burst, failover, idle load."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import dataclass
from typing import Any

from benchlib.accuracy import all_handled, enqueue_spread
from benchlib.common import (
    Bench,
    ServerLoad,
    cpu_seconds,
    drop_topic,
    lateness,
    redis_ms,
    wait_until,
)
from benchlib.nodes import Workers, start_scheduler
from wheelq import Admin, AsyncAdmin, AsyncClient, Client, EnqueueItem
from wheelq.core.keys import all_shards, shard_of
from wheelq.testing import read_fired

PAYLOAD = b"x" * 100


def run_enqueue(bench: Bench, *, single_n: int, many_n: int, concurrency: int = 64) -> dict:
    """Single sync calls (latency and rate), async calls with `concurrency` in flight, and
    `enqueue_many`, each on a topic of its own, 100-byte payloads due in an hour."""
    r = bench.redis()
    out: dict[str, Any] = {}
    topics = [bench.topic("enq1"), bench.topic("enqn"), bench.topic("enqa")]
    try:
        with Client.from_url(bench.url) as client:
            admin = Admin.of(client)
            admin.create_topic(topics[0], 4)
            out["single_sync"] = single_calls(client, r, topics[0], single_n)
            admin.create_topic(topics[1], 4)
            rate = enqueue_many_rate(client, topics[1], many_n)
            out["enqueue_many"] = {"jobs": many_n, "jobs_per_s": round(rate)}
        out["async"] = asyncio.run(_async_enqueue(bench, topics[2], single_n * 2, concurrency))
    finally:
        for topic in topics:
            drop_topic(r, topic)
    return out


MANY_ITEMS = 20_000
"""Items per `enqueue_many` call in the `enqueue` scenario."""


def enqueue_many_rate(client: Client, topic: str, jobs: int) -> float:
    """`enqueue_many` jobs/s over `jobs` 100-byte jobs due in an hour, `MANY_ITEMS` a call."""
    t = time.perf_counter()
    for i in range(0, jobs, MANY_ITEMS):
        chunk = min(MANY_ITEMS, jobs - i)
        client.enqueue_many(topic, [EnqueueItem(payload=PAYLOAD, delay=1800) for _ in range(chunk)])
    return jobs / (time.perf_counter() - t)


def single_calls(client: Client, r: Any, topic: str, n: int) -> dict[str, Any]:
    """`n` single sync enqueues, each followed by the raw redis-py equivalent (ZADD + HSET in
    one pipeline, one round trip) under the same conditions: loopback latency on a VM drifts
    by 2x between runs, so the two are timed in turns and compared call for call."""
    ours: list[float] = []
    raw: list[float] = []
    raw_keys = (f"bench-raw-{topic}:z", f"bench-raw-{topic}:h")
    for i in range(n):
        t = time.perf_counter()
        client.enqueue(topic, PAYLOAD, delay=1800)
        ours.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        pipe = r.pipeline(transaction=False)
        pipe.execute_command("ZADD", raw_keys[0], 1, f"j{i}")
        pipe.execute_command("HSET", raw_keys[1], f"j{i}", PAYLOAD)
        pipe.execute()
        raw.append((time.perf_counter() - t) * 1000)
    r.delete(*raw_keys)
    summary, raw_summary = lateness(ours), lateness(raw)
    return {
        "calls": n,
        "calls_per_s": round(n / (sum(ours) / 1000)),
        "latency_ms": summary,
        "raw_latency_ms": raw_summary,
        "p50_ratio_to_raw": round(float(summary["p50"]) / float(raw_summary["p50"]), 2),
    }


async def _async_enqueue(bench: Bench, topic: str, n: int, concurrency: int) -> dict[str, Any]:
    async with AsyncClient.from_url(bench.url) as client:
        admin = AsyncAdmin.of(client)
        await admin.create_topic(topic, 4)
        left = n

        async def producer() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                await client.enqueue(topic, PAYLOAD, delay=1800)

        t = time.perf_counter()
        await asyncio.gather(*(producer() for _ in range(concurrency)))
        seconds = time.perf_counter() - t
    return {"calls": n, "concurrency": concurrency, "calls_per_s": round(n / seconds)}


BURST_CONCURRENCY = 500
"""Handlers at once in the burst's worker process."""


def run_burst(
    bench: Bench,
    *,
    n: int,
    workers: int = 1,
    shards: int = 4,
    sync: bool = False,
    concurrency: int = BURST_CONCURRENCY,
) -> dict[str, Any]:
    """n jobs due at one instant T: time from T until all are in the streams, and until the
    first and every handler has started (`sync`: a plain ``def`` handler that appends a line
    to a file, on `concurrency` threads)."""
    topic = bench.topic("burst")
    r = bench.redis()
    client = Client.from_url(bench.url)
    admin = Admin.of(client)
    admin.create_topic(topic, shards)
    node = start_scheduler(bench, topic)
    pool = Workers(bench, topic, workers, concurrency, sync=sync).start()
    try:
        wait_until(lambda: all(r.get(k.lease) for k in all_shards(topic, shards)), 30)
        burst = fire_burst(r, client, topic, shards, n)
    finally:
        pool.stop()
        bench.stop(node)
        drop_topic(r, topic)
        client.close()
    return {
        "jobs": n,
        "handler": "sync" if sync else "async",
        "concurrency": concurrency,
        **burst.streams,
        **burst.handlers(pool.records()),
    }


@dataclass(frozen=True)
class Burst:
    """A burst fired and handled: its ids, its due time and what the streams showed."""

    ids: list[str]
    due_ms: int
    streams: dict[str, Any]

    def handlers(self, records: list[tuple[str, int, float]]) -> dict[str, Any]:
        """When the first and every handler started (the workers' `records`)."""
        due_ms = self.due_ms
        starts = [start for _, _, start in records]
        return {
            "first_handler_started_after_ms": round(min(starts) - due_ms, 1) if starts else None,
            "all_handlers_started_after_s": (
                round((max(starts) - due_ms) / 1000, 3) if starts else None
            ),
            "handler_start_lateness_ms": lateness(s - due_ms for s in starts) if starts else None,
            "handled": len({job_id for job_id, _, _ in records} & set(self.ids)),
        }


def fire_burst(r: Any, client: Client, topic: str, shards: int, n: int) -> Burst:
    """Enqueue n jobs due at one instant a few seconds ahead on a led topic whose streams
    are empty, wait until all are in the streams and handled (a minute or two at most)."""
    due_ms = redis_ms(r) + 3000 + n // 30
    ids = client.enqueue_many(
        topic, [EnqueueItem(payload=PAYLOAD, at=due_ms / 1000) for _ in range(n)]
    )
    left_s = (due_ms - redis_ms(r)) / 1000
    in_stream = wait_until(
        lambda: sum(r.xlen(k.ready) for k in all_shards(topic, shards)) >= n,
        left_s + 60,
        poll_s=0.01,
    )
    streams = [k.ready for k in all_shards(topic, shards) if r.xlen(k.ready)]
    last_entry_ms = max(int(r.xrevrange(s, count=1)[0][0].split(b"-")[0]) for s in streams)
    first_entry_ms = min(int(r.xrange(s, count=1)[0][0].split(b"-")[0]) for s in streams)
    wait_until(lambda: all_handled(r, topic, shards, n), 120, poll_s=0.05)
    return Burst(
        ids,
        due_ms,
        {
            "enqueued_before_due_s": round(left_s, 2),
            "all_in_stream": in_stream,
            "first_in_stream_after_ms": first_entry_ms - due_ms,
            "all_in_stream_after_s": round((last_entry_ms - due_ms) / 1000, 3),
        },
    )


def run_failover(bench: Bench, *, rate: int, duration_s: float, shards: int = 4) -> dict[str, Any]:
    """kill -9 of a leader under `rate` jobs/s, with the fast path and without it (the lease
    TTL), in turns in one run: per shard of the dead node, the gap in its stream, and the
    lateness around the kill."""
    ttl = _failover(bench, rate=rate, duration_s=duration_s, shards=shards, fast=False)
    fast = _failover(bench, rate=rate, duration_s=duration_s, shards=shards, fast=True)
    return {
        "fast": fast,
        "ttl": ttl,
        "max_lateness_ratio_fast_to_ttl": _ratio(
            fast["around_kill"]["lateness_ms"]["max"], ttl["around_kill"]["lateness_ms"]["max"]
        ),
        "_series": fast.pop("_series"),
        "_series_ttl": ttl.pop("_series"),
    }


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


AROUND_MS = 5000  # the window either side of the kill the lateness is taken over


def _failover(
    bench: Bench, *, rate: int, duration_s: float, shards: int, fast: bool
) -> dict[str, Any]:
    """Two nodes share the shards; a third into the run the leader of shard 0 is killed with
    SIGKILL."""
    topic = bench.topic("failover-fast" if fast else "failover-ttl")
    r = bench.redis()
    client = Client.from_url(bench.url)
    admin = Admin.of(client)
    admin.create_topic(topic, shards)
    setting = f"fast_failover = {int(fast)}"
    nodes = [start_scheduler(bench, topic, setting) for _ in range(2)]
    try:
        wait_until(
            lambda: (
                len(_holders(r, topic, shards)) == shards
                and len(set(_holders(r, topic, shards).values())) == 2
            ),
            30,
        )
        n = int(rate * duration_s)
        start_ms = redis_ms(r) + 2000 + n // 40
        ids = enqueue_spread(client, topic, start_ms, n, rate, PAYLOAD)
        kill_ms = start_ms + int(duration_s * 1000 / 3)
        wait_until(lambda: redis_ms(r) >= kill_ms, (kill_ms - redis_ms(r)) / 1000 + 5, 0.002)
        holder = r.get(all_shards(topic, shards)[0].lease).decode()
        dead_shards = [s for s, h in _holders(r, topic, shards).items() if h == holder]
        pid = int(holder.split(":")[1])  # node ids are host:pid:random
        os.kill(pid, signal.SIGKILL)
        killed_ms = redis_ms(r)
        wait_until(
            lambda: sum(r.xlen(k.ready) for k in all_shards(topic, shards)) >= n,
            duration_s + 30,
            poll_s=0.1,
        )
        records = asyncio.run(_read(bench, topic, shards))
    finally:
        for node in nodes:
            bench.stop(node)
        drop_topic(r, topic)
        client.close()
    fired = {x.job_id for x in records}
    gaps = {}
    for shard in dead_shards:
        entries = sorted(x.entry_ms for x in records if shard_of(x.job_id, shards) == shard)
        before = [e for e in entries if e <= killed_ms]
        after = [e for e in entries if e > killed_ms]
        gaps[str(shard)] = {
            "last_before_to_first_after_ms": (after[0] - before[-1]) if before and after else None,
            "kill_to_first_after_ms": (after[0] - killed_ms) if after else None,
        }
    around = [
        x.lateness_ms for x in records if killed_ms - AROUND_MS <= x.due_ms <= killed_ms + AROUND_MS
    ]
    return {
        "fast_failover": int(fast),
        "rate_per_s": rate,
        "jobs": n,
        "missing": len(set(ids) - fired),
        "duplicates": len(records) - len(fired),
        "lease_ttl_ms": 5000,
        "dead_node_shards": dead_shards,
        "gap_per_dead_shard": gaps,
        "around_kill": {"window_ms": 2 * AROUND_MS, "lateness_ms": lateness(around)},
        "_series": sorted(
            ((x.due_ms - killed_ms) / 1000, x.lateness_ms) for x in records[:: max(1, n // 5000)]
        ),
    }


def _holders(r: Any, topic: str, shards: int) -> dict[int, str]:
    """The leader of each led shard (free ones left out)."""
    values = [r.get(k.lease) for k in all_shards(topic, shards)]
    return {s: v.decode() for s, v in enumerate(values) if v}


async def _read(bench: Bench, topic: str, shards: int) -> list[Any]:
    import redis.asyncio

    connection = redis.asyncio.Redis.from_url(bench.url)
    try:
        return await read_fired(connection, topic, shards)
    finally:
        await connection.aclose()


def run_idle(bench: Bench, *, topics: int, shards: int, idle_s: float) -> dict[str, Any]:
    """One node leading `topics` x `shards` shards with nothing due: what it costs Redis."""
    r = bench.redis()
    names = [bench.topic(f"idle{i}") for i in range(topics)]
    with Admin.from_url(bench.url) as admin:
        for name in names:
            admin.create_topic(name, shards)
    node = start_scheduler(bench, ",".join(names))
    try:
        leases = [k.lease for name in names for k in all_shards(name, shards)]
        led = wait_until(lambda: all(r.mget(leases)), 60, poll_s=0.2)
        time.sleep(1.0)  # let start-up work settle before measuring
        load0, cpu0 = ServerLoad.read(r), cpu_seconds(node.pid)
        time.sleep(idle_s)
        load1 = ServerLoad.read(r)
        load, calls = load1.since(load0), load1.calls_since(load0)
        node_cpu = cpu_seconds(node.pid) - cpu0
    finally:
        bench.stop(node)
        for name in names:
            drop_topic(r, name)
    return {
        "topics": topics,
        "shards_per_topic": shards,
        "all_led": led,
        "redis_commands_per_s": load["commands_per_s"],
        "redis_commands_per_s_per_shard": round(load["commands_per_s"] / (topics * shards), 2),
        "redis_cpu_s_per_s": round(load["redis_cpu_s"] / load["seconds"], 4),
        "node_cpu_s_per_s": round(node_cpu / load["seconds"], 4),
        "top_commands": load["top_commands"],
        # Scripts' own commands count too (INFO commandstats counts them): the whole cost.
        "per_shard_per_s_by_command": {
            k: round(n / load["seconds"] / (topics * shards), 3) for k, n in calls.items()
        },
    }


def run_worker(
    bench: Bench,
    *,
    n: int,
    concurrency: int = 200,
    shards: int = 4,
    sync: bool = False,
    events: bool = False,
) -> dict:
    """One worker process (no-op async handler, or with `sync` a ``def`` that appends a line
    to a file) draining `n` entries already in the streams: jobs/s from the moment it is
    ready until every entry is acked. `events`: the topic keeps job events (turned on once
    the entries are in: the worker's started and succeeded events are what is measured)."""
    topic = bench.topic("worker")
    r = bench.redis()
    client = Client.from_url(bench.url)
    admin = Admin.of(client)
    admin.create_topic(topic, shards)
    try:
        for i in range(0, n, 20_000):  # due now: the enqueue script appends them at once
            client.enqueue_many(
                topic, [EnqueueItem(payload=PAYLOAD) for _ in range(min(20_000, n - i))]
            )
        if events:
            admin.set_events(topic, max_len=10_000_000)
        pool = Workers(bench, topic, 1, concurrency, sync=sync)
        pool.start()
        t0 = time.perf_counter()
        cpu0 = cpu_seconds(pool.procs[0].pid)
        server0 = cpu_seconds(bench.server_pid) if bench.server_pid else 0.0
        done = wait_until(lambda: all_handled(r, topic, shards, n), 120, poll_s=0.02)
        seconds = time.perf_counter() - t0
        cpu = cpu_seconds(pool.procs[0].pid) - cpu0
        server = cpu_seconds(bench.server_pid) - server0 if bench.server_pid else None
        pool.stop()
    finally:
        drop_topic(r, topic)
        client.close()
    return {
        "jobs": n,
        "handler": "sync" if sync else "async",
        "concurrency": concurrency,
        "events": events,
        "all_acked": done,
        "jobs_per_s": round(n / seconds),
        "worker_cpu_us_per_job": round(cpu / n * 1e6, 1),
        # The server's, the bench's own polling included (None for --redis-url).
        "redis_cpu_us_per_job": None if server is None else round(server / n * 1e6, 1),
    }
