"""What a worker costs Redis while idle and while its group is paused: commands per second,
counted by the server (INFO commandstats, less this script's own INFO calls).

    python loadtest/pause_cost.py --seconds 20

One embedded server, one topic of 4 shards, one worker (default settings) and no scheduler
node, so every command counted is the worker's (or the pause/resume calls, counted apart).
Prints JSON: commands/s per phase, and which commands.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import Counter
from typing import Any

import redis.asyncio

from wheelq import AsyncAdmin, Job, Worker
from wheelq.testing import EmbeddedServer, find_server_binaries


async def commands(r: redis.asyncio.Redis) -> Counter[str]:
    stats: dict[str, Any] = await r.info("commandstats")
    return Counter({k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()})


async def phase(r: redis.asyncio.Redis, seconds: float) -> dict[str, Any]:
    before = await commands(r)
    await asyncio.sleep(seconds)  # the measurement's span, not a synchronisation
    after = await commands(r)
    spent = after - before
    spent["info"] -= 1  # the `after` read itself
    spent = +spent
    return {
        "commands_per_s": round(sum(spent.values()) / seconds, 3),
        "by_command": dict(spent.most_common()),
    }


async def run(seconds: float, kind: str | None) -> dict[str, Any]:
    binaries = [b for b in find_server_binaries() if kind is None or b.kind == kind]
    with EmbeddedServer(binaries[0]) as server:
        r = redis.asyncio.Redis.from_url(server.url)
        async with AsyncAdmin.from_url(server.url) as admin:
            await admin.create_topic("paused", 4)

            async def handle(job: Job) -> None:
                return None

            worker = Worker.from_url(server.url, "paused", handle)
            await worker.start()
            try:
                await asyncio.sleep(1)  # let the start's own calls pass
                idle = await phase(r, seconds)
                await admin.pause("paused")
                while not worker.status()["paused"]:
                    await asyncio.sleep(0.01)
                paused = await phase(r, seconds)
                await admin.resume("paused")
            finally:
                await worker.stop()
        await r.aclose()
        return {
            "server": binaries[0].kind,
            "seconds_per_phase": seconds,
            "worker_idle": idle,
            "worker_paused": paused,
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--server", choices=("valkey", "redis"), default=None)
    args = p.parse_args()
    print(json.dumps(asyncio.run(run(args.seconds, args.server)), indent=2))


if __name__ == "__main__":
    main()
