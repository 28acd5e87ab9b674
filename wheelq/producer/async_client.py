"""The asyncio producer client, `AsyncClient`: `Client`'s methods, awaitable."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from functools import partial
from typing import Any, Literal, Self, TypeVar, Unpack, overload

import redis
import redis.asyncio

from wheelq.core.due import At, Delay
from wheelq.core.follow import Joined, OnChildFailure, policy_of
from wheelq.core.history import JobInfo
from wheelq.core.options import BulkOptions, EnqueueKwargs, FlowSpec, JobSpec, takes
from wheelq.core.settings import ClientSettings
from wheelq.producer import by_key, flows, results
from wheelq.producer.client import Client
from wheelq.producer.connected import AsyncConnected
from wheelq.producer.durability import Durability
from wheelq.producer.items import EnqueueItem
from wheelq.producer.moved import Moved, admin_of, warn_once
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
from wheelq.store import connect
from wheelq.store.acked import Wait
from wheelq.store.call import Call
from wheelq.store.executor import drive_async

T = TypeVar("T")


class AsyncClient(AsyncConnected):
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
        super().__init__(connection, settings)
        self._durability = Durability(ack, self._producer)
        self._drain = attach_spool(
            self._producer, self._breaker, spool, lambda drain: DrainService(drain, self._send_all)
        )

    async def _send_all(self, calls: list[Call[Any]]) -> list[Any]:
        return await self._executor.run(calls, return_exceptions=True)

    @property
    def producer(self) -> Producer:
        """The client's settings and encoding (sans-I/O): a relay beside it replays with it."""
        return self._producer

    @property
    def durability(self) -> Durability:
        """The client's default ack level and what each level waits for."""
        return self._durability

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
        checked = ClientSettings.from_kwargs(settings)
        executor = connect.async_executor(url, redis_options or {}, cluster)
        return cls(executor.client, checked, spool=spool, ack=ack)._over(executor)

    async def _run(self, op: Op[T], wait: Wait | None = None) -> T:
        if self._drain is not None and not self._drain.begun:
            await self._drain.start()
        send = self._executor.run if wait is None else partial(self._executor.run_acked, wait=wait)
        return await drive_async(guarded(self._breaker, op), send)

    async def _write(self, topic: str, op: Op[T], ack: str | None) -> T:
        return await self._run(*self._durability.plan(self._producer, topic, op, ack))

    @takes(EnqueueKwargs)
    async def enqueue(self, topic: str, payload: Any, **options: Unpack[EnqueueKwargs]) -> str:
        op, ack = flows.enqueue_call(self._producer, topic, payload, options)
        return await self._write(topic, op, ack)

    async def enqueue_many(
        self,
        topic: str,
        items: Iterable[EnqueueItem | Mapping[str, Any]],
        *,
        ack: str | None = None,
    ) -> list[str]:
        return await self._write(topic, self._producer.enqueue_many(topic, items), ack)

    async def enqueue_flow(
        self,
        parent: JobSpec,
        children: Sequence[JobSpec | FlowSpec],
        *,
        on_child_failure: str = "fail",
    ) -> Joined:
        policy = policy_of(OnChildFailure, on_child_failure, "on_child_failure")
        return await self._run(flows.enqueue_flow(self._producer, parent, children, policy))

    @takes(BulkOptions)
    async def enqueue_bulk(
        self, topic: str, payloads: Iterable[Any], **options: Unpack[BulkOptions]
    ) -> list[str]:
        op = self._producer.enqueue_bulk(topic, payloads, options)
        return await self._write(topic, op, options.get("ack"))

    @overload
    async def cancel(self, topic: str, job_id: str, *, ack: str | None = None) -> bool: ...
    @overload
    async def cancel(self, topic: str, *, key: str, ack: str | None = None) -> int: ...
    @overload
    async def cancel(
        self, topic: str, job_id: str, *, tree: Literal[True], ack: str | None = None
    ) -> int: ...
    async def cancel(
        self,
        topic: str,
        job_id: str | None = None,
        *,
        key: str | None = None,
        tree: bool = False,
        ack: str | None = None,
    ) -> bool | int:
        op = by_key.cancel_call(self._producer, topic, job_id, key, tree)
        return await self._write(topic, op, ack)

    @overload
    async def reschedule(
        self,
        topic: str,
        job_id: str,
        *,
        delay: Delay | None = None,
        at: At | None = None,
        ack: str | None = None,
    ) -> bool: ...
    @overload
    async def reschedule(
        self,
        topic: str,
        *,
        key: str,
        by: float | timedelta | None = None,
        to: At | None = None,
        ack: str | None = None,
    ) -> int: ...
    @overload
    async def reschedule(
        self,
        topic: str,
        job_id: str,
        *,
        tree: Literal[True],
        by: float | timedelta | None = None,
        to: At | None = None,
        ack: str | None = None,
    ) -> int: ...
    async def reschedule(
        self,
        topic: str,
        job_id: str | None = None,
        *,
        delay: Delay | None = None,
        at: At | None = None,
        key: str | None = None,
        by: float | timedelta | None = None,
        to: At | None = None,
        tree: bool = False,
        ack: str | None = None,
    ) -> bool | int:
        op = by_key.reschedule_call(self._producer, topic, job_id, delay, at, key, by, to, tree)
        return await self._write(topic, op, ack)

    async def get(self, topic: str, job_id: str) -> JobInfo:
        return await self._run(self._producer.get(topic, job_id))

    async def children(self, topic: str, job_id: str, *, limit: int | None = None) -> list[JobInfo]:
        return await self._run(flows.children(self._producer, topic, job_id, limit))

    async def result(
        self, topic: str, job_id: str, *, group: str = "default", timeout: results.Timeout = 30
    ) -> Any:
        """See `Client.result`; the wait holds one connection of the client's pool."""
        return await self._run(results.result(self._producer, topic, job_id, group, timeout))

    # --- moved to AsyncAdmin: kept for one release (wheelq.producer.moved) -------------

    create_topic = Moved("AsyncAdmin")
    topics = Moved("AsyncAdmin")
    shards = Moved("AsyncAdmin")
    drop_topic = Moved("AsyncAdmin")
    groups = Moved("AsyncAdmin")
    create_group = Moved("AsyncAdmin")
    delete_group = Moved("AsyncAdmin")
    pause = Moved("AsyncAdmin")
    resume = Moved("AsyncAdmin")
    paused = Moved("AsyncAdmin")
    set_events = Moved("AsyncAdmin")
    events_config = Moved("AsyncAdmin")
    events = Moved("AsyncAdmin")
    dead_letters = Moved("AsyncAdmin")
    replay = Moved("AsyncAdmin")
    purge_dead = Moved("AsyncAdmin")
    set_limits = Moved("AsyncAdmin")
    limits = Moved("AsyncAdmin")
    schedule = Moved("AsyncAdmin")
    get_schedule = Moved("AsyncAdmin")
    schedules = Moved("AsyncAdmin")
    pause_schedule = Moved("AsyncAdmin")
    resume_schedule = Moved("AsyncAdmin")
    unschedule = Moved("AsyncAdmin")

    async def stats(self, topic: str) -> TopicStats | None:
        """Deprecated: moved to `AsyncAdmin.stats`; this client's spool is `spool_stats`."""
        warn_once("AsyncClient.stats", "AsyncAdmin.stats")
        return with_spool(await admin_of(self).stats(topic), self.spool_stats())

    @property
    def counts(self) -> ProducerCounts:
        """Jobs this client enqueued and cancelled (what `wheelq.metrics` exports)."""
        return self._producer.counts

    def spool_stats(self) -> SpoolStats | None:
        return None if self._drain is None else self._drain.drain.stats()

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


for _name, _method in vars(AsyncClient).items():
    if callable(_method) and _method.__doc__ is None and hasattr(Client, _name):
        _method.__doc__ = getattr(Client, _name).__doc__
