"""The executors: they send a list of calls (`wheelq.store.call.Call`) in one pipeline and
return the parsed replies in order.

`plan` is the sans-I/O re-send plan (MOVED, NOSCRIPT, TRYAGAIN/ASK, slot-map reload) that
`SyncExecutor` and `AsyncExecutor` drive; a call whose connection broke may have run, so it
is raised, never re-sent (docs/architecture.md, invariant 18).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar, assert_never

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from redis.commands.cluster import READ_COMMANDS
from redis.exceptions import (
    AskError,
    ClusterDownError,
    ClusterError,
    MaxConnectionsError,
    MovedError,
    NoScriptError,
    RedisError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from wheelq.errors import InvalidArgumentError
from wheelq.store import acked
from wheelq.store.call import Call, finish
from wheelq.store.scripts import script

T = TypeVar("T")
G = TypeVar("G")


class Executor(Protocol):
    """What the services send their calls through (`AsyncExecutor`, or a fake in tests)."""

    async def run(
        self, calls: Sequence[Call[Any]], *, return_exceptions: bool = False
    ) -> list[Any]: ...

    def node_of(self, key: str) -> str:
        """The server that serves `key` ("" where there is one server, or it is unknown)."""
        ...


# --- what a reply means -----------------------------------------------------------------------

TOPOLOGY_ERRORS = (RedisConnectionError, RedisTimeoutError, ClusterDownError, SlotNotCoveredError)
"""Failures after which a cluster client's slot map may be out of date."""

SETTLE_S = 2.0
"""How long calls refused during a slot move are re-sent (past redis-py's own redirects),
and a call refused unsent because every connection its client may open to the server was
in use (`MaxConnectionsError`: redis-py's pools past `max_connections`; see `_gate`)."""
SETTLE_PAUSE_S = 0.05


def noscript(reply: Any) -> bool:
    return isinstance(reply, NoScriptError)


def moved(reply: Any) -> bool:
    return isinstance(reply, MovedError)


def unsettled(reply: Any) -> bool:
    """A cluster moving a slot refused it (TRYAGAIN, or redis-py's "TTL exhausted"), or the
    call found no free connection to its node and was not sent."""
    return (
        isinstance(reply, TryAgainError | AskError | MaxConnectionsError)
        or type(reply) is ClusterError
    )


def to_redo(replies: list[Any], which: Callable[[Any], bool]) -> list[int]:
    return [i for i, r in enumerate(replies) if which(r)]


def may_resend(exc: BaseException, calls: Sequence[Call[Any]]) -> bool:
    """Whether `calls` may go again after a slot-map reload: all read-only, or one refused call."""
    if all(c.script is None and str(c.command[0]).upper() in READ_COMMANDS for c in calls):
        return True
    if len(calls) != 1 or not isinstance(exc, RedisConnectionError):
        return False
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ConnectionRefusedError):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def apart(calls: Sequence[Call[Any]], cluster: bool) -> tuple[list[int], list[int]]:
    """On a cluster, the indices of the keyless calls and of the others; elsewhere None."""
    if not cluster or len(calls) == 1 or not any(c.keyless for c in calls):
        return [], []
    alone = [i for i, c in enumerate(calls) if c.keyless]
    return alone, [i for i, c in enumerate(calls) if not c.keyless]


# --- the re-send plan -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Pipeline:
    """Send `calls` in one round trip; the reply: their raw replies, errors in place."""

    calls: Sequence[Call[Any]]


@dataclass(frozen=True, slots=True)
class Load:
    """Load a script's `source` (after NOSCRIPT); the reply: its SHA1."""

    source: str


@dataclass(frozen=True, slots=True)
class Pause:
    """Wait `seconds` before calls go again (TRYAGAIN, a slot migrating)."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Reload:
    """Reload the slot map; the reply: whether it is fresh now."""


@dataclass(frozen=True, slots=True)
class Switch:
    """After MOVED, take the cluster client; the reply: whether calls may go again."""


Request = Pipeline | Load | Pause | Reload | Switch
Steps = Generator[Request, Any, list[Any]]


def plan(calls: Sequence[Call[Any]], cluster: Callable[[], bool]) -> Steps:
    """Send `calls` (two round trips on NOSCRIPT); returns their raw replies.

    Scripts go as EVALSHA and NOSCRIPT is handled here: redis-py's pipeline script handling
    costs a SCRIPT EXISTS round trip on every execute.
    """
    try:
        replies = yield from _send(calls, cluster)
    except TOPOLOGY_ERRORS as exc:
        if not ((yield Reload()) and may_resend(exc, calls)):
            raise
        replies = yield from _send(calls, cluster)  # reads, or its node was not reached
    if not any(isinstance(r, Exception) for r in replies):
        return replies  # the usual case: nothing to redo
    if any(isinstance(r, TOPOLOGY_ERRORS) for r in replies):
        yield Reload()
    if (redirected := to_redo(replies, moved)) and (yield Switch()):
        yield from _redo(calls, replies, redirected, cluster)
    if retry := to_redo(replies, noscript):
        for name in {calls[i].script for i in retry}:
            yield Load(script(name or "").source)
        yield from _redo(calls, replies, retry, cluster)
    settled_by = time.monotonic() + SETTLE_S
    while (refused := to_redo(replies, unsettled)) and time.monotonic() < settled_by:
        yield Pause(SETTLE_PAUSE_S)
        yield from _redo(calls, replies, refused, cluster)
    return replies


def _send(calls: Sequence[Call[Any]], cluster: Callable[[], bool]) -> Steps:
    alone, piped = apart(calls, cluster())
    if not alone:
        sent: list[Any] = yield Pipeline(calls)
        return sent
    replies: list[Any] = [None] * len(calls)
    for i in alone:
        (replies[i],) = yield Pipeline([calls[i]])
    if piped:
        yield from _redo(calls, replies, piped, cluster)
    return replies


def _redo(
    calls: Sequence[Call[Any]], replies: list[Any], which: list[int], cluster: Callable[[], bool]
) -> Generator[Request, Any, None]:
    got = yield from _send([calls[i] for i in which], cluster)
    for i, reply in zip(which, got, strict=True):
        replies[i] = reply


async def drive_async(steps: Generator[Any, Any, T], do: Callable[[Any], Awaitable[Any]]) -> T:
    """Run a sans-I/O plan to its end: `do` each request, send back its reply or throw in its
    error; the plan is closed however the run ends."""
    try:
        request = next(steps)
        while True:
            try:
                reply = await do(request)
            except Exception as exc:
                request = steps.throw(exc)
            else:
                request = steps.send(reply)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    finally:
        steps.close()


def drive(steps: Generator[Any, Any, T], do: Callable[[Any], Any]) -> T:
    """`drive_async` with a blocking `do`: its twin, kept because running `drive_async` to its
    end costs a call twice as much (docs/architecture.md, "Fast paths"; a unit test holds the
    two to the same answers)."""
    try:
        request = next(steps)
        while True:
            try:
                reply = do(request)
            except Exception as exc:
                request = steps.throw(exc)
            else:
                request = steps.send(reply)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    finally:
        steps.close()


# --- pipelines written as they are packed ---------------------------------------------------
#
# redis-py's pipeline packs every command before it writes the first byte; here each call is
# written once `WRITE_BYTES` have gathered, so the server runs the first calls while the
# client packs the next (docs/architecture.md, "Data flow"). If anything goes wrong
# between the first write and the last reply, the connection is closed, not returned
# half-read. A cluster client keeps redis-py's cluster pipeline, which sorts calls by node.

_pack: Callable[[Any], bytes] | None
try:
    import hiredis

    _pack = hiredis.pack_command
except ImportError:  # redis-py's pure-Python packer then
    _pack = None


WRITE_BYTES = 64 * 1024
"""Packed bytes gathered before a write."""


def _writes(conn: Any, calls: Sequence[Call[Any]]) -> Any:
    """`calls` packed, in writes of at least `WRITE_BYTES`.

    A script call goes straight to hiredis's packer: redis-py's wrapper costs half the packing.
    """
    buffered: list[bytes | memoryview] = []
    size = 0
    for call in calls:
        if call.script is not None and _pack is not None:
            packed = [_pack(call.wire())]
        else:
            packed = conn.pack_command(*call.wire())
        for chunk in packed:
            buffered.append(chunk)
            size += len(chunk)
        if size >= WRITE_BYTES:
            yield buffered
            buffered, size = [], 0
    if buffered:
        yield buffered


def stream(client: Any, calls: Sequence[Call[Any]]) -> list[Any]:
    """Send `calls` on one connection of `client` as they are packed; error replies in place."""
    pool: Any = client.connection_pool  # redis-py's connection layer is untyped
    try:
        conn = pool.get_connection()
    except TypeError:  # redis-py < 5.3 wants a command name
        conn = pool.get_connection("EVALSHA")
    try:
        for n, data in enumerate(_writes(conn, calls)):
            conn.send_packed_command(data, check_health=n == 0)
        replies: list[Any] = []
        for call in calls:
            try:
                replies.append(client.parse_response(conn, call.name, **call.options))
            except ResponseError as exc:
                replies.append(exc)
    except BaseException:
        conn.disconnect()
        raise
    finally:
        pool.release(conn)
    return replies


async def stream_async(client: Any, calls: Sequence[Call[Any]]) -> list[Any]:
    pool: Any = client.connection_pool
    try:
        conn = await pool.get_connection()
    except TypeError:  # redis-py < 5.3 wants a command name
        conn = await pool.get_connection("EVALSHA")
    try:
        for n, data in enumerate(_writes(conn, calls)):
            await conn.send_packed_command(data, check_health=n == 0)
        replies: list[Any] = []
        for call in calls:
            try:
                replies.append(await client.parse_response(conn, call.name, **call.options))
            except ResponseError as exc:
                replies.append(exc)
    except BaseException:
        await conn.disconnect()
        raise
    finally:
        await pool.release(conn)
    return replies


# --- how long one call may block ----------------------------------------------------------------

SOCKET_TIMEOUT_S = 5.0
"""The socket timeout of wheelq's connections unless ``redis_options`` sets one (redis-py 8's
default, made wheelq's whatever redis-py is installed: a connection that stops answering is
given up within it; see `wheelq.store.connect`)."""

BLOCK_SHARE = 0.5
"""A blocking call (XREAD(GROUP) BLOCK, WAIT) asks at most this share of its connection's
socket timeout: the rest is the round trip's and a busy process's, so an idle block never
reads as a dead server (2.5 s of the default 5; a worker's default block is 2 s)."""

MIN_BLOCK_MS = 10
"""The shortest block a call is cut to, however short the socket timeout."""


def socket_timeout_s(client: Any) -> float | None:
    """The socket timeout of `client`'s connections (None: none), plain or cluster."""
    manager = getattr(client, "nodes_manager", None)
    kwargs = (
        manager.connection_kwargs
        if manager is not None
        else client.connection_pool.connection_kwargs
    )
    timeout = kwargs.get("socket_timeout", SOCKET_TIMEOUT_S)
    return None if timeout is None else float(timeout)


def block_limit_ms(client: Any) -> int | None:
    """The longest block one call may ask on `client`'s connections (None: no limit)."""
    timeout = socket_timeout_s(client)
    return None if timeout is None else max(MIN_BLOCK_MS, int(timeout * 1000 * BLOCK_SHARE))


def connection_limit(client: Any) -> int:
    """The most connections `client` opens to one server: its pool's `max_connections`, or
    a cluster node's (unbounded where it cannot be read)."""
    if isinstance(client, redis.asyncio.cluster.RedisCluster):
        limit = client.get_connection_kwargs().get("max_connections")
    elif isinstance(client, redis.cluster.RedisCluster):
        node = client.get_default_node()  # type: ignore[no-untyped-call]
        pool = getattr(getattr(node, "redis_connection", None), "connection_pool", None)
        limit = getattr(pool, "max_connections", None)
    else:
        limit = getattr(client.connection_pool, "max_connections", None)
    return limit if isinstance(limit, int) and limit > 0 else 2**31


# --- the drivers ------------------------------------------------------------------------------

C = TypeVar("C", redis.Redis, redis.asyncio.Redis)


class _Executor(Generic[C]):
    """What both drivers hold: the client, and the cluster client that may replace it."""

    _CLUSTER: ClassVar[type]

    def __init__(self, client: C, to_cluster: Callable[[], C] | None) -> None:
        self.client: C = client
        self._to_cluster: Callable[[], C] | None = to_cluster
        self._retired: list[C] = []  # replaced clients: closed on close, others may use them
        self._switching = threading.Lock()
        self._probed: set[str] = set()  # nodes fit for WAITAOF (see wheelq.store.acked)
        self._reloads = 0  # slot map reloads after a failure, so one failure wave costs one
        self._gated: tuple[C, Any] | None = None  # the client, and `_gate`'s semaphore for it

    def _gate(self, semaphore: Callable[[int], G]) -> G:
        """How many calls may be in flight at once: the client's connections to one server.

        A call holds at most one connection of each server it goes to, so with this many
        in flight none is refused one. A blocking read is not counted (`Call.blocks`): it
        would hold a turn for its whole block time, and a cluster worker's one a shard
        could take them all. redis-py's pools (and a cluster client's, per node)
        refuse a call past `max_connections` (MaxConnectionsError; 100 by default since
        redis-py 6) where a blocking pool would wait: a server that stalls with more calls
        than that in flight would fail the rest at once. Here they wait their turn.
        """
        if self._gated is None or self._gated[0] is not self.client:  # made, or switched
            self._gated = (self.client, semaphore(connection_limit(self.client)))
        return self._gated[1]

    @property
    def cluster(self) -> bool:
        return isinstance(self.client, self._CLUSTER)

    def block_ms(self, wanted_ms: int) -> int:
        """`wanted_ms` cut to the longest block one call may ask here (`block_limit_ms`): a
        blocking read asks this, and a caller that wants longer reads again."""
        limit = block_limit_ms(self.client)
        return wanted_ms if limit is None else min(wanted_ms, limit)

    def _options(self, call: Call[Any]) -> Mapping[str, Any]:
        """`call`'s options for redis-py: on a cluster, a routed call names its target node."""
        if call.route is None or not self.cluster:
            return call.options
        client: Any = self.client
        node = client.nodes_manager.get_node_from_slot(client.keyslot(call.route))
        return {**call.options, "target_nodes": node}

    def node_of(self, key: str) -> str:
        """The name of the server that serves `key` in the client's slot map ("" on a single
        server, or while the map does not cover its slot)."""
        if not self.cluster:
            return ""
        client: Any = self.client
        try:
            return str(client.nodes_manager.get_node_from_slot(client.keyslot(key)).name)
        except (RedisError, LookupError):
            return ""

    def _switched(self, sent_with: C) -> bool:
        """After MOVED replies: whether the cluster client has replaced `sent_with`."""
        with self._switching:
            if self.client is not sent_with:
                return True
            if self._to_cluster is None:
                return False
            self._retired.append(self.client)
            self.client, self._to_cluster = self._to_cluster(), None
            return True


class SyncExecutor(_Executor[redis.Redis]):
    """Runs calls on a `redis.Redis` client (or a `redis.cluster.RedisCluster`).

    `to_cluster`, given when the URL may name a cluster node, makes the cluster client that
    replaces `client` on the first MOVED reply.
    """

    _CLUSTER = redis.cluster.RedisCluster

    def __init__(
        self, client: redis.Redis, *, to_cluster: Callable[[], redis.Redis] | None = None
    ) -> None:
        super().__init__(client, to_cluster)
        self._nodes = SeenNodes()

    def run(self, calls: Sequence[Call[Any]], *, return_exceptions: bool = False) -> list[Any]:
        """Send `calls` in one round trip (two on NOSCRIPT); return the parsed replies."""
        if len(calls) == 1 and calls[0].blocks:  # bounded where it is made (`Call.blocks`)
            return self._run(calls, return_exceptions)
        with self._gate(threading.Semaphore):
            return self._run(calls, return_exceptions)

    def _run(self, calls: Sequence[Call[Any]], return_exceptions: bool) -> list[Any]:
        sent_with, reloads = self.client, self._reloads

        def do(request: Request) -> Any:
            match request:
                case Pipeline(sent):
                    return self._pipeline(sent)
                case Load(source):
                    return self.client.script_load(source)
                case Pause(seconds):
                    return time.sleep(seconds)
                case Reload():
                    return self._reload_slots(sent_with, reloads)
                case Switch():
                    return self._switched(sent_with)
                case _:
                    assert_never(request)

        replies = drive(plan(calls, lambda: self.cluster), do)
        return finish(calls, replies, return_exceptions)

    def _pipeline(self, calls: Sequence[Call[Any]]) -> list[Any]:
        if len(calls) == 1:
            try:
                options = self._options(calls[0])
                return [self.client.execute_command(*calls[0].wire(), **options)]  # type: ignore[no-untyped-call]
            except (ResponseError, ClusterError, MaxConnectionsError) as exc:
                return [exc]  # as in a pipeline, errors go in place (a call refused unsent too)
        if not self.cluster:
            return stream(self.client, calls)
        pipe = self.client.pipeline(transaction=False)
        for call in calls:
            pipe.execute_command(*call.wire(), **call.options)  # type: ignore[no-untyped-call]
        return list(pipe.execute(raise_on_error=False))

    def _reload_slots(self, sent_with: redis.Redis, reloads: int) -> bool:
        """Reload the cluster's slot map unless another call has since; whether it is fresh."""
        if not isinstance(sent_with, redis.cluster.RedisCluster):
            return False
        with self._switching:
            if self._reloads != reloads:
                return True
            self._reloads += 1
            self._nodes.note(sent_with)
            try:
                sent_with.nodes_manager.initialize()
            except Exception:  # the call's own error is what the caller gets
                return False
            return True

    def close(self) -> None:
        """Close the client, the plain one it replaced, and every cluster node's pool."""
        self._nodes.note(self.client)
        for client in (*self._retired, self.client):
            client.close()
        self._nodes.close_sync()

    def run_acked(self, calls: Sequence[Call[Any]], wait: acked.Wait) -> acked.Acked:
        """Send `calls`, each followed by `wait` on its node's connection (`wheelq.store.acked`)."""
        with self._gate(threading.Semaphore):
            return self._run_acked(calls, wait)

    def _run_acked(self, calls: Sequence[Call[Any]], wait: acked.Wait) -> acked.Acked:
        steps = acked.plan(calls, wait, lambda key: acked.node_of(self.client, key), self._probed)
        sent_with, reloads = self.client, self._reloads

        def do(request: acked.Request) -> Any:
            if request is acked.REFRESH:
                return self._refresh()
            return [acked.send(self.client, *sent) for sent in request]

        try:
            replies, short = drive(steps, do)
        except TOPOLOGY_ERRORS:
            self._reload_slots(sent_with, reloads)
            raise
        return acked.Acked(finish(calls, replies, False), short)

    def _refresh(self) -> bool:
        """Switch to the cluster client, or reload its slot map; False when neither can."""
        if self._switched(self.client):  # the plain client is retired: others may use it
            return True
        if isinstance(self.client, redis.cluster.RedisCluster):
            self._nodes.note(self.client)
            self.client.nodes_manager.initialize()
            return True
        return False


class SeenNodes:
    """Every node a cluster client has seen, so closing closes those a reload dropped, and
    the pools of those it kept: redis-py's cluster `close` leaves each node's pool open (its
    `Redis` does not own the pool), and their sockets are then freed unclosed."""

    def __init__(self) -> None:
        self._nodes: dict[int, Any] = {}

    def note(self, client: object) -> None:
        if isinstance(client, redis.asyncio.cluster.RedisCluster | redis.cluster.RedisCluster):
            self._nodes.update((id(n), n) for n in client.nodes_manager.nodes_cache.values())

    async def close(self) -> None:
        for node in self._nodes.values():
            with contextlib.suppress(RedisError, OSError):
                await node.disconnect()
        self._nodes.clear()

    def abort(self) -> None:
        """Close the nodes' sockets now, waiting for none (`AsyncExecutor.abort`)."""
        for node in self._nodes.values():
            for connection in getattr(node, "_connections", ()):
                close = getattr(connection, "_close", None)
                if close is not None:
                    close()
        self._nodes.clear()

    def close_sync(self) -> None:
        for node in self._nodes.values():
            if node.redis_connection is not None:
                with contextlib.suppress(RedisError, OSError):
                    node.redis_connection.connection_pool.disconnect()
        self._nodes.clear()


def _connections_of(client: object) -> list[Any]:
    """The connections an asyncio client holds (a cluster client's: every node's, startup
    nodes too), as far as redis-py shows them."""
    if isinstance(client, redis.asyncio.cluster.RedisCluster):
        manager = client.nodes_manager
        nodes = [*manager.nodes_cache.values(), *manager.startup_nodes.values()]
        return [c for node in nodes for c in getattr(node, "_connections", ())]
    pool = getattr(client, "connection_pool", None)
    return [
        *getattr(pool, "_available_connections", ()),
        *getattr(pool, "_in_use_connections", ()),
    ]


def close_sync(client: redis.Redis) -> None:
    """Close a client, with every node's pool when it is a cluster client (`SeenNodes`)."""
    nodes = SeenNodes()
    nodes.note(client)
    client.close()
    nodes.close_sync()


class AsyncExecutor(_Executor[redis.asyncio.Redis]):
    """`SyncExecutor` for a `redis.asyncio.Redis` client (or its cluster client)."""

    _CLUSTER = redis.asyncio.cluster.RedisCluster

    def __init__(
        self,
        client: redis.asyncio.Redis,
        *,
        to_cluster: Callable[[], redis.asyncio.Redis] | None = None,
        make_cluster: Callable[[], redis.asyncio.Redis] | None = None,
    ) -> None:
        super().__init__(client, to_cluster)
        self._make_cluster = make_cluster
        self._reloading = asyncio.Lock()
        self._nodes = SeenNodes()

    def _calls(self) -> asyncio.Semaphore:
        return self._gate(asyncio.Semaphore)

    def cluster_client(self) -> redis.asyncio.Redis | None:
        """A new cluster client of the same URL and options (the caller closes it), or None."""
        return self._make_cluster() if self.cluster and self._make_cluster else None

    async def resolve(self) -> bool:
        """Switch to the cluster client if the server is a cluster node; returns `cluster`.

        Raises:
            InvalidArgumentError: A cluster node, but a plain client made without `to_cluster`.
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
        if len(calls) == 1 and calls[0].blocks:  # bounded where it is made (`Call.blocks`)
            return await self._run(calls, return_exceptions)
        async with self._calls():
            return await self._run(calls, return_exceptions)

    async def _run(self, calls: Sequence[Call[Any]], return_exceptions: bool) -> list[Any]:
        sent_with, reloads = self.client, self._reloads

        async def do(request: Request) -> Any:
            match request:
                case Pipeline(sent):
                    return await self._pipeline(sent)
                case Load(source):
                    return await self.client.script_load(source)
                case Pause(seconds):
                    return await asyncio.sleep(seconds)
                case Reload():
                    return await self._reload_slots(sent_with, reloads)
                case Switch():
                    return self._switched(sent_with)
                case _:
                    assert_never(request)

        replies = await drive_async(plan(calls, lambda: self.cluster), do)
        return finish(calls, replies, return_exceptions)

    async def _pipeline(self, calls: Sequence[Call[Any]]) -> list[Any]:
        if len(calls) == 1:
            try:
                if calls[0].route is not None and self.cluster:
                    await self.client.initialize()  # the slot map (a no-op once loaded)
                options = self._options(calls[0])
                return [await self.client.execute_command(*calls[0].wire(), **options)]  # type: ignore[no-untyped-call]
            except (ResponseError, ClusterError, MaxConnectionsError) as exc:
                return [exc]  # as in a pipeline, errors go in place (a call refused unsent too)
        if not self.cluster:
            return await stream_async(self.client, calls)
        pipe = self.client.pipeline(transaction=False)
        for call in calls:
            pipe.execute_command(*call.wire(), **call.options)
        return list(await pipe.execute(raise_on_error=False))

    async def _reload_slots(self, sent_with: redis.asyncio.Redis, reloads: int) -> bool:
        if not isinstance(sent_with, redis.asyncio.cluster.RedisCluster):
            return False
        async with self._reloading:
            if self._reloads != reloads:
                return True
            self._reloads += 1
            return await self._reload(sent_with)

    async def _reload(self, cluster: redis.asyncio.cluster.RedisCluster) -> bool:
        self._nodes.note(cluster)
        try:
            await cluster.nodes_manager.initialize()
        except Exception:  # the call's own error is what the caller gets
            return False
        self._nodes.note(cluster)
        return True

    async def aclose(self) -> None:
        """Close the client, the plain one it replaced, and the nodes that left the slot map."""
        self._nodes.note(self.client)
        for client in (*self._retired, self.client):
            await client.aclose()
        await self._nodes.close()

    def abort(self) -> None:
        """Close every socket of the clients now, waiting for none: what a close cut short
        (out of time, `wheelq.runtime.outage.close`) leaves open, a later GC would find
        open and warn about."""
        for client in (*self._retired, self.client):
            self._nodes.note(client)
            for connection in _connections_of(client):
                close = getattr(connection, "_close", None)  # redis-py's close without a wait
                if close is not None:
                    close()
            if isinstance(client, redis.asyncio.cluster.RedisCluster):
                client._initialize = True  # closed: what its `aclose` marks first, as here
        self._nodes.abort()

    async def run_acked(self, calls: Sequence[Call[Any]], wait: acked.Wait) -> acked.Acked:
        async with self._calls():
            return await self._run_acked(calls, wait)

    async def _run_acked(self, calls: Sequence[Call[Any]], wait: acked.Wait) -> acked.Acked:
        if isinstance(self.client, redis.asyncio.cluster.RedisCluster):
            await self.client.initialize()  # the slot map (a no-op once loaded)
        steps = acked.plan(calls, wait, lambda key: acked.node_of(self.client, key), self._probed)
        sent_with, reloads = self.client, self._reloads

        async def do(request: acked.Request) -> Any:
            if request is acked.REFRESH:
                return await self._refresh()
            sends = (acked.send_async(self.client, *sent) for sent in request)
            return list(await asyncio.gather(*sends))

        try:
            replies, short = await drive_async(steps, do)
        except TOPOLOGY_ERRORS:
            await self._reload_slots(sent_with, reloads)
            raise
        return acked.Acked(finish(calls, replies, False), short)

    async def _refresh(self) -> bool:
        if self._switched(self.client):  # the plain client is retired: others may use it
            await self.client.initialize()
            return True
        if isinstance(self.client, redis.asyncio.cluster.RedisCluster):
            return await self._reload(self.client)
        return False
