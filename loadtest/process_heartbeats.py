"""What process heartbeats cost Redis: commands per second per process, counted by the
server (INFO commandstats), with several roles running and idle.

    python loadtest/process_heartbeats.py --seconds 20

One embedded server, one idle topic of 4 shards, and processes of their own: scheduler
nodes, workers, one process running a node and a worker (as ``wheelq run`` does) and one
``wheelq serve``. Each beat is one EVALSHA of ``process_beat.lua``, whose one HSET of the
record no other idle part sends, so the window's HSET calls are the beats; the target is
<= 1 a second per process (docs/architecture.md, "Processes"). Prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import redis.asyncio

from wheelq import AsyncAdmin, Job, Scheduler, Worker
from wheelq.testing import EmbeddedServer, find_server_binaries

TOPIC = "beats"
ROOT = Path(__file__).resolve().parents[1]


async def commands(r: redis.asyncio.Redis) -> Counter[str]:
    stats: dict[str, Any] = await r.info("commandstats")
    return Counter({k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()})


async def child(role: str, url: str) -> None:
    """One process of `role` (scheduler, worker, both) until its stdin closes."""

    async def handle(job: Job) -> None:
        return None

    parts: list[Any] = []
    if role in ("scheduler", "both"):
        parts.append(Scheduler.from_url(url, TOPIC))
    if role in ("worker", "both"):
        parts.append(Worker.from_url(url, TOPIC, handle))
    for part in parts:
        await part.start()
    await asyncio.to_thread(sys.stdin.read)  # until the parent closes it
    for part in reversed(parts):
        await part.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def measure(seconds: float, kind: str | None) -> dict[str, Any]:
    binaries = [b for b in find_server_binaries() if kind is None or b.kind == kind]
    with EmbeddedServer(binaries[0]) as server:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        r = redis.asyncio.Redis.from_url(server.url)
        async with AsyncAdmin.from_url(server.url) as admin:
            await admin.create_topic(TOPIC, 4)
            roles = ["scheduler", "scheduler", "worker", "worker", "both"]
            procs = [
                subprocess.Popen(
                    [sys.executable, __file__, "--child", role, server.url],
                    stdin=subprocess.PIPE,
                    env=env,
                    cwd=ROOT,
                )
                for role in roles
            ]
            serve = [sys.executable, "-m", "wheelq", "serve", "--redis-url", server.url]
            serve += ["--port", str(free_port()), "--deliver", "none"]
            procs.append(subprocess.Popen(serve, env=env, cwd=ROOT, stderr=subprocess.DEVNULL))
            try:
                deadline = time.monotonic() + 60
                while len(await admin.processes()) < len(procs):
                    if time.monotonic() > deadline:
                        raise SystemExit("the processes did not all come up within 60 s")
                    await asyncio.sleep(0.2)
                found = await admin.processes()
                await asyncio.sleep(2)  # let the starts' own calls pass
                before = await commands(r)
                await asyncio.sleep(seconds)  # the measurement's span, not a synchronisation
                after = await commands(r)
            finally:
                for proc in procs[:-1]:
                    assert proc.stdin is not None
                    proc.stdin.close()
                procs[-1].terminate()
                for proc in procs:
                    proc.wait(timeout=30)
        spent = after - before
        spent["info"] -= 1  # the `after` read itself
        spent = +spent
        n = len(found)
        beats = spent["hset"]
        return {
            "server": binaries[0].kind,
            "seconds": seconds,
            "processes": n,
            "roles": sorted(p.role for p in found),
            "beats": beats,
            "heartbeat_commands_per_s_per_process": round(beats / n / seconds, 3),
            "target_per_s_per_process": 1.0,
            "by_command": dict(spent.most_common()),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--server", choices=["valkey", "redis"], default=None)
    parser.add_argument("--child", nargs=2, metavar=("ROLE", "URL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        asyncio.run(child(*args.child))
        return
    print(json.dumps(asyncio.run(measure(args.seconds, args.server)), indent=2))


if __name__ == "__main__":
    main()
