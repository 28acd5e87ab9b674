"""Where a single enqueue's time goes, beside the raw round trip it is compared with.

    python loadtest/enqueue_cost.py [--calls 3000] [--rounds 5] [--server valkey|redis]

Against an embedded server (or `--redis-url`), each round measures, on a topic of 4 shards
with 100-byte payloads due in an hour (the bench's `enqueue` scenario):

- ``wall``: `Client.enqueue` and the raw equivalent (ZADD + HSET in one pipeline, one round
  trip) timed in turns, call for call: p50 of each and their ratio;
- ``redis``: Redis's own time per call (``INFO commandstats``), for `enqueue.lua` as it is,
  for the same script returning right after its prelude (``call only``: what calling a
  script costs), without its TYPE checks (``no type checks``: four for the new ids of a
  generated id's call) and without its read of
  the shard's pending limit (``no limit read``), each with fresh ids; and for ZADD + HSET;
- ``client``: the client's own work per call without the round trip (`Client.enqueue` with
  its executor answering at once: validation, the id, the envelope, the script call built).

It prints the medians over the rounds as JSON, and ``floor``: the raw p50 plus what the
script costs Redis beyond ZADD + HSET plus the client's work, over the raw p50 — the ratio
a single enqueue would have if nothing else (redis-py, the loop, the kernel) cost more than
for the raw pipeline.
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

from wheelq import Client, EnqueueItem
from wheelq.core.job import Envelope
from wheelq.core.keys import ShardKeys
from wheelq.core.settings import ClientSettings
from wheelq.producer.items import validate_batch
from wheelq.store.call import Call
from wheelq.store.scripts import Placed, script_keys
from wheelq.testing import EmbeddedServer, find_server_binaries

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib.scenarios import MANY_ITEMS, PAYLOAD, enqueue_many_rate, single_calls
from redis_cost import script_variant

from wheelq import Admin

DELAY_S = 1800
"""Half an hour: the hot tier (a topic's far tier takes jobs due an hour or more ahead)."""
ENVELOPE = Envelope(PAYLOAD, 1, 5, 1_700_000_000_000).pack()

VARIANTS: dict[str, list[tuple[str, str]]] = {
    "as is": [],
    "call only": [
        (
            "local typed, t = {KEYS[1], 'zset'",
            "do return {WQ_OK} end\nlocal typed, t = {KEYS[1], 'zset'",
        )
    ],
    "no type checks": [("local wrong = wq_wrong_type(unpack(typed))", "local wrong = nil")],
    "no limit read": [
        ("redis.pcall('HMGET', KEYS[9], 'pending', 'ready', 'far', 'ordered', 'fair')", "{}")
    ],
}
"""Variant -> (piece of `enqueue.lua`'s text, what replaces it), as in `emit_cost.py`."""


def variant_source(name: str) -> str:
    """`enqueue.lua` with `name`'s pieces replaced."""
    return script_variant("enqueue", VARIANTS[name], name)


def wall(client: Client, r: redis.Redis, topic: str, calls: int) -> dict[str, float]:
    """p50 of `calls` single enqueues and of as many raw pipelines, in turns (µs): the
    bench's measure (`benchlib.scenarios.single_calls`)."""
    timed = single_calls(client, r, topic, calls)
    p50, raw_p50 = timed["latency_ms"]["p50"] * 1000, timed["raw_latency_ms"]["p50"] * 1000
    return {"p50_us": p50, "raw_p50_us": raw_p50, "ratio": p50 / raw_p50}


def redis_us(
    r: redis.Redis, shas: dict[str, str], calls: int, per_call: int, tag: str
) -> dict[str, float]:
    """Redis's µs per job of each script variant, called with `per_call` fresh jobs, and
    of ZADD + HSET (commandstats)."""
    keys = script_keys("enqueue", ShardKeys("enqueue-cost", 0))
    out: dict[str, float] = {}
    for name, sha in shas.items():
        r.config_resetstat()
        for i in range(calls):
            jobs: list[Any] = []
            for j in range(per_call):
                jobs += [f"{tag}-{name}-{i:010d}-{j:09d}", 1_800_000, ENVELOPE]
            r.evalsha(sha, len(keys), *keys, "t", "w", 0, "", "d0n", *jobs)  # as for made ids
        out[name] = _usec(r, "evalsha") / per_call
    r.config_resetstat()
    for i in range(calls):
        pipe = r.pipeline(transaction=False)
        pipe.execute_command("ZADD", "enqueue-cost-raw:z", 1, f"{tag}-{i}")
        pipe.execute_command("HSET", "enqueue-cost-raw:h", f"{tag}-{i}", PAYLOAD)
        pipe.execute()
    out["zadd + hset"] = _usec(r, "zadd") + _usec(r, "hset")
    r.delete(*keys, "enqueue-cost-raw:z", "enqueue-cost-raw:h")
    return out


def _usec(r: redis.Redis, command: str) -> float:
    return float(r.info("commandstats")[f"cmdstat_{command}"]["usec_per_call"])


def client_us(client: Client, topic: str, calls: int, batch: int) -> float:
    """The client's CPU µs per job of `enqueue` (`batch` 1) or of `enqueue_many` calls of
    `batch` items, with its executor answering every script call at once."""
    executor = client._executor  # the measurement's stand-in for Redis answers instead
    real = executor.run

    def answer(sent: list[Call[Any]], **_: Any) -> list[Any]:
        return [[Placed.SCHEDULED] * ((len(c.args) - 5) // 3) for c in sent]  # shared layout

    executor.run = answer  # type: ignore[method-assign]
    try:
        t = time.process_time()
        for _ in range(calls):
            if batch == 1:
                client.enqueue(topic, PAYLOAD, delay=DELAY_S)
            else:
                client.enqueue_many(
                    topic, [EnqueueItem(payload=PAYLOAD, delay=DELAY_S) for _ in range(batch)]
                )
        return (time.process_time() - t) / (calls * batch) * 1e6
    finally:
        executor.run = real  # type: ignore[method-assign]


def validate_us(calls: int, batch: int) -> float:
    """CPU µs per job of making and validating `batch` items (`validate_batch`): the part of
    `enqueue_many` that must end before anything is sent (bad input changes nothing)."""
    settings = ClientSettings()
    t = time.process_time()
    for _ in range(calls):
        validate_batch(
            settings, [EnqueueItem(payload=PAYLOAD, delay=DELAY_S) for _ in range(batch)], None, 0
        )
    return (time.process_time() - t) / (calls * batch) * 1e6


def measure(url: str, calls: int, rounds: int, many: int) -> dict[str, Any]:
    r = redis.Redis.from_url(url)
    shas = {name: r.script_load(variant_source(name)) for name in VARIANTS}
    topic = "enqueue-cost"
    runs: list[dict[str, Any]] = []
    with Client.from_url(url) as client:
        admin = Admin.of(client)
        admin.create_topic(topic, 4)
        client.enqueue(topic, PAYLOAD, delay=DELAY_S)  # scripts loaded, shard count known
        size = ClientSettings().batch_size  # the client is made with the defaults
        for n in range(rounds):
            single = {
                "wall": wall(client, r, topic, calls),
                "redis_us": redis_us(r, shas, calls, 1, f"r{n}"),
                "client_us": client_us(client, topic, calls, 1),
            }
            per_job = {
                "jobs_per_s": enqueue_many_rate(client, topic, many),
                "redis_us": redis_us(r, {"as is": shas["as is"]}, many // size, size, f"m{n}")[
                    "as is"
                ],
                "client_us": client_us(client, topic, max(1, many // MANY_ITEMS), MANY_ITEMS),
                "validate_us": validate_us(max(1, many // MANY_ITEMS), MANY_ITEMS),
            }
            runs.append({"single": single, "many": per_job})
        admin.drop_topic(topic, force=True)
    return _report(runs, size)


def _report(runs: list[dict[str, Any]], size: int) -> dict[str, Any]:
    def med(*path: str) -> float:
        values = []
        for run in runs:
            value = run
            for key in path:
                value = value[key]
            values.append(value)
        return round(statistics.median(values), 2)

    single, many = runs[0]["single"], runs[0]["many"]
    out: dict[str, Any] = {
        "single": {
            "wall": {key: med("single", "wall", key) for key in single["wall"]},
            "redis_us": {key: med("single", "redis_us", key) for key in single["redis_us"]},
            "client_us": med("single", "client_us"),
        },
        "many": {key: med("many", key) for key in many} | {"jobs_per_script_call": size},
    }
    s, m = out["single"], out["many"]
    beyond = s["redis_us"]["as is"] - s["redis_us"]["zadd + hset"] + s["client_us"]
    raw = s["wall"]["raw_p50_us"]
    s["floor"] = {"beyond_raw_us": round(beyond, 1), "ratio": round((raw + beyond) / raw, 2)}
    rest = m["client_us"] - m["validate_us"]
    m["floor_jobs_per_s"] = {
        "one_after_the_other": round(1e6 / (m["client_us"] + m["redis_us"])),
        "validated_then_overlapped": round(1e6 / (m["validate_us"] + max(rest, m["redis_us"]))),
    }
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=3000, help="calls per measure and round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--many", type=int, default=100_000, help="enqueue_many jobs per round")
    p.add_argument("--redis-url", help="use this server instead of an embedded one")
    p.add_argument("--server", choices=["valkey", "redis"], default="valkey")
    args = p.parse_args()
    if args.redis_url:
        report = measure(args.redis_url, args.calls, args.rounds, args.many)
    else:
        binary = next((b for b in find_server_binaries() if b.kind == args.server), None)
        if binary is None:
            p.error(f"no {args.server} server binary found")
        with EmbeddedServer(binary) as server:
            report = measure(server.url, args.calls, args.rounds, args.many)
    print(json.dumps({"calls": args.calls, "rounds": args.rounds, **report}))


if __name__ == "__main__":
    main()
