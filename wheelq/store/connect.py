"""Clients for a URL: one server, or any node of a Redis Cluster.

A ``redis://`` or ``rediss://`` URL of a cluster node works unchanged. With
``cluster=None`` (the default) the client starts as a plain one, which is all
a single server needs and costs nothing to find out; the first MOVED reply
shows the server is a cluster node, and the executor switches to redis-py's
cluster client made from the same URL and options (see `SyncExecutor`).
``cluster=True`` makes the cluster client at once; ``cluster=False`` never
switches.

redis-py sends a command again when its connection breaks before the reply
(ten times by default), and its cluster client closes every connection, the
busy ones too, at every fifth MOVED reply. Either re-runs a script that may
have run: an enqueue due now would fire twice. So the clients made here send
each call once (``retry`` with no retries) and patch one slot per MOVED reply
(``reinitialize_steps=0``); a broken call surfaces as a connection error,
which the roles retry after a backoff (their scripts are safe to run again)
and a producer reports as in doubt. Either option given in `options` wins.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.retry
import redis.backoff
import redis.cluster
import redis.retry

from wheelq.errors import InvalidArgumentError
from wheelq.store.async_executor import AsyncExecutor
from wheelq.store.sync_executor import SyncExecutor


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
