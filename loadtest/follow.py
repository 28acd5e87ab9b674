"""Jobs that follow jobs (docs/guides/workflows.md): how soon a continuation starts after the
job it follows is acked, and a 10,000-child join's parent after its last child's ack.

    python loadtest/follow.py [--pairs 2000] [--rate 200] [--children 10000] [--rounds 5]
        [--primaries 3] [--server valkey|redis] [--out FILE]

continuation: on one server (wheelq.embedded), a `wheelq scheduler` process and one worker
(this process, an async handler, concurrency 16) run `--pairs` parents due at `--rate` a
second, each followed by a continuation with ``delay=0``. The handler records on the Redis
clock (its offset measured at start) when each parent's run ended and when each
continuation's started; the gap is an upper bound of "start after the parent's ack" (the
ack itself comes after the run's end). Baseline in the same run: the same parents' own
handler start after their due time.

join: on a cluster of `--primaries` primaries, a topic of 12 shards (children on every
primary), one scheduler process and this worker: each round writes a flow of `--children`
children due at once and times the parent's handler start after the last child's run ended.
p50/p99/max over rounds; the JSON a person can re-run prints to stdout (and `--out`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib.common import Bench, git_head, lateness, machine, server_version
from benchlib.nodes import start_scheduler

from wheelq import AsyncAdmin, AsyncClient, Job, JobSpec, Worker
from wheelq.embedded import (
    EmbeddedCluster,
    EmbeddedServer,
    ServerBinary,
    find_server_binaries,
)


class Clock:
    """This process's offset to the Redis clock, measured once (the best of 20 samples)."""

    def __init__(self) -> None:
        self.offset_ms = 0.0

    async def measure(self, client: AsyncClient) -> None:
        best = None
        for _ in range(20):
            t0 = time.time() * 1000
            s, us = await client.redis.time()
            t1 = time.time() * 1000
            if best is None or t1 - t0 < best[0]:
                best = (t1 - t0, s * 1000 + us / 1000 - (t0 + t1) / 2)
        assert best is not None
        self.offset_ms = best[1]

    def now_ms(self) -> float:
        return time.time() * 1000 + self.offset_ms


async def continuations(url: str, pairs: int, rate: float) -> dict[str, Any]:
    bench = Bench(url)
    topic = bench.topic("follow")
    clock = Clock()
    ends: dict[str, float] = {}
    starts: dict[str, float] = {}
    parent_late: list[float] = []

    async def handler(job: Job) -> None:
        now = clock.now_ms()
        if job.payload["kind"] == "parent":
            parent_late.append(now - job.due_ms)
            ends[job.id] = clock.now_ms()
        else:
            starts[job.payload["after"]] = now

    async with AsyncClient.from_url(url) as client:
        await clock.measure(client)
        await AsyncAdmin.of(client).create_topic(topic, 4)
        start_scheduler(bench, topic)
        worker = Worker.from_url(url, topic, handler, concurrency=16)
        await worker.start()
        try:
            await asyncio.sleep(2)  # the node leads the shards
            begin = time.monotonic()
            for n in range(pairs):
                wait = begin + n / rate - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                parent = await client.enqueue(topic, {"kind": "parent"}, delay=0.05)
                await client.enqueue(topic, {"kind": "next", "after": parent}, after=parent)
            deadline = time.monotonic() + 30
            while len(starts) < pairs and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
        finally:
            await worker.stop()
            bench.close()
    gaps = [starts[p] - ends[p] for p in starts if p in ends]
    return {
        "pairs": pairs,
        "rate_per_s": rate,
        "started": len(starts),
        "continuation_start_after_parent_end_ms": lateness(gaps),
        "baseline_parent_start_after_due_ms": lateness(parent_late),
    }


async def join_round(url: str, topic: str, children: int, clock: Clock) -> float:
    ends: list[float] = []
    parent_start: list[float] = []

    async def handler(job: Job) -> None:
        if job.payload == "parent":
            parent_start.append(clock.now_ms())
        else:
            ends.append(clock.now_ms())

    async with AsyncClient.from_url(url) as client:
        worker = Worker.from_url(url, topic, handler, concurrency=32)
        await worker.start()
        try:
            await client.enqueue_flow(
                JobSpec(topic, "parent"), [JobSpec(topic, n) for n in range(children)]
            )
            deadline = time.monotonic() + 120
            while not parent_start and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        finally:
            await worker.stop()
    return parent_start[0] - max(ends)


async def joins(url: str, children: int, rounds: int) -> dict[str, Any]:
    bench = Bench(url)
    topic = bench.topic("join")
    clock = Clock()
    async with AsyncClient.from_url(url) as client:
        await clock.measure(client)
        await AsyncAdmin.of(client).create_topic(topic, 12)
    start_scheduler(bench, topic)
    try:
        await asyncio.sleep(3)
        gaps = [await join_round(url, topic, children, clock) for _ in range(rounds)]
    finally:
        bench.close()
    return {
        "children": children,
        "rounds": rounds,
        "parent_start_after_last_child_end_ms": {
            "each": [round(g, 2) for g in gaps],
            "p50": round(statistics.median(gaps), 2),
            "max": round(max(gaps), 2),
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=2000)
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--children", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--primaries", type=int, default=3)
    ap.add_argument("--server", choices=("valkey", "redis"), default="valkey")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    binary: ServerBinary = next(b for b in find_server_binaries() if b.kind == args.server)
    result: dict[str, Any] = {"commit": git_head(), "machine": machine()}
    with EmbeddedServer(binary) as server:
        result["server"] = server_version(redis.Redis.from_url(server.url))
        result["continuation"] = asyncio.run(continuations(server.url, args.pairs, args.rate))
    with EmbeddedCluster(binary, primaries=args.primaries) as cluster:
        result["join"] = asyncio.run(joins(cluster.url, args.children, args.rounds))
        result["join"]["primaries"] = args.primaries
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
