"""The plain design wheelq replaces: a process polling every shard's sorted set every ms.

    python loadtest/benchlib/poller.py [--quick] [--redis-url URL]

The poller (`poller_proc.py`, a process of its own) sends one Lua call per (topic, shard)
sorted set every millisecond, pipelined per tick. Two measurements:

- idle: `topics x shards` sorted sets, nothing due. Redis commands/s and CPU seconds per
  second, and the poller's own CPU: what polling costs when there is nothing to do.
  (Redis deletes an empty sorted set, so the polled keys do not exist; a call costs the
  same either way.)
- loaded: one topic x 4 shards, `rate` jobs/s due evenly over `duration_s`, every job
  enqueued (ZADD+HSET pipelines) before the first is due. Redis CPU seconds and commands
  per 1,000 fired jobs over the firing window, and lateness = stream entry id ms - due ms
  (both on the Redis clock), with missing / duplicate / early counts.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from collections import Counter
from typing import Any

import redis

_LOADTEST = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _LOADTEST not in sys.path:
    sys.path.insert(0, _LOADTEST)

from benchlib.common import (  # noqa: E402
    Bench,
    ServerLoad,
    cpu_seconds,
    lateness,
    redis_ms,
)
from benchlib.poller_proc import shard_keys  # noqa: E402

POLLER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "poller_proc.py")
LOADED_SHARDS = 4
ENQUEUE_BATCH = 500


def _start(bench: Bench, prefix: str, topics: int, shards: int) -> subprocess.Popen[bytes]:
    args = [sys.executable, POLLER, "--redis-url", bench.url, "--prefix", prefix]
    args += ["--topics", str(topics), "--shards", str(shards)]
    proc = bench.spawn(args, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # "ready", or "" if it died
    if line.strip() != b"ready":
        bench.stop(proc)
        raise RuntimeError(f"poller did not start: {line!r}")
    return proc


def _finish(bench: Bench, proc: subprocess.Popen[bytes]) -> dict[str, Any]:
    """Stop the poller; its own counters (ticks/s, calls, jobs moved)."""
    bench.stop(proc)
    assert proc.stdout is not None
    out = proc.stdout.read().decode().strip().splitlines()
    return json.loads(out[-1]) if out else {}


def _per(value: float, jobs: int, per: int = 1000) -> float:
    return round(value / jobs * per, 3) if jobs else float("nan")


def _idle(bench: Bench, r: redis.Redis, topics: int, shards: int, idle_s: float) -> dict:
    prefix = f"bench-poll-idle-{secrets.token_hex(3)}:"
    proc = _start(bench, prefix, topics, shards)
    try:
        time.sleep(0.5)  # warm-up: connection, script cache, first ticks
        before, cpu0 = ServerLoad.read(r), cpu_seconds(proc.pid)
        time.sleep(idle_s)
        after, cpu1 = ServerLoad.read(r), cpu_seconds(proc.pid)
    finally:
        stats = _finish(bench, proc)
        bench.drop(r, prefix)
    load = after.since(before)
    evals = after.calls.get("evalsha", 0) - before.calls.get("evalsha", 0)
    sets = topics * shards
    return {
        "topics": topics,
        "shards": shards,
        "sorted_sets": sets,
        "tick_ms": 1,
        "seconds": load["seconds"],
        "commands_per_s": load["commands_per_s"],
        "evalsha_per_s": round(evals / load["seconds"], 1),
        "evalsha_per_sorted_set_per_s": round(evals / load["seconds"] / sets, 1),
        "redis_cpu_s_per_s": round(load["redis_cpu_s"] / load["seconds"], 3),
        "poller_cpu_s_per_s": round((cpu1 - cpu0) / load["seconds"], 3),
        # one call per sorted set per tick: ticks achieved (the target is 1,000)
        "poller_ticks_per_s": round(evals / load["seconds"] / sets, 1),
        "poller_overrun_ticks": stats.get("overrun_ticks"),  # over its whole run
        "top_commands": load["top_commands"],
    }


def _enqueue(r: redis.Redis, prefix: str, n: int, start_ms: int, rate: float) -> list[str]:
    payload = b"x" * 100
    keys = [shard_keys(prefix, 0, s) for s in range(LOADED_SHARDS)]
    ids = []
    for first in range(0, n, ENQUEUE_BATCH):
        pipe = r.pipeline(transaction=False)
        for i in range(first, min(n, first + ENQUEUE_BATCH)):
            delayed, jobs, _ = keys[i % LOADED_SHARDS]
            job_id = f"job-{i}"
            ids.append(job_id)
            pipe.execute_command("ZADD", delayed, start_ms + int(i * 1000 / rate), job_id)
            pipe.execute_command("HSET", jobs, job_id, payload)
        pipe.execute()
    return ids


def _read_streams(r: redis.Redis, prefix: str) -> list[tuple[str, int]]:
    """(job id, lateness ms) of every entry of the loaded topic's streams."""
    out = []
    for s in range(LOADED_SHARDS):
        stream, cursor = shard_keys(prefix, 0, s)[2], "-"
        for _ in range(10_000_000):  # bounded: one page per 10,000 entries
            page = r.xrange(stream, min=cursor, count=10_000)
            for entry_id, fields in page:
                ms = int(entry_id.split(b"-")[0])
                out.append((fields[b"id"].decode(), ms - int(fields[b"due"])))
            if len(page) < 10_000:
                break
            cursor = "(" + page[-1][0].decode()
    return out


def _loaded(bench: Bench, r: redis.Redis, rate: float, duration_s: float) -> dict[str, Any]:
    prefix = f"bench-poll-load-{secrets.token_hex(3)}:"
    n = int(rate * duration_s)
    streams = [shard_keys(prefix, 0, s)[2] for s in range(LOADED_SHARDS)]
    proc = _start(bench, prefix, 1, LOADED_SHARDS)
    try:
        lead_s = 2.0 + n / 50_000
        start_ms = redis_ms(r) + int(lead_s * 1000)
        t0 = time.perf_counter()
        ids = _enqueue(r, prefix, n, start_ms, rate)
        enqueue_s = time.perf_counter() - t0
        in_time = redis_ms(r) < start_ms - 50
        time.sleep(max(0.0, (start_ms - redis_ms(r) - 20) / 1000))
        before, cpu0 = ServerLoad.read(r), cpu_seconds(proc.pid)
        time.sleep(duration_s)
        deadline = time.monotonic() + 30 + duration_s
        while time.monotonic() < deadline and sum(r.xlen(k) for k in streams) < n:
            time.sleep(0.02)
        after, cpu1 = ServerLoad.read(r), cpu_seconds(proc.pid)
        entries = _read_streams(r, prefix)
    finally:
        stats = _finish(bench, proc)
        bench.drop(r, prefix)
    load = after.since(before)
    seen = Counter(job_id for job_id, _ in entries)
    fired = len(seen)
    evals = after.calls.get("evalsha", 0) - before.calls.get("evalsha", 0)
    return {
        "rate_per_s": rate,
        "duration_s": duration_s,
        "jobs": n,
        "shards": LOADED_SHARDS,
        "enqueue_jobs_per_s": round(n / enqueue_s),
        "enqueue_finished_before_first_due": in_time,
        "fired": fired,
        "missing": len(set(ids) - seen.keys()),
        "duplicates": sum(c - 1 for c in seen.values() if c > 1),
        "early": sum(1 for _, late in entries if late < 0),
        "lateness_ms": lateness(late for _, late in entries),
        "firing_window_s": load["seconds"],
        "redis_cpu_s": load["redis_cpu_s"],
        "redis_cpu_s_per_1000_jobs": _per(load["redis_cpu_s"], fired),
        "commands_per_1000_jobs": _per(load["commands"], fired, 1000),
        "evalsha_per_1000_jobs": _per(evals, fired, 1000),
        "poller_cpu_s": round(cpu1 - cpu0, 3),
        "poller_cpu_s_per_1000_jobs": _per(cpu1 - cpu0, fired),
        # ticks achieved while firing (a full-batch repeat counts as one more; the target is
        # 1,000) and ticks that overran their ms over the poller's whole run (enqueue too)
        "poller_ticks_per_s": round(evals / load["seconds"] / LOADED_SHARDS, 1),
        "poller_overrun_ticks": stats.get("overrun_ticks"),
        "top_commands": load["top_commands"],
    }


def run_poller(
    bench: Bench,
    *,
    topics: int = 100,
    shards: int = 4,
    idle_s: float = 10.0,
    rate: float = 10_000,
    duration_s: float = 10.0,
) -> dict[str, Any]:
    """Redis load of a 1 ms poller: idle over many shards, and per fired job under load."""
    if bench.quick:
        idle_s, duration_s = 3.0, 3.0
    r = bench.redis()
    try:
        bench.log(f"poller: idle, {topics} topics x {shards} shards, {idle_s:g} s")
        idle = _idle(bench, r, topics, shards, idle_s)
        bench.log(f"poller: loaded, {rate:g} jobs/s due over {duration_s:g} s")
        loaded = _loaded(bench, r, rate, duration_s)
    finally:
        r.close()
    return {"idle": idle, "loaded": loaded}


def main() -> int:
    import argparse

    from wheelq.testing import EmbeddedServer, find_server_binaries

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--redis-url", help="use this server instead of an embedded one")
    p.add_argument("--quick", action="store_true", help="idle 3 s, loaded 3 s")
    args = p.parse_args()
    server = None
    url = args.redis_url
    if url is None:
        server = EmbeddedServer(find_server_binaries()[0])
        server.start()
        url = server.url
    bench = Bench(url, quick=args.quick, server_pid=server.pid if server else None)
    try:
        result = run_poller(bench)
    finally:
        bench.close()
        if server is not None:
            server.stop()
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
