"""The producer's operations as sans-I/O generators that `Client` and `AsyncClient` drive,
with the breaker guard and enqueue placement (docs/architecture.md).
"""

from __future__ import annotations

import secrets
from collections import defaultdict
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Protocol, Self, TypeVar, cast, overload

from wheelq.core import keys as k
from wheelq.core.due import At, Delay, DueSpec, debounce_spec, due_spec, duration_ms
from wheelq.core.expiry import absolute
from wheelq.core.far_tier import DEFAULT_HORIZON_MS, validate_horizon
from wheelq.core.flow import LimitsChange, TopicLimits, order_keys
from wheelq.core.follow import NO_RELATIONS, relations
from wheelq.core.history import (
    SEPARATOR,
    JobInfo,
    JobState,
    job_info,
    with_pauses,
    with_starts,
)
from wheelq.core.options import (
    BulkOptions,
    EnqueueKwargs,
    EnqueueOptions,
    ItemOptions,
    orders,
    stored_values,
)
from wheelq.core.process import held_by_workers
from wheelq.core.settings import ClientSettings
from wheelq.core.trace import validate_traceparent
from wheelq.errors import (
    DuplicateJobError,
    InvalidArgumentError,
    InvalidDelayError,
    InvalidJobIdError,
    RedisUnavailableError,
    ScriptError,
    TopicConfigError,
    TopicFullError,
    TopicNotEmptyError,
    UnknownTopicError,
)
from wheelq.producer import enqueue_bulk as bulk
from wheelq.producer.items import (
    EXPIRES,
    EncodeBatch,
    EnqueueItem,
    columns_of,
    validate_batch,
    validate_item,
    validate_options,
)
from wheelq.runtime import tracing
from wheelq.runtime.breaker import Breaker
from wheelq.runtime.clock import WallClock
from wheelq.runtime.outage import is_transient, unavailable_reason
from wheelq.runtime.tracing import Tracing
from wheelq.store import (
    enqueue,
    flow,
    follow,
    history,
    leases,
    pauses,
    processes,
    results,
    schedules,
    topics,
    unled,
)
from wheelq.store.call import Call
from wheelq.store.enqueue import JobWrite
from wheelq.store.limits import read_limits, read_weights, write_limits, write_weights
from wheelq.store.observe import observe_shards
from wheelq.store.scripts import Placed

T = TypeVar("T")
Op = Generator[list[Call[Any]], list[Any], T]

_CALL_ONLY = ("ack", "debounce_ms", "max_wait_ms", "debounce", "max_wait")  # of the call
_CALL_ONLY_SET = frozenset(_CALL_ONLY)
PIPELINE_CALLS = 64  # script calls per round trip in enqueue_many
Placing = list[tuple[list[str], Call[list[Placed]]]]
"""Each enqueue call with the ids it places, in the order of its arguments."""


def guarded(breaker: Breaker, op: Op[T]) -> Op[T]:
    """`op` with `breaker` asked before each round trip and told how it went
    (docs/architecture.md, "The producer spool and breaker")."""
    try:
        calls = next(op)
        while True:
            try:
                probe = breaker.admit()
            except RedisUnavailableError as refused:
                calls = op.throw(refused)
                continue
            try:
                replies: Any = yield calls
            except GeneratorExit:
                breaker.abandon(probe)
                raise
            except Exception as exc:
                breaker.report(probe, exc)
                calls = op.throw(as_unavailable(exc))
                continue
            breaker.report(probe, None)
            calls = op.send(replies)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def as_unavailable(exc: Exception) -> Exception:
    """`exc` as `RedisUnavailableError` when it says Redis cannot take calls now."""
    reason = unavailable_reason(exc)
    if reason is None or isinstance(exc, RedisUnavailableError):
        return exc
    unavailable = RedisUnavailableError(f"redis {reason}: {exc}", reason)
    unavailable.__cause__ = exc
    return unavailable


class ShardTotal:
    """A read-only attribute: the sum of the same-named field over the owner's `shards`."""

    __slots__ = ("field",)

    def __set_name__(self, owner: type, name: str) -> None:
        self.field = name

    @overload
    def __get__(self, obj: None, owner: type) -> Self: ...
    @overload
    def __get__(self, obj: object, owner: type) -> int: ...
    def __get__(self, obj: object, owner: type) -> Self | int:
        if obj is None:
            return self
        return sum(getattr(s, self.field) for s in obj.shards)  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class ShardStats:
    """One shard of `TopicStats`."""

    shard: int
    pending: int
    """Jobs waiting for their due time (sorted set size)."""
    ready: int
    """Fired and not yet delivered to the consumer group furthest behind, plus `waiting`."""
    dead: int = 0
    in_flight: int = 0
    """Delivered and not settled yet, summed over groups."""
    in_stream: int = 0
    """Fired and not trimmed yet, handled ones included."""
    far: int = 0
    """Of `pending`, the jobs kept in the far tier (due beyond the topic's far horizon)."""
    unled: bool = False
    """Jobs come due within a minute (overdue included) and no scheduler node leads the
    shard (`wheelq.store.unled`): nothing fires there until one does."""

    expired: int = 0
    """Jobs dropped at their expiry, never run (``expires=``), since the shard was made."""
    waiting: int = 0
    """Of `ready`, the jobs due and waiting on the shard's due line for their turn to enter
    the stream (docs/architecture.md, "The due line"); not in `pending`."""


@dataclass(frozen=True, slots=True)
class SpoolStats:
    """What `Client.spool_stats()` reports about a client's spool."""

    path: str
    depth: int
    """Jobs waiting in the spool to be replayed into Redis."""
    age_ms: int
    """Ms since the oldest waiting job was spooled; 0 when empty."""
    rejected: int = 0
    """Jobs Redis refused for good (kept in the ``rejected`` table, never replayed)."""
    last_error: str | None = None
    """Why the drain's last try failed, while it keeps failing."""


@dataclass(frozen=True, slots=True)
class TopicStats:
    """What `stats()` returns: a topic's shards, with totals over them."""

    topic: str
    shards: list[ShardStats]
    spool: SpoolStats | None = None
    """The client's spool (all its topics), from the deprecated `Client.stats`; None
    from `Admin.stats`, and for a client without one."""
    paused_since_ms: int | None = None
    """Since when the topic has been paused as a whole, every group (Redis clock ms); None:
    it is not."""
    paused_groups: dict[str, int] = field(default_factory=dict)
    """Groups paused on their own -> since when (Redis clock ms)."""
    far_horizon_ms: int = DEFAULT_HORIZON_MS
    """Jobs due further ahead than this are kept in the far tier (0: none; docs/architecture.md,
    "The far tier")."""

    pending = ShardTotal()
    """Jobs waiting for their due time."""
    ready = ShardTotal()
    """Fired, not yet delivered to the consumer group furthest behind (every entry while no
    group reads the stream), and the jobs `waiting` on the due line."""
    in_flight = ShardTotal()
    """Delivered and not settled, summed over groups."""
    in_stream = ShardTotal()
    """Entries in the stream: fired, not yet trimmed."""
    dead = ShardTotal()
    """Dead letters."""
    far = ShardTotal()
    """Of `pending`, the jobs kept in the far tier."""
    unled = ShardTotal()
    """Shards with jobs due within a minute and no scheduler node leading them (0: none)."""

    expired = ShardTotal()
    """Jobs dropped at their expiry, never run."""
    waiting = ShardTotal()
    """Of `ready`, the jobs due and waiting their turn on the due line (not fired yet)."""


@dataclass(slots=True)
class ProducerCounts:
    """What a client did, for `wheelq.metrics`."""

    enqueued: int = 0
    """Jobs whose enqueue returned their id (spooled ones too)."""
    cancelled: int = 0


def with_spool(stats: TopicStats | None, spool: SpoolStats | None) -> TopicStats | None:
    return stats if stats is None or spool is None else replace(stats, spool=spool)


Place = Callable[[str, list[JobWrite], list[str]], Op[list[str]]]
"""Placing validated jobs in Redis, noting in the list each id Redis confirmed."""


class Spooling(Protocol):
    """Where a client with a spool sends its enqueues (`wheelq.producer.spool.Spooler`, which
    the spool attaches): to Redis through `place`, or into the spool."""

    def write(self, topic: str, writes: list[JobWrite], place: Place) -> Op[list[str]]: ...


class Producer:
    """Validation, placement and batching shared by `Client` and `AsyncClient`."""

    def __init__(
        self, settings: ClientSettings, block_ms: Callable[[int], int] | None = None
    ) -> None:
        self.settings = settings
        self.block_ms: Callable[[int], int] = block_ms or (lambda ms: ms)
        """A block cut to what one call may ask of the client's connections (the executor's
        `block_ms`; without one, as asked)."""
        self._shards: dict[str, int] = {}
        self._clock = WallClock()
        self.spooler: Spooling | None = None
        self.tracing = tracing.load()  # None without the ``otel`` extra
        self.counts = ProducerCounts()
        self._callback_topics: set[str] = set()

    @property
    def clock(self) -> WallClock:
        return self._clock

    # --- topics ---------------------------------------------------------------------------

    def create_topic(self, topic: str, shards: int | None = None) -> Op[int]:
        k.validate_topic(topic)
        want = k.validate_shards(self.settings.default_shards if shards is None else shards)
        _, have = yield [topics.register_topic(topic, want), topics.topic_shards(topic)]
        if shards is not None and have != want:
            raise TopicConfigError(
                f"topic {topic!r} exists with {have} shards; shards={want} cannot change it"
            )
        self._shards[topic] = have
        return int(have)

    def shard_count(self, topic: str, *, create: bool) -> Op[int | None]:
        k.validate_topic(topic)
        if topic in self._shards:
            return self._shards[topic]
        if create:
            return (yield from self.create_topic(topic))
        (have,) = yield [topics.topic_shards(topic)]
        if have is not None:
            self._shards[topic] = have
        return have  # type: ignore[no-any-return]

    def forget(self, topic: str) -> None:
        self._shards.pop(topic, None)

    def topics(self) -> Op[dict[str, int]]:
        (registry,) = yield [topics.all_topics()]
        assert isinstance(registry, k.Registry)
        self._shards.update(registry.shards)
        return registry.check()

    def drop_topic(self, topic: str, force: bool) -> Op[bool]:
        k.validate_topic(topic)
        if not isinstance(force, bool):
            raise InvalidArgumentError("force", f"force must be a bool, got {force!r}")
        (shards,) = yield [topics.topic_shards(topic)]
        if shards is None:
            return False
        universe = k.all_shards(topic, shards)
        if not force:
            _raise_if_busy(topic, (yield [topics.drop_shard(keys, "check") for keys in universe]))
        mode = "force" if force else "drop"
        left = universe
        while left:  # a far tier goes in steps: the shards that say more are called again
            replies = yield [topics.drop_shard(keys, mode) for keys in left]
            _raise_if_busy(topic, replies)
            left = [keys for keys, o in zip(left, replies, strict=True) if o.more]
        unpause = list((yield from pauses.topic_pauses(topic)))
        yield [
            topics.unregister_topic(topic),
            topics.unmark_callback_topic(topic),
            leases.forget_nodes(topic),
            schedules.unindex(universe),
            *([pauses.clear_pauses(unpause)] if unpause else []),
        ]
        self._shards.pop(topic, None)
        self._callback_topics.discard(topic)
        return True

    def set_limits(self, topic: str, change: LimitsChange) -> Op[TopicLimits]:
        shards = yield from self.shard_count(topic, create=True)
        assert shards is not None
        fields = change.fields(shards)
        calls: list[Call[Any]] = []
        for keys in k.all_shards(topic, shards):
            if change.weights is not None:  # before "fair": fair turns on with its weights
                calls.append(write_weights(keys, change.weights))
            calls += write_limits(keys, fields)
        if "ordered" in fields:  # fair on: workers read ahead less at once (their pause watch)
            yield from pauses.write_then_announce(topic, calls)
        elif calls:
            yield calls
        return (yield from self._read_limits(topic))

    def set_far_horizon(self, topic: str, horizon_ms: object) -> Op[int]:
        horizon = None if horizon_ms is None else validate_horizon(horizon_ms)
        shards = yield from self.shard_count(topic, create=True)
        assert shards is not None
        yield [
            c for keys in k.all_shards(topic, shards) for c in write_limits(keys, {"far": horizon})
        ]
        return DEFAULT_HORIZON_MS if horizon is None else horizon

    def limits(self, topic: str) -> Op[TopicLimits]:
        shards = yield from self.shard_count(topic, create=False)
        if shards is None:
            raise UnknownTopicError(topic)
        return (yield from self._read_limits(topic))

    def _read_limits(self, topic: str) -> Op[TopicLimits]:
        first = k.ShardKeys(topic, 0)  # every shard holds the same settings: shard 0 says them
        raw, weights = yield [read_limits(first), read_weights(first)]
        return TopicLimits.from_fields(raw, weights)

    # --- jobs -----------------------------------------------------------------------------

    def enqueue(
        self, topic: str, item: EnqueueItem, debounce: tuple[int, int] | None = None
    ) -> Op[str]:
        k.validate_topic(topic)
        if debounce is not None:
            return (yield from self._debounce(topic, item, *debounce))
        write = partial(self._enqueue, topic, item)
        ids = yield from sending(self.tracing, topic, item.traceparent, write, batch=False)
        return ids[0]

    def _enqueue(self, topic: str, item: EnqueueItem, traceparent: str | None) -> Op[list[str]]:
        batch = EncodeBatch(self._clock.now_ms(), traceparent)
        write = validate_item(self.settings, item, batch)
        yield from self.note_callbacks(topic, batch.callbacks)
        return (yield from self.counted(topic, [write]))

    def _debounce(self, topic: str, item: EnqueueItem, debounce_ms: int, wait_ms: int) -> Op[str]:
        if item.job_id is None:
            raise InvalidJobIdError("job_id", "debounce_ms needs a job_id: the id calls share")
        if item.delay is not None or item.at is not None:
            raise InvalidDelayError("delay", "pass debounce_ms or delay/at, not both")
        batch = EncodeBatch(self._clock.now_ms(), item.traceparent)
        write = validate_item(self.settings, item, batch)
        yield from self.note_callbacks(topic, batch.callbacks)
        shards = yield from self.shard_count(topic, create=True)
        assert shards is not None
        keys = k.ShardKeys(topic, k.shard_of(write.id, shards))
        yield [enqueue.debounce(keys, write.id, debounce_ms, wait_ms, write.envelope)]
        self.counts.enqueued += 1
        return write.id

    def enqueue_many(
        self, topic: str, items: Iterable[EnqueueItem | Mapping[str, Any]]
    ) -> Op[list[str]]:
        k.validate_topic(topic)
        write = partial(self._enqueue_many, topic, items)
        return (yield from sending(self.tracing, topic, None, write, batch=True))

    def _enqueue_many(
        self, topic: str, items: Iterable[EnqueueItem | Mapping[str, Any]], traceparent: str | None
    ) -> Op[list[str]]:
        batch = EncodeBatch(self._clock.now_ms(), traceparent)
        # the spooler keeps JobWrites (Redis may be away): the items' path
        columns = columns_of(self.settings, items, batch) if self.spooler is None else None
        if columns is not None:
            return (yield from self._columns(topic, *columns))
        writes = validate_batch(self.settings, items, traceparent, batch.now_ms, batch)
        if not writes:
            return []
        yield from self.note_callbacks(topic, batch.callbacks)
        return (yield from self.counted(topic, writes))

    def enqueue_call(
        self, topic: str, payload: Any, options: EnqueueKwargs
    ) -> tuple[Op[str], str | None]:
        """`Client.enqueue`'s operation, and the ack level it asks for."""
        if _CALL_ONLY_SET.isdisjoint(options):  # the usual call: a job's options alone
            item = EnqueueItem(payload=payload, **cast(ItemOptions, options))
            return self.enqueue(topic, item), None
        rest = dict(options)
        ack, debounce_ms, max_wait_ms, debounce, max_wait = [rest.pop(n, None) for n in _CALL_ONLY]
        if debounce is not None:
            debounce_ms = duration_ms(
                debounce, debounce_ms, name="debounce", alias="debounce_ms", min_ms=1
            )
        if max_wait is not None:
            max_wait_ms = duration_ms(max_wait, max_wait_ms, name="max_wait", alias="max_wait_ms")
        item = EnqueueItem(payload=payload, **cast(ItemOptions, rest))
        bounce = None if debounce_ms is None else debounce_spec(debounce_ms, max_wait_ms)
        return self.enqueue(topic, item, bounce), cast(str | None, ack)

    def enqueue_bulk(
        self, topic: str, payloads: Iterable[Any], options: BulkOptions
    ) -> Op[list[str]]:
        """`Client.enqueue_bulk`'s operation (the ack level is the caller's)."""
        k.validate_topic(topic)
        items = bulk.payload_list(payloads)
        shared = {n: v for n, v in options.items() if n != "ack"}
        # one item's options stand for all the jobs': checked once, here
        item = EnqueueItem(payload=None, **cast(ItemOptions, shared))
        now_ms = self._clock.now_ms()
        checked = validate_options(self.settings, item, EncodeBatch(now_ms))
        write = partial(self._enqueue_bulk, topic, items, item, checked, now_ms)
        return (yield from sending(self.tracing, topic, None, write, batch=True))

    def _enqueue_bulk(
        self,
        topic: str,
        payloads: list[Any],
        item: EnqueueItem,
        checked: EnqueueOptions,
        now_ms: int,
        traceparent: str | None,
    ) -> Op[list[str]]:
        if not payloads:
            return []
        max_bytes, attempts, due = (
            self.settings.max_payload_bytes,
            checked.max_attempts,
            checked.due,
        )
        stored = absolute(stored_values(item, traceparent), EXPIRES, now_ms)
        if self.spooler is not None:  # it keeps JobWrites (Redis may be away): the per-item path
            columns = bulk.encode(payloads, max_bytes, attempts, now_ms, stored, 1)
            return (yield from self.counted(topic, bulk.as_writes(due, columns)))
        encoded = bulk.encode_jobs(payloads, max_bytes, attempts, now_ms, stored)
        return (yield from self._columns(topic, due, *encoded, orders(stored)))

    def _columns(
        self, topic: str, due: DueSpec, ids: list[str], envelopes: list[bytes], lined: bool
    ) -> Op[list[str]]:
        """Place jobs encoded as columns (`bulk.encode_jobs`) and count them."""
        shards = self._shards.get(topic)
        if shards is None:
            shards = yield from self.shard_count(topic, create=True)
        assert shards is not None
        columns = bulk.by_shard(ids, envelopes, shards, lined)
        calls = bulk.enqueue_calls(topic, due, columns, self.settings.batch_size)
        try:
            ids = yield from send_calls(topic, columns.ids, calls, None)
        except TopicFullError as exc:
            self.counts.enqueued += len(exc.enqueued)
            raise
        self.counts.enqueued += len(ids)
        return ids

    def note_callbacks(self, topic: str, callbacks: bool) -> Op[None]:
        """Put `topic` on the deliverer's list; an outage here does not stop the write."""
        if not callbacks or topic in self._callback_topics:
            return
        try:
            yield [topics.mark_callback_topic(topic)]
        except Exception as exc:
            if not is_transient(exc):
                raise
            return
        self._callback_topics.add(topic)

    def counted(self, topic: str, writes: list[JobWrite]) -> Op[list[str]]:
        """Place validated jobs and count them (a key's order registered first)."""
        if any(w.order_key for w in writes):
            yield from register_order(topic, writes)
        try:
            ids = yield from self._write(topic, writes)
        except (DuplicateJobError, TopicFullError) as exc:
            self.counts.enqueued += len(exc.enqueued)
            raise
        self.counts.enqueued += len(ids)
        return ids

    def _write(
        self, topic: str, writes: list[JobWrite], applied: list[str] | None = None
    ) -> Op[list[str]]:
        """Place validated jobs, or hand them to the spooler, which calls back with `applied`."""
        if self.spooler is not None and applied is None:
            return (yield from self.spooler.write(topic, writes, self._write))
        shards = self._shards.get(topic)  # the topic name was validated by the caller
        if shards is None:
            shards = yield from self.shard_count(topic, create=True)
        assert shards is not None
        record_ms = self.settings.spool_call_record_ms if applied is not None else 0
        calls = enqueue_calls(topic, writes, shards, self.settings.batch_size, record_ms)
        return (yield from send_calls(topic, [w.id for w in writes], calls, applied))

    def cancel(self, topic: str, job_id: str) -> Op[bool]:
        keys = yield from self.job_keys(topic, job_id)
        if keys is None:
            return False
        (done,) = yield [enqueue.cancel(keys, job_id)]
        self.counts.cancelled += bool(done)
        return bool(done)

    def reschedule(self, topic: str, job_id: str, delay: Delay | None, at: At | None) -> Op[bool]:
        if delay is None and at is None:
            raise InvalidDelayError("delay", "reschedule needs delay or at (use delay=0 for now)")
        due = due_spec(delay, at, now_ms=self._clock.now_ms())
        keys = yield from self.job_keys(topic, job_id)
        if keys is None:
            return False
        (placed,) = yield [enqueue.reschedule(keys, job_id, due)]
        return placed is not None

    def get(self, topic: str, job_id: str) -> Op[JobInfo]:
        keys = yield from self.job_keys(topic, job_id)
        if keys is None:
            return JobInfo(job_id, topic, JobState.UNKNOWN)
        raw, edges, record, children = yield [
            history.lookup(keys, job_id),
            *follow.relation_reads(keys, job_id),
        ]
        found = job_info(topic, job_id, raw)
        tied = relations(edges, record, children)
        if tied is not NO_RELATIONS:
            found = replace(
                found, parent=tied.parent, continuations=tied.continuations,
                after=tied.after, children=tied.children,
            )  # fmt: skip
        (info,) = yield from self.with_kept_results([(keys, found)])
        if any(g.state is JobState.RUNNING for g in info.groups):
            (found,) = yield [processes.live()]  # when its worker started it, as it beat
            info = with_starts(info, keys.shard, held_by_workers(found.processes))
        waiting = [g.group for g in info.groups if g.state is JobState.READY]
        if not waiting:
            return info
        (paused,) = yield [pauses.read_pause_state(topic, waiting)]  # a bounded HMGET
        return with_pauses(info, paused)

    def stats(self, topic: str) -> Op[TopicStats | None]:
        shards = yield from self.shard_count(topic, create=False)
        if shards is None:
            return None
        now_ms = self._clock.now_ms()
        found = yield from observe_shards(k.all_shards(topic, shards), now_ms, 0, probe=True)
        names = {g.name for o in found for g in o.groups}
        paused, limits, *leadership = yield [
            pauses.read_pause_state(topic, names),
            read_limits(k.ShardKeys(topic, 0)),
            *(c for o in found for c in unled.shard_calls(k.ShardKeys(topic, o.shard), now_ms)),
        ]
        far = limits.get(b"far")
        return TopicStats(
            topic,
            [
                ShardStats(
                    o.shard,
                    o.pending,
                    o.ready,
                    o.dead,
                    o.in_flight,
                    o.length,
                    o.far,
                    unled=unled.shard_unled(leadership[2 * i : 2 * i + 2]),
                    expired=o.expired,
                    waiting=o.waiting,
                )
                for i, o in enumerate(found)
            ],
            paused_since_ms=paused.since_ms,
            paused_groups=paused.groups,
            far_horizon_ms=DEFAULT_HORIZON_MS if far is None else int(far),
        )

    # --- helpers --------------------------------------------------------------------------

    def with_kept_results(self, found: list[tuple[k.ShardKeys, JobInfo]]) -> Op[list[JobInfo]]:
        """Each job as `get()` shows it: the results kept apart for a task's ``result_ttl``
        read where they are (or gone once expired), for every job in one round trip."""
        wanted = [
            (n, g) for n, (_, info) in enumerate(found) for g in info.groups if g.result_ttl_ms
        ]
        infos = [info for _, info in found]
        if not wanted:
            return infos
        kept = yield [
            results.kept_result(found[n][0], found[n][1].id + SEPARATOR + g.group)
            for n, g in wanted
        ]
        by_job: dict[int, dict[str, Any]] = {}
        for (n, g), got in zip(wanted, kept, strict=True):
            if got:
                by_job.setdefault(n, {})[g.group] = got.value
        for n, values in by_job.items():
            info = infos[n]
            groups = tuple(replace(g, result=values.get(g.group, g.result)) for g in info.groups)
            infos[n] = replace(info, groups=groups)
        return infos

    def job_keys(self, topic: str, job_id: str) -> Op[k.ShardKeys | None]:
        """The shard of `job_id` on `topic`; None when the topic does not exist."""
        k.validate_job_id(job_id)
        shards = yield from self.shard_count(topic, create=False)
        return None if shards is None else k.ShardKeys(topic, k.shard_of(job_id, shards))


def _raise_if_busy(topic: str, outcomes: list[topics.ShardDrop]) -> None:
    pending = sum(o.pending for o in outcomes)
    unacked = sum(o.unacked for o in outcomes)
    if pending or unacked:
        raise TopicNotEmptyError(topic, pending, unacked)


def enqueue_calls(
    topic: str, writes: list[JobWrite], shards: int, size: int, record_ms: int = 0
) -> Placing:
    """The ``enqueue.lua`` calls that place `writes`; with `record_ms` each call gets a
    token (its writes ``CALL:n``) so a spooled replay skips what it applied."""
    by_shard: dict[int, list[int]] = defaultdict(list)  # shard -> indexes in writes
    for n, w in enumerate(writes):
        by_shard[k.shard_of(w.id, shards)].append(n)
    calls: Placing = []
    for shard, indexes in by_shard.items():
        keys = k.ShardKeys(topic, shard)
        for i in range(0, len(indexes), size):
            token = "c" + secrets.token_hex(8) if record_ms else ""
            for m, n in enumerate(indexes[i : i + size] if token else ()):
                writes[n] = writes[n]._replace(token=f"{token}:{m}")
            chunk = [writes[n] for n in indexes[i : i + size]]
            lined = any(w.orders for w in chunk)
            call = enqueue.enqueue(keys, chunk, record_ms, token, orders=lined)
            calls.append(([w.id for w in chunk], call))
    return calls


def send_calls(
    topic: str, ids: list[str], calls: Placing, applied: list[str] | None
) -> Op[list[str]]:
    """Send `calls` (placing `ids`), `PIPELINE_CALLS` a round; returns the ids, adding
    confirmed ones to `applied`; raises `TopicFullError` / `DuplicateJobError` for refused
    ones."""
    duplicates: list[str] = []
    full: list[str] = []
    for i in range(0, len(calls), PIPELINE_CALLS):
        round_ = calls[i : i + PIPELINE_CALLS]
        replies = yield [call for _, call in round_]
        for (chunk, _), outcomes in zip(round_, replies, strict=True):
            if len(outcomes) != len(chunk):
                raise ScriptError(f"enqueue.lua answered {len(outcomes)} of {len(chunk)} jobs")
            # `in` scans in C: most calls have neither outcome, and need no loop per job
            if Placed.DUPLICATE in outcomes or Placed.FULL in outcomes:
                for job_id, o in zip(chunk, outcomes, strict=True):
                    if o == Placed.DUPLICATE:
                        duplicates.append(job_id)
                    elif o == Placed.FULL:
                        full.append(job_id)
            if applied is not None:
                taken = zip(chunk, outcomes, strict=True)
                applied += [job_id for job_id, o in taken if o != Placed.FULL]
    if full:
        refused = set(full) | set(duplicates)
        raise TopicFullError(topic, full, [i for i in ids if i not in refused], ids)
    if duplicates:
        dup = set(duplicates)
        raise DuplicateJobError(topic, duplicates, [i for i in ids if i not in dup])
    return ids


def register_order(topic: str, writes: Sequence[JobWrite]) -> Op[Any]:
    """Register each ordered write with its key before the writes, one call per key."""
    by_key: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for w in writes:
        if w.order_key:
            by_key[w.order_key].append((w.id, w.due.value_ms))
    yield [flow.order_register(order_keys(topic, key), jobs) for key, jobs in by_key.items()]


Write = Generator[list[Call[Any]], list[Any], list[str]]


def sending(
    tracing: Tracing | None,
    topic: str,
    parent: str | None,
    write: Callable[[str | None], Write],
    *,
    batch: bool,
) -> Write:
    """`write(traceparent)`, inside a ``send <topic>`` span when tracing is on."""
    if tracing is None:
        return write(None)
    if not tracing.active:  # no span to open: the traceparent a send span would have had
        return write(validate_traceparent(parent) or tracing.inject())
    return _traced(tracing, topic, parent, write, batch)


def _traced(
    tracing: Tracing,
    topic: str,
    parent: str | None,
    write: Callable[[str | None], Write],
    batch: bool,
) -> Write:
    span = tracing.send(topic, validate_traceparent(parent))
    try:
        ids = yield from write(tracing.traceparent(span))
    except Exception as exc:
        tracing.failed(span, exc)
        raise
    except BaseException:  # closed early (a cancelled caller): no outcome to record
        span.end()
        raise
    tracing.sent(span, ids, batch)
    return ids
