"""rq adapter: delayed jobs via `Queue.enqueue_at`, one forking worker with RQ's scheduler.

`enqueue_at` puts a job in the queue's ScheduledJobRegistry, a sorted set scored in
whole UTC seconds (the fraction is dropped, so a job can become due up to 1 s before its
time). RQ's scheduler (forked by `rq worker --with-scheduler`) moves due jobs, up to
1,000 per registry per pass, into the queue "once every second" (RQ docs, Scheduling
Jobs); the worker pops them with BLPOP and runs each in a forked work horse, one job at
a time. The worker does not expose the scheduler's interval, so the aggressive setting
runs `rq.scheduler.RQScheduler(..., interval=0)` as a process of its own next to a worker
started without its scheduler. 0 (no sleep between passes: a busy loop) is the only
value below the default that rq 2.x accepts: the interval must be whole seconds, since
the scheduler's lock TTL (interval + 60) goes to a Redis command that rejects fractions
("value is not an integer or out of range"). rq's key names are fixed (``rq:...``, with
global sets ``rq:queues`` and ``rq:workers``), so it runs in a db of its own.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime

import redis

from benchlib.peer_base import Run, drop_matching

AGGRESSIVE_INTERVAL_S = 0  # see the module doc
TASK = "benchlib.peer_tasks.rq_record"


class RqPeer:
    name = "rq"
    db: int | None = 15
    concurrency = "one job at a time per worker (rq's default Worker: a forked horse per job)"

    def version(self) -> str:
        import rq

        return str(rq.__version__)

    def setting(self, name: str) -> str:
        if name == "default":
            return "scheduler interval=1s (default, rq worker --with-scheduler)"
        return f"scheduler interval={AGGRESSIVE_INTERVAL_S}s (busy loop, RQScheduler process)"

    def worker_commands(self, run: Run, setting: str) -> list[list[str]]:
        common = ["--url", run.url, "--queue", run.queue]
        if setting == "default":
            return [["rq", *common]]
        return [
            ["rq", *common, "--no-scheduler"],
            ["rq-scheduler", *common, "--interval-s", str(AGGRESSIVE_INTERVAL_S)],
        ]

    def enqueue_all(self, run: Run, items: Sequence[tuple[int, float]]) -> float:
        from rq import Queue

        conn = redis.Redis.from_url(run.url, socket_timeout=30)
        try:
            queue = Queue(run.queue, connection=conn)
            started = time.perf_counter()
            for index, due_ms in items:
                queue.enqueue_at(
                    datetime.fromtimestamp(due_ms / 1000, tz=UTC),
                    TASK,
                    index,
                    due_ms,
                    job_id=run.job_id(index),
                )
            return time.perf_counter() - started
        finally:
            conn.close()

    def cleanup(self, r: redis.Redis, run: Run) -> int:
        # every per-queue / per-job / per-worker key carries the token (the worker is
        # named after the queue); the global sets only lose the run's members
        deleted = drop_matching(r, [f"rq:*{run.token}*"])
        for key in (b"rq:queues", b"rq:workers"):
            ours = [m for m in r.smembers(key) if run.token.encode() in m]
            if ours:
                r.srem(key, *ours)
        return deleted
