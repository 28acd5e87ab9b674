"""The asyncio management client, `AsyncAdmin`: `Admin`'s methods, awaitable, and `events`."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import AsyncGenerator, Collection, Mapping, Sequence
from datetime import timedelta
from typing import Any, Self, Unpack

from wheelq.admin import bulk_actions, job_lists, pauses, processes, schedules
from wheelq.admin import dead_letters as dl
from wheelq.admin import events as job_events
from wheelq.admin import forecast as fc
from wheelq.admin import groups as grp
from wheelq.admin import line as due_line
from wheelq.admin.admin import DEFAULT_CATCH_UP, EVENTS_MAX_AGE_MS, EVENTS_MAX_LEN, Admin
from wheelq.admin.bulk_actions import Progress
from wheelq.admin.schedules import SyncReport
from wheelq.core.bulk_actions import BulkOutcome
from wheelq.core.due import At, duration_ms, shift_of
from wheelq.core.events import Event, EventsConfig
from wheelq.core.flow import UNCHANGED, TopicLimits, Unchanged, validate_limits
from wheelq.core.forecast import WITHIN_S, Forecast
from wheelq.core.job_list import JobFilter, JobPage
from wheelq.core.line import LineView
from wheelq.core.options import RunOptions, takes
from wheelq.core.pause import PauseState
from wheelq.core.process import ProcessInfo
from wheelq.core.recurring import Schedule, interval_ms
from wheelq.core.settings import ClientSettings
from wheelq.errors import EventsOffError
from wheelq.producer.async_client import AsyncClient
from wheelq.producer.connected import AsyncConnected
from wheelq.producer.moved import admin_maker
from wheelq.producer.operations import TopicStats
from wheelq.store import connect

_OF: weakref.WeakKeyDictionary[AsyncClient, AsyncAdmin] = weakref.WeakKeyDictionary()
"""Each client's admin (`AsyncAdmin.of`), which lives as long as the client."""


class AsyncAdmin(AsyncConnected):
    """Asyncio management client; the same methods as `Admin`, awaitable (each method
    without a docstring of its own has `Admin`'s), and `events` to follow a topic."""

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        redis_options: Mapping[str, Any] | None = None,
        cluster: bool | None = None,
        **settings: Any,
    ) -> Self:
        """Connect to `url`; see `Admin.from_url`."""
        checked = ClientSettings.from_kwargs(settings)
        executor = connect.async_executor(url, redis_options or {}, cluster)
        return cls(executor.client, checked)._over(executor)

    @classmethod
    def of(cls, client: AsyncClient) -> AsyncAdmin:
        """The admin of `client`'s connections; see `Admin.of`."""
        admin = _OF.get(client)
        if admin is None:
            admin = AsyncAdmin._sharing(client)
            _OF[client] = admin
        return admin

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
        self,
        topic: str,
        *,
        since: str = "now",
        block: float | timedelta | None = None,
        block_ms: int | None = None,
    ) -> AsyncGenerator[Event, None]:
        """The topic's job events as they happen, from `since`: "now" (the default),
        "start" (all the streams still hold) or the `position` of an event read before (the
        ones after it, none missed or repeated while the streams hold them). An async
        iterator that ends only when the loop leaves it; to stop its reads at once then, use
        ``async with contextlib.aclosing(admin.events("emails")) as events: async for ...``
        (else they stop when the iterator is collected).

        Args:
            topic: The topic.
            since: Where to start reading.
            block: How long one blocking read of the streams waits, seconds or a timedelta
                (0.01 to 60; default 2).
            block_ms: `block` in whole ms (an alias; give one of the two).

        Raises:
            UnknownTopicError: No such topic.
            EventsOffError: The topic keeps no events (`set_events` turns them on).
            InvalidArgumentError: `since` or `block` (10 ms to 60 s) is not valid, or both
                `block` and `block_ms` were given.
        """
        block_ms = duration_ms(
            block, block_ms, name="block", alias="block_ms", max_ms=60_000, min_ms=10, default=2000
        )
        assert block_ms is not None  # a default is given
        shards = await self._run(self._producer.shard_count(topic, create=False))
        job_events.validated(topic, shards, since, block_ms)  # bad arguments first
        if not (await self.events_config(topic)).enabled:
            raise EventsOffError(topic)  # else it would wait for ever, silently
        follow = job_events.follow(self._executor, topic, shards, since, block_ms)
        async with contextlib.aclosing(follow) as events:  # closed with this one, not at GC
            async for event in events:
                yield event

    async def stats(self, topic: str) -> TopicStats | None:
        return await self._run(self._producer.stats(topic))

    async def forecast(self, topic: str, within: int | Sequence[int] = WITHIN_S) -> Forecast:
        return await self._run(fc.forecast(self._producer, topic, within))

    async def line(self, topic: str) -> LineView:
        return await self._run(due_line.line(self._producer, topic))

    async def jobs(
        self,
        topic: str,
        state: str,
        limit: int = 50,
        *,
        cursor: str | None = None,
        due_after: At | None = None,
        due_before: At | None = None,
        group: str | None = None,
        reason: str | None = None,
        priority: int | None = None,
        key: str | None = None,
    ) -> JobPage:
        match = JobFilter.of(due_after, due_before, group, reason, priority, key)
        return await self._run(
            job_lists.list_jobs(self._producer, topic, state, match, limit, cursor)
        )

    async def bulk(
        self,
        topic: str,
        action: str,
        *,
        state: str | None = None,
        due_after: At | None = None,
        due_before: At | None = None,
        group: str | None = None,
        reason: str | None = None,
        key: str | None = None,
        ids: Sequence[str] | None = None,
        refs: Sequence[str] | None = None,
        selection: str | None = None,
        dry_run: bool = False,
        at: At | None = None,
        shift_ms: int | None = None,
        max_jobs: int | None = None,
        shift: float | timedelta | None = None,
        progress: Progress | None = None,
    ) -> BulkOutcome:
        match = JobFilter.of(due_after, due_before, group, reason, key=key)
        target = bulk_actions.Target(state, match, ids, refs, selection)
        moved_ms = shift_of(shift, shift_ms)
        op = bulk_actions.bulk(
            self._producer, topic, action, target, dry_run, at, moved_ms, max_jobs, progress
        )
        return await self._run(op)

    async def dead_letters(
        self,
        topic: str,
        limit: int = 100,
        *,
        after: str | None = None,
        reason: str | None = None,
        group: str | None = None,
        scan_limit: int | None = dl.SCAN_LIMIT,
    ) -> dl.DeadLetterPage:
        op = dl.dead_letters(self._producer, topic, limit, after, reason, group, scan_limit)
        return await self._run(op)

    async def replay(
        self,
        topic: str,
        refs: dl.Refs = None,
        *,
        reason: str | None = None,
        group: str | None = None,
    ) -> dl.Replayed:
        return await self._run(dl.replay(self._producer, topic, refs, reason, group))

    async def purge_dead(
        self,
        topic: str,
        refs: dl.Refs = None,
        *,
        reason: str | None = None,
        group: str | None = None,
    ) -> int:
        return await self._run(dl.purge_dead(self._producer, topic, refs, reason, group))

    async def set_limits(
        self,
        topic: str,
        *,
        max_pending: int | Unchanged | None = UNCHANGED,
        max_ready: int | Unchanged | None = UNCHANGED,
        priority_credit_ms: int | None = None,
        fair: bool | None = None,
        fair_weights: Mapping[str, int] | None = None,
    ) -> TopicLimits:
        change = validate_limits(max_pending, max_ready, priority_credit_ms, fair, fair_weights)
        return await self._run(self._producer.set_limits(topic, change))

    async def set_far_horizon(self, topic: str, horizon_ms: int | None) -> int:
        return await self._run(self._producer.set_far_horizon(topic, horizon_ms))

    async def limits(self, topic: str) -> TopicLimits:
        return await self._run(self._producer.limits(topic))

    @takes(RunOptions)
    async def schedule(
        self,
        name: str,
        topic: str,
        payload: Any,
        *,
        cron: str | None = None,
        every: float | timedelta | None = None,
        every_ms: int | None = None,
        tz: str = "UTC",
        start: At | None = None,
        end: At | None = None,
        misfire: str = "once",
        max_catch_up: int = DEFAULT_CATCH_UP,
        **options: Unpack[RunOptions],
    ) -> Schedule:
        producer = self._producer
        made = schedules.record(
            producer.settings, producer.clock.now_ms(), name, topic, payload, cron=cron,
            every_ms=interval_ms(every, every_ms), tz=tz, start=start, end=end, misfire=misfire,
            max_catch_up=max_catch_up, options=options,
        )  # fmt: skip
        op = schedules.define(producer, made)
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

    async def sync_schedules(
        self, topics: Collection[str], declared: Sequence[Schedule]
    ) -> SyncReport:
        return await self._run(schedules.sync(self._producer, topics, declared))

    async def processes(self) -> list[ProcessInfo]:
        return await self._run(processes.processes(self._producer))


admin_maker(AsyncClient, AsyncAdmin.of)  # what the client's moved methods run on

for _name, _method in vars(AsyncAdmin).items():
    if callable(_method) and _method.__doc__ is None and hasattr(Admin, _name):
        _method.__doc__ = getattr(Admin, _name).__doc__
