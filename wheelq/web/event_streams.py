"""The pool of the service's Server-Sent Events streams (``GET /v1/topics/{t}/events``,
`wheelq.web.api_events`): blocking reads on connections of their own, ``pull_connections``
wide, so streams never take the API's connections."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from wheelq.producer.async_client import AsyncClient
from wheelq.store.connect import BlockingReads
from wheelq.store.executor import AsyncExecutor
from wheelq.web.problems import RETRY_AFTER_S, ProblemError

STOP_S = 5.0
"""How long stopping the service waits for streams' reads (each ends within its block)."""


class EventStreams:
    """The service's event streams: blocking reads on a pool of their own; `close()` ends
    every stream, `aclose()` waits for their reads (each within its block) and closes it."""

    def __init__(self, client: AsyncClient, connections: int) -> None:
        self._reads = BlockingReads(client.executor, connections)
        self.closing = asyncio.Event()
        self.pumps: set[asyncio.Task[None]] = set()
        """Each stream's reading task: it outlives its response until its reads end."""

    @contextlib.asynccontextmanager
    async def reader(self, shards: int) -> AsyncIterator[tuple[AsyncExecutor, int]]:
        """The executor of a stream's reads of `shards` shards, and how many it may run at
        once: one (every shard in one read) on one server; on a cluster one a shard, up to
        every connection of the pool (503: not that many free)."""
        executor = self._reads.executor()
        wanted = min(shards, self._reads.connections) if executor.cluster else 1
        async with self._reads.slots(wanted, 0) as taken:
            if taken < wanted:
                raise ProblemError(
                    503,
                    "unavailable",
                    "No connection free",
                    f"an event stream of this topic reads on {wanted} connection"
                    f"{'s' if wanted > 1 else ''} at once and only "
                    f"{self._reads.connections - self._reads.in_use} of the "
                    f"{self._reads.connections} connections of event streams are free "
                    "(pull_connections); try again later",
                    headers={"Retry-After": RETRY_AFTER_S},
                )
            yield executor, taken

    def close(self) -> None:
        self.closing.set()
        for pump in self.pumps:
            if not pump.cancelling():  # once: a second cancel would cut its wait for reads
                pump.cancel()

    async def aclose(self) -> None:
        self.close()
        if self.pumps:
            await asyncio.wait(self.pumps, timeout=STOP_S)
        await self._reads.aclose()
