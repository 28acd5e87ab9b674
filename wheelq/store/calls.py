"""Sending calls to Redis: one `Call` type, a sync and an async executor.

A `Call` is a script (or plain command) with its keys, arguments and a
parser for its reply. Executors send a list of calls in one pipeline
(one round trip) and return the parsed replies in order.

Scripts go out as EVALSHA. If the server answers NOSCRIPT (first use, or
after a restart or SCRIPT FLUSH), the executor loads the scripts and sends
only the calls that failed again: NOSCRIPT means they did not run. This
avoids redis-py's pipeline script handling, which costs an extra
SCRIPT EXISTS round trip on every execute.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from redis.exceptions import MovedError, NoScriptError, ResponseError

from wheelq.core.keys import ShardKeys
from wheelq.errors import InvalidArgumentError
from wheelq.store import acked
from wheelq.store.scripts import script, script_keys

T = TypeVar("T")


def _identity(reply: Any) -> Any:
    return reply


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One script call (`script` set) or plain command (`command` set)."""

    script: str | None = None
    keys: Sequence[str] = ()
    args: Sequence[str | bytes | int] = ()
    command: Sequence[str | bytes | int] = ()
    parse: Callable[[Any], T] = field(default=_identity)
    options: Mapping[str, Any] = field(default_factory=dict)
    """Keyword options for redis-py's reply callback (e.g. XPENDING's ``parse_detail``)."""
    keyless: bool = False
    """A command without a key (PING, TIME, CONFIG GET): a cluster pipeline cannot route
    it, so on a cluster it is sent on its own and redis-py picks the node."""

    def wire(self) -> tuple[str | bytes | int, ...]:
        """The command as sent."""
        if self.script is None:
            return tuple(self.command)
        return ("EVALSHA", script(self.script).sha, len(self.keys), *self.keys, *self.args)


def script_call(
    name: str, keys: ShardKeys, args: Sequence[str | bytes | int], parse: Callable[[Any], T]
) -> Call[T]:
    """A call of script `name` on one shard: its KEYS as `scripts.SCRIPT_KEYS` lists them.

    `parse` gets the raw reply and should pass it through `scripts.check` first.
    """
    return Call(name, script_keys(name, keys), args, parse=parse)


def _noscript(reply: Any) -> bool:
    return isinstance(reply, NoScriptError)


def _moved(reply: Any) -> bool:
    return isinstance(reply, MovedError)


def _to_redo(replies: list[Any], which: Callable[[Any], bool]) -> list[int]:
    return [i for i, r in enumerate(replies) if which(r)]


def _apart(calls: Sequence[Call[Any]], cluster: bool) -> tuple[list[int], list[int]]:
    """On a cluster, the indices of the keyless calls (sent one by one) and of the others
    (one pipeline); elsewhere nothing apart."""
    if not cluster or len(calls) == 1 or not any(c.keyless for c in calls):
        return [], []
    alone = [i for i, c in enumerate(calls) if c.keyless]
    return alone, [i for i, c in enumerate(calls) if not c.keyless]


def _finish(calls: Sequence[Call[Any]], replies: list[Any], return_exceptions: bool) -> list[Any]:
    out: list[Any] = []
    for call, reply in zip(calls, replies, strict=True):
        try:
            if isinstance(reply, Exception):
                raise reply
            out.append(call.parse(reply))
        except Exception as exc:
            if not return_exceptions:
                raise
            out.append(exc)
    return out


class Executor(Protocol):
    """What the services send their calls through (`AsyncExecutor`, or a scripted fake in
    tests)."""

    async def run(
        self, calls: Sequence[Call[Any]], *, return_exceptions: bool = False
    ) -> list[Any]: ...


class SyncExecutor:
    """Runs calls on a `redis.Redis` client (or a `redis.cluster.RedisCluster`).

    Args:
        client: The client.
        to_cluster: Given when the URL may name a cluster node: on the first MOVED
            reply it makes the cluster client that replaces `client` (which is
            closed), and the calls that were moved are sent again through it (a
            MOVED command did not run, so this never runs one twice).
    """

    def __init__(
        self, client: redis.Redis, *, to_cluster: Callable[[], redis.Redis] | None = None
    ) -> None:
        self.client = client
        self._to_cluster = to_cluster
        self._retired: list[redis.Redis] = []
        self._switching = threading.Lock()
        self._probed: set[str] = set()  # nodes fit for WAITAOF (see wheelq.store.acked)

    def run(self, calls: Sequence[Call[Any]], *, return_exceptions: bool = False) -> list[Any]:
        """Send `calls` in one round trip (two on NOSCRIPT); return parsed replies.

        With `return_exceptions`, a call that failed (or whose reply parsed to
        an error) has its exception in its place instead of raising.
        """
        sent_with = self.client
        replies = self._send(calls)
        if (moved := _to_redo(replies, _moved)) and self._switched(sent_with):
            self._redo(calls, replies, moved)
        if retry := _to_redo(replies, _noscript):
            for name in {calls[i].script for i in retry}:
                self.client.script_load(script(name or "").source)
            self._redo(calls, replies, retry)
        return _finish(calls, replies, return_exceptions)

    def _switched(self, sent_with: redis.Redis) -> bool:
        """After MOVED replies to calls sent through `sent_with`: whether the cluster client
        has replaced it (now, or in a concurrent call meanwhile), so they go again."""
        with self._switching:
            if self.client is not sent_with:
                return True
            if self._to_cluster is None:
                return False
            self._retired.append(self.client)  # closed by close(): other threads may use it
            self.client, self._to_cluster = self._to_cluster(), None
            return True

    def close(self) -> None:
        """Close the client, and the plain one the cluster client replaced."""
        for client in (*self._retired, self.client):
            client.close()

    def _redo(self, calls: Sequence[Call[Any]], replies: list[Any], which: list[int]) -> None:
        for i, reply in zip(which, self._send([calls[i] for i in which]), strict=True):
            replies[i] = reply

    @property
    def cluster(self) -> bool:
        """Whether the calls go through redis-py's cluster client."""
        return isinstance(self.client, redis.cluster.RedisCluster)

    def _send(self, calls: Sequence[Call[Any]]) -> list[Any]:
        alone, piped = _apart(calls, self.cluster)
        if alone:
            replies: list[Any] = [None] * len(calls)
            for i in alone:
                (replies[i],) = self._send([calls[i]])
            if piped:
                self._redo(calls, replies, piped)
            return replies
        if len(calls) == 1:
            try:
                return [self.client.execute_command(*calls[0].wire(), **calls[0].options)]  # type: ignore[no-untyped-call]
            except ResponseError as exc:  # NOSCRIPT too: like the pipeline, errors go in place
                return [exc]
        pipe = self.client.pipeline(transaction=False)
        for call in calls:
            pipe.execute_command(*call.wire(), **call.options)  # type: ignore[no-untyped-call]
        return list(pipe.execute(raise_on_error=False))

    def run_acked(self, calls: Sequence[Call[Any]], wait: acked.Wait) -> acked.Acked:
        """Send `calls`, each followed on its node's connection by `wait` (see
        `wheelq.store.acked`); return the parsed replies with the calls not confirmed.

        One pipeline per node the calls write to, one node after another; a redirect
        costs a round more. Raises as `run` does, and `AckUnsupportedError`.
        """
        steps = acked.plan(calls, wait, lambda key: acked.node_of(self.client, key), self._probed)
        try:
            request = next(steps)
            while True:
                if request is acked.REFRESH:
                    request = steps.send(self._refresh())
                else:
                    request = steps.send([acked.send(self.client, *sent) for sent in request])
        except StopIteration as done:
            replies, short = done.value
        return acked.Acked(_finish(calls, replies, False), short)

    def _refresh(self) -> bool:
        """Switch to the cluster client, or reload its slot map; False when neither can."""
        if self._to_cluster is not None:
            plain, self.client, self._to_cluster = self.client, self._to_cluster(), None
            plain.close()
            return True
        if isinstance(self.client, redis.cluster.RedisCluster):
            self.client.nodes_manager.initialize()
            return True
        return False


class AsyncExecutor:
    """Runs calls on a `redis.asyncio.Redis` client (or its cluster client); `to_cluster`
    as for `SyncExecutor`."""

    def __init__(
        self,
        client: redis.asyncio.Redis,
        *,
        to_cluster: Callable[[], redis.asyncio.Redis] | None = None,
    ) -> None:
        self.client = client
        self._to_cluster = to_cluster
        self._retired: list[redis.asyncio.Redis] = []
        self._probed: set[str] = set()  # nodes fit for WAITAOF (see wheelq.store.acked)

    @property
    def cluster(self) -> bool:
        """Whether the calls go through redis-py's cluster client."""
        return isinstance(self.client, redis.asyncio.cluster.RedisCluster)

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
        sent_with = self.client
        replies = await self._send(calls)
        if (moved := _to_redo(replies, _moved)) and self._switched(sent_with):
            await self._redo(calls, replies, moved)
        if retry := _to_redo(replies, _noscript):
            for name in {calls[i].script for i in retry}:
                await self.client.script_load(script(name or "").source)
            await self._redo(calls, replies, retry)
        return _finish(calls, replies, return_exceptions)

    def _switched(self, sent_with: redis.asyncio.Redis) -> bool:
        """As `SyncExecutor._switched` (no lock: this runs on one event loop)."""
        if self.client is not sent_with:
            return True
        if self._to_cluster is None:
            return False
        self._retired.append(self.client)  # closed by aclose(): other tasks may be using it
        self.client, self._to_cluster = self._to_cluster(), None
        return True

    async def aclose(self) -> None:
        """Close the client, and the plain one the cluster client replaced."""
        for client in (*self._retired, self.client):
            await client.aclose()

    async def _redo(self, calls: Sequence[Call[Any]], replies: list[Any], which: list[int]) -> None:
        for i, reply in zip(which, await self._send([calls[i] for i in which]), strict=True):
            replies[i] = reply

    async def _send(self, calls: Sequence[Call[Any]]) -> list[Any]:
        alone, piped = _apart(calls, self.cluster)
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
            except ResponseError as exc:  # NOSCRIPT too: like the pipeline, errors go in place
                return [exc]
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
        return acked.Acked(_finish(calls, replies, False), short)

    async def _refresh(self) -> bool:
        """See `SyncExecutor._refresh`."""
        if self._to_cluster is not None:
            plain, self.client, self._to_cluster = self.client, self._to_cluster(), None
            await plain.aclose()
            await self.client.initialize()
            return True
        if isinstance(self.client, redis.asyncio.cluster.RedisCluster):
            await self.client.nodes_manager.initialize()
            return True
        return False
