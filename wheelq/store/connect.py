"""Clients and executors for a URL (one server or any cluster node), and `BlockingReads`,
the bounded pool that long-poll XREADGROUP calls take apart from everything else.

``cluster=None`` starts plain and switches at the first MOVED; the clients send each call
once, no retries (docs/architecture.md, invariant 18). Their connections give up on a
server that stops answering after `SOCKET_TIMEOUT_S`, connecting or reading, unless
``redis_options`` says otherwise (None: never).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.retry
import redis.backoff
import redis.cluster
import redis.retry
from redis.exceptions import ResponseError

from wheelq.errors import InvalidArgumentError
from wheelq.store.executor import SOCKET_TIMEOUT_S, AsyncExecutor, SyncExecutor


def check_cluster(cluster: object) -> bool | None:
    """Validate ``from_url``'s `cluster` argument (True, False or None)."""
    if cluster is not None and not isinstance(cluster, bool):
        raise InvalidArgumentError(
            "cluster", f"cluster must be True, False or None (find out), got {cluster!r}"
        )
    return cluster


def _once(options: Mapping[str, Any], retry: object) -> tuple[dict[str, Any], dict[str, Any]]:
    timeouts = {"socket_timeout": SOCKET_TIMEOUT_S, "socket_connect_timeout": SOCKET_TIMEOUT_S}
    plain = {"retry": retry, **timeouts, **options}
    return plain, {"reinitialize_steps": 0, **plain}


def sync_executor(url: str, options: Mapping[str, Any], cluster: bool | None) -> SyncExecutor:
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


def named(name: str) -> Callable[[Any], Awaitable[None]]:
    """A connection's set-up (redis-py's ``redis_connect_func``) that names it `name` (CLIENT
    SETNAME) after the usual set-up; a server that refuses the name (an ACL without
    ``client|setname``) leaves it unnamed, never unconnected."""

    async def on_connect(connection: Any) -> None:
        await connection.on_connect()
        await connection.send_command("CLIENT", "SETNAME", name)
        with contextlib.suppress(ResponseError):
            await connection.read_response()

    return on_connect


def _name_cluster(client: Any, set_up: Callable[[Any], Awaitable[None]]) -> None:
    """Give `set_up` to every connection a cluster client makes: its nodes manager's
    connection options (one dict, copied into each node it finds) and the nodes it has."""
    shared = client.nodes_manager.connection_kwargs
    if "redis_connect_func" in shared:  # its own (READONLY for replica reads): kept
        return
    shared["redis_connect_func"] = set_up
    for node in (*client.nodes_manager.startup_nodes.values(), *client.get_nodes()):
        node.connection_kwargs["redis_connect_func"] = set_up


def async_executor(
    url: str, options: Mapping[str, Any], cluster: bool | None, *, client_name: str | None = None
) -> AsyncExecutor:
    """An executor for `url`; `client_name` names each of its connections (`named`), unless
    `options` names them or sets them up its own way."""
    opts, cluster_opts = _once(options, redis.asyncio.retry.Retry(redis.backoff.NoBackoff(), 0))
    own = {"client_name", "redis_connect_func"} & opts.keys()
    set_up = named(client_name) if client_name and not own else None

    def make() -> redis.asyncio.Redis:
        made = redis.asyncio.cluster.RedisCluster.from_url(url, **cluster_opts)
        if set_up is not None:
            _name_cluster(made, set_up)
        return made  # type: ignore[return-value]

    if check_cluster(cluster):
        return AsyncExecutor(make(), make_cluster=make)
    if set_up is not None:
        opts["redis_connect_func"] = set_up
    plain = redis.asyncio.Redis.from_url(url, **opts)
    if cluster is False:
        return AsyncExecutor(plain)
    return AsyncExecutor(plain, to_cluster=make, make_cluster=make)


SPARE_CONNECTIONS = 4
"""Connections of a node a worker keeps free of blocking reads: acks, claims, retries."""


def check_blocking_reads(client: redis.asyncio.Redis, streams: Sequence[str]) -> None:
    """On a cluster, refuse blocking reads that would take a node's every connection."""
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
    """Slots for blocking reads and the executor they go through (`connections` >= 1)."""

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
        return self.connections - self._free

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def executor(self) -> AsyncExecutor:
        """The blocking reads' executor, made at the first call."""
        if self._own is None:
            self._own = _apart(self._shared, self.connections)
        return self._own

    @contextlib.asynccontextmanager
    async def slots(
        self, wanted: int, timeout_s: float, stop: asyncio.Event | None = None
    ) -> AsyncIterator[int]:
        """Take up to `wanted` slots within `timeout_s` (or until `stop`); yields how many."""
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
        if self._own is not None and self._own is not self._shared:
            await self._own.aclose()
        self._own = None


def _apart(executor: AsyncExecutor, connections: int) -> AsyncExecutor:
    """An executor on a pool of its own to the same server (or cluster); else the shared one."""
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


def server_of(executor: AsyncExecutor) -> str:
    """Which server (or cluster) `executor` talks to, as a name: ``host:port/db``, a unix
    socket's path and db, or ``cluster:`` and its nodes (the roles of one process that talk
    to the same one share a heartbeat, `wheelq.runtime.heartbeat`)."""
    client: Any = executor.client
    if isinstance(client, redis.asyncio.cluster.RedisCluster):
        manager = client.nodes_manager
        nodes = manager.nodes_cache or manager.startup_nodes
        return "cluster:" + ",".join(sorted(nodes))
    kwargs = client.connection_pool.connection_kwargs
    where = kwargs.get("path") or f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"
    return f"{where}/{kwargs.get('db', 0)}"
