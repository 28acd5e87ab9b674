"""A scheduler node's shared context for unit tests of its parts, without Redis.

    parts = NodeParts.make(settings={"emit_batch": 2})
    lead = parts.lead(0)                        # this node leads shard 0 of topic "t"
    driver = WheelDriver(parts.ctx)
    ...
    assert parts.lost == [lead] and parts.kinds() == ["acquired", "emitted"]

The context's executor is a `ScriptedExecutor` and its clock a `ManualClock`; the
leads the parts read are the test's to add; what the parts report through the
context (lost leases, node events) is recorded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tests.support.fakes import ScriptedExecutor
from wheelq.core.clock import ManualClock
from wheelq.core.keys import ShardKeys
from wheelq.core.settings import SchedulerSettings
from wheelq.scheduler.led_shards import Lead, Leads, NodeContext, NodeEvent

TOPIC = "t"
TOKEN = "node-1"
START_MS = 1_000_000


@dataclass
class NodeParts:
    """The context and what it recorded."""

    executor: ScriptedExecutor
    clock: ManualClock
    leads: Leads
    ctx: NodeContext = field(init=False)
    lost: list[Lead] = field(default_factory=list)
    events: list[NodeEvent] = field(default_factory=list)

    @classmethod
    def make(cls, settings: dict[str, Any] | None = None) -> NodeParts:
        """A context at `START_MS` with `SchedulerSettings(**settings)` (failure pauses of
        10 ms unless given) and no leads."""
        parts = cls(ScriptedExecutor(), ManualClock(START_MS), Leads(token=TOKEN))
        s = SchedulerSettings(**{"failure_pause_max_ms": 10, **(settings or {})})
        parts.ctx = NodeContext(
            parts.executor, parts.clock, parts.leads, s, parts.lost.append, parts.events.append
        )
        return parts

    def lead(self, shard: int, acquired_ms: int | None = None) -> Lead:
        """Lead shard `shard` of `TOPIC` from `acquired_ms` (default: now)."""
        now = self.clock.now_ms()
        return self.leads.add(keys(shard), now if acquired_ms is None else acquired_ms)

    def kinds(self) -> list[str]:
        """The kinds of the node events so far, in order."""
        return [e.kind for e in self.events]


def keys(shard: int) -> ShardKeys:
    """The keys of shard `shard` of `TOPIC`."""
    return ShardKeys(TOPIC, shard)
