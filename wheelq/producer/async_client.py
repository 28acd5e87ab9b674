"""The asyncio producer client, `AsyncClient`: `Client`'s methods, awaitable."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Iterable, Mapping
from functools import partial
from typing import Any, Self, TypeVar

import redis
import redis.asyncio

from wheelq.core.due import At, Delay, debounce_spec
from wheelq.core.events import Event, EventsConfig
from wheelq.core.flow import TopicLimits
from wheelq.core.history import JobInfo
from wheelq.core.pause import PauseState
from wheelq.core.recurring import Schedule
from wheelq.core.settings import ClientSettings
from wheelq.errors import EventsOffError
from wheelq.producer import dead_letters as dl
from wheelq.producer import events as job_events
from wheelq.producer import groups as grp
from wheelq.producer import pauses, results, schedules
from wheelq.producer.client import (
    DEFAULT_CATCH_UP,
    EVENTS_MAX_AGE_MS,
    EVENTS_MAX_LEN,
    CallbackArg,
    Client,
)
from wheelq.producer.durability import Durability
from wheelq.producer.items import EnqueueItem
from wheelq.producer.operations import (
    Op,
    Producer,
    ProducerCounts,
    SpoolStats,
    TopicStats,
    guarded,
    with_spool,
)
from wheelq.producer.spool import DrainService, Path, attach_spool
from wheelq.runtime.breaker import Breaker
from wheelq.runtime.clock import LocalClock
from wheelq.store import connect
from wheelq.store.acked import Wait
from wheelq.store.call import Call
from wheelq.store.executor import AsyncExecutor, drive_async

T = TypeVar("T")


class AsyncClient:
    """Asyncio producer client; the same methods as `Client`, awaitable (each method
    without a docstring of its own has `Client`'s)."""

    def __init__(
        self,
        connection: redis.asyncio.Redis,
        settings: ClientSettings | None = None,
        *,
        spool: Path | None = None,
        ack: str = "primary",
    ) -> None:
        self._producer = Producer(settings or ClientSettings())
        self._executor = AsyncExecutor(connection)
        self._durability = Durability(ack, self._producer.settings)
        self._breaker = Breaker(self._producer.settings.breaker_open_ms, LocalClock())
        self._drain = attach_spool(
            self._producer, self._breaker, spool, lambda drain: DrainService(drain, self._send_all)
        )

    async def _send_all(self, calls: list[Call[Any]]) -> list[Any]:
        return await self._executor.run(calls, return_exceptions=True)

    @property
    def executor(self) -> AsyncExecutor:
        """What the calls go through; a worker or service beside the client can share it."""
        return self._executor

    @property
    def redis(self) -> redis.asyncio.Redis:
        """The redis-py client the calls go through (a cluster client on a cluster)."""
        return self._executor.client

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        redis_options: Mapping[str, Any] | None = None,
        cluster: bool | None = None,
        spool: Path | None = None,
        ack: str = "primary",
        **settings: Any,
    ) -> Self:
        """Connect to `url`; see `Client.from_url`. The spool's drain is a task on the loop
        the client is first used on (its first call, or ``async with``)."""
        client_settings = ClientSettings.from_kwargs(settings)
        executor = connect.async_executor(url, redis_options or {}, cluster)
        client = cls(executor.client, client_settings, spool=spool, ack=ack)
        client._executor = executor
        return client

    async def _run(self, op: Op[T], wait: Wait | None = None) -> T:
        if self._drain is not None and not self._drain.begun:
            await self._drain.start()
        send = self._executor.run if wait is None else partial(self._executor.run_acked, wait=wait)
        return await drive_async(guarded(self._breaker, op), send)

    async def _write(self, topic: str, op: Op[T], ack: str | None) -> T:
        return await self._run(*self._durability.plan(self._producer, topic, op, ack))

    async def enqueue(
        self,
        topic: str,
        payload: Any,
        *,
        delay: Delay | None = None,
        at: At | None = None,
        job_id: str | None = None,
        max_attempts: int | None = None,
        replace: bool = False,
        ack: str | None = None,
        traceparent: str | None = None,
        callback: CallbackArg = None,
        debounce_ms: int | None = None,
        max_wait_ms: int | None = None,
        key: str | None = None,
        ordered: bool = False,
    ) -> str:
        item = EnqueueItem(
            payload=payload, delay=delay, at=at, job_id=job_id, max_attempts=max_attempts,
            replace=replace, traceparent=traceparent, callback=callback, key=key, ordered=ordered,
        )  # fmt: skip
        bounce = None if debounce_ms is None else debounce_spec(debounce_ms, max_wait_ms)
        return await self._write(topic, self._producer.enqueue(topic, item, bounce), ack)

    async def enqueue_many(
        self,
        topic: str,
        items: Iterable[EnqueueItem | Mapping[str, Any]],
        *,
        ack: str | None = None,
    ) -> list[str]:
        return await self._write(topic, self._producer.enqueue_many(topic, items), ack)

    async def enqueue_bulk(
        self,
        topic: str,
        payloads: Iterable[Any],
        *,
        delay: Delay | None = None,
        at: At | None = None,
        max_attempts: int | None = None,
        ack: str | None = None,
    ) -> list[str]:
        op = self._producer.enqueue_bulk(topic, payloads, delay, at, max_attempts)
        return await self._write(topic, op, ack)

    async def cancel(self, topic: str, job_id: str, *, ack: str | None = None) -> bool:
        return await self._write(topic, self._producer.cancel(topic, job_id), ack)

    async def reschedule(
        self,
        topic: str,
        job_id: str,
        *,
        delay: Delay | None = None,
        at: At | None = None,
        ack: str | None = None,
    ) -> bool:
        op = self._producer.reschedule(topic, job_id, delay, at)
        return await self._write(topic, op, ack)

    async def get(self, topic: str, job_id: str) -> JobInfo:
        return await self._run(self._producer.get(topic, job_id))

    async def result(
        self, topic: str, job_id: str, *, group: str = "default", timeout: results.Timeout = 30
    ) -> Any:
        """See `Client.result`; the wait holds one connection of the client's pool."""
        return await self._run(results.result(self._producer, topic, job_id, group, timeout))

    async def create_topic(self, topic: str, shards: int | None = None) -> int:
        return await self._run(self._producer.create_topic(topic, shards))

    async def topics(self) -> dict[str, int]:
        return await self._run(self._producer.topics())

    async def shards(self, topic: str) -> int | None:
        return await self._run(self._producer.shard_count(topic, create=False))

    async def drop_topic(self, topic: str, *, force: bool = False) -> bool:
        return await self._run(self._producer.drop_topic(topic, force))

    async def groups(self, topic: str) -> list[grp.GroupStats] | None:
        return await self._run(grp.groups(self._producer, topic))

    async def create_group(
        self, topic: str, group: str, *, start: str = "earliest", max_groups: int = grp.MAX_GROUPS
    ) -> grp.CreatedGroup:
        return await self._run(grp.create_group(self._producer, topic, group, start, max_groups))

    async def delete_group(
        self, topic: str, group: str, *, stream: str = "ready", force: bool = False
    ) -> grp.DeletedGroup:
        return await self._run(grp.delete_group(self._producer, topic, group, stream, force))

    async def pause(self, topic: str, group: str | None = None) -> PauseState:
        return await self._run(pauses.pause(self._producer, topic, group))

    async def resume(self, topic: str, group: str | None = None) -> PauseState:
        return await self._run(pauses.resume(self._producer, topic, group))

    async def paused(self, topic: str) -> PauseState:
        return await self._run(pauses.paused(self._producer, topic))

    async def set_events(
        self,
        topic: str,
        enabled: bool = True,
        *,
        max_len: int = EVENTS_MAX_LEN,
        max_age_ms: int = EVENTS_MAX_AGE_MS,
    ) -> EventsConfig:
        config = EventsConfig(enabled, max_len, max_age_ms)
        return await self._run(job_events.configure(self._producer, topic, config))

    async def events_config(self, topic: str) -> EventsConfig:
        return await self._run(job_events.config_of(self._producer, topic))

    async def events(
        self, topic: str, *, since: str = "now", block_ms: int = 2000
    ) -> AsyncGenerator[Event, None]:
        """The topic's job events as they happen, from `since`: "now" (the default),
        "start" (all the streams still hold) or the `position` of an event read before (the
        ones after it, none missed or repeated while the streams hold them). An async
        iterator that ends only when the loop leaves it; to stop its reads at once then, use
        ``async with contextlib.aclosing(client.events("emails")) as events: async for ...``
        (else they stop when the iterator is collected).

        Raises:
            UnknownTopicError: No such topic.
            EventsOffError: The topic keeps no events (`set_events` turns them on).
            InvalidArgumentError: `since` or `block_ms` (10-60,000) is not valid.
        """
        shards = await self._run(self._producer.shard_count(topic, create=False))
        job_events.validated(topic, shards, since, block_ms)  # bad arguments first
        if not (await self.events_config(topic)).enabled:
            raise EventsOffError(topic)  # else it would wait for ever, silently
        follow = job_events.follow(self._executor, topic, shards, since, block_ms)
        async with contextlib.aclosing(follow) as events:  # closed with this one, not at GC
            async for event in events:
                yield event

    async def stats(self, topic: str) -> TopicStats | None:
        return with_spool(await self._run(self._producer.stats(topic)), self.spool_stats())

    @property
    def counts(self) -> ProducerCounts:
        """Jobs this client enqueued and cancelled (what `wheelq.metrics` exports)."""
        return self._producer.counts

    def spool_stats(self) -> SpoolStats | None:
        return None if self._drain is None else self._drain.drain.stats()

    async def dead_letters(
        self,
        topic: str,
        limit: int = 100,
        *,
        after: str | None = None,
        reason: str | None = None,
        group: str | None = None,
        scan_limit: int | None = None,
    ) -> dl.DeadLetterPage:
        match = dl.DeadFilter.of(reason, group)
        op = dl.dead_letters(self._producer, topic, limit, after, match, scan_limit)
        return await self._run(op)

    async def replay(
        self,
        topic: str,
        refs: dl.Refs = None,
        *,
        reason: str | None = None,
        group: str | None = None,
    ) -> dl.Replayed:
        match = dl.DeadFilter.of(reason, group)
        return await self._run(dl.replay(self._producer, topic, refs, match))

    async def purge_dead(
        self,
        topic: str,
        refs: dl.Refs = None,
        *,
        reason: str | None = None,
        group: str | None = None,
    ) -> int:
        match = dl.DeadFilter.of(reason, group)
        return await self._run(dl.purge_dead(self._producer, topic, refs, match))

    async def set_limits(
        self, topic: str, *, max_pending: int | None = None, max_ready: int | None = None
    ) -> TopicLimits:
        return await self._run(self._producer.set_limits(topic, max_pending, max_ready))

    async def limits(self, topic: str) -> TopicLimits:
        return await self._run(self._producer.limits(topic))

    async def schedule(
        self,
        name: str,
        topic: str,
        payload: Any,
        *,
        cron: str | None = None,
        every_ms: int | None = None,
        tz: str = "UTC",
        start: At | None = None,
        end: At | None = None,
        misfire: str = "once",
        max_catch_up: int = DEFAULT_CATCH_UP,
        max_attempts: int | None = None,
        callback: CallbackArg = None,
    ) -> Schedule:
        op = schedules.define(
            self._producer, name, topic, payload, cron=cron, every_ms=every_ms, tz=tz,
            start=start, end=end, misfire=misfire, max_catch_up=max_catch_up,
            max_attempts=max_attempts, callback=callback,
        )  # fmt: skip
        return (await self._run(op))[0]

    async def get_schedule(self, name: str, topic: str) -> Schedule | None:
        return await self._run(schedules.get(self._producer, name, topic))

    async def schedules(self, topic: str | None = None) -> list[Schedule]:
        return await self._run(schedules.every(self._producer, topic))

    async def pause_schedule(self, name: str, topic: str) -> bool:
        return await self._run(schedules.change(self._producer, name, topic, "pause"))

    async def resume_schedule(self, name: str, topic: str) -> bool:
        return await self._run(schedules.change(self._producer, name, topic, "resume"))

    async def unschedule(self, name: str, topic: str) -> bool:
        return await self._run(schedules.change(self._producer, name, topic, "remove"))

    async def aclose(self) -> None:
        """Close the connections; with a spool, stop its drain first (what it has not
        replayed stays in the file, for the next client on it)."""
        if self._drain is not None:
            await self._drain.close()
        await self._executor.aclose()

    async def __aenter__(self) -> Self:
        if self._drain is not None:
            await self._drain.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


for _name, _method in vars(AsyncClient).items():
    if callable(_method) and _method.__doc__ is None and hasattr(Client, _name):
        _method.__doc__ = getattr(Client, _name).__doc__
