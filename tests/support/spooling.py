"""What the spool and breaker tests share: either client kind behind one interface (the
``client_kind`` fixture, registered in tests/integration/conftest.py), and the job ids a
topic holds in Redis."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import redis

from tests.support.far import far_ids
from wheelq import Admin, AsyncAdmin, AsyncClient, Client, SpoolStats
from wheelq.core.keys import all_shards

SHARDS = 4
HOUR_S = 3600
DRAIN_S = 30  # the drain's backoff caps at 2 s; a busy 2-core machine needs slack


@pytest.fixture(params=["sync", "async"])
def client_kind(request: pytest.FixtureRequest) -> str:
    """Which client a test runs with: ``sync`` (`Client`) or ``async`` (`AsyncClient`)."""
    return str(request.param)


class EitherClient:
    """A `Client` or an `AsyncClient` behind one awaitable interface (`manage` for the
    managing calls, on the admin of the same kind)."""

    def __init__(self, kind: str, url: str, **options: Any) -> None:
        self.sync = Client.from_url(url, **options) if kind == "sync" else None
        self.aio = AsyncClient.from_url(url, **options) if kind == "async" else None

    async def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if self.sync is not None:
            return getattr(self.sync, name)(*args, **kwargs)
        assert self.aio is not None
        return await getattr(self.aio, name)(*args, **kwargs)

    async def manage(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Call `name` on the admin of this client's connections (and breaker)."""
        if self.sync is not None:
            return getattr(Admin.of(self.sync), name)(*args, **kwargs)
        assert self.aio is not None
        return await getattr(AsyncAdmin.of(self.aio), name)(*args, **kwargs)

    def spool_stats(self) -> SpoolStats:
        stats = (self.sync or self.aio).spool_stats()  # type: ignore[union-attr]
        assert stats is not None
        return stats

    async def close(self) -> None:
        if self.sync is not None:
            self.sync.close()
        if self.aio is not None:
            await self.aio.aclose()


def found_ids(url: str, topic: str) -> Counter[str]:
    """Each job id of the topic, counted once per place it is in (pending in the sorted set
    or the far tier, or fired)."""
    found: Counter[str] = Counter()
    with redis.Redis.from_url(url) as r:
        for keys in all_shards(topic, SHARDS):
            found.update(m.decode() for m in r.zrange(keys.delayed, 0, -1))
            found.update(far_ids(r, keys))
            found.update(f[b"id"].decode() for _, f in r.xrange(keys.ready))
    return found
