"""The columnar bulk enqueue against a raw Lua batch of the same writes, in turns.

    python loadtest/bulk_enqueue.py [--jobs 200000] [--rounds 7] [--server valkey|redis]

Against an embedded server (or `--redis-url`), each round enqueues `--jobs` jobs of 100
bytes due in an hour on a topic of 4 shards, three ways one after the other, from this one
process:

- ``raw_lua``: limit.py's raw Lua batch (one EVALSHA of a ZADD + HSET script per 500 jobs
  of a shard, 64 calls a pipeline: `benchlib.limit`), the server's own limit for the writes;
- ``bulk``: `Client.enqueue_bulk(topic, payloads, delay=1800)`, 20,000 payloads a call;
- ``many``: `Client.enqueue_many` of `EnqueueItem(payload=..., delay=1800)`, 20,000 a call,
  the items made in the timed loop as the bench's `enqueue` scenario makes them (alike:
  encoded as the bulk call's columns).

It prints JSON: jobs/s of each way per round, their medians and ranges, the ratios to
``raw_lua`` (median of the per-round ratios, with their range), and each way's CPU per job
in this process (``client_us``) and in the server (``redis_us``, ``INFO cpu``): which of
the two holds a way's rate. Keys are deleted after each round.

    python loadtest/bulk_enqueue.py --far [--jobs 200000] [--rounds 5] [--server redis]

compares the far tier with the sorted set instead (docs/architecture.md, "The far tier"):
``enqueue_many`` of items due over a day 30 days ahead (``far``: the topic's far tier, its
default horizon of an hour) against items due over the half hour from now (``hot``: the
sorted set), each item its own delay, 20,000 a call, in turns; besides jobs/s it reports
the server's CPU per job (``INFO cpu``, user + sys, across the calls) and the ratios far /
hot of both.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import redis
from benchlib.common import Bench
from benchlib.limit import _enqueue_lua
from benchlib.scenarios import MANY_ITEMS, PAYLOAD, enqueue_many_rate

from wheelq import Admin, Client, EnqueueItem
from wheelq.testing import EmbeddedServer, find_server_binaries

PER_CALL = MANY_ITEMS
SHARDS = 4


def bulk_rate(client: Client, topic: str, jobs: int) -> float:
    payloads = [PAYLOAD] * PER_CALL
    t = time.perf_counter()
    for i in range(0, jobs, PER_CALL):
        client.enqueue_bulk(topic, payloads[: min(PER_CALL, jobs - i)], delay=1800)
    return jobs / (time.perf_counter() - t)


def measure(url: str, jobs: int, rounds: int) -> dict[str, Any]:
    bench = Bench(url, quick=False)
    r = bench.redis()
    runs: list[dict[str, float]] = []
    cpu: list[dict[str, dict[str, float]]] = []  # per round: each way's CPU µs a job
    try:
        with Client.from_url(url, default_shards=SHARDS) as client:
            admin = Admin.of(client)
            for n in range(rounds):
                one: dict[str, float] = {}
                costs: dict[str, dict[str, float]] = {}
                client0 = time.process_time()
                raw = _enqueue_lua(bench, r, f"bulk-raw-{n}:", jobs, PAYLOAD)
                one["raw_lua"] = raw.per_s
                costs["raw_lua"] = {  # the server's as the phase read it, before its DEL
                    "client_us": round((time.process_time() - client0) / jobs * 1e6, 2),
                    "redis_us": raw.redis_cpu_us_per_job,
                }
                for name, rate in (("bulk", bulk_rate), ("many", enqueue_many_rate)):
                    topic = f"bulk-{name}-{n}"
                    admin.create_topic(topic, SHARDS)
                    client0, server0 = time.process_time(), server_cpu_s(r)
                    one[name] = round(rate(client, topic, jobs))
                    costs[name] = {
                        "client_us": round((time.process_time() - client0) / jobs * 1e6, 2),
                        "redis_us": round((server_cpu_s(r) - server0) / jobs * 1e6, 2),
                    }
                    admin.drop_topic(topic, force=True)
                runs.append(one)
                cpu.append(costs)
                print(f"round {n + 1}: {one} {costs}", file=sys.stderr)
    finally:
        r.close()
        bench.close()

    def summary(values: list[float]) -> dict[str, float]:
        return {"median": statistics.median(values), "min": min(values), "max": max(values)}

    ratios = {
        name: summary([round(run[name] / run["raw_lua"], 3) for run in runs])
        for name in ("bulk", "many")
    }
    return {
        "jobs_per_round": jobs,
        "payload_bytes": len(PAYLOAD),
        "shards": SHARDS,
        "jobs_per_s": {name: summary([run[name] for run in runs]) for name in runs[0]},
        "ratio_to_raw_lua": ratios,
        "cpu_us_per_job": {
            name: {part: summary([c[name][part] for c in cpu]) for part in cpu[0][name]}
            for name in cpu[0]
        },
        "rounds": runs,
        "cpu_rounds": cpu,
    }


DAY_S = 86_400
FAR_DAYS = 30


def spread_rate(
    client: Client, r: Any, topic: str, jobs: int, start_s: float, span_s: float
) -> tuple[float, float]:
    """`enqueue_many` of `jobs` items due from `start_s` over `span_s` seconds, each its own
    delay, `PER_CALL` a call: (jobs/s, the server's CPU µs per job)."""
    step = span_s / jobs
    delays = [start_s + i * step for i in range(jobs)]
    cpu0, t = server_cpu_s(r), time.perf_counter()
    for i in range(0, jobs, PER_CALL):
        chunk = delays[i : i + PER_CALL]
        client.enqueue_many(topic, [EnqueueItem(payload=PAYLOAD, delay=d) for d in chunk])
    seconds, cpu = time.perf_counter() - t, server_cpu_s(r) - cpu0
    return jobs / seconds, cpu / jobs * 1e6


def server_cpu_s(r: Any) -> float:
    info = r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def measure_far(url: str, jobs: int, rounds: int) -> dict[str, Any]:
    r = redis.Redis.from_url(url)
    runs: list[dict[str, float]] = []
    ways = {"hot": (60.0, 1800.0), "far": (FAR_DAYS * DAY_S, DAY_S)}
    try:
        with Client.from_url(url, default_shards=SHARDS) as client:
            admin = Admin.of(client)
            for n in range(rounds):
                one: dict[str, float] = {}
                for name in sorted(ways, reverse=n % 2 == 1):  # which goes first alternates
                    topic = f"bulk-{name}-{n}"
                    admin.create_topic(topic, SHARDS)
                    per_s, cpu_us = spread_rate(client, r, topic, jobs, *ways[name])
                    one[f"{name}_jobs_per_s"] = round(per_s)
                    one[f"{name}_redis_cpu_us_per_job"] = round(cpu_us, 2)
                    if name == "far":
                        far = admin.stats(topic).far
                        one["far_jobs_in_far_tier"] = far
                    admin.drop_topic(topic, force=True)
                runs.append(one)
                print(f"round {n + 1}: {one}", file=sys.stderr)
    finally:
        r.close()

    def summary(values: list[float]) -> dict[str, float]:
        return {"median": statistics.median(values), "min": min(values), "max": max(values)}

    figures = [k for k in runs[0] if k != "far_jobs_in_far_tier"]
    return {
        "jobs_per_round": jobs,
        "payload_bytes": len(PAYLOAD),
        "shards": SHARDS,
        "hot": "due from a minute ahead over the next half hour (the sorted set)",
        "far": f"due from {FAR_DAYS} days ahead over a day (the far tier, horizon an hour)",
        "figures": {k: summary([run[k] for run in runs]) for k in figures},
        "far_over_hot": {
            "jobs_per_s": summary(
                [round(run["far_jobs_per_s"] / run["hot_jobs_per_s"], 3) for run in runs]
            ),
            "redis_cpu_per_job": summary(
                [
                    round(run["far_redis_cpu_us_per_job"] / run["hot_redis_cpu_us_per_job"], 2)
                    for run in runs
                ]
            ),
        },
        "rounds": runs,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=200_000, help="jobs per way per round")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--server", choices=("valkey", "redis"), default=None)
    p.add_argument("--redis-url", help="use this server instead of an embedded one")
    p.add_argument("--far", action="store_true", help="the far tier against the sorted set")
    args = p.parse_args()
    run = measure_far if args.far else measure
    if args.redis_url:
        report = run(args.redis_url, args.jobs, args.rounds)
    else:
        binaries = [b for b in find_server_binaries() if args.server in (None, b.kind)]
        with EmbeddedServer(binaries[0]) as server:
            report = run(server.url, args.jobs, args.rounds)
            report["server"] = binaries[0].kind
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
