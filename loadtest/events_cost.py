"""What job events cost a worker: one no-op worker process draining the same backlog with
the topic's events off and on, in turns, in one run (`run_worker` of `bench.py`'s worker
scenario); prints each side's jobs/s and CPU per job, their medians and the ratio on/off.

    python loadtest/events_cost.py [--rounds 5] [--jobs 50000] [--server valkey|redis]

With events on, the worker notes each start (one `note_events.lua` call per shard and
settler round) and `ack.lua` writes each success: the figure the bar "events on cost the
worker at most 10 %" is read against. Off, they cost a script one HGET.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib.common import Bench
from benchlib.scenarios import run_worker

from wheelq.embedded import EmbeddedServer, find_server_binaries


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--jobs", type=int, default=50_000)
    p.add_argument("--server", choices=("valkey", "redis"), default=None)
    args = p.parse_args()
    binaries = [b for b in find_server_binaries() if args.server in (None, b.kind)]
    with EmbeddedServer(binaries[0]) as server:
        bench = Bench(server.url, server_pid=server.pid)
        runs: dict[str, list[dict]] = {"off": [], "on": []}
        try:
            for i in range(args.rounds):
                order = ("off", "on") if i % 2 == 0 else ("on", "off")  # drift favours neither
                for side in order:
                    got = run_worker(bench, n=args.jobs, events=side == "on")
                    bench.log(f"round {i + 1} events {side}: {got['jobs_per_s']:,} jobs/s")
                    runs[side].append(got)
        finally:
            bench.close()
    medians = {
        side: {
            "jobs_per_s": statistics.median(r["jobs_per_s"] for r in rs),
            "worker_cpu_us_per_job": statistics.median(r["worker_cpu_us_per_job"] for r in rs),
            "redis_cpu_us_per_job": statistics.median(r["redis_cpu_us_per_job"] for r in rs),
        }
        for side, rs in runs.items()
    }
    print(
        json.dumps(
            {
                "server": binaries[0].kind,
                "jobs": args.jobs,
                "rounds": args.rounds,
                "jobs_per_s": {side: [r["jobs_per_s"] for r in rs] for side, rs in runs.items()},
                "median": medians,
                "throughput_on_to_off": round(
                    medians["on"]["jobs_per_s"] / medians["off"]["jobs_per_s"], 3
                ),
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
