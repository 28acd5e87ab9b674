"""The wake listener against a fake pub/sub connection: it follows the led shards' channels,
puts announced jobs of led shards in the wheel and ignores the rest, and after a failed
subscription shows the failure until a new subscription is up."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import pytest
import redis.asyncio
from redis.exceptions import ConnectionError as RedisConnectionError

from tests.support.node_context import START_MS, NodeParts, keys
from tests.support.waiting import until
from wheelq.scheduler.preloader import WakeListener
from wheelq.scheduler.wheel_driver import WheelDriver
from wheelq.store.executor import AsyncExecutor

Message = dict[str, Any] | BaseException


class FakePubSub:
    """A subscription: `messages` are what `get_message` returns (an exception is raised)."""

    def __init__(self, ready: asyncio.Event) -> None:
        self.channels: set[str] = set()
        self.messages: asyncio.Queue[Message] = asyncio.Queue()
        self.closed = False
        self._ready = ready

    async def ssubscribe(self, *channels: str) -> None:
        await self._ready.wait()
        self.channels.update(channels)
        for channel in channels:  # the server confirms each
            self.messages.put_nowait(confirmation("ssubscribe", channel, len(self.channels)))

    async def sunsubscribe(self, *channels: str) -> None:
        self.channels.difference_update(channels)
        for channel in channels:
            self.messages.put_nowait(confirmation("sunsubscribe", channel, len(self.channels)))

    async def get_message(self, timeout: float | None = None) -> dict[str, Any] | None:
        try:
            message = await asyncio.wait_for(self.messages.get(), timeout or 0.001)
        except TimeoutError:
            return None
        if isinstance(message, BaseException):
            raise message
        return message

    async def aclose(self) -> None:
        self.closed = True


class FakeConnection:
    """Hands out a new `FakePubSub` per subscription; `ready` holds SSUBSCRIBE back."""

    def __init__(self) -> None:
        self.subscriptions: list[FakePubSub] = []
        self.ready = asyncio.Event()
        self.ready.set()

    def pubsub(self, **options: Any) -> FakePubSub:
        assert options == {"ignore_subscribe_messages": False}, "confirmations are read"
        self.subscriptions.append(FakePubSub(self.ready))
        return self.subscriptions[-1]

    @property
    def current(self) -> FakePubSub:
        return self.subscriptions[-1]


def note(channel: str, data: bytes) -> dict[str, Any]:
    return {"type": "smessage", "pattern": None, "channel": channel.encode(), "data": data}


def confirmation(kind: str, channel: str, count: int) -> dict[str, Any]:
    return {"type": kind, "pattern": None, "channel": channel.encode(), "data": count}


@pytest.fixture
def parts() -> NodeParts:
    return NodeParts.make()


@asynccontextmanager
async def listening(
    parts: NodeParts,
) -> AsyncIterator[tuple[FakeConnection, WakeListener, WheelDriver]]:
    """A started wake listener on a `FakeConnection`, once it has subscribed; stopped after."""
    connection = FakeConnection()
    driver = WheelDriver(parts.ctx)
    follows: list[list[bool]] = []
    wake = WakeListener(
        AsyncExecutor(cast(redis.asyncio.Redis, connection)),
        parts.leads,
        driver,
        parts.clock,
        max_pause_ms=10,
        on_follow=lambda: follows.append([lead.followed for lead in parts.leads.all()]),
    )
    await wake.start()
    try:
        await until(
            lambda: connection.subscriptions and connection.current.channels, what="SSUBSCRIBE"
        )
        yield connection, wake, driver
    finally:
        await wake.stop()


async def test_puts_announced_jobs_of_led_shards_in_the_wheel(parts: NodeParts) -> None:
    lead = parts.lead(0)
    async with listening(parts) as (connection, _, driver):
        pubsub = connection.current
        assert pubsub.channels == {keys(0).wake_channel}
        for message in (
            note(keys(1).wake_channel, f"{START_MS + 5}:not-led".encode()),
            note(keys(0).wake_channel, b"soon:bad-due"),
            note(keys(0).wake_channel, b"\xff\xfe"),
            note(keys(0).wake_channel, f"{START_MS + 7}:job-1".encode()),
        ):
            pubsub.messages.put_nowait(message)
        await until(lambda: (lead.slot, "job-1") in driver.wheel, what="job-1 in the wheel")
        assert driver.wheel.due_of((lead.slot, "job-1")) == START_MS + 7
        assert len(driver.wheel) == 1, "notes of shards not led, and malformed ones, are ignored"
    assert connection.current.closed


async def test_follows_the_leads_as_they_change(parts: NodeParts) -> None:
    first = parts.lead(0)
    async with listening(parts) as (connection, wake, _):
        parts.lead(1)
        wake.wake()
        await until(lambda: len(connection.current.channels) == 2, what="a second channel")
        parts.leads.remove(first.keys)
        await until(
            lambda: connection.current.channels == {keys(1).wake_channel}, what="SUNSUBSCRIBE"
        )
        assert len(connection.subscriptions) == 1, "one subscription throughout"


async def test_a_failed_subscription_shows_until_a_new_one_is_up(parts: NodeParts) -> None:
    lead = parts.lead(0)
    async with listening(parts) as (connection, wake, driver):
        connection.ready.clear()  # the next subscription hangs until the server is back
        connection.current.messages.put_nowait(RedisConnectionError("Connection reset by peer"))
        await until(lambda: len(connection.subscriptions) == 2, what="a new subscription")
        assert connection.subscriptions[0].closed
        assert wake.status() == {
            "running": True,
            "failures": 1,
            "last_error": "ConnectionError: Connection reset by peer",
        }
        connection.ready.set()
        await until(lambda: wake.failures == 0, what="the new subscription to be up")
        connection.current.messages.put_nowait(
            note(keys(0).wake_channel, f"{START_MS}:after".encode())
        )
        await until(lambda: (lead.slot, "after") in driver.wheel, what="a job after the fault")


async def test_a_lead_is_followed_once_its_subscription_is_confirmed_and_not_after_a_failure(
    parts: NodeParts,
) -> None:
    lead = parts.lead(0)
    lead.noted, lead.planned_ms = False, START_MS + 60_000
    async with listening(parts) as (connection, _, _):
        await until(lambda: lead.followed, what="the confirmation")
        assert lead.noted and lead.planned_ms == 0, "followed: its inbox is drained at once"
        lead.noted, lead.planned_ms = False, START_MS + 60_000
        connection.ready.clear()
        connection.current.messages.put_nowait(RedisConnectionError("Connection reset by peer"))
        await until(lambda: len(connection.subscriptions) == 2, what="a new subscription")
        assert not lead.followed, "no subscription: notes may be lost, the inbox carries them"
        connection.ready.set()
        await until(lambda: lead.followed, what="the new subscription's confirmation")
        assert lead.noted and lead.planned_ms == 0, "what was published meanwhile is drained"
    assert not lead.followed, "a stopped listener follows nothing"


async def test_a_confirmation_again_on_the_same_subscription_drains_the_inbox(
    parts: NodeParts,
) -> None:
    lead = parts.lead(0)
    async with listening(parts) as (connection, _, _):
        await until(lambda: lead.followed, what="the confirmation")
        lead.noted, lead.planned_ms = False, START_MS + 60_000
        # redis-py re-subscribes by itself after a reconnection: the server confirms again.
        connection.current.messages.put_nowait(confirmation("ssubscribe", keys(0).wake_channel, 1))
        await until(lambda: lead.planned_ms == 0, what="a round at once")
        assert lead.noted and lead.followed


async def test_a_subscription_that_worked_and_broke_is_made_again_without_a_pause(
    parts: NodeParts, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It is the node's liveness connection: other nodes free its leases if it stays gone
    for the failover grace, so it is not held back by a failure pause (a second failure in a
    row is)."""
    pauses: list[float] = []
    pause = WakeListener._pause

    async def spy(self: WakeListener, seconds: float) -> None:
        pauses.append(seconds)
        await pause(self, seconds)

    monkeypatch.setattr(WakeListener, "_pause", spy)
    lead = parts.lead(0)
    async with listening(parts) as (connection, wake, _):
        await until(lambda: lead.followed, what="the confirmation")
        connection.current.messages.put_nowait(RedisConnectionError("Connection reset by peer"))
        await until(lambda: len(connection.subscriptions) == 2, what="a new subscription")
        await until(lambda: lead.followed, what="the new subscription's confirmation")
        assert pauses == [], "made again at once"
        assert wake.status()["failures"] == 0, "counted, and over once the new one works"
