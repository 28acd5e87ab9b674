"""Firing accuracy: N jobs due at a steady rate, fired by a real scheduler node (and handled).

    python loadtest/fire_accuracy.py --rate 20000 --duration 10
    python loadtest/fire_accuracy.py --rate 5000 --duration 10 --workers 1

Starts a Valkey server (or uses --redis-url), a scheduler node in a process
of its own (`wheelq scheduler`), enqueues rate x duration jobs whose due
times are spread evenly over `duration` seconds, waits until all have
fired, and prints one JSON object: lateness percentiles (stream entry time
minus due time, both on the Redis clock), fired / missing / duplicates /
early counts, and the enqueue rate. With ``--workers N`` it also runs N
worker processes (`wheelq.Worker`, a no-op async handler) and reports
handler-start lateness: the handler's start time, read on the worker's
clock corrected to the Redis clock, minus the due time. It is a benchmark,
not a test: it asserts nothing, and it exits 1 only if a job is missing,
duplicated, early, or (with workers) not handled.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

import redis
import redis.asyncio

from wheelq import Client, EnqueueItem, Job, Worker
from wheelq.core.keys import all_shards
from wheelq.core.stats import Fired, summarize
from wheelq.embedded import EmbeddedServer, find_server_binaries
from wheelq.runtime.clock import RedisClock
from wheelq.runtime.observe import read_fired
from wheelq.runtime.scheduler import ClockKeeper
from wheelq.store.calls import AsyncExecutor


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=float, default=20_000, help="due jobs per second")
    p.add_argument("--duration", type=float, default=10.0, help="seconds the due times span")
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--redis-url", help="use this server instead of an embedded one")
    p.add_argument(
        "--server",
        choices=["valkey", "redis"],
        default="valkey",
        help="embedded server kind (redis needs redis-server on PATH)",
    )
    p.add_argument("--payload-bytes", type=int, default=100)
    p.add_argument(
        "--config", help="TOML settings file for the scheduler node (config/wheelq.toml)"
    )
    p.add_argument("--workers", type=int, default=0, help="worker processes (0: fire only)")
    p.add_argument("--concurrency", type=int, default=200, help="handlers at once per worker")
    p.add_argument(
        "--child-worker", nargs=3, metavar=("URL", "TOPIC", "OUT"), help=argparse.SUPPRESS
    )
    return p.parse_args()


async def worker_child(url: str, topic: str, out: str, concurrency: int) -> None:
    """A worker process: records (job id, due ms, handler start ms) until SIGTERM, then
    writes them to `out` as JSON."""
    connection = redis.asyncio.Redis.from_url(url)
    clock = RedisClock()
    keeper = ClockKeeper(AsyncExecutor(connection), clock, 5000)
    for _ in range(5):
        await keeper.sample()
    records: list[tuple[str, int, float]] = []

    async def handler(job: Job) -> None:
        records.append((job.id, job.due_ms, clock.now_ms()))

    worker = Worker.from_url(url, topic, handler, concurrency=concurrency)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await keeper.start()
    await worker.start()
    print("ready", flush=True)
    await stop.wait()
    await worker.stop()
    await keeper.stop()
    await connection.aclose()
    with open(out, "w") as f:
        json.dump(records, f)


def _start_workers(
    args: argparse.Namespace, url: str, topic: str, tmp: str
) -> list[subprocess.Popen[bytes]]:
    procs = []
    for i in range(args.workers):
        out = os.path.join(tmp, f"worker-{i}.json")
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--concurrency",
                    str(args.concurrency),
                    "--child-worker",
                    url,
                    topic,
                    out,
                ],
                stdout=subprocess.PIPE,
            )
        )
    for proc in procs:
        assert proc.stdout is not None
        proc.stdout.readline()  # "ready"
    return procs


def _all_handled(r: redis.Redis, topic: str, shards: int, n: int) -> bool:
    if sum(r.xlen(k.ready) for k in all_shards(topic, shards)) < n:
        return False
    for keys in all_shards(topic, shards):
        last = r.xrevrange(keys.ready, count=1)
        group = r.xinfo_groups(keys.ready)[0]
        if group["pending"] or (last and group["last-delivered-id"] != last[0][0]):
            return False
    return True


def _handled_records(tmp: str, workers: int) -> list[Fired]:
    out: list[Fired] = []
    for i in range(workers):
        with open(os.path.join(tmp, f"worker-{i}.json")) as f:
            out += [Fired(job_id, due, round(start)) for job_id, due, start in json.load(f)]
    return out


def redis_ms(r: redis.Redis) -> int:
    sec, usec = r.time()
    return int(sec) * 1000 + int(usec) // 1000


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc (Linux)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _read_fired(url: str, topic: str, shards: int) -> list[Fired]:
    connection = redis.asyncio.Redis.from_url(url)
    try:
        return await read_fired(connection, topic, shards)
    finally:
        await connection.aclose()


def run(args: argparse.Namespace, url: str) -> dict[str, Any]:
    topic = f"fire-{os.getpid()}-{int(time.time())}"
    n = int(args.rate * args.duration)
    r = redis.Redis.from_url(url)
    client = Client.from_url(url)
    client.create_topic(topic, args.shards)
    node = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "wheelq",
            "--log-level",
            "WARNING",
            "scheduler",
            "--redis-url",
            url,
            "--topics",
            topic,
            *(["--config", args.config] if args.config else []),
        ],
    )
    tmp = tempfile.mkdtemp(prefix="wheelq-load-")
    workers = _start_workers(args, url, topic, tmp)
    worker_cpu_s = 0.0
    try:
        while any(r.get(k.lease) is None for k in all_shards(topic, args.shards)):
            time.sleep(0.05)
        # Every job is enqueued before the first one is due, so the producer's CPU
        # does not compete with the node while it fires.
        lead_s = 2.0 + n / 50_000
        start_ms = redis_ms(r) + int(lead_s * 1000)
        payload = b"x" * args.payload_bytes
        t0 = time.perf_counter()
        ids: list[str] = []
        step = 20_000
        for i in range(0, n, step):
            ids += client.enqueue_many(
                topic,
                [
                    EnqueueItem(payload, at=(start_ms + (j * 1000.0 / args.rate)) / 1000)
                    for j in range(i, min(n, i + step))
                ],
            )
        enqueue_s = time.perf_counter() - t0
        cpu_before = cpu_seconds(node.pid)
        workers_before = sum(cpu_seconds(w.pid) for w in workers)
        deadline = time.monotonic() + lead_s + args.duration + 60
        while time.monotonic() < deadline:
            if workers:
                if _all_handled(r, topic, args.shards, n):
                    break
            elif sum(r.xlen(k.ready) for k in all_shards(topic, args.shards)) >= n:
                break
            time.sleep(0.2)
        node_cpu_s = cpu_seconds(node.pid) - cpu_before
        worker_cpu_s = sum(cpu_seconds(w.pid) for w in workers) - workers_before
        late_start = redis_ms(r) < start_ms
        records = asyncio.run(_read_fired(url, topic, args.shards))
    finally:
        for proc in [*workers, node]:
            proc.send_signal(signal.SIGTERM)
        for proc in [*workers, node]:
            proc.wait(timeout=60)
        for keys in all_shards(topic, args.shards):
            r.delete(*keys.data_keys)
        r.hdel("wheelq:topics", topic)
        r.delete(f"wheelq:nodes:{topic}")
    summary = summarize(records, ids)
    if workers:
        handled = summarize(_handled_records(tmp, args.workers), ids)
        summary["handled"] = {
            "workers": args.workers,
            "concurrency": args.concurrency,
            "handled": handled["fired"],
            "missing": handled["missing"],
            "run_twice": handled["duplicates"],
            "handler_start_lateness_ms": handled["lateness_ms"],
            "worker_cpu_s_while_handling": round(worker_cpu_s, 2),
        }
    shutil.rmtree(tmp, ignore_errors=True)
    info = r.info("server")
    return {
        "scenario": "fire_accuracy",
        "server": f"{info.get('server_name', 'redis')} "
        f"{info.get('valkey_version') or info['redis_version']}",
        "rate_per_s": args.rate,
        "duration_s": args.duration,
        "jobs": n,
        "shards": args.shards,
        "enqueue_jobs_per_s": round(n / enqueue_s),
        "enqueue_finished_before_first_due": not late_start,
        "scheduler_cpu_s_while_firing": round(node_cpu_s, 2),
        **summary,
    }


def main() -> int:
    args = parse_args()
    if args.child_worker:
        url, topic, out = args.child_worker
        asyncio.run(worker_child(url, topic, out, args.concurrency))
        return 0
    server = None
    url = args.redis_url
    if url is None:
        binary = next(b for b in find_server_binaries() if b.kind == args.server)
        server = EmbeddedServer(binary)
        server.start()
        url = server.url
    try:
        result = run(args, url)
    finally:
        if server is not None:
            server.stop()
    print(json.dumps(result, indent=2))
    ok = result["missing"] == 0 and result["duplicates"] == 0 and result["early"] == 0
    if "handled" in result:
        ok = ok and result["handled"]["missing"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
