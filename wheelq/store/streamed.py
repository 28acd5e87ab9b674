"""Pipelines written as they are packed: the executors' way to send several calls to one
server (`wheelq.store.sync_executor`, `wheelq.store.async_executor`).

redis-py's pipeline packs every command before it writes the first byte, so the server
waits while the client packs, and the client waits while the server runs. Here each call
is packed and written as soon as `WRITE_BYTES` have gathered, and the replies are read
after the last write: the server runs the first calls (an `enqueue_many`'s script calls of
500 jobs take it milliseconds each) while the client packs the next. One round trip as
before, the same replies in the same order, an error reply in its call's place.

The connection is borrowed from the client's pool for the whole pipeline. If anything
goes wrong between the first write and the last reply (the connection fails, a timeout,
a cancelled task), the connection is closed, not returned half-read: no later call can
read a reply meant for this one. Nothing is sent again (wheelq's clients have no retries).
A cluster client keeps redis-py's cluster pipeline, which sorts calls by node.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from redis.exceptions import ResponseError

from wheelq.store.calls import Call

_pack: Callable[[Any], bytes] | None
try:
    import hiredis

    _pack = hiredis.pack_command
except ImportError:  # redis-py's pure-Python packer then
    _pack = None


WRITE_BYTES = 64 * 1024
"""Packed bytes gathered before a write: few syscalls, and the first call reaches the
server after at most this much packing."""


def _writes(conn: Any, calls: Sequence[Call[Any]]) -> Iterator[list[bytes | memoryview]]:
    """`calls` packed, in writes of at least `WRITE_BYTES` (the last one less).

    A script call goes straight to hiredis's packer (redis-py's own wrapper walks every
    argument in Python first, half the cost of packing an `enqueue_many` call of 500 jobs);
    the arguments are wheelq's (str as UTF-8, bytes, int), as redis-py would send them. Plain
    commands, and every call without hiredis, go through the connection's packer."""
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


def send(client: Any, calls: Sequence[Call[Any]]) -> list[Any]:
    """Send `calls` on a connection of `client` (a `redis.Redis`), writing as they are
    packed; their replies in order, an error reply (`ResponseError`) in its call's place."""
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


async def send_async(client: Any, calls: Sequence[Call[Any]]) -> list[Any]:
    """`send` for an asyncio client (a `redis.asyncio.Redis`)."""
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
