"""A node's shared state: the shards it leads, its counters, and the context its parts share."""

from __future__ import annotations

import itertools
import logging
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from wheelq.core.clock import Clock
from wheelq.core.histogram import Histogram
from wheelq.core.keys import ShardKeys
from wheelq.core.settings import SchedulerSettings
from wheelq.runtime.service import Service
from wheelq.store.executor import Executor
from wheelq.store.fire import EmitResult


@dataclass(slots=True)
class NodeMetrics:
    """Counters by (event kind, topic, shard), and fire lateness histograms by topic."""

    counts: dict[tuple[str, str, int], int] = field(default_factory=lambda: defaultdict(int))
    fire_lateness: dict[str, Histogram] = field(default_factory=dict)

    def record(self, kind: str, topic: str, shard: int, count: int) -> None:
        """Count one node event: its `count` of jobs or entries, or 1 (a lease change)."""
        self.counts[(kind, topic, shard)] += count or 1

    def lateness(self, topic: str) -> Histogram:
        found = self.fire_lateness.get(topic)
        if found is None:
            found = self.fire_lateness[topic] = Histogram()
        return found

    def fired_by_wheel(
        self,
        topic: str,
        sent_ms: int,
        ids: Sequence[str],
        dues_ms: Sequence[int],
        result: EmitResult,
    ) -> None:
        """Observe the lateness of the jobs one wheel emit call fired."""
        hist = self.lateness(topic)
        if result.emitted == len(ids):
            hist.observe_since(sent_ms, dues_ms)
            return
        if result.emitted <= 0:
            return
        skipped = {i for i, _ in result.not_yet_due} | set(result.held) | set(result.malformed)
        late = [sent_ms - due for i, due in zip(ids, dues_ms, strict=True) if i not in skipped]
        late = late[: result.emitted]
        late += [late[-1] if late else 0] * (result.emitted - len(late))
        hist.observe_all(late)

    def fired_by_sweep(self, topic: str, sent_ms: int, bound_ms: int, emitted: int) -> None:
        """Observe `emitted` overdue jobs a sweep fired, at their least lateness."""
        if emitted > 0:
            least = max(0, sent_ms - bound_ms)
            self.lateness(topic).observe_all([least] * emitted)


@dataclass(eq=False, slots=True)
class Lead:
    """One led shard: its keys, the lease token, and how far it has been preloaded."""

    keys: ShardKeys
    slot: int
    acquired_ms: int  # Redis time at acquisition: due by then is backlog.
    cursor_ms: int  # Jobs due before this were read into the wheel.
    active: bool = True
    emitted: int = 0
    throttled: bool = False  # Held back by max_ready: sweep often.
    waiting: int = 0  # Jobs on the shard's due line: sweep at the line's pace.
    line_pace_ms: int = 2  # That pace, kept to about half a lead a sweep (preloader).
    shards: int = 1  # The topic's shard count.
    planned_ms: int = 0  # Next read planned (Redis ms; 0: now).
    last_round_ms: int = 0  # Redis ms of the last round.
    followed: bool = False  # Wake notes arrive by pub/sub.
    noted: bool = True  # The inbox may hold notes.
    overdue: bool = True  # A job to sweep was seen (or backlog).
    renewed_ms: int = 0  # Redis ms the lease was last renewed (or taken): its age's start.
    nudged: int = 1  # Nudges seen: notices may wait on the shard (jobs that follow jobs)...
    checked: int = 0  # ...unless the resolver read none since the `nudged` it had then.

    @property
    def notices(self) -> bool:
        """Whether notices may wait on the shard (the resolver reads it)."""
        return self.nudged != self.checked


@dataclass(frozen=True, slots=True)
class NodeEvent:
    """What a node did: ``acquired``, ``lost``, ``emitted``, ``trimmed``, ..."""

    kind: str
    topic: str
    shard: int
    count: int = 0
    sent_ms: int | None = None  # ``emitted``: Redis ms when sent.


EventHook = Callable[[NodeEvent], None]


@dataclass(slots=True)
class Leads:
    """Registry of current leads by slot, by shard and by wake channel."""

    token: str
    _slots: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    by_slot: dict[int, Lead] = field(default_factory=dict)
    by_keys: dict[ShardKeys, Lead] = field(default_factory=dict)
    by_channel: dict[str, Lead] = field(default_factory=dict)

    def add(self, keys: ShardKeys, acquired_ms: int, shards: int = 1) -> Lead:
        lead = Lead(
            keys, next(self._slots), acquired_ms, acquired_ms, shards=shards, renewed_ms=acquired_ms
        )
        self.by_slot[lead.slot] = lead
        self.by_keys[keys] = lead
        self.by_channel[keys.wake_channel] = lead
        return lead

    def remove(self, keys: ShardKeys) -> Lead | None:
        lead = self.by_keys.pop(keys, None)
        if lead is not None:
            lead.active = False
            self.by_slot.pop(lead.slot, None)
            self.by_channel.pop(keys.wake_channel, None)
        return lead

    def __len__(self) -> int:
        return len(self.by_keys)

    def all(self) -> list[Lead]:
        return list(self.by_keys.values())


@dataclass(frozen=True, slots=True)
class NodeContext:
    """What every service of one node shares."""

    executor: Executor
    clock: Clock
    leads: Leads
    settings: SchedulerSettings
    lost: Callable[[Lead], None]  # A lease found gone: forget the lead.
    on_event: EventHook | None = None
    metrics: NodeMetrics = field(default_factory=NodeMetrics)

    def event(self, kind: str, keys: ShardKeys, count: int = 0, sent_ms: int | None = None) -> None:
        self.metrics.record(kind, keys.topic, keys.shard, count)
        if self.on_event is not None:
            self.on_event(NodeEvent(kind, keys.topic, keys.shard, count, sent_ms))


class NodePart(Service):
    def __init__(self, ctx: NodeContext, log: logging.Logger) -> None:
        super().__init__(ctx.clock, log, max_pause_ms=ctx.settings.failure_pause_max_ms)
        self._ctx = ctx
        self._refused: set[int] = set()
        """Slots of leads whose last call was refused on its own (a wrong-type key)."""

    def _keep_count(self) -> None:
        """A refused shard's retry is still to come: this step is no sign it is well."""
        self._refused &= self._ctx.leads.by_slot.keys()  # forget leads gone since
        if self._refused:
            self.still_failing()
