"""Redis work of one fired job in `emit_due.lua`, part by part, counted in CPU instructions.

    python loadtest/emit_cost.py [--jobs 3000] [--ids 100,3] [--variants "as is,no checks"]

(`--variants "as is"` also runs against another revision's package, `PYTHONPATH` at its
checkout: the other variants name pieces of this revision's script.)

Against a `redis-server` run under valgrind's callgrind (as `redis_cost.py`), for each
variant of the script and each number of ids per call: `--jobs` pending jobs are stored in
one shard (an envelope in the hash, a due time in the past in the sorted set), the lease is
held, and emitting them all in calls of that many ids is counted; a first round of the same
size, not counted, brings the keys to their working size. It prints instructions per job and
per call as JSON.

The variants are the script as it is and the script with one part taken out, so the
difference is that part's cost:

- ``call only``: returns right after the lease check (what calling the script costs);
- ``no history``: no ``job id -> entry`` record;
- ``no checks``: the envelope decoded but not checked;
- ``no decode``: no envelope decoded (a fixed one stands in);
- ``no score check``: ids not looked up in the sorted set (ZMSCORE);
- ``bare fields``: entries of id, due and payload only (no topic, attempt, max_attempts).

Each variant is the script's text with one piece replaced (at its last place: in
`emit_due.lua` rather than the prelude it shares), loaded under its own SHA (the package's
files are not touched); a piece not found stops the run, so a changed script is noticed.
For comparison, the 1-ms poller's script (`benchlib.poller_proc`) moves the same number of
jobs per call (its LIMIT) with the bare move: ZRANGEBYSCORE, HMGET, XADD of id / due /
payload, ZREM, HDEL.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib.poller_proc import POLL_LUA
from benchlib.poller_proc import shard_keys as poller_keys
from redis_cost import Counter, script_variant, start_server

from wheelq.core.job import Envelope
from wheelq.core.keys import all_shards
from wheelq.store.fire import NO_BYTE_BOUND
from wheelq.store.scripts import script_keys

TOKEN = "emit-cost"
PAYLOAD = b"x" * 100
ENQUEUED_MS = 1_700_000_000_000

VARIANTS: dict[str, list[tuple[str, str]]] = {
    "as is": [],
    "call only": [
        (
            "local now = math.min(tonumber(ARGV[3]), wq_now_ms())",
            "do return {WQ_OK, 0, 0, 0, {}, {}, {}, 0} end",
        )
    ],
    "no history": [("wq_remember(KEYS[6], rec)", "")],
    "no checks": [
        (
            "  -- The usual envelope passes these checks unrolled",
            "  do return env end\n  -- The usual envelope passes these checks unrolled",
        )
    ],
    "no decode": [
        ("local env, why = wq_envelope(envelope)", "local env, why = {1, envelope, 1, 3, 0}, nil")
    ],
    "no score check": [
        (
            "local scores = wq_multi('ZMSCORE', KEYS[1], ids, redis.pcall)",
            "local scores = {} for i = 1, #ids do scores[i] = '1' end",
        )
    ],
    "bare fields": [
        (
            "  return redis.pcall('XADD', ready, '*', 'id', id, 'topic', topic, 'due', due,\n"
            "    'attempt', attempt, 'max_attempts', max_attempts, 'payload', env[2])\n"
            "end",
            "  return redis.pcall('XADD', ready, '*', 'id', id, 'due', due, 'payload', env[2])\n"
            "end",
        )
    ],
}
"""Variant -> (piece of the script's text, what replaces it)."""


def variant_source(name: str) -> str:
    """`emit_due.lua` with `name`'s pieces replaced."""
    return script_variant("emit_due", VARIANTS[name], name)


def emit_rounds(r: redis.Redis, counter: Counter, sha: str, jobs: int, per_call: int) -> int:
    """Store `jobs` pending jobs and emit them in calls of `per_call` ids, twice; the
    instructions of the second round."""
    keys = all_shards("emit-cost", 1)[0]
    r.set(keys.lease, TOKEN)
    envelope = Envelope(PAYLOAD, 1, 3, ENQUEUED_MS).pack()
    count = 0
    for round_no in range(2):
        ids = [f"{round_no}-{i:024d}" for i in range(jobs)]  # as long as generated ids
        due_ms = int(r.time()[0]) * 1000 - 1000
        for i in range(0, jobs, 1000):
            pipe = r.pipeline(transaction=False)
            pipe.hset(keys.jobs, mapping=dict.fromkeys(ids[i : i + 1000], envelope))
            pipe.zadd(keys.delayed, dict.fromkeys(ids[i : i + 1000], due_ms))
            pipe.execute()
        counter.zero()
        for i in range(0, jobs, per_call):
            args = [TOKEN, keys.topic, due_ms + 10**9, 0, NO_BYTE_BOUND, *ids[i : i + per_call]]
            r.evalsha(
                sha, len(script_keys("emit_due", keys)), *script_keys("emit_due", keys), *args
            )
        count = counter.read()
    r.delete(*script_keys("emit_due", keys))
    return count


def poller_rounds(r: redis.Redis, counter: Counter, jobs: int, per_call: int) -> int:
    """The poller's script moving `jobs` due jobs, `per_call` at a time; the second round."""
    sha = r.script_load(POLL_LUA)
    keys = poller_keys("emit-cost-poll:", 0, 0)
    count = 0
    for round_no in range(2):
        ids = [f"{round_no}-{i:024d}" for i in range(jobs)]
        due_ms = int(r.time()[0]) * 1000 - 1000
        for i in range(0, jobs, 1000):
            pipe = r.pipeline(transaction=False)
            pipe.zadd(keys[0], dict.fromkeys(ids[i : i + 1000], due_ms))
            pipe.hset(keys[1], mapping=dict.fromkeys(ids[i : i + 1000], PAYLOAD))
            pipe.execute()
        counter.zero()
        moved = 0
        while moved < jobs:
            moved += int(r.evalsha(sha, 3, *keys, per_call))
        count = counter.read()
    r.delete(*keys)
    return count


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=3000)
    p.add_argument("--ids", default="100,3", help="ids per call, comma-separated")
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated names")
    p.add_argument("--server", default=shutil.which("redis-server") or "redis-server")
    args = p.parse_args()
    names = args.variants.split(",")
    if unknown := set(names) - VARIANTS.keys():
        p.error(f"--variants: unknown {sorted(unknown)}; known: {', '.join(VARIANTS)}")
    if not shutil.which("valgrind"):
        raise SystemExit("needs valgrind (apt-get install valgrind)")
    sizes = [int(n) for n in args.ids.split(",")]
    report: dict[str, Any] = {"jobs": args.jobs, "server": args.server, "variants": {}}
    with tempfile.TemporaryDirectory(prefix="wheelq-emit-cost-") as tmp:
        proc, port, out = start_server(args.server, Path(tmp))
        try:
            r = redis.Redis(port=port)
            counter = Counter(proc.pid, out)
            for name in names:
                sha = r.script_load(variant_source(name))
                report["variants"][name] = {
                    n: per(emit_rounds(r, counter, sha, args.jobs, n), args.jobs, n) for n in sizes
                }
            report["poller"] = {
                n: per(poller_rounds(r, counter, args.jobs, n), args.jobs, n) for n in sizes
            }
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    print(json.dumps(report))


def per(instructions: int, jobs: int, per_call: int) -> dict[str, int]:
    calls = -(-jobs // per_call)
    return {"per_job": round(instructions / jobs), "per_call": round(instructions / calls)}


if __name__ == "__main__":
    main()
