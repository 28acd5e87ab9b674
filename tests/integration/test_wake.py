"""The wake subscription on a real server: it follows a changing set of channels and turns
the notes scripts publish into `WakeNote`s, ignoring anything else on the channel."""

from __future__ import annotations

import pytest
import redis.asyncio

from tests.support.waiting import eventually
from wheelq.core.due import DueSpec
from wheelq.core.job import Envelope
from wheelq.core.keys import ShardKeys
from wheelq.store import enqueue
from wheelq.store.executor import AsyncExecutor
from wheelq.store.wake import WakeNote, WakeSubscription

pytestmark = pytest.mark.both_servers  # pub/sub

MINUTE_MS = 60_000


async def subscribers(r: redis.asyncio.Redis, channel: str) -> int:
    [(_, count)] = await r.pubsub_shardnumsub(channel)
    return int(count)


async def test_receives_the_notes_enqueue_publishes_and_ignores_other_messages(
    redis_async: redis.asyncio.Redis, topic: str
) -> None:
    keys = ShardKeys(topic, 1)
    subscription = WakeSubscription(redis_async)
    try:
        await subscription.follow([keys.wake_channel])
        await eventually(
            lambda: subscribers(redis_async, keys.wake_channel), timeout_s=5, what="subscribed"
        )
        sec, _ = await redis_async.time()
        due = int(sec) * 1000 + MINUTE_MS
        await redis_async.set(keys.horizon, due + MINUTE_MS)
        await redis_async.spublish(keys.wake_channel, b"not a note")
        await redis_async.spublish(keys.wake_channel, b"12x:id")
        write = enqueue.JobWrite("j1", DueSpec("at", due), False, Envelope(b"\xa1p").pack())
        await AsyncExecutor(redis_async).run([enqueue.enqueue(keys, [write])])
        batch = [  # one call, one message: a note each
            enqueue.JobWrite(f"b{i}", DueSpec("at", due + i), False, Envelope(b"\xa1p").pack())
            for i in range(3)
        ]
        await AsyncExecutor(redis_async).run([enqueue.enqueue(keys, batch)])

        received: list[WakeNote] = []

        async def got_the_notes() -> bool:
            received.extend(await subscription.receive(0.1))
            return any(note.job_id == "b2" for note in received)

        await eventually(got_the_notes, timeout_s=5, what="the enqueued jobs' notes")
    finally:
        await subscription.aclose()

    assert received == [
        WakeNote(keys.wake_channel, "j1", due),
        *(WakeNote(keys.wake_channel, f"b{i}", due + i) for i in range(3)),
    ]


async def test_follow_subscribes_and_unsubscribes_to_match_the_set_given(
    redis_async: redis.asyncio.Redis, topic: str
) -> None:
    a, b = (ShardKeys(topic, s).wake_channel for s in (0, 1))
    subscription = WakeSubscription(redis_async)
    try:
        await subscription.follow([a, b])
        await eventually(lambda: subscribers(redis_async, b), timeout_s=5, what="b subscribed")
        await subscription.follow([b])

        async def only_b() -> bool:
            counts = await subscribers(redis_async, a), await subscribers(redis_async, b)
            return counts == (0, 1)

        await eventually(only_b, timeout_s=5, what="a unsubscribed, b kept")
        assert subscription.channels == {b}
    finally:
        await subscription.aclose()
