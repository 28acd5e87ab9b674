"""The producer API: `Client` (blocking) and `AsyncClient` (asyncio).

Both expose the same methods with the same arguments; the logic lives once
in `wheelq.producer.operations` and each client only sends its calls.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any, Self, TypeVar

import redis
import redis.asyncio

from wheelq.core.dead import DeadLetter
from wheelq.core.job import JobInfo
from wheelq.core.schedule import At, Delay
from wheelq.core.settings import ClientSettings
from wheelq.producer import dead_letters as dl
from wheelq.producer.operations import EnqueueItem, Op, Producer, TopicStats
from wheelq.store import connect
from wheelq.store.calls import AsyncExecutor, SyncExecutor

T = TypeVar("T")

_ENQUEUE_DOC = """Enqueue `payload` on `topic`, due after `delay` or at `at` (neither: now).

        Args:
            topic: Topic name, 1-100 characters from [A-Za-z0-9_.-]; created on first use.
            payload: Any msgpack-serialisable value (at most `max_payload_bytes` encoded).
            delay: Seconds from now (int, float or timedelta), 0 to ten years.
            at: Absolute due time: epoch seconds or an aware datetime (past = now).
            job_id: Your own id, which makes the call idempotent while the job is
                pending; default a generated, time-sortable, URL-safe id.
            max_attempts: Runs allowed before the job is dead-lettered (1-1000);
                default `default_max_attempts`.
            replace: With `job_id`, replace a pending job of that id instead of failing.

        Returns:
            The job id.

        Raises:
            InvalidArgumentError: A bad topic, delay, at, job_id or max_attempts
                (also a ValueError); nothing was written.
            PayloadTypeError: The payload cannot be serialised, or would not decode back
                (a tuple as a dict key); also a TypeError.
            DuplicateJobError: `job_id` is pending already and `replace` is False.
        """


class Client:
    """Blocking producer client. Thread-safe (redis-py pools connections)."""

    def __init__(self, connection: redis.Redis, settings: ClientSettings | None = None) -> None:
        self._producer = Producer(settings or ClientSettings())
        self._executor = SyncExecutor(connection)

    @property
    def redis(self) -> redis.Redis:
        """The redis-py client the calls go through (a cluster client on a cluster)."""
        return self._executor.client

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        redis_options: Mapping[str, Any] | None = None,
        cluster: bool | None = None,
        **settings: Any,
    ) -> Self:
        """Connect to `url` (``redis://``, ``rediss://`` for TLS, with ``user:password@``).

        Args:
            url: The Redis URL: one server, or any node of a Redis Cluster.
            redis_options: Extra keyword arguments for `redis.Redis.from_url`
                (for example ``ssl_ca_certs``).
            cluster: None: find out (a cluster node's first MOVED reply switches to
                redis-py's cluster client); True or False: say so.
            **settings: Fields of `ClientSettings`.

        Raises:
            InvalidArgumentError: A setting unknown or out of range, or `cluster` not a
                bool or None.
        """
        client_settings = ClientSettings.from_kwargs(settings)
        executor = connect.sync_executor(url, redis_options or {}, cluster)
        client = cls(executor.client, client_settings)
        client._executor = executor
        return client

    def _run(self, op: Op[T]) -> T:
        try:
            calls = next(op)
            while True:
                calls = op.send(self._executor.run(calls))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    def enqueue(
        self,
        topic: str,
        payload: Any,
        *,
        delay: Delay | None = None,
        at: At | None = None,
        job_id: str | None = None,
        max_attempts: int | None = None,
        replace: bool = False,
    ) -> str:
        item = EnqueueItem(payload, delay, at, job_id, max_attempts, replace)
        return self._run(self._producer.enqueue(topic, item))

    enqueue.__doc__ = _ENQUEUE_DOC

    def enqueue_many(
        self, topic: str, items: Iterable[EnqueueItem | Mapping[str, Any]]
    ) -> list[str]:
        """Enqueue many jobs in pipelined, bounded batches; returns their ids in order.

        Each item is an `EnqueueItem` or a mapping with its fields (``payload``
        required). Every item is validated before anything is written.

        Raises:
            DuplicateJobError: Some ids were pending already; all other jobs
                were enqueued (see its `enqueued`).
        """
        return self._run(self._producer.enqueue_many(topic, items))

    def cancel(self, topic: str, job_id: str) -> bool:
        """Cancel a pending job; False when it is not pending (fired, cancelled, unknown)."""
        return self._run(self._producer.cancel(topic, job_id))

    def reschedule(
        self, topic: str, job_id: str, *, delay: Delay | None = None, at: At | None = None
    ) -> bool:
        """Move a pending job to a new due time; False when it is not pending."""
        return self._run(self._producer.reschedule(topic, job_id, delay, at))

    def get(self, topic: str, job_id: str) -> JobInfo | None:
        """A pending job's state, due time, attempt and payload; None when not pending.

        Raises:
            MalformedJobError: The stored job cannot be decoded (not written by wheelq).
        """
        return self._run(self._producer.get(topic, job_id))

    def create_topic(self, topic: str, shards: int | None = None) -> int:
        """Create a topic (idempotent); returns its shard count.

        Raises:
            TopicConfigError: It exists with another shard count.
        """
        return self._run(self._producer.create_topic(topic, shards))

    def topics(self) -> dict[str, int]:
        """Every topic with its shard count.

        Raises:
            TopicConfigError: A registry entry is not a shard count in [1, 1024].
        """
        return self._run(self._producer.topics())

    def drop_topic(self, topic: str, *, force: bool = False) -> bool:
        """Delete a topic: every key of every shard (pending jobs, stream, dead letters,
        leases) and its registry entry. Returns False when the topic does not exist.

        Each shard is deleted atomically by one script; without `force` nothing is
        deleted while a job is pending or a ready-stream entry is not acked by every
        consumer group (dead letters do not count). Schedulers serving the topic let it
        go; a running worker of the topic should be stopped first (it would recreate
        empty streams for its group).

        Raises:
            TopicNotEmptyError: Jobs are still to run and `force` is False.
            TopicConfigError: The registry entry is not a shard count in [1, 1024].
        """
        return self._run(self._producer.drop_topic(topic, force))

    def stats(self, topic: str) -> TopicStats | None:
        """Pending and ready counts per shard; None for an unknown topic."""
        return self._run(self._producer.stats(topic))

    def dead_letters(self, topic: str, limit: int = 100) -> list[DeadLetter]:
        """The topic's oldest `limit` dead letters (1-100000), oldest first."""
        return self._run(dl.dead_letters(self._producer, topic, limit))

    def replay(self, topic: str, refs: dl.Refs = None) -> int:
        """Run dead letters again: each goes back to its stream as attempt 1, due now, for
        the group it failed in. `refs`: DeadLetters or their refs; None = all. Returns how
        many were replayed (malformed entries cannot be and stay).

        Raises:
            InvalidArgumentError: A ref is not ``"shard/ms-seq"`` of this topic.
        """
        return self._run(dl.replay(self._producer, topic, refs))

    def purge_dead(self, topic: str, refs: dl.Refs = None) -> int:
        """Delete dead letters (`refs` as in `replay`; None = all); returns how many went."""
        return self._run(dl.purge_dead(self._producer, topic, refs))

    def close(self) -> None:
        self.redis.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncClient:
    """Asyncio producer client; the same methods as `Client`, awaitable."""

    def __init__(
        self, connection: redis.asyncio.Redis, settings: ClientSettings | None = None
    ) -> None:
        self._producer = Producer(settings or ClientSettings())
        self._executor = AsyncExecutor(connection)

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
        **settings: Any,
    ) -> Self:
        """Connect to `url`; see `Client.from_url`."""
        client_settings = ClientSettings.from_kwargs(settings)
        executor = connect.async_executor(url, redis_options or {}, cluster)
        client = cls(executor.client, client_settings)
        client._executor = executor
        return client

    async def _run(self, op: Op[T]) -> T:
        try:
            calls = next(op)
            while True:
                calls = op.send(await self._executor.run(calls))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

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
    ) -> str:
        item = EnqueueItem(payload, delay, at, job_id, max_attempts, replace)
        return await self._run(self._producer.enqueue(topic, item))

    enqueue.__doc__ = _ENQUEUE_DOC

    async def enqueue_many(
        self, topic: str, items: Iterable[EnqueueItem | Mapping[str, Any]]
    ) -> list[str]:
        """See `Client.enqueue_many`."""
        return await self._run(self._producer.enqueue_many(topic, items))

    async def cancel(self, topic: str, job_id: str) -> bool:
        """See `Client.cancel`."""
        return await self._run(self._producer.cancel(topic, job_id))

    async def reschedule(
        self, topic: str, job_id: str, *, delay: Delay | None = None, at: At | None = None
    ) -> bool:
        """See `Client.reschedule`."""
        return await self._run(self._producer.reschedule(topic, job_id, delay, at))

    async def get(self, topic: str, job_id: str) -> JobInfo | None:
        """See `Client.get`."""
        return await self._run(self._producer.get(topic, job_id))

    async def create_topic(self, topic: str, shards: int | None = None) -> int:
        """See `Client.create_topic`."""
        return await self._run(self._producer.create_topic(topic, shards))

    async def topics(self) -> dict[str, int]:
        """See `Client.topics`."""
        return await self._run(self._producer.topics())

    async def drop_topic(self, topic: str, *, force: bool = False) -> bool:
        """See `Client.drop_topic`."""
        return await self._run(self._producer.drop_topic(topic, force))

    async def stats(self, topic: str) -> TopicStats | None:
        """See `Client.stats`."""
        return await self._run(self._producer.stats(topic))

    async def dead_letters(self, topic: str, limit: int = 100) -> list[DeadLetter]:
        """See `Client.dead_letters`."""
        return await self._run(dl.dead_letters(self._producer, topic, limit))

    async def replay(self, topic: str, refs: dl.Refs = None) -> int:
        """See `Client.replay`."""
        return await self._run(dl.replay(self._producer, topic, refs))

    async def purge_dead(self, topic: str, refs: dl.Refs = None) -> int:
        """See `Client.purge_dead`."""
        return await self._run(dl.purge_dead(self._producer, topic, refs))

    async def aclose(self) -> None:
        await self.redis.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
