"""Does the job history stay within its byte budget? A long run through the real commands.

    python loadtest/history_bound.py --jobs 1000000 --budget-mib 64

One topic of 4 shards, one `wheelq scheduler` and one `wheelq worker` (no-op handler) as
processes, on an embedded Valkey (or --redis-url). The producer enqueues --jobs jobs due at
--rate per second; the scheduler fires them and trims every second with
`history_max_bytes` = --budget-mib, retention 3 days (so only the budget trims). Every
second it samples what the budget counts (MEMORY USAGE of each shard's ready stream, both
history generations and cancellations, as trim.lua does), less the share of the entries no
group has acked yet (a lagging worker's backlog: not history, and never trimmed), and at the end
measures it exactly (SAMPLES 0). Prints one JSON object: the budget, the highest sample,
the exact bytes per job the history costs (stream entry vs. the history records), and the
checks: every job handled, every unacked entry kept, the newest jobs still known to get()
and the oldest trimmed. Exit 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from wheelq import Admin, Client, EnqueueItem, JobState
from wheelq.core.keys import all_shards
from wheelq.testing import EmbeddedServer

SHARDS = 4
TOPIC = "history-bound"
PAYLOAD = {"user": 12345, "kind": "reminder", "text": "x" * 60}
HANDLER = "async def handle(job):\n    pass\n"


def history_bytes(r: redis.Redis, samples: int | None = None) -> dict[str, int]:
    """What the byte budget counts, per kind of key, over the topic's shards."""
    out = {"ready": 0, "history": 0, "history_old": 0, "cancelled": 0}
    for keys in all_shards(TOPIC, SHARDS):
        for kind in out:
            key = getattr(keys, kind)
            args = [] if samples is None else ["SAMPLES", samples]
            out[kind] += int(r.execute_command("MEMORY", "USAGE", key, *args) or 0)
    return out


def acked_history_bytes(r: redis.Redis) -> tuple[int, int]:
    """(bytes of the history less the entries no group has acked yet, those entries): the
    backlog of a worker that lags is not history, and trimming may not touch it."""
    sampled = history_bytes(r, 5)
    length = backlog = 0
    for keys in all_shards(TOPIC, SHARDS):
        if not r.exists(keys.ready):
            continue
        length += r.xlen(keys.ready)
        for g in r.xinfo_groups(keys.ready):
            backlog += int(g.get("lag") or 0) + int(g["pending"])
    unacked_bytes = sampled["ready"] * backlog // max(length, 1)
    return sum(sampled.values()) - unacked_bytes, backlog


def handled(r: redis.Redis) -> int:
    """Entries read by the worker's group and not pending any more, over the shards."""
    total = 0
    for keys in all_shards(TOPIC, SHARDS):
        if not r.exists(keys.ready):
            continue
        for g in r.xinfo_groups(keys.ready):
            total += int(g["entries-read"] or 0) - int(g["pending"])
    return total


def start(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "wheelq", *args], env=env, cwd=cwd, stdout=subprocess.DEVNULL
    )


def run(url: str, jobs: int, rate: int, budget: int, tmp: Path) -> dict[str, Any]:
    r = redis.Redis.from_url(url)
    (tmp / "noop_handler.py").write_text(HANDLER)
    env = {
        **os.environ,
        "WHEELQ_REDIS_URL": url,
        "WHEELQ_SCHEDULER_HISTORY_MAX_BYTES": str(budget),
        "WHEELQ_SCHEDULER_TRIM_INTERVAL_MS": "1000",
        "WHEELQ_LOG_LEVEL": "WARNING",
    }
    with Client.from_url(url) as client:
        admin = Admin.of(client)
        admin.create_topic(TOPIC, SHARDS)
        procs = [
            start(["scheduler", "--topics", TOPIC], env, tmp),
            start(
                ["worker", "noop_handler:handle", "--topic", TOPIC, "--concurrency", "200"],
                env,
                tmp,
            ),
        ]
        try:
            sec, usec = r.time()
            first_due_ms = int(sec) * 1000 + int(usec) // 1000 + 5000 + jobs * 1000 // 70_000
            t = time.perf_counter()
            for i in range(0, jobs, 20_000):
                items = [
                    EnqueueItem(
                        payload=PAYLOAD, job_id=f"j{n}", at=(first_due_ms + n * 1000 // rate) / 1000
                    )
                    for n in range(i, min(jobs, i + 20_000))
                ]
                client.enqueue_many(TOPIC, items)
            enqueue_s = time.perf_counter() - t
            samples: list[int] = []
            backlogs: list[int] = []
            deadline = time.monotonic() + jobs / rate + 120
            while handled(r) < jobs and time.monotonic() < deadline:
                acked_bytes, backlog = acked_history_bytes(r)
                samples.append(acked_bytes)
                backlogs.append(backlog)
                time.sleep(1)
            # One more trim round after the last job, so the end state is a trimmed one.
            time.sleep(2.5)
            samples.append(acked_history_bytes(r)[0])
            exact = history_bytes(r, 0)
            held = sum(r.xlen(k.ready) for k in all_shards(TOPIC, SHARDS))
            records = sum(  # both generations, less their \x1f markers
                r.hlen(key) - sum(r.hexists(key, m) for m in ("\x1fsince", "\x1fupto"))
                for k in all_shards(TOPIC, SHARDS)
                for key in (k.history, k.history_old)
            )
            done = handled(r)
            pending = sum(
                int(g["pending"])
                for k in all_shards(TOPIC, SHARDS)
                for g in r.xinfo_groups(k.ready)
            )
            newest = [client.get(TOPIC, f"j{n}").state for n in range(jobs - 100, jobs)]
            oldest = client.get(TOPIC, "j0").state
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(30)
            admin.drop_topic(TOPIC, force=True)
    over = [s for s in samples if s > budget]
    checks = {
        "every_job_handled": done == jobs and pending == 0,
        "newest_100_succeeded": all(s is JobState.SUCCEEDED for s in newest),
        "oldest_trimmed": oldest is JobState.UNKNOWN,
        "end_within_budget": sum(exact.values()) <= budget * 1.1,
    }
    return {
        "jobs": jobs,
        "rate_per_s": rate,
        "enqueue_s": round(enqueue_s, 1),
        "budget_bytes": budget,
        "samples": len(samples),
        "max_sample_bytes": max(samples),
        "max_over_budget": round(max(samples) / budget, 3),
        "median_sample_bytes": round(statistics.median(samples)),
        "samples_over_budget": len(over),
        "max_backlog_entries": max(backlogs, default=0),
        "end_exact_bytes": exact,
        "jobs_in_stream": held,
        "history_records": records,
        "stream_bytes_per_job": round(exact["ready"] / max(held, 1), 1),
        # Two records per job here (its entry, its success); the generations keep a job's
        # records for a while after its entry went, so they are counted per record.
        "history_record_bytes_per_job": round(
            2 * (exact["history"] + exact["history_old"]) / max(records, 1), 1
        ),
        "checks": checks,
        "lost": jobs - done,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=1_000_000)
    p.add_argument("--rate", type=int, default=20_000, help="jobs due per second")
    p.add_argument("--budget-mib", type=float, default=64.0, help="history_max_bytes, MiB")
    p.add_argument("--redis-url", help="use this server instead of an embedded Valkey")
    args = p.parse_args()
    budget = int(args.budget_mib * 2**20)
    with tempfile.TemporaryDirectory(prefix="wheelq-history-") as tmp:
        if args.redis_url:
            result = run(args.redis_url, args.jobs, args.rate, budget, Path(tmp))
        else:
            with EmbeddedServer() as server:
                result = run(server.url, args.jobs, args.rate, budget, Path(tmp))
    print(json.dumps(result))
    sys.exit(0 if all(result["checks"].values()) else 1)


if __name__ == "__main__":
    main()
