"""The blocking producer client, `Client`. `AsyncClient` has the same methods, awaitable;
both drive the operations of `wheelq.producer.operations` (a test checks the two match).
"""

from __future__ import annotations

import threading
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
from wheelq.producer.connected import Connected
from wheelq.producer.durability import Durability
from wheelq.producer.items import EnqueueItem
from wheelq.producer.moved import Moved, admin_of, warn_once
from wheelq.producer.operations import (
    Op,
    ProducerCounts,
    SpoolStats,
    TopicStats,
    guarded,
    with_spool,
)
from wheelq.producer.spool import DrainService, DrainThread, Path, attach_spool
from wheelq.store import connect
from wheelq.store.acked import Wait
from wheelq.store.call import Call
from wheelq.store.executor import drive

T = TypeVar("T")


class Client(Connected):
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
        super().__init__(connection, settings)
        self._durability = Durability(ack, self._producer)
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
        checked = ClientSettings.from_kwargs(settings)
        executor = connect.sync_executor(url, redis_options or {}, cluster)
        return cls(executor.client, checked, spool=spool, ack=ack)._over(executor)

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

    @takes(EnqueueKwargs)
    def enqueue(self, topic: str, payload: Any, **options: Unpack[EnqueueKwargs]) -> str:
        """Enqueue `payload` on `topic`, due after `delay` or at `at` (neither: now).

        Args:
            topic: Topic name, 1-100 characters from [A-Za-z0-9_.-]; created on first use.
            payload: Any msgpack-serialisable value (at most `max_payload_bytes` encoded).

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
        op, ack = flows.enqueue_call(self._producer, topic, payload, options)
        return self._write(topic, op, ack)

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

    def enqueue_flow(
        self,
        parent: JobSpec,
        children: Sequence[JobSpec | FlowSpec],
        *,
        on_child_failure: str = "fail",
    ) -> Joined:
        """Enqueue a join: `children` (up to 10,000 `JobSpec`s, on any topics) run as jobs
        do; `parent` awaits them all and becomes due its ``delay`` after the last one
        succeeded in its group. A child may be a `FlowSpec`: a flow of its own, written
        first, counting as one child (docs/guides/workflows.md, "Flows inside flows").
        Returns the ids (`Joined.id`, the parent's, is the flow's).

        `on_child_failure`: ``"fail"`` (default) dead-letters the parent with the first
        failed child's error, never run, and cancels the children still pending;
        ``"ignore"`` runs the parent once every child has ended. A child dead-lettered,
        cancelled or dropped at its expiry has failed. The children are written first, then
        the parent: a call that raised part-way may have written children, never a parent
        that could wait forever (docs/architecture.md, "Jobs that follow jobs").

        Raises:
            InvalidArgumentError: A bad spec (named ``parent`` or ``children[i]``), policy,
                or the parent's ``at``/``replace``; nothing written.
            DuplicateJobError: The parent's id is pending (nothing written), or a child's
                (children before it written, no parent).
        """
        policy = policy_of(OnChildFailure, on_child_failure, "on_child_failure")
        return self._run(flows.enqueue_flow(self._producer, parent, children, policy))

    @takes(BulkOptions)
    def enqueue_bulk(
        self, topic: str, payloads: Iterable[Any], **options: Unpack[BulkOptions]
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
        op = self._producer.enqueue_bulk(topic, payloads, options)
        return self._write(topic, op, options.get("ack"))

    @overload
    def cancel(self, topic: str, job_id: str, *, ack: str | None = None) -> bool: ...
    @overload
    def cancel(self, topic: str, *, key: str, ack: str | None = None) -> int: ...
    @overload
    def cancel(
        self, topic: str, job_id: str, *, tree: Literal[True], ack: str | None = None
    ) -> int: ...
    def cancel(
        self,
        topic: str,
        job_id: str | None = None,
        *,
        key: str | None = None,
        tree: bool = False,
        ack: str | None = None,
    ) -> bool | int:
        """Cancel a pending job, with every consumer group's retry of it; False when none
        is pending (fired, cancelled, unknown). With `key` instead of an id: every pending
        job of that key (and each retry of one; those due and waiting on the due line too),
        found through the topic's key index at a cost of the key's jobs whatever else is
        pending; how many were cancelled (docs/architecture.md, "Jobs by key"). With
        ``tree=True``: the job, a flow parent's children (and theirs), and every job that
        follows one of them, whatever its ``on_parent_failure``; how many were cancelled
        (docs/guides/workflows.md). `ack` as for
        `enqueue` (`DurabilityError`: not confirmed; its ``result`` is this call's answer on
        the primary)."""
        done: bool | int = self._write(
            topic, by_key.cancel_call(self._producer, topic, job_id, key, tree), ack
        )
        return done

    @overload
    def reschedule(
        self,
        topic: str,
        job_id: str,
        *,
        delay: Delay | None = None,
        at: At | None = None,
        ack: str | None = None,
    ) -> bool: ...
    @overload
    def reschedule(
        self,
        topic: str,
        *,
        key: str,
        by: float | timedelta | None = None,
        to: At | None = None,
        ack: str | None = None,
    ) -> int: ...
    @overload
    def reschedule(
        self,
        topic: str,
        job_id: str,
        *,
        tree: Literal[True],
        by: float | timedelta | None = None,
        to: At | None = None,
        ack: str | None = None,
    ) -> int: ...
    def reschedule(
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
        """Move a pending job, with every consumer group's retry of it, to a new due time
        (`delay` or `at`); False when none is pending. With `key` instead of an id: every
        pending job of that key, each `by` a shift from its own due time (seconds or a
        timedelta, either sign) or all `to` one time; how many moved (a job that fired,
        was cancelled or was written again while the call ran is left alone). With
        ``tree=True`` and `by` or `to`: every pending job of the job's tree (as ``cancel``'s
        finds it), each shifted from its own due time as it is when moved (read and moved in
        one step), or all to one time; a job awaiting another stays so (it becomes due
        relative to its release); how many moved. `ack` as for `cancel`."""
        op = by_key.reschedule_call(self._producer, topic, job_id, delay, at, key, by, to, tree)
        moved: bool | int = self._write(topic, op, ack)
        return moved

    def get(self, topic: str, job_id: str) -> JobInfo:
        """Where job `job_id` is in its life, whatever the state (docs/guides/producing.md).

        Raises:
            MalformedJobError: The job is pending and its stored envelope cannot be decoded.
        """
        return self._run(self._producer.get(topic, job_id))

    def children(self, topic: str, job_id: str, *, limit: int | None = None) -> list[JobInfo]:
        """The children of the join whose parent is `job_id` (`enqueue_flow`), in the order
        given, each as `get()` shows it: what a parent's handler reads their results from
        (``info.groups[i].result``). Kept while the parent waits and 3 days after. `limit`:
        the first that many (1-10,000) only.

        Raises:
            UnknownJobError: `job_id` is no join's parent (or its list has expired).
        """
        return self._run(flows.children(self._producer, topic, job_id, limit))

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

    # --- moved to Admin: kept for one release (wheelq.producer.moved) -------------

    create_topic = Moved("Admin")
    topics = Moved("Admin")
    shards = Moved("Admin")
    drop_topic = Moved("Admin")
    groups = Moved("Admin")
    create_group = Moved("Admin")
    delete_group = Moved("Admin")
    pause = Moved("Admin")
    resume = Moved("Admin")
    paused = Moved("Admin")
    set_events = Moved("Admin")
    events_config = Moved("Admin")
    dead_letters = Moved("Admin")
    replay = Moved("Admin")
    purge_dead = Moved("Admin")
    set_limits = Moved("Admin")
    limits = Moved("Admin")
    schedule = Moved("Admin")
    get_schedule = Moved("Admin")
    schedules = Moved("Admin")
    pause_schedule = Moved("Admin")
    resume_schedule = Moved("Admin")
    unschedule = Moved("Admin")

    def stats(self, topic: str) -> TopicStats | None:
        """Deprecated: moved to `Admin.stats`; this client's spool is `spool_stats`."""
        warn_once("Client.stats", "Admin.stats")
        return with_spool(admin_of(self).stats(topic), self.spool_stats())

    @property
    def counts(self) -> ProducerCounts:
        """Jobs this client enqueued and cancelled (what `wheelq.metrics` exports)."""
        return self._producer.counts

    def spool_stats(self) -> SpoolStats | None:
        """The spool's depth (jobs waiting in it) and age (ms since the oldest was spooled),
        read without Redis; None without a spool."""
        return None if self._drain is None else self._drain.drain.stats()

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
