"""The blocking producer client, `Client`. `AsyncClient` has the same methods, awaitable;
both drive the operations of `wheelq.producer.operations` (a test checks the two match).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from functools import partial
from typing import Any, Self, TypeVar

import redis
import redis.asyncio

from wheelq.core.callback import Callback
from wheelq.core.due import At, Delay, debounce_spec
from wheelq.core.events import EventsConfig
from wheelq.core.flow import TopicLimits
from wheelq.core.history import JobInfo
from wheelq.core.pause import PauseState
from wheelq.core.recurring import Schedule
from wheelq.core.settings import ClientSettings
from wheelq.producer import dead_letters as dl
from wheelq.producer import events as job_events
from wheelq.producer import groups as grp
from wheelq.producer import pauses, results, schedules
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
from wheelq.producer.spool import DrainService, DrainThread, Path, attach_spool
from wheelq.runtime.breaker import Breaker
from wheelq.runtime.clock import LocalClock
from wheelq.store import connect
from wheelq.store.acked import Wait
from wheelq.store.call import Call
from wheelq.store.executor import SyncExecutor, drive

T = TypeVar("T")
CallbackArg = Callback | str | Mapping[str, Any] | None
DEFAULT_CATCH_UP = 100
EVENTS_MAX_LEN = EventsConfig().max_len
EVENTS_MAX_AGE_MS = EventsConfig().max_age_ms


class Client:
    """Blocking producer client; thread-safe. With `spool` (a file path), enqueues Redis
    cannot take go to that SQLite file and are replayed once Redis is back
    (docs/guides/durability.md); without, they raise `RedisUnavailableError`.

    Raises:
        SpoolLockedError: Another client has the spool file open.
        SpoolError: The file cannot be used as a spool.
    """

    def __init__(
        self,
        connection: redis.Redis,
        settings: ClientSettings | None = None,
        *,
        spool: Path | None = None,
        ack: str = "primary",
    ) -> None:
        self._producer = Producer(settings or ClientSettings())
        self._executor = SyncExecutor(connection)
        self._durability = Durability(ack, self._producer.settings)
        self._breaker = Breaker(self._producer.settings.breaker_open_ms, LocalClock())
        self._drain = attach_spool(
            self._producer,
            self._breaker,
            spool,
            lambda drain: DrainThread(DrainService(drain, self._send_all)),
        )
        self._inside = threading.local()
        """``calls``: this thread's calls of the client under way (`close` defers to them)."""
        self._close_pending = False

    async def _send_all(self, calls: list[Call[Any]]) -> list[Any]:
        return self._executor.run(calls, return_exceptions=True)  # on the drain's own loop

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
        spool: Path | None = None,
        ack: str = "primary",
        **settings: Any,
    ) -> Self:
        """Connect to `url` (``redis://``, ``rediss://`` for TLS, with ``user:password@``).

        Args:
            url: The Redis URL: one server, or any node of a Redis Cluster.
            redis_options: Extra keyword arguments for `redis.Redis.from_url`
                (for example ``ssl_ca_certs``).
            cluster: None: find out (a cluster node's first MOVED reply switches to
                redis-py's cluster client); True or False: say so.
            spool: A file for the enqueues Redis cannot take (see the class); jobs a
                previous client left in it are replayed at once.
            ack: The ack level of writes that pass none: ``"primary"``,
                ``"replicated"`` or ``"persisted"`` (see `enqueue`).
            **settings: Fields of `ClientSettings`.

        Raises:
            InvalidArgumentError: A setting unknown or out of range, `cluster` not a
                bool or None, or `ack` not a level.
            SpoolLockedError: Another client has the spool file open.
        """
        client_settings = ClientSettings.from_kwargs(settings)
        executor = connect.sync_executor(url, redis_options or {}, cluster)
        client = cls(executor.client, client_settings, spool=spool, ack=ack)
        client._executor = executor
        return client

    def _run(self, op: Op[T], wait: Wait | None = None) -> T:
        send = self._executor.run if wait is None else partial(self._executor.run_acked, wait=wait)
        inside = self._inside
        inside.calls = getattr(inside, "calls", 0) + 1  # before any lock is taken
        try:
            return drive(guarded(self._breaker, op), send)
        finally:
            inside.calls -= 1
            if self._close_pending and not inside.calls:
                self._close_pending = False
                self._close()

    def _write(self, topic: str, op: Op[T], ack: str | None) -> T:
        return self._run(*self._durability.plan(self._producer, topic, op, ack))

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
        ack: str | None = None,
        traceparent: str | None = None,
        callback: CallbackArg = None,
        debounce_ms: int | None = None,
        max_wait_ms: int | None = None,
        key: str | None = None,
        ordered: bool = False,
    ) -> str:
        """Enqueue `payload` on `topic`, due after `delay` or at `at` (neither: now).

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
            ack: ``"primary"``, ``"replicated"`` (WAIT for ``ack_replicas``) or
                ``"persisted"`` (WAITAOF); default the client's
                (docs/guides/durability.md).
            traceparent: The W3C traceparent of the job's trace; default this call's
                ``send`` span with the ``otel`` extra, else none (docs/guides/tracing.md).
            callback: Where `wheelq deliver` POSTs the job when it is due: a URL, a
                `Callback` or a mapping with ``url``, ``headers`` and ``timeout_ms``.
            debounce_ms: With `job_id`, instead of `delay`/`at`: the job is due this long
                after the latest call, so calls in a burst fire it once, after the last
                (its payload and options are the latest call's); 1 ms to ten years.
            max_wait_ms: With `debounce_ms`: fire no later than this long after the
                first call of the burst, however the calls go on (>= debounce_ms).
            key: The job's key (a tenant, a customer id; 1-256 bytes): `Job.key`, and what
                a worker's `Flow` limits per key unless its ``key=`` says otherwise.
            ordered: With `key`: the key's jobs run one at a time, in due order, in every
                consumer group (a failing job holds the ones after it until it succeeds or
                is dead-lettered).

        Returns:
            The job id.

        Raises:
            InvalidArgumentError: A bad argument (named; also a ValueError); nothing was
                written.
            PayloadTypeError: The payload cannot be serialised, or would not decode back
                (a tuple as a dict key); also a TypeError.
            DuplicateJobError: `job_id` is pending already and `replace` is False.
            RedisUnavailableError: Redis cannot take the job now (its `reason` says why);
                with a spool, the job is spooled and its id returned instead.
            DurabilityError: Written, but `ack` was not reached within ``ack_timeout_ms``.
            AckUnsupportedError: ``ack="persisted"`` on a server without WAITAOF or AOF;
                nothing was written.
        """
        item = EnqueueItem(
            payload=payload, delay=delay, at=at, job_id=job_id, max_attempts=max_attempts,
            replace=replace, traceparent=traceparent, callback=callback, key=key, ordered=ordered,
        )  # fmt: skip
        bounce = None if debounce_ms is None else debounce_spec(debounce_ms, max_wait_ms)
        return self._write(topic, self._producer.enqueue(topic, item, bounce), ack)

    def enqueue_many(
        self,
        topic: str,
        items: Iterable[EnqueueItem | Mapping[str, Any]],
        *,
        ack: str | None = None,
    ) -> list[str]:
        """Enqueue many jobs in pipelined, bounded batches; returns their ids in order.

        Each item is an `EnqueueItem` or a mapping with its fields (``payload``
        required). Every item is validated before anything is written. `ack` as for
        `enqueue`: every round of the batch is confirmed on each node it wrote to.

        Raises:
            DuplicateJobError: Some ids were pending already; all other jobs
                were enqueued (see its `enqueued`).
            DurabilityError: All were written, but some not confirmed at `ack` (named).
        """
        return self._write(topic, self._producer.enqueue_many(topic, items), ack)

    def enqueue_bulk(
        self,
        topic: str,
        payloads: Iterable[Any],
        *,
        delay: Delay | None = None,
        at: At | None = None,
        max_attempts: int | None = None,
        ack: str | None = None,
    ) -> list[str]:
        """Enqueue many payloads that share their timing and options, due after `delay` or
        at `at` (neither: now); returns their generated ids in order.

        The fast form of `enqueue_many` for plain jobs: the options are checked once and the
        jobs encoded a column at a time, with no object per job (about twice its rate).
        For your own ids, callbacks, keys or per-job times, use `enqueue_many`. Every
        payload is encoded before anything is written; `delay`, `at`, `max_attempts` and
        `ack` mean what they mean for `enqueue`.

        Raises:
            PayloadTypeError, PayloadTooLargeError: A payload (named ``payloads[i]``)
                cannot be encoded; nothing was written.
            TopicFullError: The topic is at its `max_pending` (see its `enqueued`).
            DurabilityError: All were written, but some not confirmed at `ack` (named).
        """
        op = self._producer.enqueue_bulk(topic, payloads, delay, at, max_attempts)
        return self._write(topic, op, ack)

    def cancel(self, topic: str, job_id: str, *, ack: str | None = None) -> bool:
        """Cancel a pending job, with every consumer group's retry of it; False when none
        is pending (fired, cancelled, unknown). `ack` as for `enqueue` (`DurabilityError`:
        not confirmed; its ``result`` is this call's answer on the primary)."""
        return self._write(topic, self._producer.cancel(topic, job_id), ack)

    def reschedule(
        self,
        topic: str,
        job_id: str,
        *,
        delay: Delay | None = None,
        at: At | None = None,
        ack: str | None = None,
    ) -> bool:
        """Move a pending job, with every consumer group's retry of it, to a new due time;
        False when none is pending. `ack` as for `cancel`."""
        return self._write(topic, self._producer.reschedule(topic, job_id, delay, at), ack)

    def get(self, topic: str, job_id: str) -> JobInfo:
        """Where job `job_id` is in its life, whatever the state (docs/guides/producing.md).

        Raises:
            MalformedJobError: The job is pending and its stored envelope cannot be decoded.
        """
        return self._run(self._producer.get(topic, job_id))

    def result(
        self, topic: str, job_id: str, *, group: str = "default", timeout: results.Timeout = 30
    ) -> Any:
        """What `group`'s handler returned for job `job_id` (None if it returned None),
        waiting until the job's latest run succeeds there, dies, or `timeout` passes.

        The wait blocks on Redis (one connection of the client's pool while it waits) and
        is woken by the settlement itself: nothing polls (docs/guides/producing.md). A
        result is kept as long as the job's history (`retention_ms`, `history_max_bytes`).

        Args:
            group: The consumer group whose outcome is awaited (a result is per group).
            timeout: Seconds (int, float or timedelta) to wait, 0 (look only) to a day.

        Raises:
            InvalidArgumentError: A bad topic, job id, group or timeout; nothing was written.
            UnknownGroupError: The topic has no consumer group `group`: raised at once, as
                no worker could ever settle the job there (an `InvalidArgumentError`).
            JobFailedError: The job was dead-lettered in `group` (its `reason` and `error`
                are the dead letter's), or cancelled.
            UnknownTopicError: No such topic: raised at once.
            UnknownJobError: Nothing is known of the job (never enqueued there, or its
                history is past retention): raised at once, as HTTP's 404.
            ResultTimeoutError: It had not finished when `timeout` passed (also a
                TimeoutError).
        """
        return self._run(results.result(self._producer, topic, job_id, group, timeout))

    def create_topic(self, topic: str, shards: int | None = None) -> int:
        """Create a topic (idempotent); returns its shard count, fixed for the topic's life:
        at least as many as scheduler nodes you want busy (docs/guides/cluster.md).

        Raises:
            TopicConfigError: It exists with another shard count.
        """
        return self._run(self._producer.create_topic(topic, shards))

    def topics(self) -> dict[str, int]:
        """Every topic with its shard count (`TopicConfigError` for a bad registry entry)."""
        return self._run(self._producer.topics())

    def shards(self, topic: str) -> int | None:
        """The topic's shard count; None when there is no such topic (it creates none).
        Known once, it is not looked up again."""
        return self._run(self._producer.shard_count(topic, create=False))

    def drop_topic(self, topic: str, *, force: bool = False) -> bool:
        """Delete every key of a topic; False when it does not exist. Stop its workers first.

        Raises:
            TopicNotEmptyError: A job is pending or a ready entry unacked, and `force` is False.
        """
        return self._run(self._producer.drop_topic(topic, force))

    def groups(self, topic: str) -> list[grp.GroupStats] | None:
        """The topic's consumer groups, by stream then name: per group its consumers, entries
        in flight (delivered, not acked) and ready (fired, not yet delivered to it), in all
        and by shard; None for an unknown topic. A group of one name on every shard is one
        group; the ``ready`` and ``callbacks`` streams' groups are listed apart (`stream`)."""
        return self._run(grp.groups(self._producer, topic))

    def create_group(
        self, topic: str, group: str, *, start: str = "earliest", max_groups: int = grp.MAX_GROUPS
    ) -> grp.CreatedGroup:
        """Create a pull consumer's group `group` (1-200 printable characters) of an existing
        `topic` on every shard that lacks it (a worker creates its own).

        Args:
            start: ``"earliest"`` (every job still in the stream) or ``"now"``.
            max_groups: Most groups the topic's ``ready`` stream may have (1-10000).

        Raises:
            GroupNotFoundError: No such topic.
            GroupLimitError: The topic has `max_groups` groups already (nothing created).
        """
        return self._run(grp.create_group(self._producer, topic, group, start, max_groups))

    def delete_group(
        self, topic: str, group: str, *, stream: str = "ready", force: bool = False
    ) -> grp.DeletedGroup:
        """Delete consumer group `group` of `topic` on every shard that has it (its waiting
        retries still fire, and no group runs them). Stop its workers first.

        Args:
            stream: ``"ready"`` (the topic's groups) or ``"callbacks"`` (the deliverer's).
            force: Delete it with entries in flight (they are dropped for it).

        Raises:
            GroupNotFoundError: No shard of the topic has the group on `stream`.
            GroupBusyError: Entries are in flight and `force` is False.
        """
        return self._run(grp.delete_group(self._producer, topic, group, stream, force))

    def pause(self, topic: str, group: str | None = None) -> PauseState:
        """Pause `group` of `topic` (None: the whole topic, every group, those created later
        too); returns what is paused of the topic now.

        Within a second its workers take no new jobs: running handlers finish and settle,
        and take-over stops. Firing goes on, so the jobs wait in the stream, undelivered,
        until `resume`. The pause is kept in Redis: it holds across worker restarts.

        Raises:
            UnknownTopicError: No such topic.
            UnknownGroupError: The topic has no consumer group `group`.
        """
        return self._run(pauses.pause(self._producer, topic, group))

    def resume(self, topic: str, group: str | None = None) -> PauseState:
        """Resume `group` of `topic` (None: the topic and every group paused on its own);
        returns what is still paused. Resuming what is not paused changes nothing.

        Raises:
            UnknownTopicError: No such topic.
            InvalidArgumentError: `group` given while the topic is paused as a whole.
            UnknownGroupError: The topic has no consumer group `group` (and no pause of it).
        """
        return self._run(pauses.resume(self._producer, topic, group))

    def paused(self, topic: str) -> PauseState:
        """What is paused of `topic` (nothing, for a topic that does not exist)."""
        return self._run(pauses.paused(self._producer, topic))

    def set_events(
        self,
        topic: str,
        enabled: bool = True,
        *,
        max_len: int = EVENTS_MAX_LEN,
        max_age_ms: int = EVENTS_MAX_AGE_MS,
    ) -> EventsConfig:
        """Turn the topic's job events on (or off): from then on every shard keeps a stream of
        what happens to its jobs (fired, started, succeeded, retrying, dead, cancelled, and
        its groups paused and resumed), about `max_len` events a shard for at most
        `max_age_ms`; `AsyncClient.events` follows them. Off, they cost nothing.

        Raises:
            InvalidArgumentError: `enabled` not a bool; `max_len` not an int in [100,
                10,000,000]; `max_age_ms` not one in [60,000, a year].
        """
        config = EventsConfig(enabled, max_len, max_age_ms)
        return self._run(job_events.configure(self._producer, topic, config))

    def events_config(self, topic: str) -> EventsConfig:
        """The topic's events setting (`UnknownTopicError` for a topic that does not exist)."""
        return self._run(job_events.config_of(self._producer, topic))

    def stats(self, topic: str) -> TopicStats | None:
        """Pending and ready counts per shard, and the spool's (`TopicStats.spool`); None
        for an unknown topic."""
        return with_spool(self._run(self._producer.stats(topic)), self.spool_stats())

    @property
    def counts(self) -> ProducerCounts:
        """Jobs this client enqueued and cancelled (what `wheelq.metrics` exports)."""
        return self._producer.counts

    def spool_stats(self) -> SpoolStats | None:
        """The spool's depth (jobs waiting in it) and age (ms since the oldest was spooled),
        read without Redis; None without a spool."""
        return None if self._drain is None else self._drain.drain.stats()

    def dead_letters(
        self,
        topic: str,
        limit: int = 100,
        *,
        after: str | None = None,
        reason: str | None = None,
        group: str | None = None,
        scan_limit: int | None = None,
    ) -> dl.DeadLetterPage:
        """The topic's oldest `limit` dead letters (1-100000), oldest first; with `after`
        (the `next` of the page before, or a dead letter's ref), the ones after it.

        Args:
            reason: Only those dead-lettered for this reason (``failed``, ``deliveries``,
                ``malformed``).
            group: Only those of this consumer group.
            scan_limit: With a filter, read through at most this many dead letters (None:
                as many as it takes); the page then ends early, and its `next` goes on.

        Raises:
            UnknownTopicError: No such topic (as `replay` and `purge_dead`).
        """
        match = dl.DeadFilter.of(reason, group)
        return self._run(dl.dead_letters(self._producer, topic, limit, after, match, scan_limit))

    def replay(
        self,
        topic: str,
        refs: dl.Refs = None,
        *,
        reason: str | None = None,
        group: str | None = None,
    ) -> dl.Replayed:
        """Run dead letters again: each goes back to its stream as attempt 1, due now, for
        the group it failed in. `refs`: DeadLetters or their refs; None = all, or all of
        that `reason` and/or `group`. Returns how many were replayed, an int whose
        ``skipped`` counts those asked for that cannot be and stay dead letters: malformed
        ones (reason ``malformed``) and those whose payload nests past 100 levels.

        Raises:
            UnknownTopicError: No such topic.
            InvalidArgumentError: A ref is not ``"shard/ms-seq"`` of this topic, a filter is
                not valid, refs and a filter are both given, or a dead letter named in
                `refs` is malformed (nothing is replayed).
            PayloadTooDeepError: A dead letter named in `refs` has a payload nested past
                ``wheelq.core.payload.MAX_PAYLOAD_DEPTH`` levels (nothing is replayed).
        """
        match = dl.DeadFilter.of(reason, group)
        return self._run(dl.replay(self._producer, topic, refs, match))

    def purge_dead(
        self,
        topic: str,
        refs: dl.Refs = None,
        *,
        reason: str | None = None,
        group: str | None = None,
    ) -> int:
        """Delete dead letters (`refs` and the filter as in `replay`; None = all); returns
        how many went."""
        match = dl.DeadFilter.of(reason, group)
        return self._run(dl.purge_dead(self._producer, topic, refs, match))

    def set_limits(
        self, topic: str, *, max_pending: int | None = None, max_ready: int | None = None
    ) -> TopicLimits:
        """Set the topic's backpressure limits (None: no limit; kept per shard as
        ``ceil(limit / shards)``; docs/guides/flow-control.md); returns them.

        Args:
            max_pending: Most jobs waiting to fire; an enqueue past it raises `TopicFullError`.
            max_ready: Most fired jobs the slowest group has not acked; past it due jobs are
                held back and fire late, as workers catch up.
        """
        return self._run(self._producer.set_limits(topic, max_pending, max_ready))

    def limits(self, topic: str) -> TopicLimits:
        """The topic's limits (`UnknownTopicError` for an unknown topic)."""
        return self._run(self._producer.limits(topic))

    def schedule(
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
        """Create or update the recurring schedule `name` of `topic`; returns it.

        Each run is an ordinary job with the id ``<name>@<occurrence ms>``, written by a
        scheduler node shortly before it is due, so it fires on time and exists once,
        whatever nodes run or die. Calling it again with the same name updates the
        schedule from its first run not yet written (declare schedules at start-up).

        Args:
            name: 1-100 characters from [A-Za-z0-9_.:-], unique within the topic.
            topic: Where the runs are enqueued (created if new).
            payload: What every run carries (msgpack-serialisable).
            cron: Five cron fields, read in `tz` (``"30 2 * * *"``); or
            every_ms: an interval, 100 ms to 366 days: runs at ``start + k * every_ms``
                (from the Unix epoch without `start`).
            tz: IANA zone for `cron` ("Europe/Berlin"); spring forward runs a skipped
                time at the next valid one, fall back runs a repeated time once.
            start: No run before this (epoch seconds or an aware datetime), at most ten
                years from now, as a job's `at`.
            end: No run after this (epoch seconds or an aware datetime), at most ten years
                from now.
            misfire: Runs missed while no scheduler ran: "once" runs the latest of them
                now, "all" the latest `max_catch_up` in order, "skip" none.
            max_catch_up: 1-10,000 (for misfire="all").
            max_attempts: As for `enqueue`, for every run.
            callback: As for `enqueue`, for every run.

        Raises:
            InvalidArgumentError: A parameter out of range (named in the message).
        """
        op = schedules.define(
            self._producer, name, topic, payload, cron=cron, every_ms=every_ms, tz=tz,
            start=start, end=end, misfire=misfire, max_catch_up=max_catch_up,
            max_attempts=max_attempts, callback=callback,
        )  # fmt: skip
        return self._run(op)[0]

    def get_schedule(self, name: str, topic: str) -> Schedule | None:
        """The schedule `name` of `topic`, None if there is none."""
        return self._run(schedules.get(self._producer, name, topic))

    def schedules(self, topic: str | None = None) -> list[Schedule]:
        """Every schedule (of `topic` when given), by topic and name; a stored record that
        cannot be read is listed with the reason in its `error` (it never runs)."""
        return self._run(schedules.every(self._producer, topic))

    def pause_schedule(self, name: str, topic: str) -> bool:
        """Stop writing runs and cancel the ones written ahead; False if no such schedule."""
        return self._run(schedules.change(self._producer, name, topic, "pause"))

    def resume_schedule(self, name: str, topic: str) -> bool:
        """Run again from now on (runs that fell while paused are skipped)."""
        return self._run(schedules.change(self._producer, name, topic, "resume"))

    def unschedule(self, name: str, topic: str) -> bool:
        """Remove the schedule and cancel its runs written ahead; False if there was none."""
        return self._run(schedules.change(self._producer, name, topic, "remove"))

    def close(self) -> None:
        """Close the connections; with a spool, stop its drain first (what it has not
        replayed stays in the file, for the next client on it).

        Safe in a signal handler: one that interrupts a call of this client on the same
        thread (which may hold the spool's or the pool's lock) closes the client as that
        call returns, instead of waiting on the lock the call holds."""
        if getattr(self._inside, "calls", 0):
            self._close_pending = True
            return
        self._close()

    def _close(self) -> None:
        if self._drain is not None:
            self._drain.close(self._executor.close)
        self._executor.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
