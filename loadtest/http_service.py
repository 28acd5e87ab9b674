"""The HTTP service under load: how many jobs one `wheelq serve` process accepts, one per
request and in batches, and how late callbacks arrive at a steady rate. Prints JSON (also
written to --out).

    python loadtest/http_service.py                          # both scenarios, embedded Valkey
    python loadtest/http_service.py --scenarios enqueue --rounds 5
    python loadtest/http_service.py --scenarios callbacks --rates 1000,3000 --seconds 20

enqueue: a `wheelq serve` process (no deliveries) and a load process flooding it over
CONNECTIONS connections for --seconds (`benchlib/http_load.py flood`); jobs/s accepted, the
server's CPU, medians over --rounds. The baseline, measured in the same run, is the same
jobs enqueued by an `AsyncClient` in one process (no HTTP), as the ratio `vs_client`.

callbacks: a scheduler node, `wheelq serve` delivering callbacks, and a receiver process
that answers 200 and notes each arrival. The jobs are enqueued over HTTP beforehand (batch
requests), due at a steady --rates a second for --seconds, each with a callback to the
receiver; so while they fire, the machine's two cores run Redis, the node, the deliverer
and the receiver, not the enqueue load too (which the enqueue scenario measures).
Lateness = arrival (the receiver's clock) - due time (the Redis clock; one machine, one
clock).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchlib.common import Bench, cpu_seconds, drop_topic, lateness, wheelq_cmd

from wheelq import Admin, AsyncClient
from wheelq.embedded import free_port
from wheelq.testing import EmbeddedServer, find_server_binaries

LOAD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "benchlib", "http_load.py")
SEED_001 = {
    "accepted_jobs_per_s": 3500,
    "on_time_at_jobs_per_s": 1000,
    "late_at_3000_per_s_s": "1-2",
}


def serve(bench: Bench, port: int, *extra: str, env: dict[str, str] | None = None) -> Any:
    proc = bench.spawn(
        wheelq_cmd("serve", "--redis-url", bench.url, "--port", str(port), *extra),
        env={**os.environ, **(env or {})},
    )
    import urllib.request

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                return proc
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("wheelq serve did not start")


def load(*args: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, LOAD, *args], capture_output=True, text=True, check=True)
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


async def client_rate(url: str, topic: str, seconds: float, batch: int) -> float:
    """Jobs/s an AsyncClient enqueues in one process: 64 at once, or `batch` at a time
    from one task (its best: several batches at once go slower, see the README)."""
    async with AsyncClient.from_url(url) as client:
        deadline = time.monotonic() + seconds
        jobs = 0

        async def one() -> None:
            nonlocal jobs
            while time.monotonic() < deadline:
                if batch:
                    items = [{"payload": {"n": i}, "delay": 3600} for i in range(batch)]
                    jobs += len(await client.enqueue_many(topic, items))
                else:
                    await client.enqueue(topic, {"n": 1}, delay=3600)
                    jobs += 1

        started = time.monotonic()
        await asyncio.gather(*(one() for _ in range(1 if batch else 64)))
        return jobs / (time.monotonic() - started)


def run_enqueue(bench: Bench, rounds: int, seconds: float) -> dict[str, Any]:
    port = free_port()
    proc = serve(bench, port, "--deliver", "none")
    url = f"http://127.0.0.1:{port}"
    r = bench.redis()
    out: dict[str, Any] = {}
    try:
        for name, batch, conns in (("single", 0, 64), ("batch", 1000, 4)):
            rates, cores, base = [], [], []
            for i in range(rounds):
                topic = bench.topic(f"http-{name}-{i}")
                cpu0 = cpu_seconds(proc.pid)
                got = load("flood", url, topic, str(seconds), str(conns), str(batch))
                cores.append((cpu_seconds(proc.pid) - cpu0) / got["seconds"])
                rates.append(got["jobs"] / got["seconds"])
                drop_topic(r, topic)
                topic = bench.topic(f"client-{name}-{i}")
                base.append(asyncio.run(client_rate(bench.url, topic, seconds, batch)))
                drop_topic(r, topic)
                bench.log(
                    f"{name} round {i}: {rates[-1]:,.0f} jobs/s over HTTP, "
                    f"{base[-1]:,.0f} by the client, server {cores[-1]:.2f} cores"
                )
            out[name] = {
                "jobs_per_s": round(statistics.median(rates)),
                "server_cores": round(statistics.median(cores), 2),
                "client_jobs_per_s": round(statistics.median(base)),
                "vs_client": round(statistics.median(rates) / statistics.median(base), 2),
                "rounds": [round(x) for x in rates],
                "connections": conns,
                "jobs_per_request": batch or 1,
            }
    finally:
        bench.stop(proc)
    return out


def run_callbacks(
    bench: Bench, rates: list[int], seconds: float, server_pid: int | None, rounds: int
) -> list[dict[str, Any]]:
    """Each rate `rounds` times (every process started afresh): the runs, and the medians
    of their p50 and p99."""
    out = []
    for rate in rates:
        runs = [_callbacks_once(bench, rate, seconds, server_pid) for _ in range(rounds)]
        out.append(
            {
                "rate_per_s": rate,
                "median_p50_ms": statistics.median(r["callback_lateness_ms"]["p50"] for r in runs),
                "median_p99_ms": statistics.median(r["callback_lateness_ms"]["p99"] for r in runs),
                "p99_ms_of_each_run": [r["callback_lateness_ms"]["p99"] for r in runs],
                "runs": runs,
            }
        )
    return out


def _callbacks_once(
    bench: Bench, rate: int, seconds: float, server_pid: int | None
) -> dict[str, Any]:
    topic = bench.topic(f"callbacks-{rate}")
    r = bench.redis()
    with Admin.from_url(bench.url) as admin:
        admin.create_topic(topic, 4)
    node = bench.spawn(wheelq_cmd("scheduler", "--redis-url", bench.url, "--topics", topic))
    port, hook_port = free_port(), free_port()
    env = {
        "WHEELQ_CALLBACKS_ALLOW_PRIVATE": "true",
        "WHEELQ_CALLBACKS_SIGNING_SECRET": "bench",
    }
    proc = serve(bench, port, "--deliver", topic, env=env)
    fd, record = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    receiver = bench.spawn(
        [sys.executable, LOAD, "receive", str(hook_port), record], stdout=subprocess.PIPE
    )
    assert receiver.stdout is not None
    receiver.stdout.readline()  # "ready"
    try:
        hook = f"http://127.0.0.1:{hook_port}/hook"
        start_ms = int(time.time() * 1000) + 3000 + int(seconds * rate / 20)
        sent = load(
            "ahead",
            f"http://127.0.0.1:{port}",
            topic,
            str(seconds),
            str(rate),
            str(start_ms),
            hook,
        )
        expected = sent["sent"]
        time.sleep(max(0.0, start_ms / 1000 - time.time()))
        pids = {"serve": proc.pid, "scheduler": node.pid, "receiver": receiver.pid}
        if server_pid:
            pids["redis"] = server_pid
        cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
        fired = time.monotonic()
        while time.monotonic() < fired + seconds + 30 and _acked(r, topic) < expected:
            time.sleep(0.2)
        span = time.monotonic() - fired
        cores = {n: round((cpu_seconds(pid) - cpu0[n]) / span, 2) for n, pid in pids.items()}
    finally:
        bench.stop(receiver)
        bench.stop(proc)
        bench.stop(node)
    with open(record) as f:
        got = json.load(f)
    late = [arrived - due for due, arrived in got]
    result = {
        "rate_per_s": rate,
        "sent": expected,
        "received": len(got),
        "enqueue_errors": sent["errors"],
        "callback_lateness_ms": lateness(late),
        "cores": cores,
    }
    bench.log(f"{rate}/s: {result['callback_lateness_ms']}")
    drop_topic(r, topic)
    return result


def _acked(r: Any, topic: str) -> int:
    """Entries the deliverer's group has settled (fired minus still pending)."""
    from wheelq.core.keys import all_shards

    done = 0
    for k in all_shards(topic, 4):
        try:
            info = {g["name"]: g for g in r.xinfo_groups(k.ready)}
        except Exception:
            continue
        group = info.get(b"callbacks") or info.get("callbacks")
        if group is not None:
            done += int(group.get("entries-read") or 0) - int(group["pending"])
    return done


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--redis-url")
    p.add_argument("--scenarios", default="enqueue,callbacks")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--rates", default="1000,3000")
    p.add_argument("--out")
    args = p.parse_args()
    server = None
    if args.redis_url is None:
        server = EmbeddedServer(find_server_binaries()[0])
        server.start()
    bench = Bench(args.redis_url or server.url)  # type: ignore[union-attr]
    out: dict[str, Any] = {"seed_001": SEED_001, "cpus": os.cpu_count()}
    try:
        wanted = args.scenarios.split(",")
        if "enqueue" in wanted:
            out["enqueue"] = run_enqueue(bench, args.rounds, args.seconds)
        if "callbacks" in wanted:
            rates = [int(x) for x in args.rates.split(",")]
            pid = None if server is None else server.pid
            out["callbacks"] = run_callbacks(bench, rates, args.seconds, pid, args.rounds)
    finally:
        bench.close()
        if server is not None:
            server.stop()
    text = json.dumps(out, indent=2)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
