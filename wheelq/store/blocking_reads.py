"""Blocking reads on connections of their own, a bounded number at once.

A long-poll pull holds a connection for as long as it blocks in XREADGROUP (up to its
``wait_ms``). On the connections everything else uses, enough waiting pulls would take
them all: enqueues and the service's own parts would find none (redis-py's pool refuses
past its ``max_connections``). `BlockingReads` keeps them apart: a pool of
`connections` of its own to the same server (or cluster), and slots that a caller takes
before it blocks and gives back after, so the pool is never asked for more than it has.
On a cluster a read blocks one connection per shard: it takes as many slots.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import redis.asyncio

from wheelq.store.async_executor import AsyncExecutor


class BlockingReads:
    """Slots for blocking reads and the executor they go through.

    Args:
        executor: The executor everything else uses: its server (or cluster) and options
            are copied, its connections are not used for blocking reads (unless it was made
            from a cluster client this module cannot copy: then they share its pool, still
            at most `connections` at once).
        connections: The most connections blocking reads hold at once (>= 1).
    """

    def __init__(self, executor: AsyncExecutor, connections: int) -> None:
        if connections < 1:
            raise ValueError(f"connections must be >= 1, got {connections}")
        self.connections = connections
        self._shared = executor
        self._own: AsyncExecutor | None = None
        self._free = connections
        self._waiters: set[asyncio.Future[None]] = set()

    @property
    def in_use(self) -> int:
        """Slots taken now."""
        return self.connections - self._free

    @property
    def waiting(self) -> int:
        """Callers waiting for slots now."""
        return len(self._waiters)

    def executor(self) -> AsyncExecutor:
        """The executor of the blocking reads: made at the first call, once the shared one
        knows whether it talks to a cluster."""
        if self._own is None:
            self._own = _apart(self._shared, self.connections)
        return self._own

    @contextlib.asynccontextmanager
    async def slots(
        self, wanted: int, timeout_s: float, stop: asyncio.Event | None = None
    ) -> AsyncIterator[int]:
        """Take `wanted` slots (at most `connections`), waiting up to `timeout_s` for them
        to come free (or until `stop` is set); yields how many were taken: 0 when they did
        not come free in time (the caller must then not block). Given back on exit."""
        wanted = min(wanted, self.connections)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_s, 0)
        while self._free < wanted:
            left = deadline - loop.time()
            if left <= 0 or (stop is not None and stop.is_set()):
                break
            freed: asyncio.Future[None] = loop.create_future()
            self._waiters.add(freed)
            stopped = asyncio.ensure_future(stop.wait()) if stop is not None else None
            waits: list[asyncio.Future[Any]] = [freed] if stopped is None else [freed, stopped]
            try:
                await asyncio.wait(waits, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            finally:
                self._waiters.discard(freed)
                freed.cancel()
                if stopped is not None:
                    stopped.cancel()
        taken = wanted if self._free >= wanted else 0
        self._free -= taken
        try:
            yield taken
        finally:
            self._free += taken
            if taken:
                for waiter in self._waiters:  # each looks again: the first that fits goes
                    if not waiter.done():
                        waiter.set_result(None)

    async def aclose(self) -> None:
        """Close the connections of its own (none when it shares the executor's)."""
        if self._own is not None and self._own is not self._shared:
            await self._own.aclose()
        self._own = None


def _apart(executor: AsyncExecutor, connections: int) -> AsyncExecutor:
    """An executor on a pool of its own of at most `connections` connections to the same
    server, with the same options; on a cluster, a new cluster client of the same URL and
    options (redis-py caps its connections per node); the shared executor when it can be
    neither."""
    client = executor.client
    if executor.cluster:
        made = executor.cluster_client()
        return executor if made is None else AsyncExecutor(made)
    pool = client.connection_pool
    options = {k: v for k, v in pool.connection_kwargs.items() if k != "himport_registry"}
    own = redis.asyncio.ConnectionPool(
        connection_class=pool.connection_class, max_connections=connections, **options
    )
    return AsyncExecutor(redis.asyncio.Redis.from_pool(own))
