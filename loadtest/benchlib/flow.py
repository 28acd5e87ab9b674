"""Scenarios of `flow_cost.py` that run workers or watch streams: a worker process with a
`wheelq.Flow`, max_ready binding, worker throughput per flow kind, and schedules.

Run as a script, this file is one worker process:

    python loadtest/benchlib/flow.py REDIS_URL TOPIC {none,rate,key} CONCURRENCY

It runs `wheelq.Worker` with a no-op async handler and the flow named by the third argument
(`FLOWS`), prints "ready" once started, and on SIGTERM stops and prints one JSON line:
{"handled": jobs handled, "deferred": jobs deferred by the flow, "errors": exceptions of
tasks no one awaited (counted instead of logged), "first_error": the first of them}.
A Flow's key function is Python, so this cannot be the `wheelq worker` CLI.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchlib` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchlib.common import Bench, ServerLoad, cpu_seconds, drop_topic, lateness, redis_ms
from benchlib.nodes import start_scheduler
from wheelq import Admin, Client, EnqueueItem, Flow
from wheelq.core.keys import SCHEDULED_KEY, all_shards, scheduled_member
from wheelq.testing import read_fired

FLOWS: dict[str, Callable[[], Flow | None]] = {
    "none": lambda: None,
    "rate": lambda: Flow(rate="1000000/s"),
    "key": lambda: Flow(key=lambda j: str(j.payload % 100), key_concurrency=1000),
}
"""Flow kind (the script's argument) -> the worker's flow."""
FLOW_TEXT = {
    "none": "no flow",
    "rate": 'Flow(rate="1000000/s")',
    "key": "Flow(key=lambda j: str(j.payload % 100), key_concurrency=1000)",
}

CHUNK = 20_000


class FlowWorker:
    """One worker process (this file) for `topic` with the flow `kind`."""

    def __init__(self, bench: Bench, topic: str, kind: str, concurrency: int = 200) -> None:
        cmd = [sys.executable, os.path.abspath(__file__), bench.url, topic, kind, str(concurrency)]
        self.bench = bench
        self.proc = bench.spawn(cmd, stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # "ready": the group is joined
        if line.strip() != b"ready":
            raise RuntimeError(f"flow worker ({kind}) did not start: {line!r}")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> dict[str, Any]:
        """SIGTERM; what the worker reported (handled, deferred)."""
        self.bench.stop(self.proc, timeout_s=60)
        assert self.proc.stdout is not None
        text = self.proc.stdout.read().decode().strip()
        return json.loads(text.splitlines()[-1]) if text else {}


def group_state(r: Any, topic: str, shards: int) -> tuple[int, int, int]:
    """(stream entries, read but unacked, not yet read) over the topic's shards, for the
    one consumer group there (0 for a shard without a group yet)."""
    pipe = r.pipeline(transaction=False)
    for keys in all_shards(topic, shards):
        pipe.xlen(keys.ready)
        pipe.xinfo_groups(keys.ready)
    found = pipe.execute()
    entries = pending = lag = 0
    for length, groups in zip(found[::2], found[1::2], strict=True):
        entries += length
        if groups:
            pending += int(groups[0]["pending"])
            lag += int(groups[0].get("lag") or 0)
        else:
            lag += length
    return entries, pending, lag


def wait_leases(r: Any, topic: str, shards: int) -> bool:
    """Wait (30 s at most) until a scheduler node leads every shard of `topic`."""
    leases = [k.lease for k in all_shards(topic, shards)]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if all(r.mget(leases)):
            return True
        time.sleep(0.05)
    return False


def drop_flow(bench: Bench, r: Any, topic: str) -> None:
    """The topic and its flow buckets and semaphores."""
    drop_topic(r, topic)
    bench.drop(r, f"wheelq:flow:{{{topic}:")


def run_max_ready(
    bench: Bench, *, n: int, max_ready: int | None, shards: int = 4, sample_s: float = 0.01
) -> dict[str, Any]:
    """`n` jobs due at one instant, one scheduler node and one worker process (no flow):
    seconds from the due time until all are handled, and the largest backlog (read but
    unacked + not yet read, over all shards) sampled every `sample_s`."""
    topic = bench.topic("maxready")
    r = bench.redis()
    client = Client.from_url(bench.url)
    admin = Admin.of(client)
    admin.create_topic(topic, shards)
    if max_ready is not None:
        admin.set_limits(topic, max_ready=max_ready)
    node = start_scheduler(bench, topic)
    worker = FlowWorker(bench, topic, "none")
    try:
        wait_leases(r, topic, shards)
        due_ms = redis_ms(r) + 2000 + n // 30
        for i in range(0, n, CHUNK):
            items = [EnqueueItem(payload=i + j, at=due_ms / 1000) for j in range(min(CHUNK, n - i))]
            client.enqueue_many(topic, items)
        while redis_ms(r) < due_ms:
            time.sleep(0.005)
        backlog, done_ms = 0, None
        deadline = time.monotonic() + 120 + n / 1000
        while time.monotonic() < deadline:
            entries, pending, lag = group_state(r, topic, shards)
            backlog = max(backlog, pending + lag)
            if entries >= n and pending == 0 and lag == 0:
                done_ms = redis_ms(r)
                break
            time.sleep(sample_s)
        report = worker.stop()
    finally:
        bench.stop(worker.proc)
        bench.stop(node)
        drop_flow(bench, r, topic)
        client.close()
    return {
        "jobs": n,
        "max_ready": max_ready,
        "all_handled": done_ms is not None,
        "all_handled_after_s": None if done_ms is None else round((done_ms - due_ms) / 1000, 3),
        "max_backlog": backlog,
        "handled": report.get("handled"),
    }


def run_flow_worker(
    bench: Bench, *, n: int, kind: str, concurrency: int = 200, shards: int = 4
) -> dict[str, Any]:
    """One worker process with the flow `kind` draining `n` entries already in the streams
    (int payloads 0..n-1, due now): jobs/s from ready to all acked, its CPU and Redis's per
    job. Gives up after 10 s without an ack (a stalled worker)."""
    topic = bench.topic(f"flow{kind}")
    r = bench.redis()
    client = Client.from_url(bench.url)
    admin = Admin.of(client)
    admin.create_topic(topic, shards)
    worker = None
    try:
        for i in range(0, n, CHUNK):  # due now: the enqueue script appends them at once
            client.enqueue_many(
                topic, [EnqueueItem(payload=i + j) for j in range(min(CHUNK, n - i))]
            )
        worker = FlowWorker(bench, topic, kind, concurrency)
        t0, cpu0, load0 = time.perf_counter(), cpu_seconds(worker.pid), ServerLoad.read(r)
        done, acked, moved = False, -1, t0
        while time.perf_counter() < t0 + 120 + n / 1000 and time.perf_counter() < moved + 10:
            entries, pending, lag = group_state(r, topic, shards)
            if entries >= n and pending == 0 and lag == 0:
                done = True
                break
            if entries - pending - lag > acked:  # no progress for 10 s: stalled, give up
                acked, moved = entries - pending - lag, time.perf_counter()
            time.sleep(0.02)
        seconds = time.perf_counter() - t0
        cpu, load = cpu_seconds(worker.pid) - cpu0, ServerLoad.read(r).since(load0)
        report = worker.stop()
    finally:
        if worker is not None:
            bench.stop(worker.proc)
        drop_flow(bench, r, topic)
        client.close()
    return {
        "jobs": n,
        "flow": kind,
        "all_acked": done,
        "jobs_per_s": round(n / seconds),
        "worker_cpu_us_per_job": round(cpu / n * 1e6, 1),
        "redis_cpu_us_per_job": round(load["redis_cpu_s"] / n * 1e6, 1),
        "redis_commands_per_job": round(load["commands"] / n, 2),
        "concurrency": concurrency,
        "deferred": report.get("deferred"),
        "worker_errors": report.get("errors"),
        "first_worker_error": report.get("first_error"),
    }


def run_schedules(
    bench: Bench, *, count: int, seconds: float = 5.0, shards: int = 4
) -> dict[str, Any]:
    """`count` schedules every 100 ms on one topic, one scheduler node (count 0: an idle
    node): runs entering the streams per second over `seconds`, their entry lateness
    (entry id ms - the occurrence in the id `name@<ms>`), node and Redis CPU per second."""
    topic, r = bench.topic("sched"), bench.redis()
    client = Client.from_url(bench.url)
    admin = Admin.of(client)
    admin.create_topic(topic, shards)
    names = [f"s{i}" for i in range(count)]
    for i, name in enumerate(names):
        admin.schedule(name, topic, i, every_ms=100)
    node = start_scheduler(bench, topic)
    try:
        wait_leases(r, topic, shards)
        time.sleep(1.5)  # the first planning round and the runs missed before it are done
        t0_ms, load0, cpu0 = redis_ms(r), ServerLoad.read(r), cpu_seconds(node.pid)
        time.sleep(seconds)
        t1_ms, load, cpu = redis_ms(r), ServerLoad.read(r).since(load0), cpu_seconds(node.pid)
        records = asyncio.run(_read_fired(bench.url, topic, shards))
    finally:
        bench.stop(node)
        for name in names:
            admin.unschedule(name, topic)
        r.srem(SCHEDULED_KEY, *(scheduled_member(k) for k in all_shards(topic, shards)))
        drop_topic(r, topic)
        client.close()
    runs = [x for x in records if "@" in x.job_id and t0_ms <= x.entry_ms < t1_ms]
    late = lateness(x.entry_ms - int(x.job_id.rsplit("@", 1)[1]) for x in runs) if runs else {}
    span_s = (t1_ms - t0_ms) / 1000
    return {
        "schedules": count,
        "expected_runs_per_s": count * 10,
        "runs_per_s": round(len(runs) / span_s, 1),
        "entry_lateness_p50_ms": late.get("p50"),
        "entry_lateness_p99_ms": late.get("p99"),
        "scheduler_cpu_s_per_s": round((cpu - cpu0) / span_s, 4),
        "redis_cpu_s_per_s": round(load["redis_cpu_s"] / span_s, 4),
    }


async def _read_fired(url: str, topic: str, shards: int) -> list[Any]:
    import redis.asyncio

    connection = redis.asyncio.Redis.from_url(url)
    try:
        return await read_fired(connection, topic, shards)
    finally:
        await connection.aclose()


async def _worker_main(url: str, topic: str, kind: str, concurrency: int) -> None:
    from wheelq import Job, Worker

    handled = 0

    async def handler(job: Job) -> None:
        nonlocal handled
        handled += 1

    errors: list[str] = []  # exceptions no one retrieved (counted, not printed by the loop)

    def on_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        errors.append(repr(context.get("exception") or context.get("message")))

    worker = Worker.from_url(url, topic, handler, concurrency=concurrency, flow=FLOWS[kind]())
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    asyncio.get_running_loop().set_exception_handler(on_error)
    await worker.start()
    print("ready", flush=True)
    await stop.wait()
    await worker.stop()
    gate = worker.in_flight.gate
    report = {"handled": handled, "deferred": gate.deferred if gate else 0, "errors": len(errors)}
    print(json.dumps({**report, "first_error": errors[0] if errors else None}), flush=True)


if __name__ == "__main__":
    asyncio.run(_worker_main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
