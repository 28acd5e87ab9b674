"""Workers a test starts in its own process, with its fast settings, each stopped at teardown.

pool = Workers(redis_url, topic, {"visibility_timeout_ms": 500})
worker = await pool.start(handler, group="a")
...
await pool.close()
"""

from __future__ import annotations

import contextlib
from typing import Any

from wheelq import Worker


class Workers:
    """Starts workers with `fast` settings (a test's own may add to them) and stops every
    one at teardown."""

    def __init__(self, url: str, topic: str, fast: dict[str, Any]) -> None:
        self.url = url
        self.topic = topic
        self.fast = fast
        self.all: list[Worker] = []

    def make(self, handler: Any, **settings: Any) -> Worker:
        worker = Worker.from_url(self.url, self.topic, handler, **{**self.fast, **settings})
        self.all.append(worker)
        return worker

    async def start(self, handler: Any, **settings: Any) -> Worker:
        worker = self.make(handler, **settings)
        await worker.start()
        return worker

    async def close(self) -> None:
        for worker in self.all:
            with contextlib.suppress(Exception):  # a test may have failed half-way
                await worker.stop(grace_ms=0)
            # A stop() that failed half-way leaves the worker's services running (see
            # test_stop_while_starting_stops_the_worker): stop them.
            running = [
                service
                for parts in worker._parts
                for service in (*parts.readers, parts.claims, *filter(None, [parts.watch]))
            ]
            for service in running:
                await service.stop()
            await worker.settler.stop()
            await worker.redis.aclose()
