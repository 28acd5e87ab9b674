"""The producer's logic, written once for the sync and the async client.

Each operation is a generator ("sans-I/O"): it validates its input, then
yields lists of `Call`s to send together and receives their parsed
replies, and finally returns its result. `Client` drives these generators
with a blocking executor, `AsyncClient` with an awaiting one, so the two
clients cannot drift apart. All validation happens before the first
yield: bad input raises before anything is sent.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from wheelq.core import keys as k
from wheelq.core.due import At, Delay, due_spec
from wheelq.core.history import JobInfo, JobState, job_info
from wheelq.core.settings import ClientSettings
from wheelq.errors import (
    DuplicateJobError,
    InvalidArgumentError,
    InvalidDelayError,
    InvalidJobIdError,
    TopicConfigError,
    TopicFullError,
    TopicNotEmptyError,
)
from wheelq.producer.encode_batch import EncodeBatch
from wheelq.producer.items import EnqueueItem, validate_batch, validate_item
from wheelq.producer.ordering import register_order
from wheelq.producer.placing import enqueue_calls, send_calls
from wheelq.producer.traced import sending
from wheelq.runtime import tracing
from wheelq.runtime.clock import WallClock
from wheelq.runtime.outage import is_transient
from wheelq.store import job_writes, nodes, ops, schedules
from wheelq.store.executor import Call
from wheelq.store.observe import observe_shards

if TYPE_CHECKING:
    from wheelq.producer.spool import SpoolStats
    from wheelq.producer.spooler import Spooler

T = TypeVar("T")
Op = Generator[list[Call[Any]], list[Any], T]


@dataclass(frozen=True, slots=True)
class ShardStats:
    """One shard of `TopicStats`: its backlog, stream and dead letters, with the meanings
    `wheelq stats`, `wheelq top`, the dashboard and the metrics give them
    (`wheelq.core.observe`)."""

    shard: int
    pending: int
    """Jobs waiting for their due time (sorted set size)."""
    ready: int
    """Fired and not yet delivered, to the consumer group furthest behind (every entry of
    the stream while no group reads it)."""
    dead: int = 0
    """Entries in the shard's dead-letter stream."""
    in_flight: int = 0
    """Delivered to a worker and not settled yet, summed over groups."""
    in_stream: int = 0
    """Entries in the stream: fired and not trimmed yet, handled ones included."""


@dataclass(frozen=True, slots=True)
class TopicStats:
    """What `stats()` returns: a topic's shards, with totals over them."""

    topic: str
    shards: list[ShardStats]
    spool: SpoolStats | None = None
    """The client's spool (all its topics), None without one; `Client.spool_stats()` reads
    it without Redis."""

    @property
    def pending(self) -> int:
        return sum(s.pending for s in self.shards)

    @property
    def ready(self) -> int:
        return sum(s.ready for s in self.shards)

    @property
    def in_flight(self) -> int:
        return sum(s.in_flight for s in self.shards)

    @property
    def in_stream(self) -> int:
        return sum(s.in_stream for s in self.shards)

    @property
    def dead(self) -> int:
        return sum(s.dead for s in self.shards)


@dataclass(slots=True)
class ProducerCounts:
    """What a client did, for `wheelq.metrics` (plain ints: counted on the caller's thread)."""

    enqueued: int = 0
    """Jobs whose enqueue returned their id (spooled ones too)."""
    cancelled: int = 0
    """Cancels that removed a pending job."""


class Producer:
    """Validation, placement and batching shared by `Client` and `AsyncClient`."""

    def __init__(self, settings: ClientSettings) -> None:
        self.settings = settings
        self._shards: dict[str, int] = {}
        self._clock = WallClock()
        self.spooler: Spooler | None = None
        """Set by a client with a spool: enqueues go through it (`wheelq.producer.spooler`)."""
        self.tracing = tracing.load()
        """Spans around enqueues; None without the ``otel`` extra."""
        self.counts = ProducerCounts()
        self._callback_topics: set[str] = set()
        """Topics this client put on the deliverer's list (`note_callbacks`)."""

    @property
    def clock(self) -> WallClock:
        """The client's clock (epoch ms): enqueue stamps, schedule definitions."""
        return self._clock

    # --- topics ---------------------------------------------------------------------------

    def create_topic(self, topic: str, shards: int | None = None) -> Op[int]:
        k.validate_topic(topic)
        want = k.validate_shards(self.settings.default_shards if shards is None else shards)
        _, have = yield [ops.register_topic(topic, want), ops.topic_shards(topic)]
        if shards is not None and have != want:
            raise TopicConfigError(
                f"topic {topic!r} exists with {have} shards; shards={want} cannot change it"
            )
        self._shards[topic] = have
        return int(have)

    def shard_count(self, topic: str, *, create: bool) -> Op[int | None]:
        """The topic's shard count (cached); creates the topic first when `create`."""
        k.validate_topic(topic)
        if topic in self._shards:
            return self._shards[topic]
        if create:
            return (yield from self.create_topic(topic))
        (have,) = yield [ops.topic_shards(topic)]
        if have is not None:
            self._shards[topic] = have
        return have  # type: ignore[no-any-return]

    def forget(self, topic: str) -> None:
        """Drop the cached shard count, so the next write registers the topic again."""
        self._shards.pop(topic, None)

    def topics(self) -> Op[dict[str, int]]:
        (registry,) = yield [ops.all_topics()]
        assert isinstance(registry, k.Registry)
        self._shards.update(registry.shards)
        return registry.check()

    def drop_topic(self, topic: str, force: bool) -> Op[bool]:
        """Delete every key of every shard and the registry entry; False when unknown.

        Without `force` the shards are checked first (one round trip, nothing deleted
        when any has jobs to run) and again inside each shard's drop script, so a job
        written in between is not deleted silently.
        """
        k.validate_topic(topic)
        if not isinstance(force, bool):
            raise InvalidArgumentError("force", f"force must be a bool, got {force!r}")
        (shards,) = yield [ops.topic_shards(topic)]
        if shards is None:
            return False
        universe = k.all_shards(topic, shards)
        if not force:
            _raise_if_busy(topic, (yield [ops.drop_shard(keys, "check") for keys in universe]))
        mode = "force" if force else "drop"
        _raise_if_busy(topic, (yield [ops.drop_shard(keys, mode) for keys in universe]))
        yield [
            ops.unregister_topic(topic),
            ops.unmark_callback_topic(topic),
            nodes.forget_nodes(topic),
            schedules.unindex(universe),
        ]
        self._shards.pop(topic, None)
        self._callback_topics.discard(topic)
        return True

    # --- jobs -----------------------------------------------------------------------------

    def enqueue(
        self, topic: str, item: EnqueueItem, debounce: tuple[int, int] | None = None
    ) -> Op[str]:
        """`debounce`: (debounce ms, max wait ms or 0), from `debounce_spec`."""
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
        return (yield from self._counted(topic, [write]))

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
        yield [ops.debounce(keys, write.id, debounce_ms, wait_ms, write.envelope)]
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
        writes = validate_batch(self.settings, items, traceparent, batch.now_ms, batch)
        if not writes:
            return []
        yield from self.note_callbacks(topic, batch.callbacks)
        return (yield from self._counted(topic, writes))

    def note_callbacks(self, topic: str, callbacks: bool) -> Op[None]:
        """Put `topic` on the deliverer's list (`wheelq serve` delivers only the topics on it)
        the first time this client writes it a job with a callback (`callbacks`). An outage
        here does not stop the write, which may still go to the spool: the deliverer also
        finds topics by their callbacks streams, less often."""
        if not callbacks or topic in self._callback_topics:
            return
        try:
            yield [ops.mark_callback_topic(topic)]
        except Exception as exc:
            if not is_transient(exc):
                raise
            return
        self._callback_topics.add(topic)

    def _counted(self, topic: str, writes: list[job_writes.JobWrite]) -> Op[list[str]]:
        """`_write`, counting the jobs it enqueued (a batch's too when some were duplicates)."""
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
        self, topic: str, writes: list[job_writes.JobWrite], applied: list[str] | None = None
    ) -> Op[list[str]]:
        """Place validated jobs: by shard, in script calls of `batch_size`, pipelined.

        With a spooler, it decides (and calls back with `applied`, a list this appends the
        ids of each round Redis confirmed to). Such a direct call's outcome may be unknown
        (a reply lost): its writes, in `writes` itself, get the tokens of
        `wheelq.producer.placing` that make their replay from the spool exactly once."""
        if self.spooler is not None and applied is None:
            return (yield from self.spooler.write(topic, writes, self._write))
        shards = self._shards.get(topic)  # the topic name was validated by the caller
        if shards is None:
            shards = yield from self.shard_count(topic, create=True)
        assert shards is not None
        record_ms = self.settings.spool_call_record_ms if applied is not None else 0
        calls = enqueue_calls(topic, writes, shards, self.settings.batch_size, record_ms)
        return (yield from send_calls(topic, writes, calls, applied))

    def cancel(self, topic: str, job_id: str) -> Op[bool]:
        keys = yield from self._job_keys(topic, job_id)
        if keys is None:
            return False
        (done,) = yield [ops.cancel(keys, job_id)]
        self.counts.cancelled += bool(done)
        return bool(done)

    def reschedule(self, topic: str, job_id: str, delay: Delay | None, at: At | None) -> Op[bool]:
        if delay is None and at is None:
            raise InvalidDelayError("delay", "reschedule needs delay or at (use delay=0 for now)")
        due = due_spec(delay, at, now_ms=self._clock.now_ms())
        keys = yield from self._job_keys(topic, job_id)
        if keys is None:
            return False
        (placed,) = yield [ops.reschedule(keys, job_id, due)]
        return placed is not None

    def get(self, topic: str, job_id: str) -> Op[JobInfo]:
        keys = yield from self._job_keys(topic, job_id)
        if keys is None:
            return JobInfo(job_id, topic, JobState.UNKNOWN)
        (raw,) = yield [ops.lookup(keys, job_id)]
        return job_info(topic, job_id, raw)

    def stats(self, topic: str) -> Op[TopicStats | None]:
        shards = yield from self.shard_count(topic, create=False)
        if shards is None:
            return None
        now_ms = self._clock.now_ms()
        found = yield from observe_shards(k.all_shards(topic, shards), now_ms, 0, probe=True)
        return TopicStats(
            topic,
            [ShardStats(o.shard, o.pending, o.ready, o.dead, o.in_flight, o.length) for o in found],
        )

    # --- helpers --------------------------------------------------------------------------

    def _job_keys(self, topic: str, job_id: str) -> Op[k.ShardKeys | None]:
        k.validate_job_id(job_id)
        shards = yield from self.shard_count(topic, create=False)
        return None if shards is None else k.ShardKeys(topic, k.shard_of(job_id, shards))


def _raise_if_busy(topic: str, outcomes: list[ops.ShardDrop]) -> None:
    pending = sum(o.pending for o in outcomes)
    unacked = sum(o.unacked for o in outcomes)
    if pending or unacked:
        raise TopicNotEmptyError(topic, pending, unacked)
