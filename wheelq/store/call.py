"""A call to Redis: one script or command with the parser of its reply (`Call`), and the
replies of a batch parsed by their calls (`finish`).

The bottom of the store's sending side: the executors (`wheelq.store.executor`) and the
acknowledged writes (`wheelq.store.acked`) both send `Call`s, and every module of calls
builds them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

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
    options: Mapping[str, Any] = field(default_factory=dict)  # for redis-py's reply callback
    keyless: bool = False
    """No key (PING, TIME): a cluster pipeline cannot route it."""
    route: str | None = None
    """A keyless command's key to route by: on a cluster it goes to the node serving the
    key's slot (CLIENT LIST of a shard's server), elsewhere to the one server."""
    blocks: bool = False
    """A blocking read (XREAD, XREADGROUP with BLOCK), sent alone: it holds its connection
    up to its block time, so the executor's gate on calls in flight does not count it
    (blocking reads are bounded where they are made: a worker's one a shard, checked
    against a node's connections, `BlockingReads`' slots)."""

    @property
    def name(self) -> Any:
        """The command as redis-py names it (for its reply callback): EVALSHA for a script."""
        return "EVALSHA" if self.script is not None else self.command[0]

    def wire(self) -> tuple[str | bytes | int, ...]:
        if self.script is None:
            return tuple(self.command)
        return (self.name, script(self.script).sha, len(self.keys), *self.keys, *self.args)


def script_call(
    name: str, keys: ShardKeys, args: Sequence[str | bytes | int], parse: Callable[[Any], T]
) -> Call[T]:
    """A call of script `name` on one shard; `parse` should go through `scripts.check`."""
    return Call(name, script_keys(name, keys), args, parse=parse)


def finish(calls: Sequence[Call[Any]], replies: list[Any], return_exceptions: bool) -> list[Any]:
    """The parsed replies; the first error raised, or with `return_exceptions` in place."""
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
