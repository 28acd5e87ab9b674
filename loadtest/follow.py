"""Jobs that follow jobs (docs/guides/workflows.md): how soon a continuation starts after the
job it follows is acked, and a 10,000-child join's parent after its last child's ack.

    python loadtest/follow.py [--pairs 2000] [--rate 200] [--children 10000] [--rounds 10]
        [--primaries 3] [--server valkey|redis] [--out FILE]

continuation: on one server (wheelq.embedded), a `wheelq scheduler` process and one worker
(this process, an async handler, concurrency 16) run `--pairs` parents due at `--rate` a
second, each followed by a continuation with ``delay=0``. The handler records on the Redis
clock (its offset measured at start) when each parent's run ended and when each
continuation's started; the gap is an upper bound of "start after the parent's ack" (the
ack itself comes after the run's end). Baseline in the same run: the same parents' own
handler start after their due time.

join: on a cluster of `--primaries` primaries, a topic of 12 shards (children on every
primary), one scheduler process and one worker process (concurrency 32, an async handler:
`benchlib/join_handler.py`): each round writes a flow of `--children` children due at once
and times the parent's handler start after the last child's ack (the newest notice's stream
id on the children's shards: when ``ack.lua`` wrote it, Redis clock), when it was made due
after that ack, and its start after the last child's run ended (the worker's own ack lag
included). p50/p99/max over rounds; the JSON a person can re-run prints to stdout (and `--out`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib.common import Bench, git_head, lateness, machine, server_version, wheelq_cmd
from benchlib.nodes import start_scheduler

from wheelq import AsyncAdmin, AsyncClient, Job, JobSpec, Worker
from wheelq.core.job import entry_ms
from wheelq.core.keys import ShardKeys
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


SHARDS = 12
"""The join's topic: children on every primary."""


async def join_round(url: str, topic: str, children: int, out: Path) -> dict[str, float]:
    """When the parent started after the last child's ack (the newest notice's id on the
    children's shards: ``ack.lua`` wrote it, on the Redis clock) and after the last child's
    run ended (an upper bound: the worker acks after), and when it was made due (released)
    after that ack; the worker process records its side (`benchlib/join_handler.py`)."""
    seen = len(out.read_text().splitlines())
    async with AsyncClient.from_url(url) as client:
        await client.enqueue_flow(
            JobSpec(topic, "parent"), [JobSpec(topic, n) for n in range(children)]
        )
        deadline = time.monotonic() + 120
        while len(lines := out.read_text().splitlines()) == seen and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        start, last_end, due, _ = map(float, lines[seen].split())
        infos = [
            await client.redis.xinfo_stream(ShardKeys(topic, s).notices) for s in range(SHARDS)
        ]
    last_ack = max(entry_ms(i["last-generated-id"]) for i in infos)
    return {
        "start_after_ack": start - last_ack,
        "start_after_end": start - last_end,
        "release_after_ack": due - last_ack,
    }


async def joins(url: str, children: int, rounds: int) -> dict[str, Any]:
    bench = Bench(url)
    topic = bench.topic("join")
    async with AsyncClient.from_url(url) as client:
        await AsyncAdmin.of(client).create_topic(topic, SHARDS)
    out = Path(tempfile.mkstemp(prefix="wheelq-join-", suffix=".txt")[1])
    start_scheduler(bench, topic)
    here = str(Path(__file__).resolve().parent)
    bench.spawn(
        wheelq_cmd("worker", "--redis-url", url, "--topic", topic, "--concurrency", "32",
                   "benchlib.join_handler:handle"),
        env={**os.environ, "WHEELQ_JOIN_OUT": str(out), "PYTHONPATH": here},
    )  # fmt: skip
    try:
        await asyncio.sleep(3)
        gaps = [await join_round(url, topic, children, out) for _ in range(rounds)]
    finally:
        bench.close()
        out.unlink()
    return {
        "children": children,
        "rounds": rounds,
        "parent_start_after_last_child_ack_ms": _spread([g["start_after_ack"] for g in gaps]),
        "parent_released_after_last_child_ack_ms": _spread([g["release_after_ack"] for g in gaps]),
        "parent_start_after_last_child_end_ms": _spread([g["start_after_end"] for g in gaps]),
    }


def _spread(gaps: list[float]) -> dict[str, Any]:
    """Each round's gap, and their p50, p99 (nearest rank) and max."""
    ranked = sorted(gaps)
    return {
        "each": [round(g, 2) for g in gaps],
        "p50": round(statistics.median(gaps), 2),
        "p99": round(ranked[min(len(ranked) - 1, int(0.99 * len(ranked)))], 2),
        "max": round(ranked[-1], 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=2000)
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--children", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=10)
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
