"""A node's shared state: the shards it leads, and the context its services share.

The lease keeper adds and removes leads; the preloader, the wheel driver
and the wake listener read them and keep a few flags of their own on them
(the preloader its plan, the wake listener whether it follows the shard). Wheel entries are keyed by
``(lead.slot, job id)``; a slot number is never reused, so entries left in
the wheel by a lost lead are recognised and dropped when they expire.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from wheelq.core.clock import Clock
from wheelq.core.keys import ShardKeys
from wheelq.core.settings import SchedulerSettings
from wheelq.scheduler.node_metrics import NodeMetrics
from wheelq.store.executor import Executor


@dataclass(eq=False, slots=True)
class Lead:
    """One led shard: its keys, the lease token, and how far it has been preloaded."""

    keys: ShardKeys
    slot: int
    acquired_ms: int
    """Redis time at acquisition; everything due by then is backlog for the sweep."""
    cursor_ms: int
    """Jobs due up to here (exclusive of later) have been read into the wheel."""
    active: bool = True
    emitted: int = 0
    throttled: bool = False
    """Due jobs were held back by the topic's max_ready: the preloader sweeps every due job
    (not only overdue ones) at a short interval until the stream has room again."""
    shards: int = 1
    """The topic's shard count (its history byte budget is split evenly over them)."""
    planned_ms: int = 0
    """When the last read planned the next one (Redis time, ms; 0: at once)."""
    last_round_ms: int = 0
    """When the preloader last went round this shard (Redis time, ms)."""
    followed: bool = False
    """The wake listener's subscription to this shard's channel is confirmed: notes of jobs
    written inside the horizon arrive by pub/sub, so the preloader may sleep until its
    plan. Set by the wake listener."""
    noted: bool = True
    """Notes may wait in the inbox (a note arrived, or the shard was not followed): the
    next round drains it."""
    overdue: bool = True
    """The last round saw a job the sweep should emit (and at first: the backlog)."""


@dataclass(frozen=True, slots=True)
class NodeEvent:
    """What a node did, for logs, metrics and tests: kind is one of
    ``acquired``, ``released``, ``lost``, ``emitted``, ``orphans``, ``malformed``
    (jobs dead-lettered because their envelope cannot be decoded), ``trimmed``."""

    kind: str
    topic: str
    shard: int
    count: int = 0
    sent_ms: int | None = None
    """For ``emitted``: the node's clock (Redis time, ms) when the emit call was sent. The
    reply, and so the event, can come much later (a node paused with a call in flight)."""


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
        lead = Lead(keys, next(self._slots), acquired_ms, acquired_ms, shards=shards)
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
    lost: Callable[[Lead], None]
    """Called when a service finds a lease gone: the node forgets the lead."""
    on_event: EventHook | None = None
    metrics: NodeMetrics = field(default_factory=NodeMetrics)
    """Counted for `wheelq.metrics`: every event, and the fire lateness."""

    def event(self, kind: str, keys: ShardKeys, count: int = 0, sent_ms: int | None = None) -> None:
        self.metrics.record(kind, keys.topic, keys.shard, count)
        if self.on_event is not None:
            self.on_event(NodeEvent(kind, keys.topic, keys.shard, count, sent_ms))
