"""Clients and executors for a URL (one server, or any node of a Redis Cluster), and the
connections blocking reads take apart from them.

With ``cluster=None`` the client starts plain and the executor switches to redis-py's
cluster client at the first MOVED reply; ``cluster=True`` makes the cluster client at once,
``cluster=False`` never switches. The clients made here send each call once (no retries,
``reinitialize_steps=0``): redis-py's own re-sending would run again a script that may have
run (docs/architecture.md, invariant 18). Either option given in `options` wins.

A long-poll pull holds a connection while it blocks in XREADGROUP; `BlockingReads` gives
those reads a bounded pool of their own, so enqueues and the roles' parts always find one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.retry
import redis.backoff
import redis.cluster
import redis.retry

from wheelq.errors import InvalidArgumentError
from wheelq.store.executor import AsyncExecutor, SyncExecutor


def check_cluster(cluster: object) -> bool | None:
    """Validate ``from_url``'s `cluster` argument.

    Raises:
        InvalidArgumentError: Not True, False or None.
    """
    if cluster is not None and not isinstance(cluster, bool):
        raise InvalidArgumentError(
            "cluster", f"cluster must be True, False or None (find out), got {cluster!r}"
        )
    return cluster


def _once(options: Mapping[str, Any], retry: object) -> tuple[dict[str, Any], dict[str, Any]]:
    """The options of the plain client and of the cluster client: see the module docstring."""
    plain = {"retry": retry, **options}
    return plain, {"reinitialize_steps": 0, **plain}


def sync_executor(url: str, options: Mapping[str, Any], cluster: bool | None) -> SyncExecutor:
    """An executor for `url`: see the module docstring for `cluster`."""
    opts, cluster_opts = _once(options, redis.retry.Retry(redis.backoff.NoBackoff(), 0))
    if check_cluster(cluster):
        return SyncExecutor(redis.cluster.RedisCluster.from_url(url, **cluster_opts))  # type: ignore[arg-type]
    plain = redis.Redis.from_url(url, **opts)
    if cluster is False:
        return SyncExecutor(plain)
    return SyncExecutor(
        plain,
        to_cluster=lambda: redis.cluster.RedisCluster.from_url(url, **cluster_opts),  # type: ignore[arg-type,return-value]
    )


def async_executor(url: str, options: Mapping[str, Any], cluster: bool | None) -> AsyncExecutor:
    """The asyncio version of `sync_executor`."""
    opts, cluster_opts = _once(options, redis.asyncio.retry.Retry(redis.backoff.NoBackoff(), 0))

    def make() -> redis.asyncio.Redis:
        return redis.asyncio.cluster.RedisCluster.from_url(url, **cluster_opts)  # type: ignore[return-value]

    if check_cluster(cluster):
        return AsyncExecutor(make(), make_cluster=make)
    plain = redis.asyncio.Redis.from_url(url, **opts)
    if cluster is False:
        return AsyncExecutor(plain)
    return AsyncExecutor(plain, to_cluster=make, make_cluster=make)


SPARE_CONNECTIONS = 4
"""Connections of a node a worker keeps free of blocking reads: acks, claims, retries."""


def check_blocking_reads(client: redis.asyncio.Redis, streams: Sequence[str]) -> None:
    """On a cluster, check that one blocking read per stream leaves each node's connection
    pool room for everything else (redis-py's cluster client allows `max_connections` per
    node, 100 by default); a single server's reads take one connection in all.

    Raises:
        InvalidArgumentError: A node would lend every connection to blocking reads.
    """
    if not isinstance(client, redis.asyncio.cluster.RedisCluster):
        return
    reads = Counter(client.get_node_from_key(stream).name for stream in streams)
    for name, count in reads.items():
        node = client.get_node(node_name=name)
        if node is not None and count + SPARE_CONNECTIONS > node.max_connections:
            raise InvalidArgumentError(
                "redis_options",
                f"max_connections must be >= {count + SPARE_CONNECTIONS} for a worker whose "
                f"topic has {count} shards on node {name} (one blocking read each, plus "
                f"{SPARE_CONNECTIONS}), got {node.max_connections}",
            )


# --- blocking reads on connections of their own -----------------------------------------------


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
