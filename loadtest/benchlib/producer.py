"""A steady producer, run as a process of its own: jobs enqueued at a rate for a while, each
due a random delay after its enqueue, so the producer runs while the node fires them (the
accuracy scenario enqueues every job first instead).

    python loadtest/benchlib/producer.py URL TOPIC RATE SECONDS DUE_MIN_S DUE_MAX_S IDS_OUT

It prints ``ready`` once connected, then for SECONDS enqueues what the rate owes every
`TICK_S` with `Client.enqueue_many` (100-byte payloads, delays uniform in DUE_MIN_S to
DUE_MAX_S; at most `MAX_CALL` jobs a call, so one that falls behind catches up in larger
calls but never without bound), writes the ids to IDS_OUT one a line and prints one JSON
line: jobs sent and their rate, the window on the Redis clock, its own CPU seconds over the
window, the share of the window spent enqueueing, and how many jobs it was behind at most.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from typing import Any

import redis

if __package__ in (None, ""):  # run as a script: make `benchlib` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchlib.common import redis_ms
from benchlib.scenarios import PAYLOAD
from wheelq import Client, EnqueueItem

TICK_S = 0.01
MAX_CALL = 5000


def produce(
    client: Client, topic: str, rate: float, seconds: float, due_s: tuple[float, float]
) -> tuple[list[str], dict[str, Any]]:
    """Enqueue at `rate` for `seconds`; the ids and what it took (without the Redis clock)."""
    rng = random.Random()
    ids: list[str] = []
    behind = 0
    busy_s = 0.0
    cpu0, started = time.process_time(), time.monotonic()
    while (elapsed := time.monotonic() - started) < seconds:
        owed = int(elapsed * rate) - len(ids)
        if owed <= 0:
            time.sleep(min(TICK_S, seconds - elapsed))
            continue
        behind = max(behind, owed)
        t = time.monotonic()
        n = min(owed, MAX_CALL)
        items = [EnqueueItem(payload=PAYLOAD, delay=rng.uniform(*due_s)) for _ in range(n)]
        ids += client.enqueue_many(topic, items)
        busy_s += time.monotonic() - t
        if n == owed:  # caught up: wait for the next tick's share
            time.sleep(TICK_S)
    took = time.monotonic() - started
    return ids, {
        "target_per_s": rate,
        "sent": len(ids),
        "seconds": round(took, 3),
        "enqueue_per_s": round(len(ids) / took, 1),
        "cpu_s": round(time.process_time() - cpu0, 3),
        "busy_share": round(busy_s / took, 3),
        "max_behind_jobs": behind,
    }


def command(
    url: str, topic: str, rate: float, seconds: float, due_s: tuple[float, float], ids_out: str
) -> list[str]:
    """The command line of a producer process."""
    args = (url, topic, rate, seconds, *due_s, ids_out)
    return [sys.executable, os.path.abspath(__file__), *map(str, args)]


def main(argv: list[str]) -> None:
    url, topic, rate, seconds, due_min, due_max, ids_out = argv
    r = redis.Redis.from_url(url)
    with Client.from_url(url) as client:
        print("ready", flush=True)
        start_ms = redis_ms(r)
        ids, stats = produce(
            client, topic, float(rate), float(seconds), (float(due_min), float(due_max))
        )
        end_ms = redis_ms(r)
    r.close()
    with open(ids_out, "w") as f:
        f.write("\n".join(ids))
    print(json.dumps({**stats, "start_ms": start_ms, "end_ms": end_ms}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
