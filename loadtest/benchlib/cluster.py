"""The cluster scenario: firing throughput and lateness on 1, 3 and 6 primaries, 4/8/16 shards.

Each cluster is an `EmbeddedCluster` (a 1-primary cluster, not a standalone server, so the
primaries are the only variable). For every shard count and every count of scheduler node
processes (1 and 3 by default), a burst of `n` jobs is
enqueued due at one instant T a few seconds ahead, with the nodes already leading every
shard (shared by their quotas). Measured:

- fired/s: n / (last stream entry - T), both on the Redis clock; entry lateness
  (entry id - due) p50 / p99 / max; missing, duplicate and early entries;
- cores busy while firing: CPU seconds from 100 ms before T until the bench saw every
  entry (idle time on either side) over the span T to the last entry, for each primary
  (INFO used_cpu_sys + used_cpu_user), the scheduler processes (/proc), the bench process
  and the whole machine (/proc/stat: what is left is other work on the machine);
- what was at its limit while firing (`common.at_limit`): a primary or a scheduler process
  (on average) busy 0.9 of a core or more, or the machine 0.9 of its cores (``machine_bound``:
  then the machine, not wheelq, set the figure); the machine's cores are in the result;
- per job: Redis CPU while firing and before it (enqueue + preload), the schedulers' CPU
  from the enqueue to the last entry (their idle cost included: an upper bound), and the
  bytes in and out of the primaries (INFO stats);
- with `steady_rate`, one steady run per shard count with one node: entry lateness.

Each run first waits (10 s at most) for the machine to be quiet, and records how busy it was.

With `repeats` > 1 each burst runs that many times; the run with the median fired/s is
reported (its other figures with it) and `fired_per_s_range` gives the spread.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any

from redis.cluster import RedisCluster
from redis.crc import key_slot

from benchlib.accuracy import ENQUEUE_CHUNK, enqueue_spread, fired
from benchlib.common import (
    SATURATED,
    Bench,
    CpuSnapshot,
    at_limit,
    drop_topic,
    lateness,
    redis_ms,
    wait_quiet,
    wait_until,
)
from benchlib.nodes import start_scheduler
from wheelq import Admin, Client, EnqueueItem
from wheelq.core.keys import ShardKeys, all_shards
from wheelq.testing import EmbeddedCluster, ServerBinary, summarize

PAYLOAD = b"x" * 100
LEAD_MS = 100
"""The CPU window opens this long before the due time."""
PRIMARIES = (1, 3, 6)
SHARDS = (4, 8, 16)
NODES = (1, 3)
"""Counts of scheduler node processes (`wheelq scheduler`) for each cluster and shard count."""
Enqueue = Callable[[Client, str, int], list[str]]
"""Enqueues the run's jobs on a topic, due from a Redis-clock ms on; returns their ids."""


def _cores(used: dict[str, Any], span_s: float) -> dict[str, Any]:
    """Cores kept busy on average over `span_s` (CPU s per s), the CPU seconds being those
    of a window a little wider (idle before the due time and after the last entry);
    `others`: the machine less ours."""
    s = max(1e-3, span_s)
    ours = sum(used["redis_per_primary"]) + used["schedulers"] + used["bench"]
    return {
        "redis_per_primary": [round(x / s, 2) for x in used["redis_per_primary"]],
        "schedulers": round(used["schedulers"] / s, 2),
        "bench": round(used["bench"] / s, 2),
        "machine": round(used["machine"] / s, 2),
        "others": round(max(0.0, used["machine"] - ours) / s, 2),
    }


def _spread(cluster: EmbeddedCluster, keys: list[ShardKeys]) -> list[int]:
    """How many of the shards each primary serves."""
    with cluster.client(cluster.primaries[0]) as c:
        ranges = [
            (int(lo), int(hi), int(p[1])) for lo, hi, p, *_ in c.execute_command("CLUSTER", "SLOTS")
        ]
    ports = [
        next(port for lo, hi, port in ranges if lo <= key_slot(k.ready.encode()) <= hi)
        for k in keys
    ]
    return [ports.count(node.port) for node in cluster.primaries]


def even_topic(bench: Bench, cluster: EmbeddedCluster, shards: int) -> str:
    """A topic name whose shards' hash slots spread over the primaries as evenly as can be
    (counts within one), so the runs compare primaries, not luck: which primary serves a
    shard follows from CRC16 of its hash tag, not from the shard count."""
    for _ in range(1000):
        topic = bench.topic(f"cluster{len(cluster.primaries)}x{shards}")
        counts = _spread(cluster, all_shards(topic, shards))
        if max(counts) - min(counts) <= 1:
            return topic
    return topic


def _led(r: RedisCluster, keys: list[ShardKeys], nodes: int) -> bool:
    """Every shard leased, by `nodes` distinct holders none above its share."""
    holders = [r.get(k.lease) for k in keys]
    if not all(holders):
        return False
    counts = [holders.count(h) for h in set(holders)]
    return len(counts) == nodes and max(counts) <= -(-len(keys) // nodes)


def _fire(
    bench: Bench, cluster: EmbeddedCluster, shards: int, nodes: int, n: int, enqueue: Enqueue
) -> dict[str, Any]:
    """One run on a topic of its own: `nodes` scheduler processes, `n` jobs."""
    topic = even_topic(bench, cluster, shards)
    r = RedisCluster.from_url(cluster.url)
    client = Client.from_url(cluster.url)
    admin = Admin.of(client)
    admin.create_topic(topic, shards)
    keys = all_shards(topic, shards)
    procs = [start_scheduler(bench, topic) for _ in range(nodes)]
    servers = [cluster.client(node) for node in cluster.primaries]
    groups = {"schedulers": procs}
    try:
        if not wait_until(lambda: _led(r, keys, nodes), 60, poll_s=0.1):
            raise TimeoutError(f"{nodes} nodes did not share {shards} shards within 60 s")
        quiet = wait_quiet()
        before = CpuSnapshot.read(servers, groups)
        due_ms = redis_ms(r) + 3000 + n // 30
        ids = enqueue(client, topic, due_ms)
        lead_s = (due_ms - redis_ms(r)) / 1000
        # From just before the due time: at it, the nodes and Redis take both cores and
        # this process could wake up after a short burst is over.
        wait_until(lambda: redis_ms(r) >= due_ms - LEAD_MS, lead_s + 5, poll_s=0.002)
        cpu0 = CpuSnapshot.read(servers, groups)
        done = wait_until(lambda: sum(r.xlen(k.ready) for k in keys) >= n, 120, poll_s=0.02)
        cpu1 = CpuSnapshot.read(servers, groups)
        records = asyncio.run(fired(cluster.url, topic, shards, cluster=True))
    finally:
        for proc in procs:
            bench.stop(proc)
        drop_topic(r, topic)
        r.close()
        client.close()
        for server in servers:
            server.close()
    counts = summarize(records, ids)
    late = lateness(x.lateness_ms for x in records)
    firing, whole = cpu1.since(cpu0), cpu1.since(before)
    busy = _cores(firing, float(late["max"]) / 1000)
    single = {f"primary {i}": c for i, c in enumerate(busy["redis_per_primary"])}
    single["scheduler (per process)"] = round(busy["schedulers"] / nodes, 2)
    return {
        "all_in_stream": done,
        "enqueued_before_due_s": round(lead_s, 2),
        "fired_per_s": round(n / max(1e-3, float(late["max"]) / 1000)),
        "entry_lateness_ms": late,
        **{k: counts[k] for k in ("missing", "duplicates", "early")},
        "machine_cores_busy_before": quiet,
        "cores_busy": busy,
        "at_limit": at_limit(single, busy["machine"]),
        "machine_bound": busy["machine"] >= SATURATED * (os.cpu_count() or 1),
        # Costs per job: firing (due -> all in the streams), enqueue + preload (before due:
        # the producer's scripts, the preloader's reads), schedulers over both.
        "cpu_us_per_job": {
            "redis_firing": round(sum(firing["redis_per_primary"]) / n * 1e6, 2),
            "redis_enqueue_preload": round(
                (sum(whole["redis_per_primary"]) - sum(firing["redis_per_primary"])) / n * 1e6, 2
            ),
            "schedulers": round(whole["schedulers"] / n * 1e6, 2),
        },
        # Bytes in + out of the primaries per job, enqueue to stream entry (no workers).
        "net_bytes_per_job": round(whole["net_bytes"] / n),
        "shards_per_primary": _spread(cluster, keys),
    }


def _burst(n: int) -> Enqueue:
    def enqueue(client: Client, topic: str, due_ms: int) -> list[str]:
        ids: list[str] = []
        for i in range(0, n, ENQUEUE_CHUNK):
            items = [EnqueueItem(payload=PAYLOAD, at=due_ms / 1000)] * min(ENQUEUE_CHUNK, n - i)
            ids += client.enqueue_many(topic, items)
        return ids

    return enqueue


def _steady(rate: int, n: int) -> Enqueue:
    return lambda client, topic, start_ms: enqueue_spread(client, topic, start_ms, n, rate, PAYLOAD)


def run_cluster(
    bench: Bench,
    binary: ServerBinary | None,
    *,
    n: int,
    repeats: int = 1,
    primaries: tuple[int, ...] = PRIMARIES,
    shards: tuple[int, ...] = SHARDS,
    nodes: tuple[int, ...] = NODES,
    steady_rate: int = 0,
    steady_s: float = 3.0,
) -> dict[str, Any]:
    """Burst firing (and steady lateness, one node, reported with the fewest nodes' row) for
    every primaries x shards x scheduler nodes."""
    nodes = tuple(sorted(set(nodes)))
    rows: list[dict[str, Any]] = []
    for p in primaries:
        bench.log(f"cluster: starting {p} primaries")
        with EmbeddedCluster(binary, primaries=p) as cluster:
            sub = Bench(cluster.url, quick=bench.quick)
            try:
                for s in shards:
                    for k in nodes:
                        bench.log(f"cluster: {p} primaries, {s} shards, {k} nodes x{repeats}")
                        runs = [_fire(sub, cluster, s, k, n, _burst(n)) for _ in range(repeats)]
                        runs.sort(key=lambda x: x["fired_per_s"])
                        row = {"primaries": p, "shards": s, "nodes": k, **runs[len(runs) // 2]}
                        row["fired_per_s_range"] = [runs[0]["fired_per_s"], runs[-1]["fired_per_s"]]
                        rows.append(row)
                    if steady_rate:
                        bench.log(f"cluster: {p} primaries, {s} shards, 1 node, {steady_rate}/s")
                        m = int(steady_rate * steady_s)
                        steady = _fire(sub, cluster, s, 1, m, _steady(steady_rate, m))
                        # burst figures only (over the span of a burst's lateness)
                        for key in ("fired_per_s", "cores_busy", "at_limit", "machine_bound"):
                            steady.pop(key)
                        rows[-len(nodes)]["steady"] = {"rate_per_s": steady_rate, **steady}
            finally:
                sub.close()
    by_key = {(x["primaries"], x["shards"], x["nodes"]): x for x in rows}
    for row in rows:
        base = by_key.get((1, row["shards"], row["nodes"]))
        if base and row is not base:
            row["ratio_to_1_primary"] = round(row["fired_per_s"] / base["fired_per_s"], 2)
    return {
        "jobs": n,
        "repeats": repeats,
        "steady_s": steady_s,
        "primaries": list(primaries),
        "shards": list(shards),
        "nodes": list(nodes),
        "machine_cores": os.cpu_count(),
        "machine_bound_rows": sum(1 for x in rows if x["machine_bound"]),
        "rows": rows,
    }
