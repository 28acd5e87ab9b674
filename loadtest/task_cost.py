"""What a task costs over a plain job, on a real server the script starts: the p50 latency of
`Task.enqueue_in` with three typed arguments against `Client.enqueue` of the same payload,
and a worker's throughput running a no-op task against a no-op plain handler. In turns,
--rounds times; medians and ratios as JSON.

    python loadtest/task_cost.py --rounds 5 --calls 2000 --jobs 20000
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import wheelq
from wheelq import App, Client, EnqueueItem, Worker
from wheelq.testing import EmbeddedServer, find_server_binaries

sys.path.insert(0, str(Path(__file__).resolve().parent))


@dataclasses.dataclass
class Address:
    city: str
    zip: str = ""


WHEN = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
ADDRESS = Address("Oslo", "0150")


def p50_us(call: Callable[[], Any], calls: int) -> float:
    """Median µs of `calls` calls of `call`, each timed alone."""
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


async def drain(url: str, topic: str, handler: Any, jobs: int, counted: list[int]) -> float:
    """Jobs/s of one worker (concurrency 200) running `handler` on `jobs` jobs due now."""
    worker = Worker.from_url(url, topic, handler, concurrency=200)
    await worker.start()
    started = time.perf_counter()
    while counted[0] < jobs:
        await asyncio.sleep(0.005)
    seconds = time.perf_counter() - started
    await worker.stop()
    return jobs / seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=2000, help="single enqueues a round, each way")
    p.add_argument("--jobs", type=int, default=20_000, help="jobs a worker drains a round")
    args = p.parse_args()
    binary = find_server_binaries()[0]
    out: dict[str, Any] = {"server": binary.kind, "rounds": args.rounds, "calls": args.calls}
    with EmbeddedServer(binary) as server:
        url = server.url
        app = App(url)
        counted = [0]

        @app.task(topic="cost-task")
        def send(to: str, when: datetime.datetime, address: Address) -> None:
            """Three typed arguments, no work."""

        @app.task(topic="cost-task-worker", result=False)
        async def noop(to: str, when: datetime.datetime, address: Address) -> None:
            counted[0] += 1

        async def plain(job: wheelq.Job) -> None:
            counted[0] += 1

        payload = send.codec.encode(("a@b.example", WHEN), {"address": ADDRESS})
        client = Client.from_url(url)
        enqueue = {
            "plain": lambda: client.enqueue("cost-plain", payload, delay=3600),
            "task": lambda: send.enqueue_in(3600, "a@b.example", WHEN, address=ADDRESS),
        }
        for way in enqueue.values():  # connections and scripts warm
            for _ in range(200):
                way()
        latency: dict[str, list[float]] = {"plain": [], "task": []}
        throughput: dict[str, list[float]] = {"plain": [], "task": []}
        for n in range(args.rounds):
            order = ["plain", "task"] if n % 2 == 0 else ["task", "plain"]
            for way in order:
                latency[way].append(p50_us(enqueue[way], args.calls))
            for way in order:
                topic = "cost-plain-worker" if way == "plain" else "cost-task-worker"
                client.enqueue_many(topic, [EnqueueItem(payload=payload)] * args.jobs)
                counted[0] = 0
                handler = plain if way == "plain" else noop.handler()
                throughput[way].append(asyncio.run(drain(url, topic, handler, args.jobs, counted)))
        client.close()
        app.close()
    for name, runs in (("enqueue_p50_us", latency), ("worker_jobs_per_s", throughput)):
        out[name] = {
            way: {"median": round(statistics.median(v), 1), "runs": [round(x, 1) for x in v]}
            for way, v in runs.items()
        }
        plain, task = (statistics.median(runs[w]) for w in ("plain", "task"))
        out[name]["task_to_plain"] = round(task / plain, 3)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
