"""The asyncio executor: `wheelq.store.sync_executor`'s twin, method for method, for the
roles and the asyncio producer.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis.asyncio
import redis.asyncio.cluster
from redis.exceptions import ClusterError, RedisError, ResponseError

from wheelq.errors import InvalidArgumentError
from wheelq.store import acked, redirects, streamed
from wheelq.store.calls import Call, finish, moved, noscript, to_redo
from wheelq.store.scripts import script


class SeenNodes:
    """Every node of a cluster client seen: a slot-map reload drops a node that left the map
    (a primary failed over, a node removed) without closing the connections that were busy
    then; `close` closes them all."""

    def __init__(self) -> None:
        self._nodes: dict[int, redis.asyncio.cluster.ClusterNode] = {}

    def note(self, client: object) -> None:
        """Remember the nodes `client` knows now (nothing when it is not a cluster client)."""
        if isinstance(client, redis.asyncio.cluster.RedisCluster):
            self._nodes.update((id(n), n) for n in client.nodes_manager.nodes_cache.values())

    async def close(self) -> None:
        for node in self._nodes.values():
            with contextlib.suppress(RedisError, OSError):
                await node.disconnect()
        self._nodes.clear()


class AsyncExecutor:
    """Runs calls on a `redis.asyncio.Redis` client (or its cluster client); `to_cluster`
    as for `SyncExecutor`. `make_cluster` makes another cluster client of the same URL
    and options (`cluster_client`)."""

    def __init__(
        self,
        client: redis.asyncio.Redis,
        *,
        to_cluster: Callable[[], redis.asyncio.Redis] | None = None,
        make_cluster: Callable[[], redis.asyncio.Redis] | None = None,
    ) -> None:
        self.client = client
        self._to_cluster = to_cluster
        self._make_cluster = make_cluster
        self._retired: list[redis.asyncio.Redis] = []
        self._probed: set[str] = set()  # nodes fit for WAITAOF (see wheelq.store.acked)
        self._reloads = 0  # as in `SyncExecutor`
        self._reloading = asyncio.Lock()
        self._nodes = SeenNodes()

    @property
    def cluster(self) -> bool:
        """Whether the calls go through redis-py's cluster client."""
        return isinstance(self.client, redis.asyncio.cluster.RedisCluster)

    def cluster_client(self) -> redis.asyncio.Redis | None:
        """A new cluster client of the same URL and options, for the caller to close; None
        when not on a cluster or when the executor was made from a client. The wake
        subscription takes one (see `wheelq.store.wake.WakeSubscription`)."""
        return self._make_cluster() if self.cluster and self._make_cluster else None

    async def resolve(self) -> bool:
        """Find out now whether the server is a cluster node (INFO cluster says
        ``cluster_enabled:1``) instead of at the first MOVED reply, and switch to the
        cluster client if it is; returns `cluster`. A role calls it when it starts, before
        it builds anything that differs between the two (per-shard reads, sharded
        subscriptions). A server that refuses INFO (an ACL) is taken as a single server;
        a MOVED reply would still switch.

        Raises:
            InvalidArgumentError: The server is a cluster node but the client is a plain
                one that may not switch (made without `to_cluster`).
        """
        if not self.cluster:
            try:
                info = await self.client.info("cluster")
            except ResponseError:
                info = {}
            if str(info.get("cluster_enabled", "0")) != "1":
                self._to_cluster = None
            elif self._to_cluster is None:
                raise InvalidArgumentError(
                    "connection",
                    "the server is a Redis Cluster node, but the client given is a plain one: "
                    "give a redis.asyncio.cluster.RedisCluster, or use from_url",
                )
            else:
                self._switched(self.client)
        if self.cluster:
            await self.client.initialize()  # learn the slot map
        return self.cluster

    async def run(
        self, calls: Sequence[Call[Any]], *, return_exceptions: bool = False
    ) -> list[Any]:
        """Send `calls` in one round trip (two on NOSCRIPT); see `SyncExecutor.run`."""
        sent_with, reloads = self.client, self._reloads
        try:
            replies = await self._send(calls)
        except redirects.TOPOLOGY_ERRORS as exc:
            reloaded = await self._reload_slots(sent_with, reloads)
            if not (reloaded and redirects.may_resend(exc, calls)):
                raise
            replies = await self._send(calls)  # reads, or its node was not reached
        if any(isinstance(r, redirects.TOPOLOGY_ERRORS) for r in replies):
            await self._reload_slots(sent_with, reloads)
        if (redirected := to_redo(replies, moved)) and self._switched(sent_with):
            await self._redo(calls, replies, redirected)
        if retry := to_redo(replies, noscript):
            for name in {calls[i].script for i in retry}:
                await self.client.script_load(script(name or "").source)
            await self._redo(calls, replies, retry)
        settled_by = time.monotonic() + redirects.SETTLE_S
        while (refused := to_redo(replies, redirects.unsettled)) and time.monotonic() < settled_by:
            await asyncio.sleep(redirects.SETTLE_PAUSE_S)
            await self._redo(calls, replies, refused)
        return finish(calls, replies, return_exceptions)

    def _switched(self, sent_with: redis.asyncio.Redis) -> bool:
        """As `SyncExecutor._switched` (no lock: this runs on one event loop)."""
        if self.client is not sent_with:
            return True
        if self._to_cluster is None:
            return False
        self._retired.append(self.client)  # closed by aclose(): other tasks may be using it
        self.client, self._to_cluster = self._to_cluster(), None
        return True

    async def _reload_slots(self, sent_with: redis.asyncio.Redis, reloads: int) -> bool:
        """As `SyncExecutor._reload_slots`."""
        if not isinstance(sent_with, redis.asyncio.cluster.RedisCluster):
            return False
        async with self._reloading:
            if self._reloads != reloads:
                return True
            self._reloads += 1
            return await self._reload(sent_with)

    async def _reload(self, cluster: redis.asyncio.cluster.RedisCluster) -> bool:
        """Reload the slot map of `cluster`; False if that failed too."""
        self._nodes.note(cluster)
        try:
            await cluster.nodes_manager.initialize()
        except Exception:  # the call's own error is what the caller gets
            return False
        self._nodes.note(cluster)
        return True

    async def aclose(self) -> None:
        """Close the client, the plain one the cluster client replaced, and the
        connections of nodes that left the slot map."""
        self._nodes.note(self.client)
        for client in (*self._retired, self.client):
            await client.aclose()
        await self._nodes.close()

    async def _redo(self, calls: Sequence[Call[Any]], replies: list[Any], which: list[int]) -> None:
        for i, reply in zip(which, await self._send([calls[i] for i in which]), strict=True):
            replies[i] = reply

    async def _send(self, calls: Sequence[Call[Any]]) -> list[Any]:
        alone, piped = redirects.apart(calls, self.cluster)
        if alone:
            replies: list[Any] = [None] * len(calls)
            for i in alone:
                (replies[i],) = await self._send([calls[i]])
            if piped:
                await self._redo(calls, replies, piped)
            return replies
        if len(calls) == 1:
            try:
                return [await self.client.execute_command(*calls[0].wire(), **calls[0].options)]  # type: ignore[no-untyped-call]
            except (ResponseError, ClusterError) as exc:  # as in a pipeline, errors go in place
                return [exc]
        if not self.cluster:
            return await streamed.send_async(self.client, calls)
        pipe = self.client.pipeline(transaction=False)
        for call in calls:
            pipe.execute_command(*call.wire(), **call.options)
        return list(await pipe.execute(raise_on_error=False))

    async def run_acked(self, calls: Sequence[Call[Any]], wait: acked.Wait) -> acked.Acked:
        """Send `calls`, each followed on its node's connection by `wait`; see
        `SyncExecutor.run_acked`. The nodes' pipelines go out concurrently."""
        if isinstance(self.client, redis.asyncio.cluster.RedisCluster):
            await self.client.initialize()  # the slot map (a no-op once loaded)
        steps = acked.plan(calls, wait, lambda key: acked.node_of(self.client, key), self._probed)
        sent_with, reloads = self.client, self._reloads
        try:
            request = next(steps)
            while True:
                if request is acked.REFRESH:
                    request = steps.send(await self._refresh())
                else:
                    sends = (acked.send_async(self.client, *sent) for sent in request)
                    request = steps.send(list(await asyncio.gather(*sends)))
        except StopIteration as done:
            replies, short = done.value
        except redirects.TOPOLOGY_ERRORS:
            await self._reload_slots(sent_with, reloads)
            raise
        return acked.Acked(finish(calls, replies, False), short)

    async def _refresh(self) -> bool:
        """See `SyncExecutor._refresh`."""
        if self._switched(self.client):  # the plain client is retired: others may use it
            await self.client.initialize()
            return True
        if isinstance(self.client, redis.asyncio.cluster.RedisCluster):
            return await self._reload(self.client)
        return False
