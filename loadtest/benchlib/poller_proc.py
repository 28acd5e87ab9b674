"""The plain design's process: poll every shard's sorted set every millisecond.

    python loadtest/benchlib/poller_proc.py --redis-url URL --prefix P --topics 100 --shards 4

Every tick (1 ms, start to start) it sends one EVALSHA per (topic, shard) sorted set, all in
one pipeline; each call moves the jobs due by the server's TIME (ZRANGEBYSCORE ... LIMIT 500,
one HMGET, one XADD per job with fields id / due / payload, one ZREM, one HDEL). A shard whose
call moved a full batch is called again at once. A tick that overruns its millisecond is
counted and the next one starts right away; missed ticks are skipped, not caught up.

The pipeline's bytes are packed once (every tick sends the same calls), so the client, not
Redis, is as cheap as Python allows. It prints ``ready`` once the script is loaded, runs until
SIGTERM (or `--max-s`, or its parent dies), then prints one JSON line of counters.
No wheelq code: it is the baseline wheelq is compared with.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

import redis

BATCH = 500

# KEYS[1] ZSET delayed, KEYS[2] HASH jobs, KEYS[3] STREAM ready; ARGV[1] limit.
# Returns the number of jobs moved.
POLL_LUA = """
local t = redis.call('TIME')
local now = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0,
  tonumber(ARGV[1]))
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
    redis.call('XADD', KEYS[3], '*', 'id', id, 'due', due[2 * i], 'payload', payloads[i])
  end
end
redis.call('ZREM', KEYS[1], unpack(ids))
redis.call('HDEL', KEYS[2], unpack(ids))
return #ids
"""


def shard_keys(prefix: str, topic: int, shard: int) -> tuple[str, str, str]:
    """The delayed ZSET, jobs HASH and ready STREAM of one (topic, shard), one hash tag."""
    tag = f"{prefix}{{t{topic}:{shard}}}"
    return f"{tag}:delayed", f"{tag}:jobs", f"{tag}:ready"


def poll(url: str, prefix: str, topics: int, shards: int, tick_ms: float, max_s: float) -> dict:
    r = redis.Redis.from_url(url)
    sha = r.script_load(POLL_LUA)
    keys = [shard_keys(prefix, t, s) for t in range(topics) for s in range(shards)]
    conn = r.connection_pool.make_connection()  # its own, for pre-packed pipelines
    calls = [("EVALSHA", sha, 3, *k, BATCH) for k in keys]
    packed = conn.pack_commands(calls)

    def call(commands: list, buffer: list) -> list[int]:
        conn.send_packed_command(buffer, check_health=False)
        return [int(conn.read_response()) for _ in commands]

    stopping = False

    def on_term(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    parent = os.getppid()
    print("ready", flush=True)
    ticks = evals = moved = repeats = overruns = 0
    tick_s = tick_ms / 1000
    started = time.monotonic()
    deadline = started + max_s
    next_tick = started
    while not stopping:
        counts = call(calls, packed)
        evals += len(calls)
        moved += sum(counts)
        # A full batch means more may be due: call those shards again (bounded).
        for _ in range(10_000):
            full = [c for c, n in zip(calls, counts, strict=True) if n >= BATCH]
            if not full:
                break
            counts = call(full, conn.pack_commands(full))
            evals += len(full)
            repeats += len(full)
            moved += sum(counts)
        ticks += 1
        next_tick += tick_s
        now = time.monotonic()
        if now >= deadline or (ticks % 1000 == 0 and os.getppid() != parent):
            break
        if next_tick > now:
            time.sleep(next_tick - now)
        else:
            overruns += 1
            next_tick = now
    seconds = time.monotonic() - started
    conn.disconnect()
    r.close()
    return {
        "seconds": round(seconds, 3),
        "ticks": ticks,
        "ticks_per_s": round(ticks / seconds, 1),
        "overrun_ticks": overruns,
        "evalsha": evals,
        "full_batch_repeats": repeats,
        "moved": moved,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--redis-url", required=True)
    p.add_argument("--prefix", required=True, help="key prefix of the bench's data")
    p.add_argument("--topics", type=int, default=1)
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--tick-ms", type=float, default=1.0)
    p.add_argument("--max-s", type=float, default=3600.0, help="exit after this long anyway")
    args = p.parse_args()
    stats = poll(args.redis_url, args.prefix, args.topics, args.shards, args.tick_ms, args.max_s)
    print(json.dumps(stats), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
