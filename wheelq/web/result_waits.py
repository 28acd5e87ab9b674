"""Long-polls of job results (``GET .../jobs/{id}/result?wait_ms=``) on connections of their
own, so a wait never takes the API's connections (docs/architecture.md, "Job results")."""

from __future__ import annotations

import asyncio
from typing import Any

from wheelq.producer.async_client import AsyncClient
from wheelq.runtime.outage import wait_for_either
from wheelq.store.connect import BlockingReads
from wheelq.web.problems import RETRY_AFTER_S, ProblemError


class ResultWaits:
    """Long-polls of results: each wait on a pool of its own, `connections` at most at once
    (one more is 503: it never waits for, nor takes, the API's connections); `close()` ends
    every wait (each answers with what it has, as a look)."""

    def __init__(self, client: AsyncClient, connections: int) -> None:
        self._client = client
        self._reads = BlockingReads(client.executor, connections)
        self._waiter: AsyncClient | None = None
        self._closing = asyncio.Event()

    async def wait(self, topic: str, job_id: str, group: str, wait_ms: int) -> Any:
        """`result()` with `wait_ms`; raises as it does (503 `ProblemError`: no slot)."""
        if wait_ms == 0 or self._closing.is_set():
            return await self._client.result(topic, job_id, group=group, timeout=0)
        async with self._reads.slots(1, 0) as taken:
            if not taken:
                raise ProblemError(
                    503,
                    "unavailable",
                    "No connection free",
                    f"every one of the {self._reads.connections} connections of result waits "
                    "is taken (pull_connections); try again, or ask with wait_ms=0",
                    headers={"Retry-After": RETRY_AFTER_S},
                )
            if self._waiter is None:
                self._waiter = AsyncClient(self._reads.executor().client)
            waiting = asyncio.ensure_future(
                self._waiter.result(topic, job_id, group=group, timeout=wait_ms / 1000)
            )
            try:
                await wait_for_either(waiting, self._closing, None)
                if waiting.done():
                    return waiting.result()
            finally:
                if not waiting.done():  # closing, or the request went away: drop its connection
                    waiting.cancel()
                    await asyncio.gather(waiting, return_exceptions=True)
        return await self._client.result(topic, job_id, group=group, timeout=0)

    @property
    def in_use(self) -> int:
        """Waits holding a connection now."""
        return self._reads.in_use

    def close(self) -> None:
        """End every wait now; later ones only look."""
        self._closing.set()

    async def aclose(self) -> None:
        self.close()
        await self._reads.aclose()
