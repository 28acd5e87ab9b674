"""Pipelines written as they are packed (`wheelq.store.executor.stream`), on a real server: the
replies come in the calls' order with an error reply in its call's place, through the
executors too; and a pipeline that fails after its first write leaves no reply behind for
the connection's next user (its connection is closed, not returned half-read).

The half-read case holds a reply back on purpose: the pipeline's first call is a BLPOP
that answers 0.3 s later, so the reply is not yet there when the connection is next
taken from the pool (redis-py's own check on taking it would catch one already there)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
import redis.asyncio
from redis.exceptions import DataError, ResponseError

from tests.support.waiting import eventually
from wheelq.store import executor as streamed
from wheelq.store.call import Call
from wheelq.store.executor import AsyncExecutor, SyncExecutor

pytestmark = pytest.mark.both_servers  # the protocol: pipelined replies

BIG = b"v" * (streamed.WRITE_BYTES // 4)  # four calls fill a write


def mixed_calls(topic: str) -> tuple[list[Call[Any]], list[Any]]:
    """Many SETs over several writes, an INCR of a non-number, GETs back: (calls, replies
    expected, an error reply as ResponseError)."""
    calls: list[Call[Any]] = []
    expected: list[Any] = []
    for n in range(20):
        calls.append(Call(command=("SET", f"{topic}:{n}", BIG + str(n).encode())))
        expected.append(True)
    calls.append(Call(command=("INCR", f"{topic}:3")))
    expected.append(ResponseError)
    for n in range(20):
        calls.append(Call(command=("GET", f"{topic}:{n}")))
        expected.append(BIG + str(n).encode())
    return calls, expected


def check(replies: list[Any], expected: list[Any]) -> None:
    assert len(replies) == len(expected)
    for reply, want in zip(replies, expected, strict=True):
        if want is ResponseError:
            assert isinstance(reply, ResponseError)
        else:
            assert reply == want


def half_sent(topic: str) -> list[Call[Any]]:
    """A call answered 0.3 s late, a write's worth, then a call that cannot be packed."""
    return [
        Call(command=("BLPOP", f"{topic}:never", 0.3)),
        *[Call(command=("SET", f"{topic}:big{n}", BIG)) for n in range(5)],
        Call(command=("SET", f"{topic}:bad", {"a dict": "cannot be packed"})),  # type: ignore[arg-type]
    ]


def test_replies_come_in_order_with_an_error_in_its_calls_place(redis_url: str, topic: str) -> None:
    calls, expected = mixed_calls(topic)
    with redis.Redis.from_url(redis_url) as client:
        check(streamed.stream(client, calls), expected)
        check(SyncExecutor(client).run(calls, return_exceptions=True), expected)


async def test_async_replies_come_in_order_with_an_error_in_its_calls_place(
    redis_url: str, topic: str
) -> None:
    calls, expected = mixed_calls(topic)
    client = redis.asyncio.Redis.from_url(redis_url)
    try:
        check(await streamed.stream_async(client, calls), expected)
        check(await AsyncExecutor(client).run(calls, return_exceptions=True), expected)
    finally:
        await client.aclose()


def test_a_pipeline_failing_after_its_first_write_leaves_no_reply_behind(
    redis_url: str, topic: str
) -> None:
    with redis.Redis.from_url(redis_url, max_connections=1) as client:
        client.set(f"{topic}:probe", b"mine")
        with pytest.raises(DataError):
            streamed.stream(client, half_sent(topic))
        assert client.get(f"{topic}:probe") == b"mine"  # not the BLPOP's nil


async def test_async_a_pipeline_failing_after_its_first_write_leaves_no_reply_behind(
    redis_url: str, topic: str
) -> None:
    client = redis.asyncio.Redis.from_url(redis_url, max_connections=1)
    try:
        await client.set(f"{topic}:probe", b"mine")
        with pytest.raises(DataError):
            await streamed.stream_async(client, half_sent(topic))
        assert await client.get(f"{topic}:probe") == b"mine"
    finally:
        await client.aclose()


async def test_async_a_pipeline_cancelled_while_reading_leaves_no_reply_behind(
    redis_url: str, topic: str
) -> None:
    name = f"{topic}-reader"
    client = redis.asyncio.Redis.from_url(redis_url, max_connections=1, client_name=name)
    watcher = redis.asyncio.Redis.from_url(redis_url)
    try:
        await client.set(f"{topic}:probe", b"mine")
        calls = [Call(command=("BLPOP", f"{topic}:never", 0.3)), Call(command=("PING",))]
        task = asyncio.create_task(streamed.stream_async(client, calls))

        async def blocked() -> bool:
            listed = await watcher.client_list()
            return any(c["name"] == name and c["cmd"] == "blpop" for c in listed)

        await eventually(blocked, timeout_s=5, what="the pipeline's BLPOP on the server")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await client.get(f"{topic}:probe") == b"mine"
    finally:
        await client.aclose()
        await watcher.aclose()
