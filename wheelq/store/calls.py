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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import redis
import redis.asyncio
from redis.exceptions import MovedError, NoScriptError, ResponseError

from wheelq.core.keys import ShardKeys
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

    def run(self, calls: Sequence[Call[Any]], *, return_exceptions: bool = False) -> list[Any]:
        """Send `calls` in one round trip (two on NOSCRIPT); return parsed replies.

        With `return_exceptions`, a call that failed (or whose reply parsed to
        an error) has its exception in its place instead of raising.
        """
        replies = self._send(calls)
        if self._to_cluster is not None and (moved := _to_redo(replies, _moved)):
            plain, self.client, self._to_cluster = self.client, self._to_cluster(), None
            plain.close()
            self._redo(calls, replies, moved)
        if retry := _to_redo(replies, _noscript):
            for name in {calls[i].script for i in retry}:
                self.client.script_load(script(name or "").source)
            self._redo(calls, replies, retry)
        return _finish(calls, replies, return_exceptions)

    def _redo(self, calls: Sequence[Call[Any]], replies: list[Any], which: list[int]) -> None:
        for i, reply in zip(which, self._send([calls[i] for i in which]), strict=True):
            replies[i] = reply

    def _send(self, calls: Sequence[Call[Any]]) -> list[Any]:
        if len(calls) == 1:
            try:
                return [self.client.execute_command(*calls[0].wire(), **calls[0].options)]  # type: ignore[no-untyped-call]
            except ResponseError as exc:  # NOSCRIPT too: like the pipeline, errors go in place
                return [exc]
        pipe = self.client.pipeline(transaction=False)
        for call in calls:
            pipe.execute_command(*call.wire(), **call.options)  # type: ignore[no-untyped-call]
        return list(pipe.execute(raise_on_error=False))


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

    async def run(
        self, calls: Sequence[Call[Any]], *, return_exceptions: bool = False
    ) -> list[Any]:
        """Send `calls` in one round trip (two on NOSCRIPT); see `SyncExecutor.run`."""
        replies = await self._send(calls)
        if self._to_cluster is not None and (moved := _to_redo(replies, _moved)):
            plain, self.client, self._to_cluster = self.client, self._to_cluster(), None
            await plain.aclose()
            await self._redo(calls, replies, moved)
        if retry := _to_redo(replies, _noscript):
            for name in {calls[i].script for i in retry}:
                await self.client.script_load(script(name or "").source)
            await self._redo(calls, replies, retry)
        return _finish(calls, replies, return_exceptions)

    async def _redo(self, calls: Sequence[Call[Any]], replies: list[Any], which: list[int]) -> None:
        for i, reply in zip(which, await self._send([calls[i] for i in which]), strict=True):
            replies[i] = reply

    async def _send(self, calls: Sequence[Call[Any]]) -> list[Any]:
        if len(calls) == 1:
            try:
                return [await self.client.execute_command(*calls[0].wire(), **calls[0].options)]  # type: ignore[no-untyped-call]
            except ResponseError as exc:  # NOSCRIPT too: like the pipeline, errors go in place
                return [exc]
        pipe = self.client.pipeline(transaction=False)
        for call in calls:
            pipe.execute_command(*call.wire(), **call.options)
        return list(await pipe.execute(raise_on_error=False))
