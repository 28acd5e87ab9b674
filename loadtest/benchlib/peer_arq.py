"""arq adapter: delayed jobs via `enqueue_job(..., _defer_until=...)`, one asyncio worker.

arq keeps delayed and ready jobs in one sorted set per queue (score = when to run). Its
worker polls that set every `poll_delay` seconds (`arq.worker.Worker`, default 0.5 s)
and starts up to `queue_read_limit` due jobs per poll (default max(5 x max_jobs, 100)),
at most `max_jobs` at once (default 10). Job ids carry the run's token, so a run's keys
are found by pattern in the bench's own db.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import UTC, datetime

import redis

from benchlib.peer_base import Run, drop_matching

AGGRESSIVE_POLL_DELAY_S = 0.01


class ArqPeer:
    name = "arq"
    db: int | None = None
    concurrency = "one asyncio process, max_jobs=10 (arq's default)"

    def version(self) -> str:
        from arq.version import VERSION

        return str(VERSION)

    def setting(self, name: str) -> str:
        if name == "default":
            return "poll_delay=0.5s (default)"
        return f"poll_delay={AGGRESSIVE_POLL_DELAY_S}s"

    def worker_commands(self, run: Run, setting: str) -> list[list[str]]:
        args = ["arq", "--url", run.url, "--queue", run.queue]
        if setting == "aggressive":
            args += ["--poll-delay-s", str(AGGRESSIVE_POLL_DELAY_S)]
        return [args]

    def enqueue_all(self, run: Run, items: Sequence[tuple[int, float]]) -> float:
        timeout_s = 60 + 0.01 * len(items)  # a bound, far above any rate seen
        return asyncio.run(asyncio.wait_for(self._enqueue_all(run, items), timeout_s))

    async def _enqueue_all(self, run: Run, items: Sequence[tuple[int, float]]) -> float:
        from arq.connections import RedisSettings, create_pool

        pool = await create_pool(RedisSettings.from_dsn(run.url))
        try:
            started = time.perf_counter()
            for index, due_ms in items:
                await pool.enqueue_job(
                    "arq_record",
                    index,
                    due_ms,
                    _job_id=run.job_id(index),
                    _queue_name=run.queue,
                    _defer_until=datetime.fromtimestamp(due_ms / 1000, tz=UTC),
                )
            return time.perf_counter() - started
        finally:
            await pool.aclose()

    def cleanup(self, r: redis.Redis, run: Run) -> int:
        # the queue's sorted set and health-check key; arq:job: / :result: / :in-progress:
        # / :retry: keys of the run's job ids
        return drop_matching(r, [f"{run.queue}*", f"arq:*:{run.token}-*"])
