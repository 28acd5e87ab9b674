"""The PostgreSQL outbox, measured on servers the script starts (a PostgreSQL of its own,
tests/support/postgres.py; Valkey, and redis-server when on PATH):

- relay throughput: N committed rows placed in Redis by one relay, and by two racing
  (jobs/s from the relay's start to the table empty; every job placed once, checked);
- commit -> sorted set: one job at a time (due in 10 min), from its commit returning to
  its id in the shard's sorted set (polled on a connection of its own), with NOTIFY and
  with the sweep alone (the trigger disabled), idle and under a background load;
- what `outbox.enqueue` adds to the app's transaction: it against a bare INSERT of the same
  row values, one job per transaction and 100, in turns.

Medians of --rounds, with the spread; JSON on stdout (and --out FILE).

    PYTHONPATH=$PWD python loadtest/outbox_relay.py --rounds 3 --rows 200000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.postgres import PostgresServer  # noqa: E402
from wheelq import outbox  # noqa: E402
from wheelq.core import keys as k  # noqa: E402
from wheelq.core.settings import RelaySettings  # noqa: E402
from wheelq.outbox.enqueue import INSERT, row  # noqa: E402
from wheelq.producer.async_client import AsyncClient  # noqa: E402
from wheelq.testing import EmbeddedServer, find_server_binaries  # noqa: E402

SHARDS = 4
PAYLOAD = {"order": 12345, "email": "ada@example.com", "items": [1, 2, 3]}


def spread(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 2),
        "min": round(min(values), 2),
        "max": round(max(values), 2),
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def fresh(pg: PostgresServer, name: str) -> str:
    pg.drop_database(name)
    dsn = pg.create_database(name)
    outbox.install(dsn)
    return dsn


def commit_rows(dsn: str, topic: str, count: int, delay: float | None = None) -> None:
    """`count` rows, committed 1,000 a transaction with executemany (the app's cost is
    measured apart: this is only the load)."""
    with psycopg.connect(dsn) as conn:
        for start in range(0, count, 1000):
            params = [
                row(topic, PAYLOAD, None, delay=delay) for _ in range(min(1000, count - start))
            ]
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany(INSERT, params)


def placed(r: redis.Redis, topic: str) -> int:
    return sum(r.xlen(k.ShardKeys(topic, s).ready) for s in range(SHARDS)) + sum(
        r.zcard(k.ShardKeys(topic, s).delayed) for s in range(SHARDS)
    )


async def relay_throughput(url: str, dsn: str, topic: str, rows: int, relays: int) -> float:
    """Jobs/s of `relays` relays placing `rows` committed rows (every one exactly once)."""
    commit_rows(dsn, topic, rows)
    clients = [AsyncClient.from_url(url) for _ in range(relays)]
    started_relays = [outbox.Relay(c, dsn, RelaySettings(sweep_ms=1000)) for c in clients]
    for relay in started_relays:
        await relay.check()
    started = time.perf_counter()
    for relay in started_relays:
        await relay.start()
    while sum(r.relayed for r in started_relays) < rows:
        await asyncio.sleep(0.002)
    seconds = time.perf_counter() - started
    for relay in started_relays:
        await relay.stop()
    for client in clients:
        await client.aclose()
    with redis.Redis.from_url(url) as r:
        count = placed(r, topic)
    if count != rows:
        raise SystemExit(f"{count} jobs in Redis for {rows} rows")
    return rows / seconds


def background_load(dsn: str, topic: str, per_s: int, stop: threading.Event) -> None:
    """Commit `per_s` rows a second, 50 a transaction, until `stop`."""
    with psycopg.connect(dsn) as conn:
        next_at = time.perf_counter()
        while not stop.is_set():
            params = [row(topic, PAYLOAD, None) for _ in range(50)]
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany(INSERT, params)
            next_at += 50 / per_s
            time.sleep(max(0.0, next_at - time.perf_counter()))


async def commit_to_zset(
    url: str, dsn: str, topic: str, samples: int, sweep_ms: int, notify: bool, load: int
) -> dict[str, float]:
    """ms from a commit returning to the job in its sorted set, one job at a time."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        state = "ENABLE" if notify else "DISABLE"
        conn.execute(f"ALTER TABLE wheelq_outbox {state} TRIGGER wheelq_outbox_notify")
    client = AsyncClient.from_url(url)
    relay = outbox.Relay(client, dsn, RelaySettings(sweep_ms=sweep_ms))
    await relay.start()
    stop = threading.Event()
    loader = None
    if load:
        loader = threading.Thread(target=background_load, args=(dsn, topic + "-load", load, stop))
        loader.start()

    def sample() -> list[float]:  # on a thread: the relay runs on this loop meanwhile
        times: list[float] = []
        with redis.Redis.from_url(url) as r, psycopg.connect(dsn) as conn:
            for _ in range(samples):
                with conn.transaction():
                    job_id = outbox.enqueue(conn, topic, PAYLOAD, delay=600)
                committed = time.perf_counter()
                key = k.ShardKeys(topic, k.shard_of(job_id, SHARDS)).delayed
                while r.zscore(key, job_id) is None:
                    if time.perf_counter() - committed > 10:
                        raise SystemExit(f"{job_id} not in Redis 10 s after its commit")
                times.append((time.perf_counter() - committed) * 1000)
        return times

    times = await asyncio.to_thread(sample)
    stop.set()
    if loader is not None:
        loader.join()
    await relay.stop()
    await client.aclose()
    return {
        "p50_ms": round(percentile(times, 0.5), 2),
        "p99_ms": round(percentile(times, 0.99), 2),
        "max_ms": round(max(times), 2),
        "samples": len(times),
    }


def enqueue_cost(dsn: str, topic: str, per_tx: int, calls: int) -> dict[str, float]:
    """µs per job: `outbox.enqueue` against a bare INSERT of the same values, in turns."""
    params = row(topic, PAYLOAD, None, delay=60)
    with psycopg.connect(dsn) as conn:

        def bare() -> None:
            conn.execute(INSERT, params)

        def wheelq_call() -> None:
            outbox.enqueue(conn, topic, PAYLOAD, delay=60)

        def timed(call: Callable[[], None]) -> float:
            started = time.perf_counter()
            for _ in range(calls // per_tx):
                with conn.transaction():
                    for _ in range(per_tx):
                        call()
            return (time.perf_counter() - started) / (calls // per_tx * per_tx) * 1e6

        for call in (bare, wheelq_call):  # warm: prepared statements, caches
            timed(call)
        a, b = [], []
        for _ in range(5):
            a.append(timed(bare))
            b.append(timed(wheelq_call))
    ratio = statistics.median(b) / statistics.median(a)
    return {
        "bare_insert_us": round(statistics.median(a), 1),
        "outbox_enqueue_us": round(statistics.median(b), 1),
        "ratio": round(ratio, 2),
        "added_us": round(statistics.median(b) - statistics.median(a), 1),
    }


async def measure(url: str, pg: PostgresServer, args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for relays in (1, 2):
        rates = []
        for n in range(args.rounds):
            dsn = fresh(pg, "bench")
            rates.append(
                await relay_throughput(
                    url, dsn, f"tp{relays}-{n}-{time.time_ns()}", args.rows, relays
                )
            )
        out[f"relay_jobs_per_s_{relays}_relays"] = spread(rates)
    latency: dict[str, Any] = {}
    for name, sweep_ms, notify, load in (
        ("notify_idle", 1000, True, 0),
        ("notify_load_5k", 1000, True, args.load),
        ("sweep_100ms_idle", 100, False, 0),
        ("sweep_1000ms_idle", 1000, False, 0),
    ):
        runs = []
        for n in range(args.rounds):
            dsn = fresh(pg, "bench")
            topic = f"lat-{name}-{n}-{time.time_ns()}"
            # the sweep alone: fewer samples, each waits the interval (the worst case here:
            # each commit comes right after the sweep that placed the previous job)
            samples = args.samples if notify else (200 if sweep_ms <= 100 else 60)
            runs.append(await commit_to_zset(url, dsn, topic, samples, sweep_ms, notify, load))
        latency[name] = {
            key: statistics.median(run[key] for run in runs)
            for key in ("p50_ms", "p99_ms", "max_ms")
        } | {"p99_ms_per_round": [run["p99_ms"] for run in runs], "samples": runs[0]["samples"]}
    out["commit_to_sorted_set"] = latency
    dsn = fresh(pg, "bench")
    out["enqueue_cost_1_per_tx"] = enqueue_cost(dsn, "cost", 1, 2000)
    out["enqueue_cost_100_per_tx"] = enqueue_cost(dsn, "cost", 100, 20_000)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rows", type=int, default=200_000, help="rows a relay places a round")
    p.add_argument("--samples", type=int, default=2000, help="latency samples a round (NOTIFY)")
    p.add_argument("--load", type=int, default=5000, help="background rows/s in the load case")
    p.add_argument("--out", type=Path, help="also write the JSON here")
    args = p.parse_args()
    pg = PostgresServer()
    result: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "rounds": args.rounds,
        "rows": args.rows,
        "servers": {},
    }
    try:
        with psycopg.connect(pg.dsn) as conn:
            result["machine"]["postgresql"] = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
        for binary in find_server_binaries():
            with EmbeddedServer(binary) as server:
                with redis.Redis.from_url(server.url) as r:
                    version = (
                        r.info("server").get("valkey_version") or r.info("server")["redis_version"]
                    )
                figures = asyncio.run(measure(server.url, pg, args))
                result["servers"][binary.kind] = {"version": version, **figures}
    finally:
        pg.stop()
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
