"""dramatiq adapter: delayed messages via `send_with_options(delay=ms)`, one worker process.

A delayed message goes to the queue's delay queue (``<queue>.DQ``) with an ``eta``. The
worker's consumer thread for that queue prefetches up to 1,000 x worker_threads of them
into memory and, each time it wakes, re-enqueues those whose eta has passed onto the
normal queue, whose own consumer then hands them to the worker threads (8 by default).
An idle consumer sleeps with exponential backoff capped by ``worker_timeout`` ("the
number of milliseconds workers should wake up after if the queue is idle", default
1000; `dramatiq.Worker`). All keys live under a per-run broker ``namespace``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import redis

from benchlib.peer_base import Run, drop_matching

AGGRESSIVE_WORKER_TIMEOUT_MS = 10


def namespace(run: Run) -> str:
    return f"bench-peer-dramatiq-ns-{run.token}"


class DramatiqPeer:
    name = "dramatiq"
    db: int | None = None
    concurrency = "one worker process, worker_threads=8 (dramatiq's default)"

    def version(self) -> str:
        import dramatiq

        return str(dramatiq.__version__)

    def setting(self, name: str) -> str:
        if name == "default":
            return "worker_timeout=1000ms (default)"
        return f"worker_timeout={AGGRESSIVE_WORKER_TIMEOUT_MS}ms"

    def worker_commands(self, run: Run, setting: str) -> list[list[str]]:
        args = ["dramatiq", "--url", run.url, "--queue", run.queue, "--namespace", namespace(run)]
        if setting == "aggressive":
            args += ["--worker-timeout-ms", str(AGGRESSIVE_WORKER_TIMEOUT_MS)]
        return [args]

    def enqueue_all(self, run: Run, items: Sequence[tuple[int, float]]) -> float:
        import dramatiq
        from dramatiq.brokers.redis import RedisBroker

        from benchlib.peer_tasks import DRAMATIQ_ACTOR, dramatiq_record

        client = redis.Redis.from_url(run.url, socket_timeout=30)
        broker = RedisBroker(client=client, namespace=namespace(run))
        try:
            actor = dramatiq.actor(
                dramatiq_record, actor_name=DRAMATIQ_ACTOR, queue_name=run.queue, broker=broker
            )
            started = time.perf_counter()
            for index, due_ms in items:
                delay = max(0, round(due_ms - time.time() * 1000))
                actor.send_with_options(args=(index, due_ms), delay=delay)
            return time.perf_counter() - started
        finally:
            broker.close()

    def cleanup(self, r: redis.Redis, run: Run) -> int:
        return drop_matching(r, [f"{namespace(run)}:*"])
