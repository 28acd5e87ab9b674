"""What each ack level loses when a cluster primary is killed with kill -9 mid-stream.

    python loadtest/ack_loss.py                          # primary and replicated, 5 runs
    python loadtest/ack_loss.py --levels primary --runs 9 --threads 8 --batch 10
    python loadtest/ack_loss.py --cost                   # latency per level, no kill

Each run starts a Redis Cluster of 3 primaries with one replica each
(``cluster-node-timeout`` 1000 ms), lets `--threads` producer threads enqueue jobs at one
ack level (one `enqueue` per call, or `enqueue_many` of `--batch`), kills one primary
with SIGKILL after `--warmup` seconds, waits until its replica has taken over, produces
`--after` seconds more, then counts the jobs whose call returned (acknowledged) that are
not pending on the cluster. A job acknowledged by the dead primary but not yet
replicated is what a failover loses. It prints one JSON object: per level, each run's
figures and their medians. A benchmark, not a test: it asserts nothing.

With --cost it measures what each level costs instead: the latency of single sync
`enqueue` calls (p50, p99) on one primary with one replica, both with appendonly yes
(``appendfsync everysec``, the default, and ``always``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from typing import Any

import redis.cluster

from wheelq import Admin, Client, DurabilityError, RedisUnavailableError
from wheelq.core.keys import all_shards
from wheelq.testing import EmbeddedCluster, EmbeddedServer, ServerBinary, find_server_binaries

SHARDS = 12
TOPIC = "ack-loss"
LEVELS_COST = (("primary", 1), ("replicated", 1), ("persisted", 1), ("persisted", 0))


class Stream:
    """Producer threads that enqueue until stopped and keep the acknowledged ids."""

    def __init__(self, client: Client, level: str, threads: int, batch: int) -> None:
        self.level, self.batch = level, batch
        self.client = client
        self.acked: list[str] = []
        self.failed = 0
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(t,)) for t in range(threads)]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def join(self) -> None:
        self.stop.set()
        for t in self._threads:
            t.join()

    def _run(self, thread: int) -> None:
        n = 0
        while not self.stop.is_set():
            ids = [f"t{thread}-{n + i}" for i in range(self.batch)]
            n += self.batch
            try:
                if self.batch == 1:
                    self.client.enqueue(TOPIC, 0, delay=1800, job_id=ids[0], ack=self.level)
                else:
                    items = [{"payload": 0, "delay": 1800, "job_id": i} for i in ids]
                    self.client.enqueue_many(TOPIC, items, ack=self.level)
            except (DurabilityError, RedisUnavailableError, redis.exceptions.RedisError):
                with self._lock:
                    self.failed += 1
                continue
            with self._lock:
                self.acked += ids


def one_run(binary: ServerBinary, level: str, args: argparse.Namespace) -> dict[str, Any]:
    with EmbeddedCluster(binary, primaries=3, replicas=1, node_timeout_ms=1000) as cluster:
        settings = {"default_shards": SHARDS, "ack_timeout_ms": 200}
        with Client.from_url(cluster.url, cluster=True, **settings) as client:
            admin = Admin.of(client)
            admin.create_topic(TOPIC)
            stream = Stream(client, level, args.threads, args.batch)
            started = time.monotonic()
            stream.start()
            stream.stop.wait(args.warmup)
            acked_at_kill = len(stream.acked)
            killed = time.monotonic()
            cluster.kill_primary(1)
            failover_s = time.monotonic() - killed
            stream.stop.wait(args.after)
            stream.join()
            took = time.monotonic() - started
        node = cluster.primaries[0]
        with redis.cluster.RedisCluster(host=node.host, port=node.port) as rc:
            present: set[str] = set()
            for keys in all_shards(TOPIC, SHARDS):
                present |= {m.decode() for m in rc.zrange(keys.delayed, 0, -1)}
    lost = len(set(stream.acked) - present)
    return {
        "acked": len(stream.acked),
        "acked_before_kill": acked_at_kill,
        "lost": lost,
        "lost_per_million_acked": round(lost * 1e6 / max(1, len(stream.acked)), 1),
        "failed_calls": stream.failed,
        "jobs_per_s": round(len(stream.acked) / took),
        "failover_s": round(failover_s, 2),
    }


def cost(binary: ServerBinary, calls: int) -> dict[str, Any]:
    """Latency of single enqueues per level and fsync policy, in ms: `calls` calls a level,
    20 for "persisted" (about a second each with a replica to wait for)."""
    out: dict[str, Any] = {}
    for fsync in ("everysec", "always"):
        extra = ("--appendfsync", fsync)
        with EmbeddedServer(binary, appendonly=True, extra_args=extra) as primary:
            follow = (*extra, "--replicaof", primary.host, str(primary.port))
            with EmbeddedServer(binary, appendonly=True, extra_args=follow) as replica:
                with redis.Redis(port=replica.port) as r:
                    while r.info("replication").get("master_link_status") != "up":
                        time.sleep(0.05)
                for level, replicas in LEVELS_COST:
                    settings = {
                        "ack_replicas": replicas,
                        "ack_timeout_ms": 5000,
                        "redis_options": {"socket_timeout": 15},  # WAIT holds it up to 5 s
                    }
                    with Client.from_url(primary.url, **settings) as client:
                        admin = Admin.of(client)
                        admin.create_topic(TOPIC)
                        took = []
                        for _ in range(20 if level == "persisted" else calls):
                            t = time.perf_counter()
                            client.enqueue(TOPIC, 0, delay=1800, ack=level)
                            took.append((time.perf_counter() - t) * 1000)
                    took.sort()
                    out[f"{level}/ack_replicas={replicas}/{fsync}"] = {
                        "calls": len(took),
                        "p50_ms": round(statistics.median(took), 2),
                        "p99_ms": round(took[min(len(took) - 1, int(len(took) * 0.99))], 2),
                    }
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--levels", default="primary,replicated", help="comma-separated ack levels")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--threads", type=int, default=4, help="producer threads")
    p.add_argument("--batch", type=int, default=1, help="jobs per call (1: enqueue)")
    p.add_argument("--warmup", type=float, default=1.5, help="seconds before the kill")
    p.add_argument("--after", type=float, default=0.5, help="seconds after the failover")
    p.add_argument("--server", choices=["valkey", "redis"], default="valkey")
    p.add_argument("--cost", action="store_true", help="measure each level's latency instead")
    args = p.parse_args()
    binary = next((b for b in find_server_binaries() if b.kind == args.server), None)
    if binary is None:
        p.error(f"no {args.server} server binary found")
    if args.cost:
        print(json.dumps({"server": args.server, "latency": cost(binary, 1000)}, indent=2))
        return 0
    out: dict[str, Any] = {
        "scenario": "kill -9 of 1 of 3 primaries (1 replica each), automatic failover",
        "server": args.server,
        "threads": args.threads,
        "batch": args.batch,
        "levels": {},
    }
    for level in args.levels.split(","):
        runs = []
        for i in range(args.runs):
            runs.append(one_run(binary, level, args))
            print(f"{level} run {i + 1}/{args.runs}: {runs[-1]}", file=sys.stderr)
        medians = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        out["levels"][level] = {"median": medians, "runs": runs}
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
