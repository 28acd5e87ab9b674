"""The worker process of loadtest/locustfile.py: runs a topic's jobs, relays their lateness.

    WHEELQ_REDIS_URL=redis://127.0.0.1:6379/0 \
        python loadtest/locust_support.py --topic T --relay-key K [--concurrency N]

The locustfile starts it; it is not meant to be run by hand. It runs a
`wheelq.Worker` whose async handler reads the handler-start time on a clock
corrected to the Redis server's (`RedisClock` kept by a `ClockKeeper`, as in
fire_accuracy.py) and subtracts the job's due time. The values (ms, text) are
RPUSHed to the list `relay-key` in batches every 100 ms; the locust process
pops them and reports each one as a request. It prints ``ready`` once the
clock is sampled and the worker runs, and stops on SIGTERM or SIGINT, or
when its parent process is gone. The list is capped at `--relay-max` values
(the newest are kept) so that nothing grows without bound if nobody reads it.

This module does not import locust: the process runs asyncio, not gevent.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal

import redis.asyncio
from redis.exceptions import RedisError

from wheelq import Job, Worker
from wheelq.runtime.clock import RedisClock
from wheelq.scheduler.scheduler import ClockKeeper
from wheelq.store.executor import AsyncExecutor

log = logging.getLogger("wheelq.locust.worker")

CLOCK_SAMPLES_AT_START = 5
CLOCK_SYNC_INTERVAL_MS = 5000
FLUSH_INTERVAL_S = 0.1
SHUTDOWN_GRACE_MS = 5000


class Relay:
    """Buffers lateness values and RPUSHes them in batches (one round trip per flush)."""

    def __init__(self, connection: redis.asyncio.Redis, key: str, max_values: int) -> None:
        self._connection = connection
        self._key = key
        self._max = max_values
        self._buffer: list[str] = []

    def add(self, lateness_ms: float) -> None:
        self._buffer.append(f"{lateness_ms:.3f}")
        if len(self._buffer) > self._max:  # Redis unreachable for long: keep the newest
            del self._buffer[: len(self._buffer) - self._max]

    async def flush(self) -> None:
        if not self._buffer:
            return
        batch, self._buffer = self._buffer, []
        try:
            pipe = self._connection.pipeline(transaction=False)
            pipe.rpush(self._key, *batch)
            pipe.ltrim(self._key, -self._max, -1)
            await pipe.execute()
        except (RedisError, OSError) as exc:
            log.warning("relay push failed, retrying: %s", exc)
            self._buffer[:0] = batch


async def run(url: str, topic: str, relay_key: str, concurrency: int, relay_max: int) -> None:
    connection = redis.asyncio.Redis.from_url(url)
    clock = RedisClock()
    keeper = ClockKeeper(AsyncExecutor(connection), clock, CLOCK_SYNC_INTERVAL_MS)
    for _ in range(CLOCK_SAMPLES_AT_START):
        await keeper.sample()
    relay = Relay(connection, relay_key, relay_max)

    async def handler(job: Job) -> None:
        relay.add(clock.now_ms_float() - job.due_ms)

    worker = Worker.from_url(
        url, topic, handler, concurrency=concurrency, shutdown_grace_ms=SHUTDOWN_GRACE_MS
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    parent = os.getppid()
    await keeper.start()
    await worker.start()
    print("ready", flush=True)
    try:
        while not stop.is_set() and os.getppid() == parent:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), FLUSH_INTERVAL_S)
            await relay.flush()
    finally:
        await worker.stop()
        await keeper.stop()
        await relay.flush()
        await connection.aclose()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--topic", required=True)
    p.add_argument("--relay-key", required=True, help="Redis list the lateness values go to")
    p.add_argument("--concurrency", type=int, default=100, help="handlers at once")
    p.add_argument("--relay-max", type=int, default=1_000_000, help="cap of the relay list")
    p.add_argument("--log-level", default="WARNING")
    args = p.parse_args()
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    url = os.environ.get("WHEELQ_REDIS_URL")
    if not url:
        p.error("WHEELQ_REDIS_URL is not set")
    asyncio.run(run(url, args.topic, args.relay_key, args.concurrency, args.relay_max))


if __name__ == "__main__":
    main()
