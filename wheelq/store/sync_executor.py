"""The synchronous executor: sends `Call`s through a `redis.Redis` client or redis-py's
cluster client (see `wheelq.store.calls` for what it does with the replies, and
`wheelq.store.redirects` for a cluster's refusals); `wheelq.store.async_executor`
is its asyncio twin, method for method.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis
import redis.cluster
from redis.exceptions import ClusterError, ResponseError

from wheelq.store import acked, redirects, streamed
from wheelq.store.calls import Call, finish, moved, noscript, to_redo
from wheelq.store.scripts import script


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
        self._reloads = 0  # slot map reloads after a failure, so one failure wave costs one

    def run(self, calls: Sequence[Call[Any]], *, return_exceptions: bool = False) -> list[Any]:
        """Send `calls` in one round trip (two on NOSCRIPT); return parsed replies.

        With `return_exceptions`, a call that failed (or whose reply parsed to
        an error) has its exception in its place instead of raising.
        """
        sent_with, reloads = self.client, self._reloads
        try:
            replies = self._send(calls)
        except redirects.TOPOLOGY_ERRORS as exc:
            reloaded = self._reload_slots(sent_with, reloads)
            if not (reloaded and redirects.may_resend(exc, calls)):
                raise
            replies = self._send(calls)  # reads, or its node was not reached
        if any(isinstance(r, redirects.TOPOLOGY_ERRORS) for r in replies):
            self._reload_slots(sent_with, reloads)
        if (redirected := to_redo(replies, moved)) and self._switched(sent_with):
            self._redo(calls, replies, redirected)
        if retry := to_redo(replies, noscript):
            for name in {calls[i].script for i in retry}:
                self.client.script_load(script(name or "").source)
            self._redo(calls, replies, retry)
        settled_by = time.monotonic() + redirects.SETTLE_S
        while (refused := to_redo(replies, redirects.unsettled)) and time.monotonic() < settled_by:
            time.sleep(redirects.SETTLE_PAUSE_S)
            self._redo(calls, replies, refused)
        return finish(calls, replies, return_exceptions)

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

    def _reload_slots(self, sent_with: redis.Redis, reloads: int) -> bool:
        """After a call through `sent_with` failed: reload the cluster's slot map, unless
        another call has since `reloads`; whether the map is fresh now. A reload that
        fails too is left to the next failure."""
        if not isinstance(sent_with, redis.cluster.RedisCluster):
            return False
        with self._switching:
            if self._reloads != reloads:
                return True
            self._reloads += 1
            try:
                sent_with.nodes_manager.initialize()
            except Exception:  # the call's own error is what the caller gets
                return False
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
        alone, piped = redirects.apart(calls, self.cluster)
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
            except (ResponseError, ClusterError) as exc:  # as in a pipeline, errors go in place
                return [exc]
        if not self.cluster:
            return streamed.send(self.client, calls)
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
        sent_with, reloads = self.client, self._reloads
        try:
            request = next(steps)
            while True:
                if request is acked.REFRESH:
                    request = steps.send(self._refresh())
                else:
                    request = steps.send([acked.send(self.client, *sent) for sent in request])
        except StopIteration as done:
            replies, short = done.value
        except redirects.TOPOLOGY_ERRORS:
            self._reload_slots(sent_with, reloads)
            raise
        return acked.Acked(finish(calls, replies, False), short)

    def _refresh(self) -> bool:
        """Switch to the cluster client, or reload its slot map; False when neither can."""
        if self._switched(self.client):  # the plain client is retired: others may use it
            return True
        if isinstance(self.client, redis.cluster.RedisCluster):
            self.client.nodes_manager.initialize()
            return True
        return False
