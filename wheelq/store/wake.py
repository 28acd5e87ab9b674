"""The wake channels over pub/sub: the subscription the scheduler's wake listener reads.

A script that writes a job inside a leader's preloaded window publishes the
job's note (``"<due ms>:<job id>"``, `wheelq.core.wire.parse_note`) on the
shard's wake channel (`wheelq.core.keys.ShardKeys.wake_channel`). This module
builds the subscription's commands (SUBSCRIBE, UNSUBSCRIBE, reading
messages) and turns messages into `WakeNote`s; what is done with them is the
listener's business. Pub/sub only makes the pick-up prompt: the inbox holds
the same notes durably.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, NamedTuple

import redis.asyncio

from wheelq.core.wire import parse_note


class WakeNote(NamedTuple):
    """A job announced on a wake channel (a tuple: cheap to make, one per message)."""

    channel: str
    job_id: str
    due_ms: int


def wake_note(message: Any) -> WakeNote | None:
    """A pub/sub message as a `WakeNote`; None for anything else (a subscribe confirmation,
    a message that is not a note)."""
    if not isinstance(message, dict) or message.get("type") != "message":
        return None
    channel, data = message.get("channel"), message.get("data")
    if not isinstance(channel, bytes) or not isinstance(data, bytes):
        return None
    note = parse_note(data)
    if note is None:
        return None
    return WakeNote(channel.decode("utf-8", "replace"), *note)


class WakeSubscription:
    """One pub/sub connection following a changing set of wake channels.

    Args:
        connection: The client to take the pub/sub connection from (it needs a
            connection of its own while subscribed).
    """

    def __init__(self, connection: redis.asyncio.Redis) -> None:
        self._pubsub = connection.pubsub(ignore_subscribe_messages=True)
        self.channels: frozenset[str] = frozenset()
        """The channels subscribed to."""

    async def follow(self, channels: Collection[str]) -> None:
        """Subscribe to `channels` not subscribed yet, unsubscribe from the others."""
        wanted = frozenset(channels)
        if wanted - self.channels:
            await self._pubsub.subscribe(*(wanted - self.channels))
        if self.channels - wanted:
            await self._pubsub.unsubscribe(*(self.channels - wanted))
        self.channels = wanted

    async def receive(self, timeout_s: float) -> list[WakeNote]:
        """Wait up to `timeout_s` for a message; return the notes of it and of every message
        already arrived after it."""
        notes: list[WakeNote] = []
        message = await self._pubsub.get_message(timeout=timeout_s)
        while message is not None:
            if (note := wake_note(message)) is not None:
                notes.append(note)
            message = await self._pubsub.get_message(timeout=0)
        return notes

    async def aclose(self) -> None:
        """Close the pub/sub connection."""
        await self._pubsub.aclose()  # type: ignore[no-untyped-call]
