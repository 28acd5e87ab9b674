"""What Redis itself allows: wheelq's data movement done with raw redis-py, no wheelq code.

    python loadtest/benchlib/limit.py [--quick] [--redis-url URL]

Each phase moves the same data a wheelq job moves, from one process, so a wheelq
figure divided by the matching figure here says how close wheelq gets to the server:

- enqueue: ZADD (id, due ms) + HSET (id -> payload) per job, 500 jobs (1,000 commands)
  per pipeline;
- enqueue_lua: the same writes as one Lua call per 500 jobs of a shard (one ZADD and one
  HSET of all its jobs), 64 calls per pipeline: the raw Lua batch wheelq's `enqueue_many`
  is a richer form of;
- single: one job per round trip (a ZADD+HSET pipeline), sync client: the baseline of
  wheelq's single `enqueue`;
- fire: every job due, one Lua call per 500 jobs that reads the due ids
  (ZRANGEBYSCORE ... LIMIT 500), their payloads (one HMGET), XADDs one stream entry per
  job with wheelq's six fields, and removes them (one ZREM, one HDEL), until empty;
- consume: XREADGROUP COUNT 500 + XACK of the batch on a prefilled stream until drained.

Keys live under a prefix of their own and are deleted afterwards.
"""

from __future__ import annotations

import os
import secrets
import sys
import time
from dataclasses import dataclass
from typing import Any

import redis

_LOADTEST = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _LOADTEST not in sys.path:
    sys.path.insert(0, _LOADTEST)

from benchlib.common import Bench, ServerLoad, lateness, redis_ms, wait_freed  # noqa: E402

BATCH = 500
SHARDS = 4  # like a wheelq topic's default shard count

# KEYS[1] ZSET delayed, KEYS[2] HASH jobs, KEYS[3] STREAM ready; ARGV[1] topic, ARGV[2] limit.
# Returns the number of jobs moved (0: nothing due).
FIRE_LUA = """
local t = redis.call('TIME')
local now = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0,
  tonumber(ARGV[2]))
if #due == 0 then
  return 0
end
local ids = {}
for i = 1, #due, 2 do
  ids[#ids + 1] = due[i]
end
local payloads = redis.call('HMGET', KEYS[2], unpack(ids))
for i, id in ipairs(ids) do
  if payloads[i] then
    redis.call('XADD', KEYS[3], '*', 'id', id, 'topic', ARGV[1], 'due', due[2 * i],
      'attempt', '1', 'max_attempts', '1', 'payload', payloads[i])
  end
end
redis.call('ZREM', KEYS[1], unpack(ids))
redis.call('HDEL', KEYS[2], unpack(ids))
return #ids
"""

# KEYS[1] ZSET delayed, KEYS[2] HASH jobs; ARGV: id, due ms, payload per job. Returns the count.
ENQUEUE_LUA = """
local z, h, n = {}, {}, 0
for i = 1, #ARGV, 3 do
  z[n + 1] = ARGV[i + 1]
  z[n + 2] = ARGV[i]
  h[n + 1] = ARGV[i]
  h[n + 2] = ARGV[i + 2]
  n = n + 2
end
redis.call('ZADD', KEYS[1], unpack(z))
redis.call('HSET', KEYS[2], unpack(h))
return n / 2
"""
LUA_CALLS = 64  # script calls per pipeline, as wheelq's enqueue_many sends


@dataclass(frozen=True)
class Phase:
    """One timed phase: jobs moved, wall seconds, the server's CPU seconds meanwhile."""

    jobs: int
    seconds: float
    redis_cpu_s: float

    @property
    def per_s(self) -> int:
        return round(self.jobs / self.seconds)

    @property
    def redis_cpu_us_per_job(self) -> float:
        return round(self.redis_cpu_s / self.jobs * 1e6, 2)


def _keys(prefix: str, shard: int) -> tuple[str, str, str]:
    tag = f"{prefix}{{{shard}}}"
    return f"{tag}:delayed", f"{tag}:jobs", f"{tag}:ready"


def _fill(r: redis.Redis, prefix: str, n: int, payload: bytes, due_ms: int) -> tuple[float, float]:
    """ZADD+HSET `n` jobs (round robin over the shards), 500 per pipeline.

    Returns wall seconds and the server's CPU seconds."""
    keys = [_keys(prefix, s) for s in range(SHARDS)]
    cpu0 = ServerLoad.read(r).cpu_s
    t0 = time.perf_counter()
    for start in range(0, n, BATCH):
        pipe = r.pipeline(transaction=False)
        for i in range(start, min(n, start + BATCH)):
            delayed, jobs, _ = keys[i % SHARDS]
            job_id = f"job-{i}"
            # execute_command: redis-py's zadd()/hset() wrappers cost the client ~10% more
            pipe.execute_command("ZADD", delayed, due_ms + i % 1000, job_id)
            pipe.execute_command("HSET", jobs, job_id, payload)
        pipe.execute()
    seconds = time.perf_counter() - t0
    return seconds, ServerLoad.read(r).cpu_s - cpu0


def _drop(bench: Bench, r: redis.Redis, prefix: str) -> None:
    """Delete the phase's keys and wait until the server has freed them: for 100k-member
    keys its freeing thread shows as a 10-30 ms tail in the next phase if not waited for."""
    bench.drop(r, prefix)
    wait_freed(r, 10.0)


def _enqueue(bench: Bench, r: redis.Redis, prefix: str, n: int, payload: bytes) -> Phase:
    seconds, cpu_s = _fill(r, prefix, n, payload, redis_ms(r) + 3_600_000)
    _drop(bench, r, prefix)
    return Phase(n, seconds, cpu_s)


def _enqueue_lua(bench: Bench, r: redis.Redis, prefix: str, n: int, payload: bytes) -> Phase:
    """One EVALSHA of ENQUEUE_LUA per BATCH jobs of one shard, LUA_CALLS per pipeline."""
    sha = r.script_load(ENQUEUE_LUA)
    due_ms = redis_ms(r) + 3_600_000
    keys = [_keys(prefix, s)[:2] for s in range(SHARDS)]
    cpu0 = ServerLoad.read(r).cpu_s
    t0 = time.perf_counter()
    pipe = r.pipeline(transaction=False)
    for call, start in enumerate(range(0, n, BATCH)):
        args: list[Any] = []
        for i in range(start, min(n, start + BATCH)):
            args += (f"job-{i}", due_ms + i % 1000, payload)
        pipe.execute_command("EVALSHA", sha, 2, *keys[call % SHARDS], *args)
        if len(pipe) == LUA_CALLS:
            pipe.execute()
    pipe.execute()
    seconds = time.perf_counter() - t0
    cpu_s = ServerLoad.read(r).cpu_s - cpu0
    stored = sum(int(r.zcard(_keys(prefix, s)[0])) for s in range(SHARDS))
    if stored != n:
        bench.log(f"limit enqueue_lua: stored {stored}, expected {n}")
    _drop(bench, r, prefix)
    return Phase(n, seconds, cpu_s)


def _single(bench: Bench, r: redis.Redis, prefix: str, n: int, payload: bytes) -> dict[str, Any]:
    delayed, jobs, _ = _keys(prefix, 0)
    due = redis_ms(r) + 3_600_000
    calls_ms: list[float] = []
    t0 = time.perf_counter()
    for i in range(n):
        job_id = f"one-{i}"
        start = time.perf_counter()
        pipe = r.pipeline(transaction=False)
        pipe.execute_command("ZADD", delayed, due, job_id)
        pipe.execute_command("HSET", jobs, job_id, payload)
        pipe.execute()
        calls_ms.append((time.perf_counter() - start) * 1000)
    seconds = time.perf_counter() - t0
    _drop(bench, r, prefix)
    return {"ms": lateness(calls_ms), "per_s": n / seconds}


def _fire(bench: Bench, r: redis.Redis, prefix: str, n: int, payload: bytes) -> Phase:
    _fill(r, prefix, n, payload, redis_ms(r) - 10_000)
    script = r.register_script(FIRE_LUA)
    moved = 0
    cpu0 = ServerLoad.read(r).cpu_s
    t0 = time.perf_counter()
    for shard in range(SHARDS):
        keys = list(_keys(prefix, shard))
        for _ in range(n // BATCH + 2):  # bounded: one more call than the shard can need
            count = int(script(keys=keys, args=["limit-bench", BATCH]))
            moved += count
            if count == 0:
                break
    seconds = time.perf_counter() - t0
    cpu_s = ServerLoad.read(r).cpu_s - cpu0
    entries = sum(r.xlen(_keys(prefix, s)[2]) for s in range(SHARDS))
    if moved != n or entries != n:
        bench.log(f"limit fire: moved {moved}, streams hold {entries}, expected {n}")
    _drop(bench, r, prefix)
    return Phase(n, seconds, cpu_s)


def _consume(bench: Bench, r: redis.Redis, prefix: str, n: int, payload: bytes) -> Phase:
    _, _, stream = _keys(prefix, 0)
    due = str(redis_ms(r)).encode()
    for start in range(0, n, BATCH):
        pipe = r.pipeline(transaction=False)
        for i in range(start, min(n, start + BATCH)):
            fields = {
                "id": f"job-{i}",
                "topic": "limit-bench",
                "due": due,
                "attempt": "1",
                "max_attempts": "1",
                "payload": payload,
            }
            pipe.xadd(stream, fields)  # type: ignore[arg-type]
        pipe.execute()
    r.xgroup_create(stream, "g", id="0")
    acked = 0
    cpu0 = ServerLoad.read(r).cpu_s
    t0 = time.perf_counter()
    for _ in range(n // BATCH + 2):
        reply = r.xreadgroup("g", "c", {stream: ">"}, count=BATCH)
        if not reply or not reply[0][1]:
            break
        ids = [entry_id for entry_id, _fields in reply[0][1]]
        acked += int(r.xack(stream, "g", *ids))
    seconds = time.perf_counter() - t0
    cpu_s = ServerLoad.read(r).cpu_s - cpu0
    if acked != n:
        bench.log(f"limit consume: acked {acked}, expected {n}")
    _drop(bench, r, prefix)
    return Phase(n, seconds, cpu_s)


def run_limit(
    bench: Bench,
    *,
    enqueue_n: int = 200_000,
    fire_n: int = 200_000,
    consume_n: int = 200_000,
    payload_bytes: int = 100,
    single_n: int = 2000,
) -> dict[str, Any]:
    """Jobs/s Redis allows for wheelq's enqueue, fire and consume data movement."""
    if bench.quick:
        enqueue_n, fire_n, consume_n = enqueue_n // 10, fire_n // 10, consume_n // 10
        single_n //= 10
    r = bench.redis()
    prefix = f"bench-limit-{secrets.token_hex(3)}:"
    payload = b"x" * payload_bytes
    try:
        bench.log(f"limit: enqueue {enqueue_n} jobs")
        enqueue = _enqueue(bench, r, prefix, enqueue_n, payload)
        bench.log(f"limit: enqueue {enqueue_n} jobs through a raw Lua batch")
        enqueue_lua = _enqueue_lua(bench, r, prefix, enqueue_n, payload)
        bench.log(f"limit: {single_n} single enqueues")
        single = _single(bench, r, prefix, single_n, payload)
        bench.log(f"limit: fire {fire_n} due jobs")
        fire = _fire(bench, r, prefix, fire_n, payload)
        bench.log(f"limit: consume {consume_n} entries")
        consume = _consume(bench, r, prefix, consume_n, payload)
    finally:
        bench.drop(r, prefix)
        r.close()
    return {
        "enqueue_jobs_per_s": enqueue.per_s,
        "enqueue_lua_jobs_per_s": enqueue_lua.per_s,
        "single_enqueue_ms": single["ms"],
        "single_enqueue_per_s": round(single["per_s"]),
        "fire_jobs_per_s": fire.per_s,
        "consume_jobs_per_s": consume.per_s,
        # The server's share: how far Redis itself is from its limit while the client works.
        "redis_cpu_us_per_job": {
            "enqueue": enqueue.redis_cpu_us_per_job,
            "enqueue_lua": enqueue_lua.redis_cpu_us_per_job,
            "fire": fire.redis_cpu_us_per_job,
            "consume": consume.redis_cpu_us_per_job,
        },
        "sizes": {
            "enqueue_n": enqueue_n,
            "single_n": single_n,
            "fire_n": fire_n,
            "consume_n": consume_n,
            "payload_bytes": payload_bytes,
            "batch": BATCH,
            "shards": SHARDS,
        },
    }


def main() -> int:
    import argparse
    import json

    from wheelq.testing import EmbeddedServer, find_server_binaries

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--redis-url", help="use this server instead of an embedded one")
    p.add_argument("--quick", action="store_true", help="about a tenth of the sizes")
    args = p.parse_args()
    server = None
    url = args.redis_url
    if url is None:
        server = EmbeddedServer(find_server_binaries()[0])
        server.start()
        url = server.url
    bench = Bench(url, quick=args.quick, server_pid=server.pid if server else None)
    try:
        result = run_limit(bench)
    finally:
        bench.close()
        if server is not None:
            server.stop()
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
