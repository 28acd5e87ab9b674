"""What the dashboard's charts cost: how long the topic page (charts included) takes to
render at 16 shards and 5 consumer groups, and how many Redis commands a second the
service's own sampling spends on a topic (INFO commandstats, counted by the server).

    python loadtest/console_cost.py [--requests 50] [--seconds 60] [--server valkey|redis]

One embedded server, one topic of 16 shards with 5 groups, 10,000 pending jobs and 2,000
fired ones, and `wheelq serve`'s app on a loopback port with its sampler running. The page
is fetched `--requests` times after a warm-up (the time to its last byte, over loopback);
then, with nothing else running, the sampler's commands are counted over `--seconds`.
Prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import redis.asyncio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib.web import service_on_loopback

from wheelq import AsyncAdmin, AsyncClient
from wheelq.testing import EmbeddedServer, find_server_binaries
from wheelq.web.samples import interval_s

SHARDS, GROUPS = 16, 5


async def commands(r: redis.asyncio.Redis) -> Counter[str]:
    stats: dict[str, Any] = await r.info("commandstats")
    return Counter({k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()})


async def run(requests: int, seconds: float, kind: str | None) -> dict[str, Any]:
    binaries = [b for b in find_server_binaries() if kind is None or b.kind == kind]
    with EmbeddedServer(binaries[0]) as server:
        r = redis.asyncio.Redis.from_url(server.url)
        async with AsyncClient.from_url(server.url) as client:
            admin = AsyncAdmin.of(client)
            await admin.create_topic("console", SHARDS)
            for g in range(GROUPS):
                await admin.create_group("console", f"group-{g}")
            later = [{"payload": i, "delay": timedelta(hours=1)} for i in range(10_000)]
            await client.enqueue_many("console", later)
            await client.enqueue_many("console", [{"payload": i} for i in range(2_000)])
        async with service_on_loopback(server.url) as base, aiohttp.ClientSession() as http:
            url = f"{base}/ui/topics/console"
            for _ in range(5):  # warm-up: templates compiled, scripts loaded, a sample taken
                async with http.get(url) as response:
                    assert response.status == 200, await response.text()
            times_ms = []
            for _ in range(requests):
                started = time.perf_counter()
                async with http.get(url) as response:
                    await response.read()
                times_ms.append((time.perf_counter() - started) * 1000)
            # Now only the sampler talks to Redis.
            before = await commands(r)
            await asyncio.sleep(seconds)  # the measurement's span
            spent = await commands(r) - before
            spent["info"] -= 1
            spent = +spent
        await r.aclose()
    times_ms.sort()
    return {
        "server": binaries[0].kind,
        "shards": SHARDS,
        "groups": GROUPS,
        "topic_page_ms": {
            "median": round(statistics.median(times_ms), 1),
            "p99": round(times_ms[max(0, int(len(times_ms) * 0.99) - 1)], 1),
            "max": round(times_ms[-1], 1),
            "requests": requests,
        },
        "sampling": {
            "interval_s": interval_s(SHARDS, GROUPS),
            "commands_per_s": round(sum(spent.values()) / seconds, 2),
            "seconds": seconds,
            "by_command": dict(spent.most_common()),
        },
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=50)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--server", choices=("valkey", "redis"), default=None)
    args = p.parse_args()
    print(json.dumps(asyncio.run(run(args.requests, args.seconds, args.server)), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
