"""Writes confirmed where they were made: WAIT or WAITAOF after a batch, on each owning node
(a keyless WAIT through the cluster client would confirm on a default node).

`plan` is sans-I/O: one pipeline per node, its calls then the wait; MOVED, ASK and
NOSCRIPT go again as in `wheelq.store.executor.plan`. WAITAOF nodes are probed once.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from redis.exceptions import (
    AskError,
    ConnectionError,
    MovedError,
    NoScriptError,
    SlotNotCoveredError,
)

from wheelq.errors import AckUnsupportedError
from wheelq.store.scripts import script

if TYPE_CHECKING:
    from wheelq.store.call import Call

PLAIN = "server"
"""The node name of a single server (a client that is not a cluster client)."""
REFRESH = None
"""The request to reload the slot map (or switch to the cluster client)."""
MAX_ROUNDS = 5
"""Sends per batch at most; a call still redirected then has its redirect error as reply."""

Command = tuple[Sequence[Any], Mapping[str, Any]]  # arguments, reply-callback options
Request = list[tuple[str, list[Command]]] | None
Plan = Generator[Request, Any, tuple[list[Any], dict[int, int]]]

_PROBE: list[Command] = [(("WAITAOF", 0, 0, 0), {}), (("INFO", "persistence"), {})]


@dataclass(frozen=True, slots=True)
class Wait:
    """What a batch waits for on each node: WAIT `replicas`, or WAITAOF with `aof`."""

    replicas: int
    timeout_ms: int
    aof: bool = False

    @property
    def command(self) -> tuple[str | int, ...]:
        if self.aof:
            return ("WAITAOF", 1, self.replicas, self.timeout_ms)
        return ("WAIT", self.replicas, self.timeout_ms)

    def confirmed(self, reply: Any) -> int:
        """Replicas that confirmed; -1 when the command failed or the node's AOF was not fsynced."""
        if isinstance(reply, Exception):
            return -1
        if self.aof:
            local, replicas = reply
            return int(replicas) if int(local) >= 1 else -1
        return int(reply)


class Acked(list[Any]):
    """The parsed replies of `run_acked`; `short`: call index -> replicas confirmed when too few."""

    def __init__(self, replies: Sequence[Any], short: Mapping[int, int]) -> None:
        super().__init__(replies)
        self.short = dict(short)


def routing_key(call: Call[Any]) -> str:
    """The key that places `call` on a node."""
    if call.script is not None:
        return str(call.keys[0])
    if len(call.command) < 2:
        raise ValueError(f"{call.command!r} names no key to route it by")
    key = call.command[1]
    return key.decode() if isinstance(key, bytes) else str(key)


def plan(
    calls: Sequence[Call[Any]], wait: Wait, route: Callable[[str], str], probed: set[str]
) -> Plan:
    """Send `calls` with `wait` on each owning node; returns (raw replies, short).

    `probed` holds the nodes known to have WAITAOF and appendonly (updated here).

    Raises:
        AckUnsupportedError: `wait.aof` and a node lacks WAITAOF or AOF; nothing sent to it.
    """
    replies: list[Any] = [None] * len(calls)
    short: dict[int, int] = {}
    todo: dict[int, str | None] = dict.fromkeys(range(len(calls)))  # index -> ASK target
    loads: dict[str, set[str]] = defaultdict(set)  # node -> scripts to load first
    for _ in range(MAX_ROUNDS):
        groups: dict[str, list[int]] = defaultdict(list)
        for i, ask in todo.items():
            groups[ask or route(routing_key(calls[i]))].append(i)
        if wait.aof:
            yield from _probe(list(groups), probed)
        sent = [
            _commands(calls, ids, todo, loads.pop(name, set()), wait)
            for name, ids in groups.items()
        ]
        got = yield [(name, commands) for name, (commands, _) in zip(groups, sent, strict=True)]
        redo: dict[int, str | None] = {}
        moved = False
        for (name, ids), (_, at), raw in zip(groups.items(), sent, got, strict=True):
            count = wait.confirmed(raw[-1])
            if count < 0 and wait.aof:
                probed.discard(name)  # ask again before the next write (appendonly off now?)
            for i, reply in zip(ids, [raw[p] for p in at], strict=True):
                replies[i] = reply  # stays the reply if a redirected call cannot go again
                if isinstance(reply, AskError):  # MovedError is one too
                    asked = name != PLAIN and not isinstance(reply, MovedError)
                    redo[i] = f"{reply.host}:{reply.port}" if asked else None
                    moved = moved or not asked  # a plain client switches to the cluster one
                elif isinstance(reply, NoScriptError):
                    redo[i] = todo[i]
                    loads[name].add(calls[i].script or "")
                elif count < wait.replicas:
                    short[i] = count
        todo = redo
        if not todo or (moved and not (yield REFRESH)):
            break
    return replies, short


def _commands(
    calls: Sequence[Call[Any]],
    ids: list[int],
    asks: Mapping[int, str | None],
    loads: set[str],
    wait: Wait,
) -> tuple[list[Command], list[int]]:
    """One node's pipeline (SCRIPT LOADs, calls, the wait) and where each call's reply is."""
    commands: list[Command] = [
        (("SCRIPT", "LOAD", script(name).source), {}) for name in sorted(loads)
    ]
    at: list[int] = []
    for i in ids:
        if asks[i] is not None:
            commands.append((("ASKING",), {}))
        at.append(len(commands))
        commands.append((calls[i].wire(), calls[i].options))
    commands.append((wait.command, {}))
    return commands, at


def _probe(names: list[str], probed: set[str]) -> Generator[Request, Any, None]:
    unknown = [name for name in names if name not in probed]
    if not unknown:
        return
    got = yield [(name, _PROBE) for name in unknown]
    for name, (waitaof, info) in zip(unknown, got, strict=True):
        if isinstance(waitaof, Exception):
            raise AckUnsupportedError(name, f"has no WAITAOF ({waitaof})")
        if isinstance(info, Exception) or not int(info.get("aof_enabled", 0)):
            raise AckUnsupportedError(name, "has appendonly no")
        probed.add(name)


def node_of(client: object, key: str) -> str:
    """The name of the node of `client` that owns `key` now; `PLAIN` for a plain client."""
    if not isinstance(client, redis.cluster.RedisCluster | redis.asyncio.cluster.RedisCluster):
        return PLAIN
    node = client.get_node_from_key(key)
    if node is None:
        raise SlotNotCoveredError(f"no node owns the slot of {key!r}")
    return str(node.name)


def send(client: redis.Redis, name: str, commands: list[Command]) -> list[Any]:
    """Send `commands` as one pipeline on a connection of node `name`; errors in place."""
    cluster = client if isinstance(client, redis.cluster.RedisCluster) else None
    target = client
    if cluster is not None and name != PLAIN:
        if (node := cluster.get_node(node_name=name)) is None:
            raise ConnectionError(f"no cluster node {name} in the slot map")
        target = cluster.get_redis_connection(node)
    pipe = target.pipeline(transaction=False)
    for args, options in commands:
        pipe.execute_command(*args, **options)  # type: ignore[no-untyped-call]
    return list(pipe.execute(raise_on_error=False))


async def send_async(client: redis.asyncio.Redis, name: str, commands: list[Command]) -> list[Any]:
    if not isinstance(client, redis.asyncio.cluster.RedisCluster) or name == PLAIN:
        pipe = client.pipeline(transaction=False)
        for args, options in commands:
            pipe.execute_command(*args, **options)
        return list(await pipe.execute(raise_on_error=False))
    if (node := client.get_node(node_name=name)) is None:
        raise ConnectionError(f"no cluster node {name} in the slot map")
    sent = [
        redis.asyncio.cluster.PipelineCommand(i, *args, **options)
        for i, (args, options) in enumerate(commands)
    ]
    await node.execute_pipeline(sent)
    return [command.result for command in sent]
